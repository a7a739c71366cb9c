/* Elementwise ops (add, mul, scale, vector broadcasts, row scaling, clip,
 * two-term logsumexp) and the full reductions sum / mean.
 * Forward and backward of each op sit next to each other. */
#include <math.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/elementwise.h"

/* Validates two float tensors of identical shape. */
static int check_same(const char *op, const dt_tensor *a, const dt_tensor *b) {
    if (!ag_check_f32(op, "a", a) || !ag_check_f32(op, "b", b)) return 0;
    if (!dt_same_shape(a, b)) {
        ag_fail_shapes(op, a, b, "differ (must be equal)");
        return 0;
    }
    return 1;
}

/* Validates x [..., C] against a vector v [C]. */
static int check_vec(const char *op, const dt_tensor *x, const dt_tensor *v) {
    if (!ag_check_f32(op, "x", x) || !ag_check_f32(op, "v", v)) return 0;
    if (v->ndim != 1 || v->shape[0] != dt_cols(x)) {
        ag_fail_shapes(op, x, v, "do not match (x [..., C], v [C])");
        return 0;
    }
    return 1;
}

/* ---- add: out = a + b ---- */

/* d_t += d_out, or d_t = d_out when t's gradient is a fresh buffer (no zero-fill). */
static void pass_gradient(ag_ctx *ctx, dt_tensor *t, const float *d_out, int64_t n) {
    int accumulate;
    float *d_t = ag_grad_for_write(ctx, t, &accumulate);
    if (!d_t) return;
    if (accumulate)
        k_accumulate(d_t, d_out, n);
    else
        k_scale(d_t, d_out, 1.0f, n); /* a copy */
}

static void add_backward(ag_ctx *ctx, ag_node *node) {
    float *d_out = node->out->grad; /* [n] */
    int64_t n = node->out->size;
    /* a + a: both inputs are one tensor, and its gradient gets d_out twice */
    pass_gradient(ctx, node->in[0], d_out, n);
    pass_gradient(ctx, node->in[1], d_out, n);
}

dt_tensor *ag_add(ag_ctx *ctx, dt_tensor *a, dt_tensor *b) {
    if (!a || !b) return NULL;
    if (!check_same("add", a, b)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, a);
    if (!out) return NULL;
    k_add(dt_f32(out), dt_f32(a), dt_f32(b), a->size);
    dt_tensor *inputs[2] = {a, b};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "add", add_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- mul: out = a * b ---- */

static void mul_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *a = node->in[0], *b = node->in[1];
    k_mul_backward(ag_grad(ctx, a), ag_grad(ctx, b), node->out->grad, dt_f32(a), dt_f32(b), a->size);
}

dt_tensor *ag_mul(ag_ctx *ctx, dt_tensor *a, dt_tensor *b) {
    if (!a || !b) return NULL;
    if (!check_same("mul", a, b)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, a);
    if (!out) return NULL;
    k_mul(dt_f32(out), dt_f32(a), dt_f32(b), a->size);
    dt_tensor *inputs[2] = {a, b};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "mul", mul_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- scale: out = s * a ---- */

static void scale_backward(ag_ctx *ctx, ag_node *node) {
    float *d_a = ag_grad(ctx, node->in[0]);
    if (d_a) k_accumulate_scaled(d_a, node->out->grad, node->farg[0], node->out->size);
}

dt_tensor *ag_scale(ag_ctx *ctx, dt_tensor *a, float s) {
    if (!a) return NULL;
    if (!ag_check_f32("scale", "a", a)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, a);
    if (!out) return NULL;
    k_scale(dt_f32(out), dt_f32(a), s, a->size);
    dt_tensor *inputs[1] = {a};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, "scale", scale_backward, out, inputs, 1);
        if (!node) return NULL;
        node->farg[0] = s;
    }
    return out;
}

/* ---- add_vec: out [M,C] = x [M,C] + v [C] ---- */

static void add_vec_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    int64_t M = dt_rows(x), C = dt_cols(x);
    float *d_out = node->out->grad; /* [M,C] */
    float *d_x = ag_grad(ctx, x), *d_v = ag_grad(ctx, node->in[1]);
    if (d_x) k_accumulate(d_x, d_out, M * C);
    if (d_v) k_sum_rows(d_v, d_out, M, C);
}

