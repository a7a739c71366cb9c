/* ag_linear: y = x W^T (+ b) over the last dim of x (leading dims flattened to
 * rows), forward and backward through the BLIS-backed k_linear_* kernels (or,
 * when the tape runs bf16 products, kernels/gemm_bf16.h); and
 * its fused forms: the MLP's first map with its GELU (ag_linear_gelu), a map
 * added onto the residual stream (ag_linear_residual), the whole GPT-2 MLP
 * with the GELU output recomputed in the backward (ag_mlp_gelu), and the
 * decode branch's coupled maps (ag_linear_coupled).
 *
 * Backward writes d_x with the GEMM's beta = 0 when d_x is a fresh buffer
 * (ag_grad_for_write): no zero-fill, and no read of the zeros. */
#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

/* ---- the tape's products (ag_ctx.bf16_products): float32, or operands
 * rounded to bfloat16 with float32 sums, a weight read through its own bf16
 * copy when it has one (models refresh those once per step) ---- */

/* C [M,N] = A [M,K] · op(W) + beta C; op(W) is W^T (W [N,K], trans_w) or W (W [K,N]).
 * A bf16 product can fail (out of memory for its operand scratch): then the
 * tape's backward_failed is set too, so ag_backward reports it. */
static dt_status times_weight_rounded(ag_ctx *ctx, int trans_w, int64_t M, int64_t N, int64_t K, const float *A,
                                      const uint16_t *A_bf16, const dt_tensor *W, float beta, float *C) {
    const int64_t ldw = dt_cols(W);
    if (!ctx->bf16_products) {
        k_gemm(0, trans_w, M, N, K, 1.0f, A, K, dt_f32(W), ldw, beta, C, N);
        return DT_OK;
    }
    if (k_gemm_bf16(0, trans_w, M, N, K, 1.0f, A, A_bf16, K, dt_f32(W), W->bf16, ldw, beta, C, N) == DT_OK)
        return DT_OK;
    ctx->backward_failed = 1;
    return DT_ERR;
}

/* The same, A rounded by the product itself. */
static dt_status times_weight(ag_ctx *ctx, int trans_w, int64_t M, int64_t N, int64_t K, const float *A,
                              const dt_tensor *W, float beta, float *C) {
    return times_weight_rounded(ctx, trans_w, M, N, K, A, NULL, W, beta, C);
}

/* x [n] rounded to bfloat16 once, into tape scratch, for an operand that
 * feeds two bf16 products (a gradient d_y: d_x = d_y W and d_W = d_y^T x).
 * Rounding is deterministic, so both products read the bits they would have
 * rounded themselves; what is saved is a second conversion pass over x (in
 * a bf16 char step conversions were 16-18% of the time, and each layer's
 * d_y's were 3,456 of the 12,288 columns of M rows rounded twice). NULL
 * when the tape runs float32 products, or when scratch runs out (then each
 * product rounds x itself, the arena having recorded why). Hand the copy
 * back with ag_temp_release. */
static uint16_t *rounded_once(ag_ctx *ctx, const float *x, int64_t n) {
    if (!ctx->bf16_products || n <= 0) return NULL;
    float *room = ag_temp(ctx, (n + 1) / 2); /* 2 bytes per element */
    if (!room) return NULL;
    uint16_t *copy = (uint16_t *)(void *)room;
    k_bf16_round(copy, x, n);
    return copy;
}

/* out [M,N] = in [M,K] · weight [N,K]^T + bias [N] (bias may be NULL); under
 * bf16 products `in` may come as its bf16 copy only (in = NULL, in_bf16). */
static dt_status linear_forward_rounded(ag_ctx *ctx, float *out, const float *in, const uint16_t *in_bf16,
                                        const dt_tensor *weight, const dt_tensor *bias, int64_t M, int64_t K,
                                        int64_t N) {
    if (!ctx->bf16_products) {
        k_linear_forward(out, in, dt_f32(weight), bias ? dt_f32(bias) : NULL, M, K, N);
        return DT_OK;
    }
    if (k_gemm_bf16_bias(0, 1, M, N, K, 1.0f, in, in_bf16, K, dt_f32(weight), weight->bf16, dt_cols(weight),
                         bias ? dt_f32(bias) : NULL, out, N) == DT_OK)
        return DT_OK;
    ctx->backward_failed = 1;
    return DT_ERR;
}

