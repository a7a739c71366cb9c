/* FFN kind "moe" (SPEC §1-§2): a router [E,C] and E SwiGLU experts (w1, w3
 * [E,F,C], w2 [E,C,F]); each token runs its top-k experts, gated by the
 * softmax of the chosen router logits. The primary adds the Switch balance
 * term; the branch runs the same experts with its own fan-out top_k_branch,
 * choosing them by router replay (the primary's logits) or its own logits.
 * The taped math lives in moe.c (dispatch, expert views, gated combine); this
 * file adds the kind's parameters, decode forms and cost. */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "models/ffn.h"
#include "models/moe.h"

enum { ROUTER, W1, W3, W2, W4, W5, PROD_NORM };

/* Experts are SwiGLU, or with a product FFN (SPEC §6.1, layer->product_degree)
 * products of 2-4 projections (moe.w4, moe.w5 beside §3's), optionally
 * RMS-normalised (moe.prod_norm.weight [E,F], row e for expert e). */
static dt_status declare(const model_arch *arch, const model_layer_arch *layer, const model_param_sink *sink,
                         dt_tensor **w) {
    const int64_t C = arch->C, F = layer->d_ff, E = arch->n_expert;
    w[ROUTER] = sink->add(sink->self, "moe.router.weight", DT_SHAPE(E, C), 1, MODEL_INIT_NORMAL);
    w[W1] = sink->add(sink->self, "moe.w1.weight", DT_SHAPE(E, F, C), 1, MODEL_INIT_NORMAL);
    w[W3] = sink->add(sink->self, "moe.w3.weight", DT_SHAPE(E, F, C), 1, MODEL_INIT_NORMAL);
    if (layer->product_degree >= 3)
        w[W4] = sink->add(sink->self, "moe.w4.weight", DT_SHAPE(E, F, C), 1, MODEL_INIT_NORMAL);
    if (layer->product_degree >= 4)
        w[W5] = sink->add(sink->self, "moe.w5.weight", DT_SHAPE(E, F, C), 1, MODEL_INIT_NORMAL);
    w[W2] = sink->add(sink->self, "moe.w2.weight", DT_SHAPE(E, C, F), 1, MODEL_INIT_RESIDUAL);
    if (layer->prod_norm)
        w[PROD_NORM] = sink->add(sink->self, "moe.prod_norm.weight", DT_SHAPE(E, F), 0, MODEL_INIT_ONE);
    return w[ROUTER] && w[W1] && w[W3] && w[W2] && (layer->product_degree < 3 || w[W4]) &&
                   (layer->product_degree < 4 || w[W5]) && (!layer->prod_norm || w[PROD_NORM])
               ? DT_OK
               : DT_ERR;
}

static model_moe_weights moe_weights(const model_arch *arch, const model_layer_arch *layer, dt_tensor *const *w) {
    return (model_moe_weights){w[ROUTER], w[W1], w[W3],        w[W2],         layer->product_degree,
                               w[W4],     w[W5], w[PROD_NORM], arch->norm_eps};
}

// x [B,T,C] -> m [B,T,C]
static dt_tensor *forward(const model_ffn_train *c) {
    ag_ctx *ctx = c->ctx;
    dt_tensor *x = c->x;
    if (!x) return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], N = B * T, E = c->arch->n_expert;
    const model_moe_weights weights = moe_weights(c->arch, c->layer, c->w);
    dt_tensor *flat = ag_reshape(ctx, x, DT_SHAPE(N, C));
    model_moe_result moe;
    if (!c->branch) {
        if (model_moe_forward(ctx, &weights, flat, c->top_k, NULL, &moe) != DT_OK) return NULL;
        if (c->state) c->state->router_logits = moe.router_logits;
        /* Switch balance (SPEC §1): f_e from the primary's assignments, a constant. */
        model_ffn_balance *balance = c->balance;
        float *fractions = ag_scratch(ctx, (size_t)E * sizeof *fractions);
        if (!fractions || !balance) return NULL;
        model_moe_fractions(fractions, moe.experts, E);
        const int64_t l = balance->count++;
        dt_tensor *term =
            ag_moe_balance_ex(ctx, moe.router_logits, fractions, &balance->fractions[l], balance->mean_probs + l * E);
        balance->sum = balance->sum ? ag_add(ctx, balance->sum, term) : term;
    } else {
        /* replay: experts from the primary's router logits, gates from the branch's own. */
        const dt_tensor *select = c->replay ? c->state->router_logits : NULL;
        if (model_moe_forward(ctx, &weights, flat, c->top_k, select, &moe) != DT_OK) return NULL;
    }
    return ag_reshape(ctx, moe.out, DT_SHAPE(B, T, C));
}

