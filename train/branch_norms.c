/* The coupling-vector and branch-embedding norms (train/branch_norms.h). */
#include "train/branch_norms.h"

#include <math.h>

/* ||x||_2 of a tensor's floats, summed in double. */
static double tensor_norm(const dt_tensor *t) {
    const float *x = dt_f32(t); // [size]
    double sum = 0.0;
    for (int64_t i = 0; i < t->size; i++)
        sum += (double)x[i] * (double)x[i];
    return sqrt(sum);
}

typedef enum { COUPLE_Q, COUPLE_HIDDEN, COUPLE_OUT } couple_kind;

/* Mean over the layers that have it of the norm of one kind of coupling vector. */
static double mean_over_layers(const model *m, couple_kind kind) {
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t l = 0; l < m->config.n_layer; l++) {
        const model_layer *layer = &m->layers[l];
        const dt_tensor *t = kind == COUPLE_Q        ? layer->couple_q
                             : kind == COUPLE_HIDDEN ? layer->couple_hidden
                                                     : layer->couple_out;
        if (!t) continue;
        sum += tensor_norm(t);
        count++;
    }
    return count ? sum / (double)count : NAN;
}

train_branch_norms train_branch_norms_of(const model *m) {
    return (train_branch_norms){
        .couple_q = mean_over_layers(m, COUPLE_Q),
        .couple_hidden = mean_over_layers(m, COUPLE_HIDDEN),
        .couple_out = mean_over_layers(m, COUPLE_OUT),
        .branch_emb = m->branch_tok_emb ? tensor_norm(m->branch_tok_emb) : NAN,
    };
}
