/* The MoE FFN of SPEC §1 for the primary path and the decode branch:
 * router logits, top-k expert choice (ties to the lower index), gates as the
 * softmax over the chosen logits, dispatch by grouping the tokens of each
 * expert (one SwiGLU per expert over a view of the [E,F,C] weights), and a
 * gated combine back to token order.
 *
 * Two small ops live here because only the MoE needs them: the expert-matrix
 * view (a [R,S] slice of an [E,R,S] parameter whose gradient goes straight
 * into the parameter's) and the gated combine (out[n] = sum_j gate[n,j] *
 * expert_out[e_nj][row_nj]), which writes one [N,C] output instead of E
 * scattered copies. */
#include "models/moe.h"

#include <string.h>

#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/topk.h"

/* ---- expert-matrix view ---- */

static void expert_matrix_backward(ag_ctx *ctx, ag_node *node) {
    float *d_weight = ag_grad(ctx, node->in[0]); // [E,R,S]
    if (!d_weight) return;
    k_accumulate(d_weight + node->iarg[0], node->out->grad, node->out->size);
}

dt_tensor *model_expert_matrix(ag_ctx *ctx, dt_tensor *weight, int64_t e) {
    if (!weight) return NULL;
    if ((weight->ndim != 3 && weight->ndim != 2) || weight->dtype != DT_F32 || e < 0 || e >= weight->shape[0]) {
        dt_errorf("expert matrix: expert %lld of a tensor with %d dims (need [E,R,S] or [E,S], E > expert)",
                  (long long)e, weight->ndim);
        return NULL;
    }
    /* [E,R,S] -> the matrix [R,S] of expert e; [E,S] -> its vector [S] */
    const int vector = weight->ndim == 2;
    int64_t rows = vector ? 1 : weight->shape[1], cols = weight->shape[weight->ndim - 1];
    int64_t offset = e * rows * cols;
    dt_tensor *view = dt_arena_calloc(&ctx->arena, sizeof *view);
    if (!view) return NULL;
    const int64_t shape[2] = {vector ? cols : rows, cols};
    if (dt_tensor_init(view, DT_F32, vector ? 1 : 2, shape, dt_f32(weight) + offset) != DT_OK) return NULL;
    if (!ag_needs_grad(ctx, &weight, 1)) return view;
    if (weight->grad) {
        /* A parameter keeps its gradient buffer: the view's gradient is simply
         * its slice, so the expert's linear backward accumulates in place. */
        view->grad = weight->grad + offset;
        view->requires_grad = 1;
        return view;
    }
    ag_node *node = ag_record(ctx, "expert_matrix", expert_matrix_backward, view, &weight, 1);
    if (!node) return NULL;
    node->iarg[0] = offset;
    return view;
}

/* ---- gated combine ---- */

typedef struct moe_combine_saved {
    int64_t n_tokens, k, width;   /* N, k, C */
    const int32_t *experts;       /* [N,k] expert of slot (n, j) */
    const int32_t *row_in_expert; /* [N,k] row of slot (n, j) in its expert's batch */
    dt_tensor **expert_out;       /* [E] each [M_e, C]; NULL for an expert with no tokens */
    dt_tensor *gates;             /* [N,k] */
} moe_combine_saved;

static void moe_combine_backward(ag_ctx *ctx, ag_node *node) {
    moe_combine_saved *s = node->saved;
    const int64_t N = s->n_tokens, k = s->k, C = s->width;
    const float *d_out = node->out->grad;    // [N,C]
    const float *gates = dt_f32(s->gates);   // [N,k]
    float *d_gates = ag_grad(ctx, s->gates); // [N,k] or NULL
    int64_t n_expert = node->iarg[0];
    float **d_expert = ag_scratch(ctx, (size_t)n_expert * sizeof *d_expert);
    if (!d_expert) return;
    for (int64_t e = 0; e < n_expert; e++)
        d_expert[e] = s->expert_out[e] ? ag_grad(ctx, s->expert_out[e]) : NULL;
        /* Each (expert, row) belongs to exactly one (token, slot): rows of d_expert
         * are written by one token only, so tokens run in parallel deterministically. */
#pragma omp parallel for if (N * k * C > 32768)
    for (int64_t n = 0; n < N; n++) {
        const float *d_row = d_out + n * C;
        for (int64_t j = 0; j < k; j++) {
            int64_t slot = n * k + j;
            int32_t e = s->experts[slot];
            int64_t row = s->row_in_expert[slot];
            if (d_expert[e]) k_accumulate_scaled(d_expert[e] + row * C, d_row, gates[slot], C);
            if (d_gates) {
                const float *y = dt_f32(s->expert_out[e]) + row * C;
                double dot = 0.0;
                for (int64_t c = 0; c < C; c++)
                    dot += (double)d_row[c] * y[c];
                d_gates[slot] += (float)dot;
            }
        }
    }
}