dt_tensor *ag_add_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *v) {
    if (!x || !v) return NULL;
    if (!check_vec("add_vec", x, v)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_add_vec(dt_f32(out), dt_f32(x), dt_f32(v), dt_rows(x), dt_cols(x));
    dt_tensor *inputs[2] = {x, v};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "add_vec", add_vec_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- mul_vec: out [M,C] = x [M,C] * v [C] ---- */

static void mul_vec_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *v = node->in[1];
    k_mul_vec_backward(ag_grad(ctx, x), ag_grad(ctx, v), node->out->grad, dt_f32(x), dt_f32(v), dt_rows(x), dt_cols(x));
}

dt_tensor *ag_mul_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *v) {
    if (!x || !v) return NULL;
    if (!check_vec("mul_vec", x, v)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_mul_vec(dt_f32(out), dt_f32(x), dt_f32(v), dt_rows(x), dt_cols(x));
    dt_tensor *inputs[2] = {x, v};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "mul_vec", mul_vec_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- add_mul_vec: out [M,C] = x [M,C] + y [M,C] * v [C] (a coupling term, one op) ---- */

static void add_mul_vec_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *y = node->in[1], *v = node->in[2];
    const float *d_out = node->out->grad; /* [M,C] */
    pass_gradient(ctx, x, d_out, x->size);
    k_mul_vec_backward(ag_grad(ctx, y), ag_grad(ctx, v), d_out, dt_f32(y), dt_f32(v), dt_rows(y), dt_cols(y));
}

dt_tensor *ag_add_mul_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *y, dt_tensor *v) {
    if (!x || !y || !v) return NULL;
    if (!check_same("add_mul_vec", x, y) || !check_vec("add_mul_vec", y, v)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_scale(dt_f32(out), dt_f32(x), 1.0f, x->size); /* a copy */
    k_accumulate_mul_vec(dt_f32(out), dt_f32(y), dt_f32(v), dt_rows(y), dt_cols(y));
    dt_tensor *inputs[3] = {x, y, v};
    if (ag_needs_grad(ctx, inputs, 3) && !ag_record(ctx, "add_mul_vec", add_mul_vec_backward, out, inputs, 3))
        return NULL;
    return out;
}

/* ---- scale_rows: out [M,C] = x [M,C] * s [M] ---- */

static void scale_rows_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0], *s = node->in[1];
    k_scale_rows_backward(ag_grad(ctx, x), ag_grad(ctx, s), node->out->grad, dt_f32(x), dt_f32(s), dt_rows(x),
                          dt_cols(x));
}

/* x may have any leading dims (rows = their product); s holds one scale per row
 * in any shape of that size (e.g. MoE gates [N, k] against rows [N*k, C]). */
dt_tensor *ag_scale_rows(ag_ctx *ctx, dt_tensor *x, dt_tensor *s) {
    static const char *op = "scale_rows";
    if (!x || !s) return NULL;
    if (!ag_check_f32(op, "x", x) || !ag_check_f32(op, "s", s)) return NULL;
    if (s->size != dt_rows(x)) return ag_fail_shapes(op, x, s, "do not match (x [M, C], s [M])");
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    k_scale_rows(dt_f32(out), dt_f32(x), dt_f32(s), dt_rows(x), dt_cols(x));
    dt_tensor *inputs[2] = {x, s};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, op, scale_rows_backward, out, inputs, 2)) return NULL;
    return out;
}

/* ---- clip: out = min(max(x, lo), hi); gradient passes where lo <= x <= hi ---- */

static void clip_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x);
    if (!d_x) return;
    const float *in = dt_f32(x), *d_out = node->out->grad; /* [n] */
    float lo = node->farg[0], hi = node->farg[1];
    for (int64_t i = 0; i < x->size; i++)
        if (in[i] >= lo && in[i] <= hi) d_x[i] += d_out[i];
}

