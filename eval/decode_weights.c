/* The decode weight view (decode_weights.h): the bf16 copy at the model's
 * offsets, and the in-place rounding of the float32 tensors it twins. */
#include "eval/decode_weights.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/type_traits.h"

dt_status eval_decode_weights_parse(const char *name, dt_dtype *dtype) {
    if (!strcmp(name, "fp32")) {
        *dtype = DT_F32;
        return DT_OK;
    }
    if (!strcmp(name, "bf16")) {
        *dtype = DT_BF16;
        return DT_OK;
    }
    return dt_errorf("--weights %s: expected fp32 or bf16", name);
}

const char *eval_decode_weights_name(dt_dtype dtype) { return dtype == DT_BF16 ? "bf16" : "fp32"; }

dt_status eval_decode_weights_init(eval_decode_weights *w, model *m, dt_dtype dtype) {
    memset(w, 0, sizeof *w);
    if (dtype != DT_F32 && dtype != DT_BF16) return dt_errorf("decode weights: unsupported type %d", (int)dtype);
    w->dtype = dtype;
    w->params = m->params_memory;
    w->n_floats = m->n_floats;
    if (dtype == DT_F32) return DT_OK;
    uint16_t *copy = calloc((size_t)(m->n_floats > 0 ? m->n_floats : 1), sizeof(uint16_t));
    if (!copy)
        return dt_errorf("decode weights: out of memory for a bf16 copy of %lld parameters", (long long)m->n_floats);
    const k_type_traits *bf16 = k_type_traits_of(DT_BF16);
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        if (!p->is_matrix && !p->is_embedding) continue; /* vectors stay float32 */
        float *x = p->tensor->data;
        uint16_t *twin = copy + (x - m->params_memory);
        bf16->from_float(twin, x, p->tensor->size);
        bf16->to_float(x, twin, p->tensor->size); /* the float32 copy holds the same bf16 values */
    }
    w->bf16 = copy;
    return DT_OK;
}

void eval_decode_weights_free(eval_decode_weights *w) {
    free((void *)w->bf16);
    memset(w, 0, sizeof *w);
}