/* ---- decode forms ---- */

/* Gate of expert e in a row's routing (index [k], gates [k]); 0 when not chosen. */
static int find_gate(const int32_t *index, const float *gates, int64_t k, int64_t e, float *gate) {
    for (int64_t j = 0; j < k; j++)
        if (index[j] == e) {
            *gate = gates[j];
            return 1;
        }
    return 0;
}

/* The branch row's experts and gates at one layer (SPEC §2): `replay` picks
 * the top-k_branch of the PRIMARY's router logits, `own` of the branch's own;
 * the gates are the softmax of the branch's own logits over the chosen.
 * primary_logits, branch_logits [E]; index, gates [k]. */
static void route_branch(const model_config *c, const float *primary_logits, const float *branch_logits, int64_t E,
                         int64_t k, int32_t *index, float *gates) {
    float chosen[MODEL_MAX_TOP_K];
    if (c->branch_routing == ROUTING_REPLAY) {
        k_topk(index, NULL, primary_logits, 1, E, k);
        for (int64_t j = 0; j < k; j++)
            chosen[j] = branch_logits[index[j]];
    } else {
        k_topk(index, chosen, branch_logits, 1, E, k);
    }
    k_softmax_forward(gates, chosen, 1, k);
}

/* The hidden of expert e from its factors' outputs a, b (c, d) [n,F] into z:
 * SwiGLU, or the product of SPEC §6.1 (normalised with row e of prod_norm). */
static void expert_hidden(const model_arch *arch, const model_layer_arch *layer, dt_tensor *const *w, int64_t e,
                          float *z, float *a, const float *b, const float *c, const float *d, int64_t n) {
    const int64_t F = layer->d_ff;
    if (!layer->product_degree) {
        k_swiglu_forward_range(z, a, b, n * F); /* inside a serial stage: the single-threaded core */
        return;
    }
    const float *norm_w = w[PROD_NORM] ? model_data(w[PROD_NORM]) + e * F : NULL;
    model_product_rows(a, b, c, d, layer->product_degree, n, F, norm_w, arch->norm_eps);
    memcpy(z, a, (size_t)(n * F) * sizeof(float));
}

/* Queues the factor products of expert e on n rows: in [n,C] -> a, b (c, d) [n,F]. */
static void queue_factors(const model_row_exec *x, const model_layer_arch *layer, int64_t C, dt_tensor *const *w,
                          int64_t e, const float *in, int64_t n, float *const *out) {
    const int64_t F = layer->d_ff;
    dt_tensor *const factors[4] = {w[W1], w[W3], w[W4], w[W5]};
    const int count = layer->product_degree > 2 ? layer->product_degree : 2;
    for (int i = 0; i < count; i++) {
        const model_row_product p = {out[i], in, model_data(factors[i]) + e * F * C, NULL, n, C, F};
        x->linear(x->self, &p);
    }
}

/* Expert e of weights w on n_rows contiguous rows: in [n,C] -> out [n,C]. */
static void expert_rows(const model_ffn_rows *c, float *out, const float *in, int n_rows, dt_tensor *const *w,
                        int64_t e) {
    const model_row_exec *x = c->exec;
    const int64_t C = c->arch->C, F = c->layer->d_ff;
    float *const factors[4] = {c->hidden_a, c->hidden_b, c->hidden_c, c->hidden_d};
    queue_factors(x, c->layer, C, w, e, in, n_rows, factors);
    x->flush(x->self);
    if (w[PROD_NORM]) x->count_vector(x->self, F); /* the expert's prod_norm row */
    MODEL_ROW_SERIAL(x)
    expert_hidden(c->arch, c->layer, w, e, c->z, c->hidden_a, c->hidden_b, c->hidden_c, c->hidden_d, n_rows);
    const model_row_product w2 = {out, c->z, model_data(w[W2]) + e * C * F, NULL, n_rows, F, C};
    x->linear(x->self, &w2);
    x->flush(x->self);
}