/* out [N,C] = sum_j gates[n,j] * expert_out[experts[n,j]][row_in_expert[n,j]] */
static dt_tensor *moe_combine(ag_ctx *ctx, dt_tensor **expert_out, int64_t n_expert, dt_tensor *gates,
                              const int32_t *experts, const int32_t *row_in_expert, int64_t N, int64_t k, int64_t C) {
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(N, C));
    if (!out) return NULL;
    float *o = dt_f32(out);
    const float *g = dt_f32(gates);
#pragma omp parallel for if (N * k * C > 32768)
    for (int64_t n = 0; n < N; n++) {
        float *o_row = o + n * C;
        memset(o_row, 0, (size_t)C * sizeof *o_row);
        for (int64_t j = 0; j < k; j++) {
            int64_t slot = n * k + j;
            const float *y = dt_f32(expert_out[experts[slot]]) + (int64_t)row_in_expert[slot] * C;
            k_accumulate_scaled(o_row, y, g[slot], C);
        }
    }
    int needs_grad = ag_needs_grad(ctx, &gates, 1);
    for (int64_t e = 0; e < n_expert && !needs_grad; e++)
        needs_grad = ag_needs_grad(ctx, &expert_out[e], 1);
    if (!needs_grad) return out;
    moe_combine_saved *s = ag_scratch(ctx, sizeof *s);
    if (!s) return NULL;
    *s = (moe_combine_saved){.n_tokens = N,
                             .k = k,
                             .width = C,
                             .experts = experts,
                             .row_in_expert = row_in_expert,
                             .expert_out = expert_out,
                             .gates = gates};
    /* The tape records gates as the visible input; the expert outputs travel in
     * `saved` (there can be more experts than AG_MAX_INPUTS). */
    ag_node *node = ag_record(ctx, "moe_combine", moe_combine_backward, out, &gates, 1);
    if (!node) return NULL;
    node->saved = s;
    node->iarg[0] = n_expert;
    return out;
}

/* ---- the MoE FFN ---- */

void model_moe_fractions(float *fractions, const dt_tensor *experts, int64_t n_expert) {
    const int32_t *chosen = dt_i32(experts); // [N,k]
    for (int64_t e = 0; e < n_expert; e++)
        fractions[e] = 0.0f;
    for (int64_t i = 0; i < experts->size; i++)
        fractions[chosen[i]] += 1.0f;
    for (int64_t e = 0; e < n_expert; e++)
        fractions[e] /= (float)experts->size;
}