/* d_weight [N,K] += d_out [M,N]^T · in [M,K]; d_bias [N] += column sums of d_out (NULLs skipped).
 * d_out_bf16, in_bf16: bf16 copies (bf16 products only), or NULL; with a copy
 * the float32 operand may be NULL, except d_out when d_bias is wanted. */
static void weight_gradients(ag_ctx *ctx, float *d_weight, float *d_bias, const float *d_out,
                             const uint16_t *d_out_bf16, const float *in, const uint16_t *in_bf16,
                             const dt_tensor *weight, int64_t M, int64_t K, int64_t N) {
    if (!ctx->bf16_products) {
        k_linear_backward(NULL, d_weight, d_bias, d_out, in, dt_f32(weight), M, K, N);
        return;
    }
    if (M <= 0 || N <= 0) return;
    if (d_weight && k_gemm_bf16(1, 0, N, K, M, 1.0f, d_out, d_out_bf16, N, in, in_bf16, K, 1.0f, d_weight, K) != DT_OK)
        ctx->backward_failed = 1;
    if (d_bias) k_sum_rows(d_bias, d_out, M, N);
}

/* Checks x [..., K] against weight [N, K] and bias [N] (or NULL). */
static int check_linear(const char *op, const dt_tensor *x, const dt_tensor *weight, const dt_tensor *bias) {
    if (!ag_check_f32(op, "x", x) || !ag_check_f32(op, "weight", weight)) return 0;
    if (weight->ndim != 2) {
        ag_fail_shape(op, "weight", weight, "(must be [N, K])");
        return 0;
    }
    if (dt_cols(x) != weight->shape[1]) {
        ag_fail_shapes(op, x, weight, "do not match (x [..., K], weight [N, K])");
        return 0;
    }
    if (bias) {
        if (!ag_check_f32(op, "bias", bias)) return 0;
        if (bias->ndim != 1 || bias->shape[0] != weight->shape[0]) {
            ag_fail_shapes(op, weight, bias, "do not match (weight [N, K], bias [N])");
            return 0;
        }
    }
    return 1;
}

/* The three gradients of y = x W^T + b given d_y [M,N]: d_x (written or
 * added, see above), d_W [N,K] and d_b [N] added. Under bf16 products d_y
 * may come as its bf16 copy (d_y_bf16; then d_y may be NULL when there is no
 * bias); without one, d_y is rounded once for both products. */
static void linear_gradients_rounded(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, const float *d_y,
                                     const uint16_t *d_y_bf16) {
    const int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    int accumulate;
    float *d_x = ag_grad_for_write(ctx, x, &accumulate); // [M,K]
    float *d_weight = ag_grad(ctx, weight);              // [N,K]
    uint16_t *rounded = !d_y_bf16 && d_x && d_weight ? rounded_once(ctx, d_y, M * N) : NULL;
    if (rounded) d_y_bf16 = rounded;
    if (d_x) /* a failure is flagged for ag_backward */
        (void)times_weight_rounded(ctx, 0, M, K, N, d_y, d_y_bf16, weight, accumulate ? 1.0f : 0.0f, d_x);
    weight_gradients(ctx, d_weight, ag_grad(ctx, bias), d_y, d_y_bf16, dt_f32(x), x->bf16, weight, M, K, N);
    ag_temp_release(ctx, (float *)(void *)rounded);
}

static void linear_gradients(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, const float *d_y) {
    linear_gradients_rounded(ctx, x, weight, bias, d_y, NULL);
}

dt_tensor *ag_bf16_operand(ag_ctx *ctx, dt_tensor *x) {
    if (!x || !ctx->bf16_products || x->bf16 || x->heap_owned || x->dtype != DT_F32 || x->size <= 0) return x;
    uint16_t *copy = dt_arena_alloc(&ctx->arena, (size_t)x->size * sizeof(uint16_t));
    if (!copy) return x; /* the products round x themselves */
    k_bf16_round(copy, dt_f32(x), x->size);
    x->bf16 = copy;
    return x;
}

/* ---- linear: in x [M,K], weight [N,K], bias [N] or NULL; out [M,N] ---- */

