/* Shape ops: reshape and detach (aliases of the same data, no copy),
 * concatenation and slicing along the last dim (copies, row by row). */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/elementwise.h"

/* ---- reshape: same data, new header; gradient passes through unchanged ---- */

static void reshape_backward(ag_ctx *ctx, ag_node *node) {
    float *d_x = ag_grad(ctx, node->in[0]);
    if (d_x) k_accumulate(d_x, node->out->grad, node->out->size);
}

dt_tensor *ag_reshape(ag_ctx *ctx, dt_tensor *x, int ndim, const int64_t *shape) {
    if (!x) return NULL;
    if (ndim < 1 || ndim > DT_MAX_DIMS) {
        dt_errorf("reshape: %d dims requested for %lld elements (must be 1..%d)", ndim, (long long)x->size,
                  DT_MAX_DIMS);
        return NULL;
    }
    int64_t size = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            dt_errorf("reshape: dimension %d is %lld (must be positive)", i, (long long)shape[i]);
            return NULL;
        }
        size *= shape[i];
    }
    if (size != x->size) {
        char sx[AG_SHAPE_BUF];
        dt_errorf("reshape: cannot view %s (%lld elements) as %lld elements", dt_shape_str(x, sx, sizeof sx),
                  (long long)x->size, (long long)size);
        return NULL;
    }
    dt_tensor *out = ag_alias(ctx, x, ndim, shape);
    if (!out) return NULL;
    dt_tensor *inputs[1] = {x};
    if (x->dtype == DT_F32 && ag_needs_grad(ctx, inputs, 1) &&
        !ag_record(ctx, "reshape", reshape_backward, out, inputs, 1))
        return NULL;
    return out;
}

/* ---- detach: same data, a constant (no node, no gradient) ---- */

dt_tensor *ag_detach(ag_ctx *ctx, dt_tensor *x) {
    if (!x) return NULL;
    return ag_alias(ctx, x, x->ndim, x->shape);
}

/* ---- concat_last: a [M,Ca], b [M,Cb] -> [M, Ca+Cb] ---- */

static void concat_last_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *a = node->in[0], *b = node->in[1];
    int64_t M = dt_rows(a), Ca = dt_cols(a), Cb = dt_cols(b), Cout = Ca + Cb;
    float *d_a = ag_grad(ctx, a), *d_b = ag_grad(ctx, b);
    const float *d_out = node->out->grad; /* [M, Ca+Cb] */
    for (int64_t m = 0; m < M; m++) {
        if (d_a) k_accumulate(d_a + m * Ca, d_out + m * Cout, Ca);
        if (d_b) k_accumulate(d_b + m * Cb, d_out + m * Cout + Ca, Cb);
    }
}

dt_tensor *ag_concat_last(ag_ctx *ctx, dt_tensor *a, dt_tensor *b) {
    static const char *op = "concat_last";
    if (!a || !b) return NULL;
    if (!ag_check_f32(op, "a", a) || !ag_check_f32(op, "b", b)) return NULL;
    int same_leading = a->ndim == b->ndim;
    for (int i = 0; same_leading && i < a->ndim - 1; i++)
        same_leading = a->shape[i] == b->shape[i];
    if (!same_leading) return ag_fail_shapes(op, a, b, "differ in their leading dims");
    int64_t M = dt_rows(a), Ca = dt_cols(a), Cb = dt_cols(b), Cout = Ca + Cb;
    dt_tensor *out = ag_tensor_like_rows(ctx, a, Cout); /* [..., Ca+Cb] */
    if (!out) return NULL;
    const float *av = dt_f32(a), *bv = dt_f32(b);
    float *y = dt_f32(out);
    for (int64_t m = 0; m < M; m++) {
        memcpy(y + m * Cout, av + m * Ca, (size_t)Ca * sizeof(float));
        memcpy(y + m * Cout + Ca, bv + m * Cb, (size_t)Cb * sizeof(float));
    }
    dt_tensor *inputs[2] = {a, b};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, concat_last_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- slice_last: x [M,C] -> columns [start, start+width) as [M,width] ---- */

static void slice_last_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x);
    if (!d_x) return;
    int64_t M = dt_rows(x), C = dt_cols(x), start = node->iarg[0], width = node->iarg[1];
    const float *d_out = node->out->grad; /* [M, width] */
    for (int64_t m = 0; m < M; m++)
        k_accumulate(d_x + m * C + start, d_out + m * width, width);
}

dt_tensor *ag_slice_last(ag_ctx *ctx, dt_tensor *x, int64_t start, int64_t width) {
    static const char *op = "slice_last";
    if (!x) return NULL;
    if (!ag_check_f32(op, "x", x)) return NULL;
    int64_t M = dt_rows(x), C = dt_cols(x);
    if (start < 0 || width < 1 || start + width > C) {
        char sx[AG_SHAPE_BUF];
        dt_errorf("%s: columns [%lld, %lld) are outside x %s", op, (long long)start, (long long)(start + width),
                  dt_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    dt_tensor *out = ag_tensor_like_rows(ctx, x, width); /* [..., width] */
    if (!out) return NULL;
    const float *in = dt_f32(x);
    float *y = dt_f32(out);
    for (int64_t m = 0; m < M; m++)
        memcpy(y + m * width, in + m * C + start, (size_t)width * sizeof(float));
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, op, slice_last_backward, out, inputs, 1);
        if (!node) return NULL;
        node->iarg[0] = start;
        node->iarg[1] = width;
    }
    return out;
}
