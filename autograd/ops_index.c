/* Indexing ops: token embedding lookup, row gather / scatter-add (MoE dispatch
 * and combine) and per-row column gather (picking chosen router logits).
 * Every index is range-checked in the forward, so kernels never see a bad id. */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"

/* ---- embedding: weight [V,C], tokens int32 [...] -> [..., C] ---- */

static void embedding_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *weight = node->in[0], *tokens = node->in[1];
    float *d_weight = ag_grad(ctx, weight); /* [V,C] */
    if (d_weight) k_embedding_backward(d_weight, node->out->grad, dt_i32(tokens), tokens->size, dt_cols(weight));
}

dt_tensor *ag_embedding(ag_ctx *ctx, dt_tensor *weight, dt_tensor *tokens) {
    static const char *op = "embedding";
    if (!weight || !tokens) return NULL;
    if (!ag_check_f32(op, "weight", weight) || !ag_check_i32(op, "tokens", tokens)) return NULL;
    if (weight->ndim != 2) return ag_fail_shape(op, "weight", weight, "(must be [V, C])");
    if (tokens->ndim >= DT_MAX_DIMS) return ag_fail_shape(op, "tokens", tokens, "(at most 3 dims: the output adds C)");
    int64_t V = weight->shape[0], C = weight->shape[1];
    if (!ag_check_ids(op, "token", tokens, V)) return NULL;
    int64_t shape[DT_MAX_DIMS];
    for (int i = 0; i < tokens->ndim; i++)
        shape[i] = tokens->shape[i];
    shape[tokens->ndim] = C;
    dt_tensor *out = ag_tensor(ctx, DT_F32, tokens->ndim + 1, shape); /* [..., C] */
    if (!out) return NULL;
    k_embedding_forward(dt_f32(out), dt_f32(weight), dt_i32(tokens), tokens->size, C);
    dt_tensor *inputs[2] = {weight, tokens};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, embedding_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- embedding_pos: weight [V,C], pos_weight [P,C], tokens, positions int32 [...] -> [..., C] ---- */

static void embedding_pos_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *weight = node->in[0], *tokens = node->in[1], *pos_weight = node->in[2], *positions = node->in[3];
    float *d_weight = ag_grad(ctx, weight), *d_pos = ag_grad(ctx, pos_weight); /* [V,C], [P,C] */
    const int64_t C = dt_cols(weight);
    if (d_weight) k_embedding_backward(d_weight, node->out->grad, dt_i32(tokens), tokens->size, C);
    if (d_pos) k_embedding_backward(d_pos, node->out->grad, dt_i32(positions), positions->size, C);
}

dt_tensor *ag_embedding_pos(ag_ctx *ctx, dt_tensor *weight, dt_tensor *tokens, dt_tensor *pos_weight,
                            dt_tensor *positions) {
    static const char *op = "embedding_pos";
    if (!weight || !tokens || !pos_weight || !positions) return NULL;
    if (!ag_check_f32(op, "weight", weight) || !ag_check_f32(op, "pos_weight", pos_weight) ||
        !ag_check_i32(op, "tokens", tokens) || !ag_check_i32(op, "positions", positions))
        return NULL;
    if (weight->ndim != 2 || pos_weight->ndim != 2 || weight->shape[1] != pos_weight->shape[1])
        return ag_fail_shapes(op, weight, pos_weight, "are not weight [V, C] and pos_weight [P, C]");
    if (!dt_same_shape(tokens, positions)) return ag_fail_shapes(op, tokens, positions, "differ (must be equal)");
    if (tokens->ndim >= DT_MAX_DIMS) return ag_fail_shape(op, "tokens", tokens, "(at most 3 dims: the output adds C)");
    const int64_t C = weight->shape[1];
    if (!ag_check_ids(op, "token", tokens, weight->shape[0]) ||
        !ag_check_ids(op, "position", positions, pos_weight->shape[0]))
        return NULL;
    int64_t shape[DT_MAX_DIMS];
    for (int i = 0; i < tokens->ndim; i++)
        shape[i] = tokens->shape[i];
    shape[tokens->ndim] = C;
    dt_tensor *out = ag_tensor(ctx, DT_F32, tokens->ndim + 1, shape); /* [..., C] */
    if (!out) return NULL;
    /* token row, then the position row added: the numbers of ag_add(lookup, lookup) */
    k_embedding_forward(dt_f32(out), dt_f32(weight), dt_i32(tokens), tokens->size, C);
    k_embedding_accumulate(dt_f32(out), dt_f32(pos_weight), dt_i32(positions), positions->size, C);
    dt_tensor *inputs[4] = {weight, tokens, pos_weight, positions};
    if (ag_needs_grad(ctx, inputs, 4) && !ag_record(ctx, op, embedding_pos_backward, out, inputs, 4)) return NULL;
    return out;
}

