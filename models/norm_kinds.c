/* The norm kinds of SPEC §1: LayerNorm (weight and bias, biased variance) and
 * RMSNorm (weight only), eps from the config. The row forms run on the
 * calling thread only: the decode step calls them in serial stages of its
 * team, where opening the kernels' OpenMP region would cost about as much as
 * the norm itself at small C. */
#include "models/norm_kinds.h"

#include <string.h>

#include "autograd/ops.h"
#include "kernels/norm.h"

static dt_tensor *layernorm_taped(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, float eps) {
    return ag_layernorm(ctx, x, weight, bias, eps);
}

static dt_tensor *rmsnorm_taped(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, float eps) {
    (void)bias;
    return ag_rmsnorm(ctx, x, weight, eps);
}

static void layernorm_batch(float *out, float *mean, float *rstd, const float *in, const float *weight,
                            const float *bias, int64_t M, int64_t C, float eps) {
    k_layernorm_forward(out, mean, rstd, in, weight, bias, M, C, eps);
}

static void rmsnorm_batch(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                          int64_t M, int64_t C, float eps) {
    (void)mean, (void)bias;
    k_rmsnorm_forward(out, rstd, in, weight, M, C, eps);
}

// out, in [M,C]; weight [C]; rstd [M]: the kernels' single-threaded cores
static void layernorm_rows(float *out, float *mean, float *rstd, const float *in, const float *weight,
                           const float *bias, int64_t M, int64_t C, float eps) {
    k_layernorm_forward_range(out, mean, rstd, in, weight, bias, M, C, eps);
}

static void rmsnorm_rows(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                         int64_t M, int64_t C, float eps) {
    (void)mean, (void)bias;
    k_rmsnorm_forward_range(out, rstd, in, weight, M, C, eps);
}

static const model_norm_kind kinds[] = {
    {"layernorm", 1, 2, layernorm_taped, layernorm_rows, layernorm_batch},
    {"rmsnorm", 0, 1, rmsnorm_taped, rmsnorm_rows, rmsnorm_batch},
};

const model_norm_kind *model_norm_kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i].name, name)) return &kinds[i];
    return NULL;
}
