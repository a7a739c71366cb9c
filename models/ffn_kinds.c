/* The table of FFN kinds (models/ffn.h): one line per kind. A kind's code is
 * its own file (ffn_<name>.c); adding one is that file plus a line here. */
#include <string.h>

#include "models/ffn.h"

extern const model_ffn_kind model_ffn_gelu_mlp, model_ffn_swiglu, model_ffn_moe, model_ffn_product;

static const model_ffn_kind *const kinds[] = {
    &model_ffn_gelu_mlp,
    &model_ffn_swiglu,
    &model_ffn_moe,
    &model_ffn_product,
};

const model_ffn_kind *model_ffn_kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}