static void linear_backward(ag_ctx *ctx, ag_node *node) {
    linear_gradients(ctx, node->in[0], node->in[1], node->in[2], node->out->grad);
}

dt_tensor *ag_linear(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    static const char *op = "linear";
    if (!x || !weight) return NULL;
    if (!check_linear(op, x, weight, bias)) return NULL;
    int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    dt_tensor *out = ag_tensor_like_rows(ctx, x, N); /* [..., N] */
    if (!out) return NULL;
    if (linear_forward_rounded(ctx, dt_f32(out), dt_f32(x), x->bf16, weight, bias, M, K, N) != DT_OK) return NULL;
    dt_tensor *inputs[3] = {x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 3) && !ag_record(ctx, op, linear_backward, out, inputs, 3)) return NULL;
    return out;
}

/* ---- linear_gelu: out [M,N] = gelu(x W^T + b); saved: the pre-activation [M,N] ---- */

static void linear_gelu_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *weight = node->in[1], *bias = node->in[2];
    dt_tensor *pre = node->saved; /* [M,N] */
    const int64_t M = dt_rows(pre), N = dt_cols(pre);
    /* d_pre borrows a gradient buffer for the span of this backward. */
    pre->requires_grad = 1;
    int accumulate;
    float *d_pre = ag_grad_for_write(ctx, pre, &accumulate); // [M,N]
    if (!d_pre) return;                                      /* out of memory: the arena recorded why */
    k_bias_gelu_backward(d_pre, accumulate, ag_grad(ctx, bias), node->out->grad, dt_f32(pre), M, N);
    linear_gradients(ctx, x, weight, NULL, d_pre); /* d_b came with the GELU pass */
    ag_release_grad(ctx, pre);
}

dt_tensor *ag_linear_gelu(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    static const char *op = "linear_gelu";
    if (!x || !weight) return NULL;
    if (!check_linear(op, x, weight, bias)) return NULL;
    int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    dt_tensor *pre = ag_tensor_like_rows(ctx, x, N); /* [..., N] before the GELU */
    dt_tensor *out = ag_tensor_like_rows(ctx, x, N); /* [..., N] */
    if (!pre || !out) return NULL;
    if (times_weight_rounded(ctx, 1, M, N, K, dt_f32(x), x->bf16, weight, 0.0f, dt_f32(pre)) != DT_OK) return NULL;
    k_bias_gelu_forward(dt_f32(out), dt_f32(pre), bias ? dt_f32(bias) : NULL, M, N);
    dt_tensor *inputs[3] = {x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 3)) {
        ag_node *node = ag_record(ctx, op, linear_gelu_backward, out, inputs, 3);
        if (!node) return NULL;
        node->saved = pre;
    }
    return out;
}

/* ---- linear_residual: out [M,N] = residual + (x W^T + b) ---- */

static void linear_residual_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *residual = node->in[0], *x = node->in[1], *weight = node->in[2], *bias = node->in[3];
    const float *d_out = node->out->grad; /* [M,N] */
    int accumulate;
    float *d_residual = ag_grad_for_write(ctx, residual, &accumulate);
    if (d_residual) {
        if (accumulate)
            k_accumulate(d_residual, d_out, residual->size);
        else
            k_scale(d_residual, d_out, 1.0f, residual->size); /* a copy */
    }
    linear_gradients(ctx, x, weight, bias, d_out);
}

dt_tensor *ag_linear_residual(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    static const char *op = "linear_residual";
    if (!residual || !x || !weight) return NULL;
    if (!check_linear(op, x, weight, bias) || !ag_check_f32(op, "residual", residual)) return NULL;
    int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    if (dt_rows(residual) != M || dt_cols(residual) != N)
        return ag_fail_shapes(op, residual, x, "do not match (residual [..., N], x [..., K] with the same rows)");
    dt_tensor *out = ag_tensor_like(ctx, residual); /* [..., N] */
    if (!out) return NULL;
    /* The linear output first, then the residual added onto it: a + b == b + a
     * exactly, so this is ag_add(residual, ag_linear(...)) to the bit. */
    if (linear_forward_rounded(ctx, dt_f32(out), dt_f32(x), x->bf16, weight, bias, M, K, N) != DT_OK) return NULL;
    k_accumulate(dt_f32(out), dt_f32(residual), M * N);
    dt_tensor *inputs[4] = {residual, x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 4) && !ag_record(ctx, op, linear_residual_backward, out, inputs, 4)) return NULL;
    return out;
}