dt_status model_moe_forward(ag_ctx *ctx, const model_moe_weights *weights, dt_tensor *x, int64_t k,
                            const dt_tensor *select_logits, model_moe_result *result) {
    memset(result, 0, sizeof *result);
    if (!x) return DT_ERR;
    const int64_t N = dt_rows(x), C = dt_cols(x);
    const int64_t E = weights->router->shape[0];
    if (k < 1 || k > E) return dt_errorf("moe: top-k %lld outside [1, n_expert = %lld]", (long long)k, (long long)E);

    dt_tensor *router_logits = ag_linear(ctx, x, weights->router, NULL); // [N,E]
    if (!router_logits) return DT_ERR;
    if (!select_logits) select_logits = router_logits;
    if (dt_rows(select_logits) != N || dt_cols(select_logits) != E)
        return dt_errorf("moe: selection logits are not [%lld, %lld]", (long long)N, (long long)E);

    /* The choice is discrete: no gradient flows through the indices. */
    dt_tensor *experts = ag_tensor(ctx, DT_I32, DT_SHAPE(N, k)); // [N,k]
    if (!experts) return DT_ERR;
    k_topk(dt_i32(experts), NULL, dt_f32(select_logits), N, E, k);
    dt_tensor *chosen_logits = ag_gather_cols(ctx, router_logits, experts); // [N,k]
    dt_tensor *gates = ag_softmax(ctx, chosen_logits);                      // [N,k]
    if (!gates) return DT_ERR;

    /* Group the (token, slot) assignments by expert, tokens ascending. */
    const int32_t *chosen = dt_i32(experts);
    int64_t *count = ag_scratch(ctx, (size_t)E * sizeof *count);
    int64_t *fill = ag_scratch(ctx, (size_t)E * sizeof *fill);
    int32_t *row_in_expert = ag_scratch(ctx, (size_t)(N * k) * sizeof *row_in_expert);
    dt_tensor **token_rows = ag_scratch(ctx, (size_t)E * sizeof *token_rows);
    dt_tensor **expert_out = ag_scratch(ctx, (size_t)E * sizeof *expert_out);
    if (!count || !fill || !row_in_expert || !token_rows || !expert_out) return DT_ERR;
    for (int64_t e = 0; e < E; e++)
        count[e] = fill[e] = 0;
    for (int64_t i = 0; i < N * k; i++)
        count[chosen[i]]++;
    for (int64_t e = 0; e < E; e++) {
        token_rows[e] = count[e] ? ag_tensor(ctx, DT_I32, DT_SHAPE(count[e])) : NULL; // [M_e]
        if (count[e] && !token_rows[e]) return DT_ERR;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e = chosen[n * k + j];
            row_in_expert[n * k + j] = (int32_t)fill[e];
            dt_i32(token_rows[e])[fill[e]++] = (int32_t)n;
        }

    /* One FFN per expert over its tokens: w2_e( silu(w1_e x) * (w3_e x) ), or
     * with product experts (SPEC §6.1) w2_e( norm( (w1_e x) ⊙ (w3_e x) ⊙ ... ) ). */
    for (int64_t e = 0; e < E; e++) {
        expert_out[e] = NULL;
        if (!count[e]) continue;
        dt_tensor *expert_in = ag_gather_rows(ctx, x, token_rows[e]);                                     // [M_e,C]
        dt_tensor *gate_proj = ag_linear(ctx, expert_in, model_expert_matrix(ctx, weights->w1, e), NULL); // [M_e,F]
        dt_tensor *up_proj = ag_linear(ctx, expert_in, model_expert_matrix(ctx, weights->w3, e), NULL);   // [M_e,F]
        dt_tensor *hidden;
        if (!weights->product_degree) {
            hidden = ag_swiglu(ctx, gate_proj, up_proj);
        } else {
            hidden = ag_mul(ctx, gate_proj, up_proj);
            dt_tensor *extra[2] = {weights->w4, weights->w5};
            for (int i = 0; i < weights->product_degree - 2; i++)
                hidden = ag_mul(ctx, hidden, ag_linear(ctx, expert_in, model_expert_matrix(ctx, extra[i], e), NULL));
            if (weights->prod_norm)
                hidden = ag_rmsnorm(ctx, hidden, model_expert_matrix(ctx, weights->prod_norm, e), weights->norm_eps);
        }
        expert_out[e] = ag_linear(ctx, hidden, model_expert_matrix(ctx, weights->w2, e), NULL); // [M_e,C]
        if (!expert_out[e]) return DT_ERR;
        if (dt_cols(expert_out[e]) != C)
            return dt_errorf("moe: expert output width %lld != d_model %lld", (long long)dt_cols(expert_out[e]),
                             (long long)C);
    }
    dt_tensor *out = moe_combine(ctx, expert_out, E, gates, chosen, row_in_expert, N, k, C);
    if (!out) return DT_ERR;
    *result = (model_moe_result){.out = out, .router_logits = router_logits, .experts = experts};
    return DT_OK;
}
