/* Attention ops: RoPE (out-of-place, so the unrotated input stays valid for
 * other consumers) and causal GQA attention over the flash-style kernel, whose
 * per-(b, h, t) log-sum-exp is saved for the backward, with or without
 * ALiBi's per-head score bias (SPEC §6.4). */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/rope.h"

/* ---- rope: x [B,T,H*hd] rotated at positions 0..T-1 ---- */

static void rope_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x); /* [B,T,H*hd] */
    if (!d_x) return;
    int64_t B = x->shape[0], T = x->shape[1], n_head = node->iarg[0], head_dim = x->shape[2] / n_head;
    const float *table = node->saved; /* [T, hd/2, 2] */
    k_rope_backward(d_x, node->out->grad, table, B, T, 0, n_head, head_dim);
}

dt_tensor *ag_rope(ag_ctx *ctx, dt_tensor *x, int64_t n_head, double theta) {
    static const char *op = "rope";
    if (!x) return NULL;
    if (!ag_check_f32(op, "x", x)) return NULL;
    if (x->ndim != 3) return ag_fail_shape(op, "x", x, "(must be [B, T, n_head*head_dim])");
    if (n_head < 1 || x->shape[2] % n_head != 0 || (x->shape[2] / n_head) % 2 != 0) {
        char sx[AG_SHAPE_BUF];
        dt_errorf("%s: x %s does not split into %lld heads of even width", op, dt_shape_str(x, sx, sizeof sx),
                  (long long)n_head);
        return NULL;
    }
    if (!(theta > 0.0)) {
        dt_errorf("%s: theta = %g (must be positive)", op, theta);
        return NULL;
    }
    int64_t B = x->shape[0], T = x->shape[1], head_dim = x->shape[2] / n_head;
    dt_tensor *out = ag_tensor_like(ctx, x);
    float *table = ag_scratch(ctx, (size_t)(T * head_dim) * sizeof(float)); /* [T, hd/2, 2] */
    if (!out || !table) return NULL;
    k_rope_table(table, T, head_dim, theta);
    memcpy(out->data, x->data, (size_t)x->size * sizeof(float));
    k_rope_forward(dt_f32(out), table, B, T, 0, n_head, head_dim);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, op, rope_backward, out, inputs, 1);
        if (!node) return NULL;
        node->saved = table;
        node->iarg[0] = n_head;
    }
    return out;
}

/* ---- attention: q [B,T,H*hd]; k, v [B,T,Hkv*hd] -> out [B,T,H*hd] ----
 * Saved: lse [B,H,T], followed by a copy of the slopes [H] when the scores
 * carry ALiBi's bias (iarg[2] = 1), so the node does not depend on the
 * caller's array living on. Under bf16 products (ctx->bf16_products) the
 * unbiased attention runs on AMX tiles where the CPU has them and the shape
 * is served (kernels/attention_amx.h), else on vdpbf16ps where it has
 * AVX512_BF16; iarg[3] holds that engine (0: the float32 kernels), and the
 * backward then runs the same one. */

/* The engine of this attention's bf16 products (kernels/attention_amx.h), or
 * K_BF16_ATTENTION_FP32 for the float32 kernels. */
static k_bf16_attention_engine bf16_engine(const ag_ctx *ctx, const float *slopes, int64_t H, int64_t Hkv,
                                           int64_t head_dim) {
    if (!ctx->bf16_products || slopes || !k_attention_amx_serves(H, Hkv, head_dim)) return K_BF16_ATTENTION_FP32;
    /* availability guards against SIGILL; the trainer refused a pinned engine the CPU lacks */
    return k_bf16_attention_available(ctx->bf16_attention) ? ctx->bf16_attention : K_BF16_ATTENTION_FP32;
}

