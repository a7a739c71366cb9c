/* Helpers every FFN kind uses (models/ffn.h): the stacked-row products of
 * the decode forms, the coupling term, and the taped down projection with
 * its residual and coupling fusions. */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "models/ffn.h"

void model_rows_linear(const model_row_exec *exec, float *out, const float *in, int row0, int n_rows,
                       const dt_tensor *w0, const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1, int64_t K,
                       int64_t N) {
    if (n_rows == 2 && w0 == w1 && b0 == b1) { /* one stacked product: the matrix is read once for both rows */
        const model_row_product p = {out, in, model_data(w0), model_data(b0), 2, K, N};
        exec->linear(exec->self, &p);
        return;
    }
    for (int r = row0; r < row0 + n_rows; r++) {
        const model_row_product p = {
            out + r * N, in + r * K, model_data(r == 0 ? w0 : w1), model_data(r == 0 ? b0 : b1), 1, K, N};
        exec->linear(exec->self, &p);
    }
}

void model_prefill_linear(const model_row_exec *exec, float *out, const float *in, int64_t P, int extra,
                          const dt_tensor *w0, const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1, int64_t K,
                          int64_t N) {
    if (extra && w0 == w1 && b0 == b1) {
        const model_row_product p = {out, in, model_data(w0), model_data(b0), P + 1, K, N};
        exec->linear(exec->self, &p);
    } else {
        const model_row_product p = {out, in, model_data(w0), model_data(b0), P, K, N};
        exec->linear(exec->self, &p);
        if (extra) {
            const model_row_product q = {out + P * N, in + P * K, model_data(w1), model_data(b1), 1, K, N};
            exec->linear(exec->self, &q);
        }
    }
    exec->flush(exec->self);
}

void model_add_coupling(float *dst, const float *couple, const float *primary, int64_t n) {
    if (!couple) return;
    for (int64_t i = 0; i < n; i++)
        dst[i] += couple[i] * primary[i];
}

dt_tensor *model_ffn_down(const model_ffn_train *call, dt_tensor *hidden, dt_tensor *down, dt_tensor *down_bias) {
    ag_ctx *ctx = call->ctx;
    if (call->residual && call->branch && call->couple_out) /* g + m2, m2 = down(z2) + couple_out ⊙ m1 */
        return ag_linear_coupled(ctx, call->residual, hidden, down, down_bias, 0, call->m1, call->couple_out);
    if (call->residual) return ag_linear_residual(ctx, call->residual, hidden, down, down_bias);
    return ag_linear(ctx, hidden, down, down_bias);
}
