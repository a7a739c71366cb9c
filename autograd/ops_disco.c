/* The taped ops DiscoLoop (SPEC §6.6, models/disco.c) is built from, each
 * forward next to its backward:
 *   topk_softmax   p = softmax over each row's kept entries, 0 elsewhere;
 *                  the kept set is a constant, so the backward is the
 *                  softmax backward on p (zero where p is zero);
 *   expected_rows  Phi = p · table (the expected output-embedding row);
 *   sigmoid_gate   a = sigmoid(x · w + b), one gate per row. */
#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/gemm.h"
#include "kernels/softmax.h"
#include "kernels/topk_softmax.h"

#include <math.h>

/* ---- topk_softmax: x [M,N] -> p [M,N] ---- */

static void topk_softmax_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *out = node->out;
    float *d_x = ag_grad(ctx, x); /* [M,N] */
    if (d_x) k_softmax_backward(d_x, out->grad, dt_f32(out), dt_rows(x), dt_cols(x));
}

dt_tensor *ag_topk_softmax(ag_ctx *ctx, dt_tensor *x, int64_t top) {
    static const char *op = "topk_softmax";
    if (!x) return NULL;
    if (!ag_check_f32(op, "x", x)) return NULL;
    if (top < 1) {
        dt_errorf("%s: top = %lld keeps no entry (need top >= 1)", op, (long long)top);
        return NULL;
    }
    const int64_t M = dt_rows(x), N = dt_cols(x);
    if (top > N) top = N;
    dt_tensor *out = ag_tensor_like(ctx, x);
    int32_t *idx = top < N ? ag_scratch(ctx, (size_t)(M * top) * sizeof *idx) : NULL; /* [M,top] */
    if (!out || (top < N && !idx)) return NULL;
    k_topk_softmax(dt_f32(out), dt_f32(x), M, N, top, idx);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1) && !ag_record(ctx, op, topk_softmax_backward, out, inputs, 1)) return NULL;
    return out;
}

/* ---- expected_rows: p [M,N], table [N,C] -> [M,C] = p · table ---- */

static void expected_rows_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *p = node->in[0], *table = node->in[1];
    const int64_t M = dt_rows(p), N = dt_cols(p), C = dt_cols(table);
    const float *d_out = node->out->grad; /* [M,C] */
    float *d_p = ag_grad(ctx, p), *d_table = ag_grad(ctx, table);
    if (d_p) k_gemm(0, 1, M, N, C, 1.0f, d_out, C, dt_f32(table), C, 1.0f, d_p, N);     /* d_p += d_out · table^T */
    if (d_table) k_gemm(1, 0, N, C, M, 1.0f, dt_f32(p), N, d_out, C, 1.0f, d_table, C); /* d_table += p^T · d_out */
}

dt_tensor *ag_expected_rows(ag_ctx *ctx, dt_tensor *p, dt_tensor *table) {
    static const char *op = "expected_rows";
    if (!p || !table) return NULL;
    if (!ag_check_f32(op, "p", p) || !ag_check_f32(op, "table", table)) return NULL;
    if (table->ndim != 2 || dt_cols(p) != table->shape[0])
        return ag_fail_shapes(op, p, table, "do not match (p [..., N], table [N, C])");
    const int64_t M = dt_rows(p), N = dt_cols(p), C = table->shape[1];
    dt_tensor *out = ag_tensor_like_rows(ctx, p, C);
    if (!out) return NULL;
    k_gemm(0, 0, M, C, N, 1.0f, dt_f32(p), N, dt_f32(table), C, 0.0f, dt_f32(out), C);
    dt_tensor *inputs[2] = {p, table};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, expected_rows_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- sigmoid_gate: x [M,C], weight [C], bias [1] -> a [M] ---- */

static void sigmoid_gate_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *weight = node->in[1], *bias = node->in[2];
    const int64_t M = dt_rows(x), C = dt_cols(x);
    const float *a = dt_f32(node->out), *d_a = node->out->grad, *in = dt_f32(x), *w = dt_f32(weight); /* [M] [M] */
    float *d_x = ag_grad(ctx, x), *d_w = ag_grad(ctx, weight), *d_b = ag_grad(ctx, bias);
    for (int64_t i = 0; i < M; i++) {
        const float d_z = d_a[i] * a[i] * (1.0f - a[i]);
        if (d_x)
            for (int64_t c = 0; c < C; c++)
                d_x[i * C + c] += d_z * w[c];
        if (d_w)
            for (int64_t c = 0; c < C; c++)
                d_w[c] += d_z * in[i * C + c];
        if (d_b) d_b[0] += d_z;
    }
}

dt_tensor *ag_sigmoid_gate(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    static const char *op = "sigmoid_gate";
    if (!x || !weight || !bias) return NULL;
    if (!ag_check_f32(op, "x", x) || !ag_check_f32(op, "weight", weight) || !ag_check_f32(op, "bias", bias))
        return NULL;
    if (weight->size != dt_cols(x)) return ag_fail_shapes(op, x, weight, "do not match (x [..., C], weight [C])");
    if (bias->size != 1) return ag_fail_shape(op, "bias", bias, "must hold one value");
    const int64_t M = dt_rows(x), C = dt_cols(x);
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(M));
    if (!out) return NULL;
    const float *in = dt_f32(x), *w = dt_f32(weight);
    float *a = dt_f32(out);
    for (int64_t i = 0; i < M; i++) {
        double z = dt_f32(bias)[0];
        for (int64_t c = 0; c < C; c++)
            z += (double)in[i * C + c] * w[c];
        a[i] = (float)(1.0 / (1.0 + exp(-z)));
    }
    dt_tensor *inputs[3] = {x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 3) && !ag_record(ctx, op, sigmoid_gate_backward, out, inputs, 3)) return NULL;
    return out;
}
