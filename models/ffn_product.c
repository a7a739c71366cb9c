/* FFN kind "product" (SPEC §6.1, TriPLU arXiv 2608.20360): a product of
 * projections with no activation and no biases,
 *     z = (x W1^T) ⊙ (x W3^T) [⊙ (x W4^T) [⊙ (x W5^T)]]    # 2, 3 (TriPLU) or 4 factors
 *     z <- RMSNorm_{prod_norm}(z)                          # ffn_prod_norm = 1
 *     m = z W2^T
 * The layer record says how many factors (product_degree) and whether the
 * product is normalised. z (after the norm) is what the decode branch couples
 * to (couple_hidden). */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/norm.h"
#include "models/ffn.h"

enum { W1, W3, W4, W5, W2, PROD_NORM };

static dt_status declare(const model_arch *arch, const model_layer_arch *layer, const model_param_sink *sink,
                         dt_tensor **w) {
    const int64_t C = arch->C, F = layer->d_ff;
    static const char *const factor_names[] = {"mlp.w1.weight", "mlp.w3.weight", "mlp.w4.weight", "mlp.w5.weight"};
    for (int i = 0; i < layer->product_degree; i++) {
        w[W1 + i] = sink->add(sink->self, factor_names[i], DT_SHAPE(F, C), 1, MODEL_INIT_NORMAL);
        if (!w[W1 + i]) return DT_ERR;
    }
    w[W2] = sink->add(sink->self, "mlp.w2.weight", DT_SHAPE(C, F), 1, MODEL_INIT_RESIDUAL);
    if (!w[W2]) return DT_ERR;
    if (layer->prod_norm) {
        w[PROD_NORM] = sink->add(sink->self, "mlp.prod_norm.weight", DT_SHAPE(F), 0, MODEL_INIT_ONE);
        if (!w[PROD_NORM]) return DT_ERR;
    }
    return DT_OK;
}

// x [B,T,C] -> m [B,T,C] (or residual + m)
static dt_tensor *forward(const model_ffn_train *c) {
    dt_tensor *const *w = c->w;
    dt_tensor *hidden = ag_mul(c->ctx, ag_linear(c->ctx, c->x, w[W1], NULL), ag_linear(c->ctx, c->x, w[W3], NULL));
    for (int i = 2; i < c->layer->product_degree; i++)
        hidden = ag_mul(c->ctx, hidden, ag_linear(c->ctx, c->x, w[W1 + i], NULL));
    if (c->layer->prod_norm) hidden = ag_rmsnorm(c->ctx, hidden, w[PROD_NORM], c->arch->norm_eps);
    if (c->z1) hidden = ag_add_mul_vec(c->ctx, hidden, c->z1, c->couple_hidden);
    if (!c->branch && c->state) c->state->z1 = hidden;
    return model_ffn_down(c, hidden, w[W2], NULL);
}

void model_product_rows(float *a, const float *b, const float *c, const float *d, int degree, int64_t rows, int64_t F,
                        const float *norm_weight, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        float *z = a + r * F;
        const float *zb = b + r * F, *zc = c ? c + r * F : NULL, *zd = d ? d + r * F : NULL;
        for (int64_t n = 0; n < F; n++)
            z[n] *= zb[n];
        if (degree >= 3)
            for (int64_t n = 0; n < F; n++)
                z[n] *= zc[n];
        if (degree >= 4)
            for (int64_t n = 0; n < F; n++)
                z[n] *= zd[n];
        if (norm_weight) { /* in place: the core reads a row's sum of squares before writing it */
            float rstd;
            k_rmsnorm_forward_range(z, &rstd, z, norm_weight, 1, F, eps);
        }
    }
}