dt_tensor *ag_clip(ag_ctx *ctx, dt_tensor *x, float lo, float hi) {
    if (!x) return NULL;
    if (!ag_check_f32("clip", "x", x)) return NULL;
    if (!(lo <= hi)) {
        dt_errorf("clip: bounds [%g, %g] are empty (need lo <= hi)", (double)lo, (double)hi);
        return NULL;
    }
    dt_tensor *out = ag_tensor_like(ctx, x);
    if (!out) return NULL;
    const float *in = dt_f32(x);
    float *y = dt_f32(out);
    for (int64_t i = 0; i < x->size; i++)
        y[i] = in[i] < lo ? lo : (in[i] > hi ? hi : in[i]);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, "clip", clip_backward, out, inputs, 1);
        if (!node) return NULL;
        node->farg[0] = lo;
        node->farg[1] = hi;
    }
    return out;
}

/* ---- logsumexp2: out = log(exp a + exp b) ----
 * A -inf term is a dropped term (weight exactly 0): it contributes nothing and
 * receives zero gradient; both -inf gives -inf with zero gradients, never NaN. */

static void logsumexp2_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *a = node->in[0], *b = node->in[1];
    float *d_a = ag_grad(ctx, a), *d_b = ag_grad(ctx, b);
    const float *av = dt_f32(a), *bv = dt_f32(b), *out = dt_f32(node->out), *d_out = node->out->grad; /* [n] */
    for (int64_t i = 0; i < a->size; i++) {
        if (!isfinite(out[i])) continue; /* both terms dropped (or overflow): no defined softmax */
        /* d out / d a = exp(a - out) = sigmoid(a - b), computed from the
         * inputs rather than the float-rounded out (at |out| ~ 1e3 its
         * rounding alone would move the weight by ~1e-4); a -inf term gets
         * sigmoid(-inf) = 0 exactly. */
        double gap = (double)av[i] - (double)bv[i];
        double weight_a = gap >= 0.0 ? 1.0 / (1.0 + exp(-gap)) : exp(gap) / (1.0 + exp(gap));
        double weight_b = gap >= 0.0 ? exp(-gap) / (1.0 + exp(-gap)) : 1.0 / (1.0 + exp(gap));
        if (d_a) d_a[i] += d_out[i] * (float)weight_a;
        if (d_b) d_b[i] += d_out[i] * (float)weight_b;
    }
}

dt_tensor *ag_logsumexp2(ag_ctx *ctx, dt_tensor *a, dt_tensor *b) {
    if (!a || !b) return NULL;
    if (!check_same("logsumexp2", a, b)) return NULL;
    dt_tensor *out = ag_tensor_like(ctx, a);
    if (!out) return NULL;
    const float *av = dt_f32(a), *bv = dt_f32(b);
    float *y = dt_f32(out);
    for (int64_t i = 0; i < a->size; i++) {
        double hi = av[i] > bv[i] ? av[i] : bv[i], lo = av[i] > bv[i] ? bv[i] : av[i];
        /* hi = -inf: both dropped; hi = +inf: the sum is +inf. Either way hi is the answer. */
        y[i] = isinf(hi) ? (float)hi : (float)(hi + log1p(exp(lo - hi)));
    }
    dt_tensor *inputs[2] = {a, b};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "logsumexp2", logsumexp2_backward, out, inputs, 2))
        return NULL;
    return out;
}

/* ---- sum / mean: [..] -> [1], accumulated in double ---- */

static void sum_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x);
    if (!d_x) return;
    float g = node->out->grad[0] * node->farg[0]; /* farg[0]: 1 for sum, 1/n for mean */
    for (int64_t i = 0; i < x->size; i++)
        d_x[i] += g;
}

static dt_tensor *reduce(ag_ctx *ctx, dt_tensor *x, const char *op, float factor) {
    if (!x) return NULL;
    if (!ag_check_f32(op, "x", x)) return NULL;
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(1));
    if (!out) return NULL;
    const float *in = dt_f32(x);
    double total = 0.0;
    for (int64_t i = 0; i < x->size; i++)
        total += in[i];
    dt_f32(out)[0] = (float)(total * factor);
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, op, sum_backward, out, inputs, 1);
        if (!node) return NULL;
        node->farg[0] = factor;
    }
    return out;
}

dt_tensor *ag_sum(ag_ctx *ctx, dt_tensor *x) { return reduce(ctx, x, "sum", 1.0f); }

dt_tensor *ag_mean(ag_ctx *ctx, dt_tensor *x) {
    return x ? reduce(ctx, x, "mean", (float)(1.0 / (double)x->size)) : NULL;
}
