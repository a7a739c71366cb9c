/* Pointwise activations (GELU tanh form, SiLU, SwiGLU) and the softmax /
 * log-softmax over the last dim. GELU/SiLU/SwiGLU backward reads the inputs;
 * softmax and log-softmax backward read their own output, which stays in the
 * arena until the next reset. */
#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/activation.h"
#include "kernels/softmax.h"

/* ---- gelu ---- */

static void gelu_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x); /* [n] */
    if (d_x) k_gelu_backward(d_x, node->out->grad, dt_f32(x), x->size);
}

dt_tensor *ag_gelu(ag_ctx *ctx, dt_tensor *x) {
    if (!x) return NULL;
    if (!ag_check_f32("gelu", "x", x)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_gelu_forward(dt_f32(out), dt_f32(x), x->size);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1) && !ag_record(ctx, "gelu", gelu_backward, out, inputs, 1)) return NULL;
    return out;
}

/* ---- silu ---- */

static void silu_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x); /* [n] */
    if (d_x) k_silu_backward(d_x, node->out->grad, dt_f32(x), x->size);
}

dt_tensor *ag_silu(ag_ctx *ctx, dt_tensor *x) {
    if (!x) return NULL;
    if (!ag_check_f32("silu", "x", x)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_silu_forward(dt_f32(out), dt_f32(x), x->size);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1) && !ag_record(ctx, "silu", silu_backward, out, inputs, 1)) return NULL;
    return out;
}

/* ---- swiglu: out = silu(gate) * up ---- */

static void swiglu_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *gate = node->in[0], *up = node->in[1];
    k_swiglu_backward(ag_grad(ctx, gate), ag_grad(ctx, up), node->out->grad, dt_f32(gate), dt_f32(up), gate->size);
}

dt_tensor *ag_swiglu(ag_ctx *ctx, dt_tensor *gate, dt_tensor *up) {
    static const char *op = "swiglu";
    if (!gate || !up) return NULL;
    if (!ag_check_f32(op, "gate", gate) || !ag_check_f32(op, "up", up)) return NULL;
    if (!dt_same_shape(gate, up)) return ag_fail_shapes(op, gate, up, "differ (gate and up must be equal)");
    dt_tensor *out = ag_tensor_like(ctx, gate);
    if (!out) return NULL;
    k_swiglu_forward(dt_f32(out), dt_f32(gate), dt_f32(up), gate->size);
    dt_tensor *inputs[2] = {gate, up};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, swiglu_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- softmax over the last dim: backward uses the output ---- */

static void softmax_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *out = node->out;
    float *d_x = ag_grad(ctx, x); /* [M,N] */
    if (d_x) k_softmax_backward(d_x, out->grad, dt_f32(out), dt_rows(x), dt_cols(x));
}

dt_tensor *ag_softmax(ag_ctx *ctx, dt_tensor *x) {
    if (!x) return NULL;
    if (!ag_check_f32("softmax", "x", x)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_softmax_forward(dt_f32(out), dt_f32(x), dt_rows(x), dt_cols(x));
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1) && !ag_record(ctx, "softmax", softmax_backward, out, inputs, 1)) return NULL;
    return out;
}

/* ---- log_softmax over the last dim: backward uses the output ---- */

static void log_softmax_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *out = node->out;
    float *d_x = ag_grad(ctx, x); /* [M,N] */
    if (d_x) k_log_softmax_backward(d_x, out->grad, dt_f32(out), dt_rows(x), dt_cols(x));
}

dt_tensor *ag_log_softmax(ag_ctx *ctx, dt_tensor *x) {
    if (!x) return NULL;
    if (!ag_check_f32("log_softmax", "x", x)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_log_softmax_forward(dt_f32(out), dt_f32(x), dt_rows(x), dt_cols(x));
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1) && !ag_record(ctx, "log_softmax", log_softmax_backward, out, inputs, 1))
        return NULL;
    return out;
}