static void attention_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *q = node->in[0], *k = node->in[1], *v = node->in[2], *out = node->out;
    int64_t B = q->shape[0], T = q->shape[1], H = node->iarg[0], Hkv = node->iarg[1], head_dim = q->shape[2] / H;
    const float *lse = node->saved;                               /* [B,H,T] */
    const float *slopes = node->iarg[2] ? lse + B * H * T : NULL; /* [H] */
    if (node->iarg[3] != K_BF16_ATTENTION_FP32) {
        float *d_q = NULL, *d_k = NULL, *d_v = NULL;
        int accumulate_q = 1, accumulate_k = 1, accumulate_v = 1;
        if (q == k || q == v || k == v) { /* one tensor in two roles: its gradient takes both sums */
            d_q = ag_grad(ctx, q), d_k = ag_grad(ctx, k), d_v = ag_grad(ctx, v);
        } else {
            d_q = ag_grad_for_write(ctx, q, &accumulate_q);
            d_k = ag_grad_for_write(ctx, k, &accumulate_k);
            d_v = ag_grad_for_write(ctx, v, &accumulate_v);
        }
        void *scratch = ag_scratch(ctx, k_attention_amx_backward_scratch(B, T, H, Hkv, head_dim));
        if (!scratch) return;
        k_attention_amx_backward((k_bf16_attention_engine)node->iarg[3], d_q, accumulate_q, d_k, accumulate_k, d_v,
                                 accumulate_v, out->grad, dt_f32(q), dt_f32(k), dt_f32(v), dt_f32(out), lse, B, T, H,
                                 Hkv, head_dim, scratch);
        return;
    }
    int64_t scratch_floats = k_attention_backward_scratch(B, T, H, Hkv, head_dim);
    float *scratch = ag_scratch(ctx, (size_t)(scratch_floats > 0 ? scratch_floats : 1) * sizeof(float));
    if (!scratch) return;             /* out of memory: the arena said why, and ag_backward fails */
    if (q == k || q == v || k == v) { /* one tensor in two roles: its gradient takes both sums */
        k_attention_backward_biased(ag_grad(ctx, q), 1, ag_grad(ctx, k), 1, ag_grad(ctx, v), 1, out->grad, dt_f32(q),
                                    dt_f32(k), dt_f32(v), dt_f32(out), lse, B, T, H, Hkv, head_dim, slopes, scratch);
        return;
    }
    /* Fresh gradient buffers are written, not zero-filled and added to. */
    int accumulate_q, accumulate_k, accumulate_v;
    float *d_q = ag_grad_for_write(ctx, q, &accumulate_q), *d_k = ag_grad_for_write(ctx, k, &accumulate_k),
          *d_v = ag_grad_for_write(ctx, v, &accumulate_v);
    k_attention_backward_biased(d_q, accumulate_q, d_k, accumulate_k, d_v, accumulate_v, out->grad, dt_f32(q),
                                dt_f32(k), dt_f32(v), dt_f32(out), lse, B, T, H, Hkv, head_dim, slopes, scratch);
}

dt_tensor *ag_attention(ag_ctx *ctx, dt_tensor *q, dt_tensor *k, dt_tensor *v, int64_t n_head, int64_t n_kv_head) {
    return ag_attention_biased(ctx, q, k, v, n_head, n_kv_head, NULL);
}

dt_tensor *ag_attention_biased(ag_ctx *ctx, dt_tensor *q, dt_tensor *k, dt_tensor *v, int64_t n_head, int64_t n_kv_head,
                               const float *slopes) {
    static const char *op = "attention";
    if (!q || !k || !v) return NULL;
    if (!ag_check_f32(op, "q", q) || !ag_check_f32(op, "k", k) || !ag_check_f32(op, "v", v)) return NULL;
    if (q->ndim != 3) return ag_fail_shape(op, "q", q, "(must be [B, T, H*head_dim])");
    if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0 || q->shape[2] % n_head != 0) {
        char sq[AG_SHAPE_BUF];
        dt_errorf("%s: q %s with %lld heads and %lld kv heads (need H %% Hkv == 0 and H | width)", op,
                  dt_shape_str(q, sq, sizeof sq), (long long)n_head, (long long)n_kv_head);
        return NULL;
    }
    int64_t B = q->shape[0], T = q->shape[1], H = n_head, Hkv = n_kv_head, head_dim = q->shape[2] / H;
    if (k_attention_check(H, Hkv, head_dim) != DT_OK) return NULL; /* its message names the op and the value */
    if (k->ndim != 3 || k->shape[0] != B || k->shape[1] != T || k->shape[2] != Hkv * head_dim)
        return ag_fail_shapes(op, q, k, "do not match (q [B, T, H*hd], k [B, T, Hkv*hd])");
    if (!dt_same_shape(k, v)) return ag_fail_shapes(op, k, v, "differ (k and v must be equal)");
    dt_tensor *out = ag_tensor_like(ctx, q);
    float *lse = ag_scratch(ctx, (size_t)(B * H * T + (slopes ? H : 0)) * sizeof(float)); /* [B,H,T] (+ slopes [H]) */
    if (!out || !lse) return NULL;
    if (slopes) {
        memcpy(lse + B * H * T, slopes, (size_t)H * sizeof(float));
        slopes = lse + B * H * T;
    }
    const k_bf16_attention_engine engine = bf16_engine(ctx, slopes, H, Hkv, head_dim);
    if (engine != K_BF16_ATTENTION_FP32) {
        void *scratch = ag_scratch(ctx, k_attention_amx_forward_scratch(B, T, Hkv, head_dim));
        if (!scratch) return NULL;
        k_attention_amx_forward(engine, dt_f32(out), lse, dt_f32(q), dt_f32(k), dt_f32(v), B, T, H, Hkv, head_dim,
                                scratch);
    } else
        k_attention_forward_biased(dt_f32(out), lse, dt_f32(q), dt_f32(k), dt_f32(v), B, T, H, Hkv, head_dim, slopes);
    dt_tensor *inputs[3] = {q, k, v};
    if (ag_needs_grad(ctx, inputs, 3)) {
        ag_node *node = ag_record(ctx, op, attention_backward, out, inputs, 3);
        if (!node) return NULL;
        node->saved = lse;
        node->iarg[0] = H;
        node->iarg[1] = Hkv;
        node->iarg[2] = slopes != NULL;
        node->iarg[3] = engine;
    }
    return out;
}
