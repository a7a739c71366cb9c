/* ag_linear: y = x W^T (+ b) over the last dim of x (leading dims flattened to
 * rows), forward and backward through the BLIS-backed k_linear_* kernels. */
#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/gemm.h"

/* in: x [M,K], weight [N,K], bias [N] or NULL; out [M,N] */
static void linear_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *weight = node->in[1], *bias = node->in[2];
    int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    k_linear_backward(ag_grad(ctx, x), ag_grad(ctx, weight), ag_grad(ctx, bias), node->out->grad, dt_f32(x),
                      dt_f32(weight), M, K, N);
}

dt_tensor *ag_linear(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    static const char *op = "linear";
    if (!x || !weight) return NULL;
    if (!ag_check_f32(op, "x", x) || !ag_check_f32(op, "weight", weight)) return NULL;
    if (weight->ndim != 2) return ag_fail_shape(op, "weight", weight, "(must be [N, K])");
    if (dt_cols(x) != weight->shape[1])
        return ag_fail_shapes(op, x, weight, "do not match (x [..., K], weight [N, K])");
    int64_t M = dt_rows(x), K = dt_cols(x), N = weight->shape[0];
    if (bias) {
        if (!ag_check_f32(op, "bias", bias)) return NULL;
        if (bias->ndim != 1 || bias->shape[0] != N)
            return ag_fail_shapes(op, weight, bias, "do not match (weight [N, K], bias [N])");
    }
    dt_tensor *out = ag_tensor_like_rows(ctx, x, N); /* [..., N] */
    if (!out) return NULL;
    k_linear_forward(dt_f32(out), dt_f32(x), dt_f32(weight), bias ? dt_f32(bias) : NULL, M, K, N);
    dt_tensor *inputs[3] = {x, weight, bias};
    if (ag_needs_grad(ctx, inputs, 3) && !ag_record(ctx, op, linear_backward, out, inputs, 3)) return NULL;
    return out;
}