static void rows(const model_ffn_rows *c) {
    const model_row_exec *x = c->exec;
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff;
    const int degree = c->layer->product_degree;
    float *factors[4] = {c->z, c->hidden_b, c->hidden_c, c->hidden_d}; /* [2,F] each; the product lands in z */
    for (int i = 0; i < degree; i++)                                   /* every factor's product in one stage */
        model_rows_linear(x, factors[i], c->x, c->row0, c->n_rows, p[W1 + i], NULL, b[W1 + i], NULL, C, F);
    x->flush(x->self);
    /* the prod_norm weights read: once when the rows share them */
    const int shared_norm = c->n_rows == 2 && c->w[0][PROD_NORM] == c->w[1][PROD_NORM];
    for (int row = c->row0; row < c->row0 + c->n_rows; row++)
        if (c->w[row][PROD_NORM] && !(shared_norm && row == 1)) x->count_vector(x->self, F);
    MODEL_ROW_SERIAL(x) {
        for (int row = c->row0; row < c->row0 + c->n_rows; row++) {
            const float *norm_w = model_data(c->w[row][PROD_NORM]);
            const int64_t o = row * F;
            model_product_rows(c->z + o, c->hidden_b + o, c->hidden_c + o, c->hidden_d + o, degree, 1, F, norm_w,
                               c->arch->norm_eps);
        }
        if (c->row0 == 0) memcpy(c->z1, c->z, (size_t)F * sizeof(float));
        if (c->row0 + c->n_rows == 2) model_add_coupling(c->z + F, c->couple_hidden, c->z1, F);
    }
    model_rows_linear(x, c->m, c->z, c->row0, c->n_rows, p[W2], NULL, b[W2], NULL, F, C);
    x->flush(x->self);
}

static void prefill(const model_ffn_prefill *c) {
    dt_tensor *const *p = c->w[0], *const *b = c->w[1];
    const int64_t C = c->arch->C, F = c->layer->d_ff, P = c->P;
    const int degree = c->layer->product_degree;
    float *factors[4] = {c->z, c->hidden_b, c->hidden_c, c->hidden_d}; /* [P+1,F] each */
    for (int i = 0; i < degree; i++)
        model_prefill_linear(c->exec, factors[i], c->x, P, c->extra, p[W1 + i], NULL, b[W1 + i], NULL, C, F);
    model_product_rows(c->z, c->hidden_b, c->hidden_c, c->hidden_d, degree, P, F, model_data(p[PROD_NORM]),
                       c->arch->norm_eps);
    if (p[PROD_NORM]) c->exec->count_vector(c->exec->self, F);
    if (c->extra && b[PROD_NORM] && b[PROD_NORM] != p[PROD_NORM]) c->exec->count_vector(c->exec->self, F);
    if (c->extra) /* the branch row: its own prod_norm weight under share = off */
        model_product_rows(c->z + P * F, c->hidden_b + P * F, c->hidden_c + P * F, c->hidden_d + P * F, degree, 1, F,
                           model_data(b[PROD_NORM]), c->arch->norm_eps);
    memcpy(c->z1, c->z + (P - 1) * F, (size_t)F * sizeof(float));
    if (c->extra) model_add_coupling(c->z + P * F, c->couple_hidden, c->z1, F);
    model_prefill_linear(c->exec, c->m, c->z, P, c->extra, p[W2], NULL, b[W2], NULL, F, C);
}

static void cost(const model_arch *arch, const model_layer_arch *layer, model_ffn_cost *cost) {
    const int64_t C = arch->C, F = layer->d_ff, degree = layer->product_degree;
    memset(cost, 0, sizeof *cost);
    cost->dense_matmul = (degree + 1) * F * C;
    cost->dense_vectors = layer->prod_norm ? F : 0;
    cost->params = cost->dense_matmul + cost->dense_vectors;
    cost->hidden = F;
    /* each factor, the running products, the norm output, the w2 output */
    cost->activation_floats = (2 * degree - 1 + (layer->prod_norm ? 1 : 0)) * F + C;
}

const model_ffn_kind model_ffn_product = {"product", 1, 1, 0, declare, forward, rows, prefill, cost};
