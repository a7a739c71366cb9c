/* Norm kinds (SPEC §1 "Norms"): one table entry per kind, read through the
 * model description (models/arch.h). LayerNorm carries a bias; RMSNorm does
 * not. Each entry has the taped forward for training and a single-threaded
 * row form for the decode engine, which runs it inside its step team. */
#ifndef MODEL_NORM_KINDS_H
#define MODEL_NORM_KINDS_H

#include <stdint.h>

#include "autograd/tape.h"

struct model_norm_kind {
    const char *name;
    int has_bias;   /* a `.bias` tensor beside each `.weight` */
    int stats_rows; /* floats of statistics saved per row (training memory estimate) */
    /* x [B,T,C] -> [B,T,C]; bias NULL when !has_bias. */
    dt_tensor *(*forward)(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, float eps);
    /* out, in [M,C]; weight, bias [C]; mean, rstd [M] scratch. No threads of its own. */
    void (*rows)(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                 int64_t M, int64_t C, float eps);
    /* The same for many rows (the prefill): may use the kernels' threads. */
    void (*batch)(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                  int64_t M, int64_t C, float eps);
};

typedef struct model_norm_kind model_norm_kind;

/* NULL for an unknown name. */
const model_norm_kind *model_norm_kind_find(const char *name);

#endif