/* x [2,C] -> m [2,C]. Each expert in the union of the rows' choices runs
 * once; when both rows chose it and share the experts, as one M = 2 product. */
static void rows(const model_ffn_rows *c) {
    const model_row_exec *x = c->exec;
    const int64_t C = c->arch->C, E = c->arch->n_expert;
    const int64_t k[2] = {c->arch->top_k, c->arch->top_k_branch};
    const int row0 = c->row0, n_rows = c->n_rows;
    /* Per layer, so no thread overwrites a routing another thread may still be
     * reading to decide which experts to visit (team rule: control flow only
     * from data that stays put for the whole step). */
    int32_t *const *index = c->route_index;
    float *const *gates = c->route_gates;

    model_rows_linear(x, c->router_logits, c->x, row0, n_rows, c->w[0][ROUTER], NULL, c->w[1][ROUTER], NULL, C, E);
    x->flush(x->self);
    MODEL_ROW_SERIAL(x) {
        if (row0 == 0) { /* primary: top_k of its router logits, softmax over the chosen */
            float chosen[MODEL_MAX_TOP_K];
            memcpy(c->router1, c->router_logits, (size_t)E * sizeof(float));
            k_topk_range(index[0], chosen, c->router_logits, 1, E, k[0]);
            k_softmax_forward_range(gates[0], chosen, 1, k[0]);
        }
        if (row0 + n_rows == 2) route_branch(c->config, c->router1, c->router_logits + E, E, k[1], index[1], gates[1]);
        memset(c->m + row0 * C, 0, (size_t)(n_rows * C) * sizeof(float));
    }
    /* From here every thread reads the routing the serial stage wrote. */
    const int stack = n_rows == 2 && c->w[0][W1] == c->w[1][W1];
    for (int64_t e = 0; e < E; e++) { /* ascending expert order in every mode: same sums */
        float gate[2] = {0.0f, 0.0f};
        int uses[2] = {0, 0};
        for (int row = row0; row < row0 + n_rows; row++)
            uses[row] = find_gate(index[row], gates[row], k[row], e, &gate[row]);
        if (!uses[0] && !uses[1]) continue;
        if (stack && uses[0] && uses[1]) {
            expert_rows(c, c->expert_out, c->x, 2, c->w[0], e);
            x->count_expert(x->self);
        } else {
            for (int row = row0; row < row0 + n_rows; row++) {
                if (!uses[row]) continue;
                expert_rows(c, c->expert_out + row * C, c->x + row * C, 1, c->w[row], e);
                x->count_expert(x->self);
            }
        }
        MODEL_ROW_SERIAL(x) {
            for (int row = row0; row < row0 + n_rows; row++)
                if (uses[row]) k_accumulate_scaled_range(c->m + row * C, c->expert_out + row * C, gate[row], C);
        }
    }
}

/* One expert on one row, outside any team (the prefill's share = off branch row). */
static void expert_row_now(const model_ffn_prefill *c, float *out, const float *in, dt_tensor *const *w, int64_t e) {
    const model_row_exec *x = c->exec;
    const int64_t C = c->arch->C, F = c->layer->d_ff;
    float *const factors[4] = {c->row_hidden_a, c->row_hidden_b, c->row_hidden_c, c->row_hidden_d};
    queue_factors(x, c->layer, C, w, e, in, 1, factors);
    x->flush(x->self);
    if (w[PROD_NORM]) x->count_vector(x->self, F);
    expert_hidden(c->arch, c->layer, w, e, c->row_z, c->row_hidden_a, c->row_hidden_b, c->row_hidden_c, c->row_hidden_d,
                  1);
    const model_row_product w2 = {out, c->row_z, model_data(w[W2]) + e * C * F, NULL, 1, F, C};
    x->linear(x->self, &w2);
    x->flush(x->self);
}

/* The prompt rows (+ the branch row P when extra): x -> m. Per expert: gather
 * the rows routed to it, SwiGLU, scale by the gates, scatter-add back; the
 * branch row joins the primary rows of an expert it shares. */