/* ---- gather_rows: x [N,C], idx [M] -> out [M,C] = x[idx] ---- */

static void gather_rows_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *idx = node->in[1];
    float *d_x = ag_grad(ctx, x); /* [N,C] */
    if (d_x) k_scatter_add_rows(d_x, node->out->grad, dt_i32(idx), idx->size, dt_cols(x));
}

dt_tensor *ag_gather_rows(ag_ctx *ctx, dt_tensor *x, dt_tensor *idx) {
    static const char *op = "gather_rows";
    if (!x || !idx) return NULL;
    if (!ag_check_f32(op, "x", x) || !ag_check_i32(op, "idx", idx)) return NULL;
    if (x->ndim != 2 || idx->ndim != 1) return ag_fail_shapes(op, x, idx, "are not x [N, C] and idx [M]");
    int64_t N = x->shape[0], C = x->shape[1], M = idx->shape[0];
    if (!ag_check_ids(op, "idx", idx, N)) return NULL;
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(M, C));
    if (!out) return NULL;
    k_gather_rows(dt_f32(out), dt_f32(x), dt_i32(idx), M, C);
    dt_tensor *inputs[2] = {x, idx};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, gather_rows_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- scatter_add_rows: src [M,C], idx [M] -> out [n_rows,C], out[idx[m]] += src[m] ---- */

static void scatter_add_rows_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *src = node->in[0], *idx = node->in[1];
    float *d_src = ag_grad(ctx, src); /* [M,C] */
    if (!d_src) return;
    int64_t M = src->shape[0], C = src->shape[1];
    const int32_t *id = dt_i32(idx);
    const float *d_out = node->out->grad; /* [n_rows,C] */
    for (int64_t m = 0; m < M; m++)
        k_accumulate(d_src + m * C, d_out + (int64_t)id[m] * C, C);
}

dt_tensor *ag_scatter_add_rows(ag_ctx *ctx, dt_tensor *src, dt_tensor *idx, int64_t n_rows) {
    static const char *op = "scatter_add_rows";
    if (!src || !idx) return NULL;
    if (!ag_check_f32(op, "src", src) || !ag_check_i32(op, "idx", idx)) return NULL;
    if (src->ndim != 2 || idx->ndim != 1 || idx->shape[0] != src->shape[0])
        return ag_fail_shapes(op, src, idx, "are not src [M, C] and idx [M]");
    if (n_rows < 1) {
        dt_errorf("%s: n_rows = %lld (must be positive)", op, (long long)n_rows);
        return NULL;
    }
    int64_t M = src->shape[0], C = src->shape[1];
    if (!ag_check_ids(op, "idx", idx, n_rows)) return NULL;
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(n_rows, C));
    if (!out) return NULL;
    memset(out->data, 0, (size_t)out->size * sizeof(float));
    k_scatter_add_rows(dt_f32(out), dt_f32(src), dt_i32(idx), M, C);
    dt_tensor *inputs[2] = {src, idx};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, scatter_add_rows_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- gather_cols: x [M,N], idx [M,k] -> out [M,k] = x[m, idx[m,j]] ---- */

static void gather_cols_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *idx = node->in[1];
    float *d_x = ag_grad(ctx, x); /* [M,N] */
    if (!d_x) return;
    int64_t M = x->shape[0], N = x->shape[1], k = idx->shape[1];
    const int32_t *id = dt_i32(idx);
    const float *d_out = node->out->grad; /* [M,k] */
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < k; j++)
            d_x[m * N + id[m * k + j]] += d_out[m * k + j];
}

dt_tensor *ag_gather_cols(ag_ctx *ctx, dt_tensor *x, dt_tensor *idx) {
    static const char *op = "gather_cols";
    if (!x || !idx) return NULL;
    if (!ag_check_f32(op, "x", x) || !ag_check_i32(op, "idx", idx)) return NULL;
    if (x->ndim != 2 || idx->ndim != 2 || idx->shape[0] != x->shape[0])
        return ag_fail_shapes(op, x, idx, "are not x [M, N] and idx [M, k]");
    int64_t M = x->shape[0], N = x->shape[1], k = idx->shape[1];
    if (!ag_check_ids(op, "idx", idx, N)) return NULL;
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(M, k));
    if (!out) return NULL;
    const float *in = dt_f32(x);
    const int32_t *id = dt_i32(idx);
    float *y = dt_f32(out);
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < k; j++)
            y[m * k + j] = in[m * N + id[m * k + j]];
    dt_tensor *inputs[2] = {x, idx};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, gather_cols_backward, out, inputs, 2)) return NULL;
    return out;
}
