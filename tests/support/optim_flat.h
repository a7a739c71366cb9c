/* Hand-made parameters over flat buffers, for the optimizer tests: one
 * weight buffer and one gradient buffer (llm.c's layout, what the model
 * allocates), each parameter a descriptor at its offset. */
#ifndef TESTS_SUPPORT_OPTIM_FLAT_H
#define TESTS_SUPPORT_OPTIM_FLAT_H

#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "optim/optim.h"

enum { OPTIM_FLAT_MAX = 8 };

typedef struct optim_flat {
    float *data, *grad; /* [n_floats] each, zeroed */
    int64_t n_floats, used;
    optim_param params[OPTIM_FLAT_MAX];
    int n_params;
} optim_flat;

static inline void optim_flat_init(optim_flat *f, int64_t n_floats) {
    memset(f, 0, sizeof *f);
    f->data = calloc((size_t)n_floats, sizeof *f->data);
    f->grad = calloc((size_t)n_floats, sizeof *f->grad);
    f->n_floats = n_floats;
}

/* Appends a parameter right after the previous one (NULL when it does not fit). */
static inline optim_param *optim_flat_add(optim_flat *f, const char *name, int ndim, const int64_t *shape, int decay,
                                          int muon) {
    if (f->n_params >= OPTIM_FLAT_MAX) return NULL;
    optim_param *p = &f->params[f->n_params];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->ndim = ndim;
    p->size = 1;
    for (int d = 0; d < ndim; d++)
        p->size *= (p->shape[d] = shape[d]);
    if (f->used + p->size > f->n_floats) return NULL;
    p->offset = f->used;
    p->decay = decay;
    p->muon = muon;
    f->used += p->size;
    f->n_params++;
    return p;
}

static inline float *optim_flat_data(const optim_flat *f, int i) { return f->data + f->params[i].offset; }
static inline float *optim_flat_grad(const optim_flat *f, int i) { return f->grad + f->params[i].offset; }

static inline dt_status optim_flat_optimizer(const optim_flat *f, optimizer *opt, optim_kind kind,
                                             const optim_hparams *hp) {
    return optim_init(opt, kind, f->params, f->n_params, f->data, f->grad, f->n_floats, hp);
}

/* One update pass of one thread, no copies, one process. */
static inline dt_status optim_flat_step(optimizer *opt, double lr, double muon_lr, float grad_scale, double max_norm,
                                        double *norm) {
    const optim_update_args args = {
        .lr = lr, .muon_lr = muon_lr, .grad_scale = grad_scale, .max_norm = max_norm, .n_threads = 1};
    return optim_update(opt, &args, norm);
}

static inline void optim_flat_free(optim_flat *f) {
    free(f->data);
    free(f->grad);
    memset(f, 0, sizeof *f);
}

#endif