/* ---- mlp_gelu: out [M,C] = residual + gelu(x fc^T + b_fc) proj^T + b_proj; saved: pre [M,F] ---- */

/* mlp_gelu's backward under bf16 products: the same steps, but the GELU
 * output and d_pre are produced in bf16 (k_gelu_recompute_backward_bf16),
 * since bf16 products are all that read them, and d_out is rounded once for
 * its two products. The residual's gradient is done by the caller. */
static void mlp_gelu_backward_bf16(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[1], *fc = node->in[2], *fc_bias = node->in[3];
    dt_tensor *proj = node->in[4], *proj_bias = node->in[5];
    dt_tensor *pre = node->saved; /* [M,F] */
    const int64_t M = dt_rows(pre), F = dt_cols(pre), C = proj->shape[0];
    const float *d_out = node->out->grad;                                      /* [M,C] */
    float *d_hidden = ag_temp(ctx, M * F);                                     /* [M,F] d_out proj */
    uint16_t *hidden_bf16 = (uint16_t *)(void *)ag_temp(ctx, (M * F + 1) / 2); /* [M,F] gelu(pre), bf16 */
    uint16_t *d_pre_bf16 = (uint16_t *)(void *)ag_temp(ctx, (M * F + 1) / 2);  /* [M,F] d_pre, bf16 */
    if (!d_hidden || !hidden_bf16 || !d_pre_bf16) return;   /* out of memory: the arena recorded why */
    uint16_t *d_out_bf16 = rounded_once(ctx, d_out, M * C); /* read by d_hidden's product and proj's d_W */
    if (times_weight_rounded(ctx, 0, M, F, C, d_out, d_out_bf16, proj, 0.0f, d_hidden) != DT_OK)
        return; /* flagged for ag_backward */
    k_gelu_recompute_backward_bf16(hidden_bf16, d_pre_bf16, ag_grad(ctx, fc_bias), d_hidden, dt_f32(pre), M, F);
    ag_temp_release(ctx, d_hidden);
    weight_gradients(ctx, ag_grad(ctx, proj), ag_grad(ctx, proj_bias), d_out, d_out_bf16, NULL, hidden_bf16, proj, M, F,
                     C);
    ag_temp_release(ctx, (float *)(void *)d_out_bf16);
    ag_temp_release(ctx, (float *)(void *)hidden_bf16);
    linear_gradients_rounded(ctx, x, fc, NULL, NULL, d_pre_bf16); /* d_x, d_W_fc */
    ag_temp_release(ctx, (float *)(void *)d_pre_bf16);
}

static void mlp_gelu_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *residual = node->in[0], *x = node->in[1], *fc = node->in[2], *fc_bias = node->in[3];
    dt_tensor *proj = node->in[4], *proj_bias = node->in[5];
    dt_tensor *pre = node->saved; /* [M,F] */
    const int64_t M = dt_rows(pre), F = dt_cols(pre), C = proj->shape[0];
    const float *d_out = node->out->grad; /* [M,C] */
    int accumulate;
    float *d_residual = ag_grad_for_write(ctx, residual, &accumulate);
    if (d_residual) {
        if (accumulate)
            k_accumulate(d_residual, d_out, residual->size);
        else
            k_scale(d_residual, d_out, 1.0f, residual->size); /* a copy */
    }
    if (ctx->bf16_products) {
        mlp_gelu_backward_bf16(ctx, node);
        return;
    }
    float *hidden = ag_temp(ctx, M * F);   /* [M,F] gelu(pre), the forward's GELU output recomputed */
    float *d_hidden = ag_temp(ctx, M * F); /* [M,F] d_out proj, then d_pre in place */
    if (!hidden || !d_hidden) return;      /* out of memory: the arena recorded why */
    if (times_weight(ctx, 0, M, F, C, d_out, proj, 0.0f, d_hidden) != DT_OK) return; /* flagged for ag_backward */
    /* one sweep over pre: the GELU output and d_pre from the same gates, d_b_fc += column sums */
    k_gelu_recompute_backward(hidden, d_hidden, ag_grad(ctx, fc_bias), d_hidden, dt_f32(pre), M, F);
    /* proj: d_W += d_out^T hidden, d_b += column sums of d_out */
    weight_gradients(ctx, ag_grad(ctx, proj), ag_grad(ctx, proj_bias), d_out, NULL, hidden, NULL, proj, M, F, C);
    ag_temp_release(ctx, hidden);
    linear_gradients(ctx, x, fc, NULL, d_hidden); /* d_x, d_W_fc */
    ag_temp_release(ctx, d_hidden);
}

