/* Normalisation ops over the last dim: LayerNorm (weight + bias) and RMSNorm
 * (weight only). The forward saves the per-row statistics (mean, rstd) in the
 * arena so the backward does not recompute them. */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/norm.h"

/* Per-row statistics saved by the forward. */
typedef struct {
    float *mean;      /* [M] (LayerNorm only) */
    float *rstd;      /* [M] */
    float *zero_bias; /* [C] zeros standing in for an absent LayerNorm bias */
} norm_saved;

static int check_norm_vec(const char *op, const char *name, const dt_tensor *x, const dt_tensor *v) {
    if (!ag_check_f32(op, name, v)) return 0;
    if (v->ndim != 1 || v->shape[0] != dt_cols(x)) {
        ag_fail_shapes(op, x, v, "do not match (x [..., C], weight/bias [C])");
        return 0;
    }
    return 1;
}

/* ---- layernorm: out = (x - mean) * rstd * weight + bias ---- */

static void layernorm_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *weight = node->in[1], *bias = node->in[2];
    norm_saved *saved = node->saved;
    k_layernorm_backward(ag_grad(ctx, x), ag_grad(ctx, weight), ag_grad(ctx, bias), node->out->grad, dt_f32(x),
                         dt_f32(weight), saved->mean, saved->rstd, dt_rows(x), dt_cols(x));
}

/* bias may be NULL (a LayerNorm without bias). */
dt_tensor *ag_layernorm(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, float eps) {
    static const char *op = "layernorm";
    if (!x || !weight) return NULL;
    if (!ag_check_f32(op, "x", x) || !check_norm_vec(op, "weight", x, weight)) return NULL;
    if (bias && !check_norm_vec(op, "bias", x, bias)) return NULL;
    int64_t M = dt_rows(x), C = dt_cols(x);
    dt_tensor *out = ag_tensor_like(ctx, x); /* [M,C] */
    norm_saved *saved = ag_scratch(ctx, sizeof *saved);
    if (!out || !saved) return NULL;
    saved->mean = ag_scratch(ctx, (size_t)M * sizeof(float));
    saved->rstd = ag_scratch(ctx, (size_t)M * sizeof(float));
    saved->zero_bias = NULL;
    if (!saved->mean || !saved->rstd) return NULL;
    const float *bias_data = bias ? dt_f32(bias) : NULL;
    if (!bias) {
        saved->zero_bias = ag_scratch(ctx, (size_t)C * sizeof(float));
        if (!saved->zero_bias) return NULL;
        memset(saved->zero_bias, 0, (size_t)C * sizeof(float));
        bias_data = saved->zero_bias;
    }
    k_layernorm_forward(dt_f32(out), saved->mean, saved->rstd, dt_f32(x), dt_f32(weight), bias_data, M, C, eps);
    dt_tensor *inputs[3] = {x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 3)) {
        ag_node *node = ag_record(ctx, op, layernorm_backward, out, inputs, 3);
        if (!node) return NULL;
        node->saved = saved;
    }
    return out;
}

/* ---- rmsnorm: out = x * rstd * weight ---- */

static void rmsnorm_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *weight = node->in[1];
    norm_saved *saved = node->saved;
    k_rmsnorm_backward(ag_grad(ctx, x), ag_grad(ctx, weight), node->out->grad, dt_f32(x), dt_f32(weight), saved->rstd,
                       dt_rows(x), dt_cols(x));
}

dt_tensor *ag_rmsnorm(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, float eps) {
    static const char *op = "rmsnorm";
    if (!x || !weight) return NULL;
    if (!ag_check_f32(op, "x", x) || !check_norm_vec(op, "weight", x, weight)) return NULL;
    int64_t M = dt_rows(x), C = dt_cols(x);
    dt_tensor *out = ag_tensor_like(ctx, x); /* [M,C] */
    norm_saved *saved = ag_scratch(ctx, sizeof *saved);
    if (!out || !saved) return NULL;
    saved->mean = NULL;
    saved->zero_bias = NULL;
    saved->rstd = ag_scratch(ctx, (size_t)M * sizeof(float));
    if (!saved->rstd) return NULL;
    k_rmsnorm_forward(dt_f32(out), saved->rstd, dt_f32(x), dt_f32(weight), M, C, eps);
    dt_tensor *inputs[2] = {x, weight};
    if (ag_needs_grad(ctx, inputs, 2)) {
        ag_node *node = ag_record(ctx, op, rmsnorm_backward, out, inputs, 2);
        if (!node) return NULL;
        node->saved = saved;
    }
    return out;
}
