/* FFN kind "swiglu" (LLaMA, SPEC §1): m = w2( silu(w1 x) ⊙ (w3 x) ), w1 and
 * w3 [F,C], w2 [C,F], no biases. The hidden activation z = silu(w1 x) ⊙ (w3 x)
 * is what the decode branch couples to (couple_hidden). */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "models/ffn.h"

enum { W1, W3, W2 };

static dt_status declare(const model_arch *arch, const model_layer_arch *layer, const model_param_sink *sink,
                         dt_tensor **w) {
    const int64_t C = arch->C, F = layer->d_ff;
    w[W1] = sink->add(sink->self, "mlp.w1.weight", DT_SHAPE(F, C), 1, MODEL_INIT_NORMAL);
    w[W3] = sink->add(sink->self, "mlp.w3.weight", DT_SHAPE(F, C), 1, MODEL_INIT_NORMAL);
    w[W2] = sink->add(sink->self, "mlp.w2.weight", DT_SHAPE(C, F), 1, MODEL_INIT_RESIDUAL);
    return w[W1] && w[W3] && w[W2] ? DT_OK : DT_ERR;
}

// x [B,T,C] -> m [B,T,C] (or residual + m)
static dt_tensor *forward(const model_ffn_train *c) {
    dt_tensor *const *w = c->w;
    dt_tensor *hidden = ag_swiglu(c->ctx, ag_linear(c->ctx, c->x, w[W1], NULL), ag_linear(c->ctx, c->x, w[W3], NULL));
    if (c->z1) hidden = ag_add_mul_vec(c->ctx, hidden, c->z1, c->couple_hidden);
    if (!c->branch && c->state) c->state->z1 = hidden;
    return model_ffn_down(c, hidden, w[W2], NULL);
}

/* The SwiGLU of the call's rows on hidden units [n0, n1): z = silu(a) * b,
 * the primary row's z saved as z1, the branch row coupled to z1 (SPEC §2).
 * Per unit, so it runs on each claimed range of the fused W1/W3 stage. */
static void swiglu_units(int64_t n0, int64_t n1, void *arg) {
    const model_ffn_rows *c = arg;
    const int64_t F = c->layer->d_ff;
    for (int row = c->row0; row < c->row0 + c->n_rows; row++) {
        const float *gate = c->hidden_a + row * F, *up = c->hidden_b + row * F; // [F] each
        float *z = c->z + row * F;                                              // [F]
        k_swiglu_forward_range(z + n0, gate + n0, up + n0, n1 - n0);
        if (row == 0) memcpy(c->z1 + n0, z + n0, (size_t)(n1 - n0) * sizeof(float));
    }
    if (c->row0 + c->n_rows == 2 && c->couple_hidden) /* the branch row's coupling on units [n0, n1) */
        k_accumulate_mul_vec_range(c->z + F + n0, c->z1 + n0, c->couple_hidden + n0, 1, n1 - n0);
}

static void rows(const model_ffn_rows *c) {
    const model_row_exec *x = c->exec;
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff;
    const int stacked = c->n_rows == 2 && p[W1] == b[W1] && p[W3] == b[W3];
    if (x->linear_pair && (c->n_rows == 1 || stacked)) {
        /* W1 and W3 handed out by rows together, the SwiGLU applied on each
         * claimed range: no serial activation stage (one thread computing
         * while the others wait, ~3-4 us per layer at 15M) */
        const int64_t in_offset = c->n_rows == 1 ? c->row0 * C : 0, out_offset = c->n_rows == 1 ? c->row0 * F : 0;
        dt_tensor *const *own = c->row0 == 0 ? p : b; /* one row: its own weights; stacked: shared */
        const model_row_product w1 = {
            c->hidden_a + out_offset, c->x + in_offset, model_data(own[W1]), NULL, c->n_rows, C, F};
        const model_row_product w3 = {
            c->hidden_b + out_offset, c->x + in_offset, model_data(own[W3]), NULL, c->n_rows, C, F};
        x->flush(x->self);
        x->linear_pair(x->self, &w1, &w3, swiglu_units, (void *)c);
    } else {
        model_rows_linear(x, c->hidden_a, c->x, c->row0, c->n_rows, p[W1], NULL, b[W1], NULL, C, F);
        model_rows_linear(x, c->hidden_b, c->x, c->row0, c->n_rows, p[W3], NULL, b[W3], NULL, C, F);
        x->flush(x->self); /* W1 and W3 in one stage */
        MODEL_ROW_SERIAL(x) swiglu_units(0, F, (void *)c);
    }
    model_rows_linear(x, c->m, c->z, c->row0, c->n_rows, p[W2], NULL, b[W2], NULL, F, C);
    x->flush(x->self);
}

static void prefill(const model_ffn_prefill *c) {
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff, P = c->P, rows = P + c->extra;
    model_prefill_linear(c->exec, c->hidden_a, c->x, P, c->extra, p[W1], NULL, b[W1], NULL, C, F);
    model_prefill_linear(c->exec, c->hidden_b, c->x, P, c->extra, p[W3], NULL, b[W3], NULL, C, F);
    k_swiglu_forward(c->z, c->hidden_a, c->hidden_b, rows * F);
    memcpy(c->z1, c->z + (P - 1) * F, (size_t)F * sizeof(float));
    if (c->extra) model_add_coupling(c->z + P * F, c->couple_hidden, c->z1, F);
    model_prefill_linear(c->exec, c->m, c->z, P, c->extra, p[W2], NULL, b[W2], NULL, F, C);
}

static void cost(const model_arch *arch, const model_layer_arch *layer, model_ffn_cost *cost) {
    const int64_t C = arch->C, F = layer->d_ff;
    memset(cost, 0, sizeof *cost);
    cost->dense_matmul = 3 * F * C;
    cost->params = cost->dense_matmul;
    cost->hidden = F;
    cost->activation_floats = 3 * F + C; /* w1, w3, SwiGLU, w2 outputs */
}

const model_ffn_kind model_ffn_swiglu = {"swiglu", 1, 1, 0, declare, forward, rows, prefill, cost};