dt_tensor *ag_mlp_gelu(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *fc, dt_tensor *fc_bias,
                       dt_tensor *proj, dt_tensor *proj_bias) {
    static const char *op = "mlp_gelu";
    if (!residual || !x || !fc || !proj) return NULL;
    if (!check_linear(op, x, fc, fc_bias) || !ag_check_f32(op, "residual", residual) || !ag_check_f32(op, "proj", proj))
        return NULL;
    const int64_t M = dt_rows(x), C = dt_cols(x), F = fc->shape[0];
    if (proj->ndim != 2 || proj->shape[1] != F || proj->shape[0] != dt_cols(residual))
        return ag_fail_shapes(op, fc, proj, "do not match (fc [F, C], proj [C_out, F])");
    if (dt_rows(residual) != M) return ag_fail_shapes(op, residual, x, "have different row counts");
    const int64_t C_out = proj->shape[0];
    if (proj_bias &&
        (!ag_check_f32(op, "proj_bias", proj_bias) || proj_bias->ndim != 1 || proj_bias->shape[0] != C_out))
        return ag_fail_shapes(op, proj, proj_bias, "do not match (proj [C_out, F], proj_bias [C_out])");
    dt_tensor *pre = ag_tensor_like_rows(ctx, x, F); /* [..., F] kept for the backward */
    dt_tensor *out = ag_tensor_like(ctx, residual);  /* [..., C_out] */
    if (!pre || !out) return NULL;
    /* [M,F] gelu output, only while the forward runs; under bf16 products
     * only its bf16 copy exists (the one operand that reads it is bf16) */
    const int bf16 = ctx->bf16_products;
    float *hidden = ag_temp(ctx, bf16 ? (M * F + 1) / 2 : M * F);
    if (!hidden) return NULL;
    uint16_t *hidden_bf16 = bf16 ? (uint16_t *)(void *)hidden : NULL;
    /* The arithmetic of ag_linear_gelu then ag_linear_residual, in that order. */
    if (times_weight_rounded(ctx, 1, M, F, C, dt_f32(x), x->bf16, fc, 0.0f, dt_f32(pre)) != DT_OK) return NULL;
    const float *fc_bias_data = fc_bias ? dt_f32(fc_bias) : NULL;
    if (bf16)
        k_bias_gelu_forward_bf16(hidden_bf16, dt_f32(pre), fc_bias_data, M, F);
    else
        k_bias_gelu_forward(hidden, dt_f32(pre), fc_bias_data, M, F);
    if (linear_forward_rounded(ctx, dt_f32(out), bf16 ? NULL : hidden, hidden_bf16, proj, proj_bias, M, F, C_out) !=
        DT_OK)
        return NULL;
    k_accumulate(dt_f32(out), dt_f32(residual), M * C_out);
    ag_temp_release(ctx, hidden);
    dt_tensor *inputs[6] = {residual, x, fc, fc_bias, proj, proj_bias};
    if (ag_needs_grad(ctx, inputs, 6)) {
        ag_node *node = ag_record(ctx, op, mlp_gelu_backward, out, inputs, 6);
        if (!node) return NULL;
        node->saved = pre;
    }
    return out;
}

/* ---- linear_coupled: out [M,N] = [residual +] act(x W^T + b) + coupled ⊙ couple ----
 * in: residual, x, weight, bias, coupled, couple; iarg[0]: act is GELU;
 * saved: the pre-activation [M,N] (GELU only). */

