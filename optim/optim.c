/* The optimizer object: state allocation (once) and the per-step dispatch of
 * each parameter to AdamW or Muon. The update rules live in adamw.c and muon.c. */
#include "optim/optim.h"

#include <stdlib.h>
#include <string.h>

optim_hparams optim_hparams_default(void) {
    return (optim_hparams){
        .beta1 = 0.9,
        .beta2 = 0.95,
        .eps = 1e-8,
        .weight_decay = 0.1,
        .muon_momentum = 0.95,
        .muon_weight_decay = 0.0,
        .muon_nesterov = 1,
        .muon_ns_steps = 5,
    };
}

const char *optim_kind_name(optim_kind kind) { return kind == OPTIM_MUON ? "muon" : "adamw"; }

/* Rows and columns of each matrix of a Muon parameter ([rows, cols] or [E, rows, cols]). */
static void muon_dims(const optim_param *p, int64_t *n_matrices, int64_t *rows, int64_t *cols) {
    *rows = p->shape[p->ndim - 2];
    *cols = p->shape[p->ndim - 1];
    *n_matrices = p->size / (*rows * *cols);
}

int optim_is_muon(const optimizer *opt, int index) { return opt->momentum && opt->momentum[index] != NULL; }

static float *zeroed_floats(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float)) != 0) return NULL;
    memset(p, 0, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return p;
}

dt_status optim_init(optimizer *opt, optim_kind kind, const optim_param *params, int n_params,
                     const optim_hparams *hp) {
    memset(opt, 0, sizeof *opt);
    opt->kind = kind;
    opt->hp = hp ? *hp : optim_hparams_default();
    if (opt->hp.muon_ns_steps < 0)
        return dt_errorf("optimizer: muon_ns_steps = %d (must be >= 0)", opt->hp.muon_ns_steps);
    for (int i = 0; i < n_params; i++) {
        const optim_param *p = &params[i];
        const char *name = p->name ? p->name : "?";
        if (!p->data || !p->grad) return dt_errorf("optimizer: parameter '%s' has no data or no gradient", name);
        if (kind == OPTIM_MUON && p->muon && (p->ndim < 2 || p->ndim > 3))
            return dt_errorf("optimizer: Muon parameter '%s' has %d dims (must be 2 or 3)", name, p->ndim);
    }
    opt->n_params = n_params;
    size_t slots = (size_t)(n_params > 0 ? n_params : 1);
    opt->params = calloc(slots, sizeof *opt->params);
    opt->m = calloc(slots, sizeof *opt->m);
    opt->v = calloc(slots, sizeof *opt->v);
    opt->momentum = calloc(slots, sizeof *opt->momentum);
    if (!opt->params || !opt->m || !opt->v || !opt->momentum) goto oom;
    memcpy(opt->params, params, (size_t)n_params * sizeof *params);

    int64_t work = 0;
    for (int i = 0; i < n_params; i++) {
        const optim_param *p = &opt->params[i];
        if (kind == OPTIM_MUON && p->muon) {
            int64_t n_matrices, rows, cols;
            muon_dims(p, &n_matrices, &rows, &cols);
            int64_t need = optim_muon_work_floats(rows, cols);
            if (need > work) work = need;
            if (!(opt->momentum[i] = zeroed_floats(p->size))) goto oom;
        } else {
            if (!(opt->m[i] = zeroed_floats(p->size)) || !(opt->v[i] = zeroed_floats(p->size))) goto oom;
        }
    }
    if (work > 0 && !(opt->ns_work = zeroed_floats(work))) goto oom;
    return DT_OK;
oom:
    optim_free(opt);
    return dt_errorf("optimizer: out of memory allocating the optimizer state");
}

void optim_free(optimizer *opt) {
    for (int i = 0; i < opt->n_params; i++) {
        if (opt->m) free(opt->m[i]);
        if (opt->v) free(opt->v[i]);
        if (opt->momentum) free(opt->momentum[i]);
    }
    free(opt->m);
    free(opt->v);
    free(opt->momentum);
    free(opt->params);
    free(opt->ns_work);
    memset(opt, 0, sizeof *opt);
}

void optim_step(optimizer *opt, double lr, double muon_lr) {
    int64_t t = opt->step + 1;
    const optim_hparams *hp = &opt->hp;
    for (int i = 0; i < opt->n_params; i++) {
        const optim_param *p = &opt->params[i];
        if (optim_is_muon(opt, i)) {
            int64_t n_matrices, rows, cols;
            muon_dims(p, &n_matrices, &rows, &cols);
            optim_muon_update(p->data, p->grad, opt->momentum[i], n_matrices, rows, cols, muon_lr, hp->muon_momentum,
                              hp->muon_nesterov, hp->muon_ns_steps, p->decay ? hp->muon_weight_decay : 0.0,
                              opt->ns_work);
        } else {
            optim_adamw_update(p->data, p->grad, opt->m[i], opt->v[i], p->size, t, lr, hp->beta1, hp->beta2, hp->eps,
                               p->decay ? hp->weight_decay : 0.0);
        }
    }
    opt->step = t;
}
