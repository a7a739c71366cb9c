/* FFN kind "gelu_mlp" (GPT-2, SPEC §1): m = proj( gelu(fc x + b) ) + b, with
 * fc [F,C] (+ bias [F]) and proj [C,F] (+ bias [C]); biases when the model's
 * projections carry them (linear_bias). The hidden activation z = gelu(...)
 * is what the decode branch couples to (couple_hidden). */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/activation.h"
#include "models/ffn.h"

enum { FC, FC_BIAS, PROJ, PROJ_BIAS };

static dt_status declare(const model_arch *arch, const model_layer_arch *layer, const model_param_sink *sink,
                         dt_tensor **w) {
    const int64_t C = arch->C, F = layer->d_ff;
    w[FC] = sink->add(sink->self, "mlp.fc.weight", DT_SHAPE(F, C), 1, MODEL_INIT_NORMAL);
    if (arch->linear_bias) w[FC_BIAS] = sink->add(sink->self, "mlp.fc.bias", DT_SHAPE(F), 0, MODEL_INIT_ZERO);
    w[PROJ] = sink->add(sink->self, "mlp.proj.weight", DT_SHAPE(C, F), 1, MODEL_INIT_RESIDUAL);
    if (arch->linear_bias) w[PROJ_BIAS] = sink->add(sink->self, "mlp.proj.bias", DT_SHAPE(C), 0, MODEL_INIT_ZERO);
    return w[FC] && w[PROJ] && (!arch->linear_bias || (w[FC_BIAS] && w[PROJ_BIAS])) ? DT_OK : DT_ERR;
}

// x [B,T,C] -> m [B,T,C] (or residual + m)
static dt_tensor *forward(const model_ffn_train *c) {
    dt_tensor *const *w = c->w;
    if (c->residual && !c->z1 && !c->couple_out && !c->keep_hidden)
        /* nothing reads z1: one op that recomputes the GELU output in its backward */
        return ag_mlp_gelu(c->ctx, c->residual, c->x, w[FC], w[FC_BIAS], w[PROJ], w[PROJ_BIAS]);
    dt_tensor *hidden = c->z1 ? ag_linear_coupled(c->ctx, NULL, c->x, w[FC], w[FC_BIAS], 1, c->z1, c->couple_hidden)
                              : ag_linear_gelu(c->ctx, c->x, w[FC], w[FC_BIAS]); /* bias and GELU fused */
    if (!c->branch && c->state) c->state->z1 = hidden;
    return model_ffn_down(c, hidden, w[PROJ], w[PROJ_BIAS]);
}

static void rows(const model_ffn_rows *c) {
    const model_row_exec *x = c->exec;
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff;
    model_rows_linear(x, c->hidden_a, c->x, c->row0, c->n_rows, p[FC], p[FC_BIAS], b[FC], b[FC_BIAS], C, F);
    x->flush(x->self);
    MODEL_ROW_SERIAL(x) {
        float *z = c->z + c->row0 * F;
        k_gelu_forward_range(z, c->hidden_a + c->row0 * F, c->n_rows * F);
        if (c->row0 == 0) memcpy(c->z1, c->z, (size_t)F * sizeof(float));
        if (c->row0 + c->n_rows == 2) model_add_coupling(c->z + F, c->couple_hidden, c->z1, F);
    }
    model_rows_linear(x, c->m, c->z, c->row0, c->n_rows, p[PROJ], p[PROJ_BIAS], b[PROJ], b[PROJ_BIAS], F, C);
    x->flush(x->self);
}

static void prefill(const model_ffn_prefill *c) {
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff, P = c->P, rows = P + c->extra;
    model_prefill_linear(c->exec, c->hidden_a, c->x, P, c->extra, p[FC], p[FC_BIAS], b[FC], b[FC_BIAS], C, F);
    k_gelu_forward(c->z, c->hidden_a, rows * F);
    memcpy(c->z1, c->z + (P - 1) * F, (size_t)F * sizeof(float));
    if (c->extra) model_add_coupling(c->z + P * F, c->couple_hidden, c->z1, F);
    model_prefill_linear(c->exec, c->m, c->z, P, c->extra, p[PROJ], p[PROJ_BIAS], b[PROJ], b[PROJ_BIAS], F, C);
}

static void cost(const model_arch *arch, const model_layer_arch *layer, model_ffn_cost *cost) {
    const int64_t C = arch->C, F = layer->d_ff;
    memset(cost, 0, sizeof *cost);
    cost->dense_matmul = 2 * F * C;
    cost->dense_vectors = arch->linear_bias ? F + C : 0;
    cost->params = cost->dense_matmul + cost->dense_vectors;
    cost->hidden = F;
    cost->activation_floats = 2 * F + C; /* fc output, GELU output, proj output */
}

const model_ffn_kind model_ffn_gelu_mlp = {"gelu_mlp", 1, 1, 0, declare, forward, rows, prefill, cost};