static void linear_coupled_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *residual = node->in[0], *x = node->in[1], *weight = node->in[2], *bias = node->in[3];
    dt_tensor *coupled = node->in[4], *couple = node->in[5];
    const float *d_out = node->out->grad; /* [M,N] */
    const int64_t M = dt_rows(x), N = weight->shape[0];
    if (residual) {
        int accumulate;
        float *d_residual = ag_grad_for_write(ctx, residual, &accumulate);
        if (d_residual) {
            if (accumulate)
                k_accumulate(d_residual, d_out, residual->size);
            else
                k_scale(d_residual, d_out, 1.0f, residual->size); /* a copy */
        }
    }
    if (coupled)
        k_mul_vec_backward(ag_grad(ctx, coupled), ag_grad(ctx, couple), d_out, dt_f32(coupled), dt_f32(couple), M, N);
    if (!node->iarg[0]) {
        linear_gradients(ctx, x, weight, bias, d_out);
        return;
    }
    dt_tensor *pre = node->saved; /* [M,N] */
    float *d_pre = ag_temp(ctx, M * N);
    if (!d_pre) return; /* out of memory: the arena recorded why */
    k_bias_gelu_backward(d_pre, 0, ag_grad(ctx, bias), d_out, dt_f32(pre), M, N);
    linear_gradients(ctx, x, weight, NULL, d_pre);
    ag_temp_release(ctx, d_pre);
}

dt_tensor *ag_linear_coupled(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *weight, dt_tensor *bias,
                             int gelu, dt_tensor *coupled, dt_tensor *couple) {
    static const char *op = "linear_coupled";
    if (!x || !weight) return NULL;
    if (!check_linear(op, x, weight, bias)) return NULL;
    const int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    if (residual && (!ag_check_f32(op, "residual", residual) || dt_rows(residual) != M || dt_cols(residual) != N))
        return ag_fail_shapes(op, residual, x, "do not match (residual [..., N], x [..., K] with the same rows)");
    if (!coupled != !couple) {
        dt_errorf("%s: coupled and couple come together (one is NULL)", op);
        return NULL;
    }
    if (coupled) {
        if (!ag_check_f32(op, "coupled", coupled) || !ag_check_f32(op, "couple", couple)) return NULL;
        if (dt_rows(coupled) != M || dt_cols(coupled) != N || couple->ndim != 1 || couple->shape[0] != N)
            return ag_fail_shapes(op, coupled, couple, "do not match (coupled [..., N], couple [N])");
    }
    dt_tensor *out = ag_tensor_like_rows(ctx, x, N); /* [..., N] */
    dt_tensor *pre = gelu ? ag_tensor_like_rows(ctx, x, N) : NULL;
    if (!out || (gelu && !pre)) return NULL;
    const float *bias_data = bias ? dt_f32(bias) : NULL;
    if (gelu) {
        /* GEMM into pre, then one pass: bias, GELU, coupling term */
        if (times_weight_rounded(ctx, 1, M, N, K, dt_f32(x), x->bf16, weight, 0.0f, dt_f32(pre)) != DT_OK) return NULL;
        if (coupled)
            k_bias_gelu_couple_forward(dt_f32(out), dt_f32(pre), bias_data, dt_f32(coupled), dt_f32(couple), M, N);
        else
            k_bias_gelu_forward(dt_f32(out), dt_f32(pre), bias_data, M, N);
        if (residual) k_accumulate(dt_f32(out), dt_f32(residual), M * N);
    } else {
        /* The linear map first, then the terms added in the unfused order: a
         * zero coupling then gives the uncoupled numbers bit for bit (the
         * couple = off ablation identity). */
        if (linear_forward_rounded(ctx, dt_f32(out), dt_f32(x), x->bf16, weight, bias, M, K, N) != DT_OK) return NULL;
        if (coupled) k_accumulate_mul_vec(dt_f32(out), dt_f32(coupled), dt_f32(couple), M, N);
        if (residual) k_accumulate(dt_f32(out), dt_f32(residual), M * N);
    }
    dt_tensor *inputs[6] = {residual, x, weight, bias, coupled, couple};
    if (ag_needs_grad(ctx, inputs, 6)) {
        ag_node *node = ag_record(ctx, op, linear_coupled_backward, out, inputs, 6);
        if (!node) return NULL;
        node->iarg[0] = gelu;
        node->saved = pre;
    }
    return out;
}
