/* The optimizer object: checks of the descriptors against the flat buffers,
 * the flat state (allocated once), the update plan (its chunk list) and the
 * per-thread Newton-Schulz workspaces. The update pass is update.c; the rules
 * are adamw.c and muon.c. */
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

int optim_is_muon(const optimizer *opt, int index) { return opt->uses_muon[index]; }

float *optim_adamw_m(const optimizer *opt, int index) {
    return opt->uses_muon[index] ? NULL : opt->m + opt->state_offset[index];
}

float *optim_adamw_v(const optimizer *opt, int index) {
    return opt->uses_muon[index] ? NULL : opt->v + opt->state_offset[index];
}

float *optim_muon_momentum(const optimizer *opt, int index) {
    return opt->uses_muon[index] ? opt->momentum + opt->state_offset[index] : NULL;
}

static float *zeroed_floats(int64_t n) {
    void *p = NULL;
    const size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static dt_status check_params(optim_kind kind, const optim_param *params, int n_params, const float *data,
                              const float *grad, int64_t n_floats) {
    if (!data || !grad) return dt_errorf("optimizer: no flat weight or gradient buffer");
    for (int i = 0; i < n_params; i++) {
        const optim_param *p = &params[i];
        const char *name = p->name ? p->name : "?";
        if (p->size < 1 || p->offset < 0 || p->offset > n_floats - p->size)
            return dt_errorf("optimizer: parameter '%s' ([%lld] at %lld) lies outside the flat buffers of %lld floats",
                             name, (long long)p->size, (long long)p->offset, (long long)n_floats);
        if (!(p->lr_scale >= 0.0 && p->lr_scale < 1e30)) /* also rejects NaN */
            return dt_errorf("optimizer: parameter '%s' has lr_scale %g (must be finite and >= 0)", name, p->lr_scale);
        if (kind == OPTIM_MUON && p->muon && (p->ndim < 2 || p->ndim > 3))
            return dt_errorf("optimizer: Muon parameter '%s' has %d dims (must be 2 or 3)", name, p->ndim);
    }
    return DT_OK;
}

/* The update's work list: AdamW parameters in chunks, Muon matrices whole. */
static dt_status build_chunks(optimizer *opt) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int i = 0; i < opt->n_params; i++) {
            const int64_t size = opt->params[i].size;
            if (opt->uses_muon[i]) {
                if (pass) opt->chunks[n] = (optim_chunk){.param = i, .offset = 0, .length = size};
                n++;
                continue;
            }
            for (int64_t offset = 0; offset < size; offset += OPTIM_CHUNK) {
                const int64_t length = size - offset < OPTIM_CHUNK ? size - offset : OPTIM_CHUNK;
                if (pass) opt->chunks[n] = (optim_chunk){.param = i, .offset = offset, .length = length};
                n++;
            }
        }
        if (!pass) {
            opt->chunks = calloc((size_t)(n > 0 ? n : 1), sizeof *opt->chunks);
            opt->chunk_sums = calloc((size_t)(n > 0 ? n : 1), sizeof *opt->chunk_sums);
            if (!opt->chunks || !opt->chunk_sums) return DT_ERR;
        }
    }
    opt->n_chunks = n;
    return DT_OK;
}

dt_status optim_init(optimizer *opt, optim_kind kind, const optim_param *params, int n_params, float *data, float *grad,
                     int64_t n_floats, const optim_hparams *hp) {
    memset(opt, 0, sizeof *opt);
    opt->kind = kind;
    opt->hp = hp ? *hp : optim_hparams_default();
    if (opt->hp.muon_ns_steps < 0)
        return dt_errorf("optimizer: muon_ns_steps = %d (must be >= 0)", opt->hp.muon_ns_steps);
    if (check_params(kind, params, n_params, data, grad, n_floats) != DT_OK) return DT_ERR;
    opt->data = data;
    opt->grad = grad;
    opt->n_floats = n_floats;
    opt->n_params = n_params;
    const size_t slots = (size_t)(n_params > 0 ? n_params : 1);
    opt->params = calloc(slots, sizeof *opt->params);
    opt->state_offset = calloc(slots, sizeof *opt->state_offset);
    opt->uses_muon = calloc(slots, sizeof *opt->uses_muon);
    if (!opt->params || !opt->state_offset || !opt->uses_muon) goto oom;
    memcpy(opt->params, params, (size_t)n_params * sizeof *params);
    for (int i = 0; i < n_params; i++) {
        const optim_param *p = &opt->params[i];
        opt->uses_muon[i] = kind == OPTIM_MUON && p->muon;
        int64_t *used = opt->uses_muon[i] ? &opt->n_muon_floats : &opt->n_adamw_floats;
        opt->state_offset[i] = *used;
        *used += p->size;
    }
    if (!(opt->m = zeroed_floats(opt->n_adamw_floats)) || !(opt->v = zeroed_floats(opt->n_adamw_floats)) ||
        !(opt->momentum = zeroed_floats(opt->n_muon_floats)))
        goto oom;
    if (build_chunks(opt) != DT_OK) goto oom;
    if (optim_reserve_threads(opt, 1) != DT_OK) {
        optim_free(opt);
        return DT_ERR;
    }
    return DT_OK;
oom:
    optim_free(opt);
    return dt_errorf("optimizer: out of memory allocating the optimizer state");
}

dt_status optim_reserve_threads(optimizer *opt, int n_threads) {
    if (n_threads <= opt->n_ns_work) return DT_OK;
    int64_t work = 0;
    for (int i = 0; i < opt->n_params; i++) {
        if (!opt->uses_muon[i]) continue;
        const optim_param *p = &opt->params[i];
        const int64_t need = optim_muon_work_floats(p->shape[p->ndim - 2], p->shape[p->ndim - 1]);
        if (need > work) work = need;
    }
    float **slots = realloc(opt->ns_work, (size_t)n_threads * sizeof *slots);
    if (!slots) return dt_errorf("optimizer: out of memory for %d update threads", n_threads);
    opt->ns_work = slots;
    for (int t = opt->n_ns_work; t < n_threads; t++) {
        slots[t] = work > 0 ? zeroed_floats(work) : NULL;
        if (work > 0 && !slots[t]) return dt_errorf("optimizer: out of memory for a Newton-Schulz workspace");
        opt->n_ns_work = t + 1;
    }
    return DT_OK;
}

void optim_free(optimizer *opt) {
    for (int t = 0; t < opt->n_ns_work; t++)
        free(opt->ns_work[t]);
    free(opt->ns_work);
    free(opt->m);
    free(opt->v);
    free(opt->momentum);
    free(opt->params);
    free(opt->state_offset);
    free(opt->uses_muon);
    free(opt->chunks);
    free(opt->chunk_sums);
    memset(opt, 0, sizeof *opt);
}