static void prefill(const model_ffn_prefill *c) {
    const model_row_exec *x = c->exec;
    const int64_t C = c->arch->C, F = c->layer->d_ff, E = c->arch->n_expert, P = c->P;
    const int64_t top_k = c->arch->top_k, top_k_branch = c->arch->top_k_branch;
    const int extra = c->extra;
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    int32_t branch_index[MODEL_MAX_TOP_K];
    float branch_gates[MODEL_MAX_TOP_K], gate;

    model_prefill_linear(x, c->router_logits, c->x, P, extra, p[ROUTER], NULL, b[ROUTER], NULL, C, E);
    k_topk(c->topk_index, c->topk_logits, c->router_logits, P, E, top_k);
    k_softmax_forward(c->topk_gates, c->topk_logits, P, top_k);
    memcpy(c->router1, c->router_logits + (P - 1) * E, (size_t)E * sizeof(float));
    if (extra)
        route_branch(c->config, c->router_logits + (P - 1) * E, c->router_logits + P * E, E, top_k_branch, branch_index,
                     branch_gates);
    const int shared = p[W1] == b[W1];
    memset(c->m, 0, (size_t)((P + extra) * C) * sizeof(float));
    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < P; t++)
            for (int64_t j = 0; j < top_k; j++)
                if (c->topk_index[t * top_k + j] == e) {
                    c->expert_rows[n] = (int32_t)t;
                    c->expert_gates[n++] = c->topk_gates[t * top_k + j];
                }
        if (extra && shared && find_gate(branch_index, branch_gates, top_k_branch, e, &gate)) {
            c->expert_rows[n] = (int32_t)P;
            c->expert_gates[n++] = gate;
        }
        if (n == 0) continue;
        k_gather_rows(c->expert_in, c->x, c->expert_rows, n, C);
        float *const factors[4] = {c->hidden_a, c->hidden_b, c->hidden_c, c->hidden_d};
        queue_factors(x, c->layer, C, p, e, c->expert_in, n, factors);
        x->flush(x->self);
        if (p[PROD_NORM]) x->count_vector(x->self, F);
        expert_hidden(c->arch, c->layer, p, e, c->z, c->hidden_a, c->hidden_b, c->hidden_c, c->hidden_d, n);
        const model_row_product w2 = {c->expert_out, c->z, model_data(p[W2]) + e * C * F, NULL, n, F, C};
        x->linear(x->self, &w2);
        x->flush(x->self);
        k_scale_rows(c->expert_out, c->expert_out, c->expert_gates, n, C);
        k_scatter_add_rows(c->m, c->expert_out, c->expert_rows, n, C);
        x->count_expert(x->self);
    }
    if (extra && !shared) /* share = off: the branch row runs its own experts */
        for (int64_t e = 0; e < E; e++)
            if (find_gate(branch_index, branch_gates, top_k_branch, e, &gate)) {
                expert_row_now(c, c->row_out, c->x + P * C, b, e);
                k_accumulate_scaled(c->m + P * C, c->row_out, gate, C);
                x->count_expert(x->self);
            }
}

static void cost(const model_arch *arch, const model_layer_arch *layer, model_ffn_cost *cost) {
    const int64_t C = arch->C, F = layer->d_ff, E = arch->n_expert;
    const int64_t factors = layer->product_degree > 2 ? layer->product_degree : 2;
    memset(cost, 0, sizeof *cost);
    cost->router = E * C;
    /* an expert's matrices (and its row of prod_norm: read with them) */
    cost->expert = (factors + 1) * F * C + (layer->prod_norm ? F : 0);
    cost->expert_vectors = layer->prod_norm ? F : 0;
    cost->expert_vectors = layer->prod_norm ? F : 0;
    cost->n_expert = E;
    cost->params = cost->router + E * cost->expert;
    /* router logits and the combined output; per chosen expert: gathered input, the factors, the hidden, output */
    cost->activation_floats = E + C;
    cost->activation_floats_per_expert =
        (factors + 1 + (layer->product_degree >= 3 ? layer->product_degree - 2 : 0) + (layer->prod_norm ? 1 : 0)) * F +
        2 * C;
}

const model_ffn_kind model_ffn_moe = {"moe", 0, 0, 1, declare, forward, rows, prefill, cost};
