/* The fused ops (ag_linear_gelu, ag_linear_residual, ag_mlp_gelu,
 * ag_embedding_pos) and the tape's gradient-buffer reuse.
 *
 * Gradients are checked against central differences of the forward
 * (tests/support/gradcheck), including inputs that are other ops' outputs, so
 * the backward's write-instead-of-add path for fresh buffers (and the add path
 * for a tensor with two consumers) is exercised. Forwards that promise the
 * unfused numbers bit for bit are compared with memcmp against the unfused
 * composition. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "kernels/gemm.h"
#include "support/gradcheck.h"

#define TOL 1e-2
#define EPS 1e-2

static ag_ctx ctx;

static void setup(void) {
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    k_set_threads(1); /* thousands of tiny forwards: see test_autograd_ops.c */
}
static void teardown(void) { ag_ctx_free(&ctx); }

TestSuite(fused, .init = setup, .fini = teardown);

typedef struct {
    dt_tensor *t[6];
    dt_tensor *ids[2];
} fused_case;

static dt_tensor *param(uint64_t seed, float std, int ndim, const int64_t *shape) {
    dt_tensor *t = gradcheck_param(seed, std, ndim, shape);
    cr_assert_not_null(t);
    return t;
}

static void free_case(fused_case *c) {
    for (int i = 0; i < 6; i++)
        dt_tensor_free(c->t[i]);
    for (int i = 0; i < 2; i++)
        dt_tensor_free(c->ids[i]);
}

static void check(const char *what, gradcheck_build_fn build, fused_case *c) {
    dt_tensor *inputs[6];
    int n = 0;
    for (int i = 0; i < 6; i++)
        if (c->t[i]) inputs[n++] = c->t[i];
    char report[512];
    double error = gradcheck(&ctx, build, c, inputs, n, EPS, TOL, report, sizeof report);
    cr_log_info("%s: %s", what, report);
    cr_assert(error < TOL, "%s: %s", what, report);
}

/* ---------------- gradients ---------------- */

static dt_tensor *build_linear_gelu(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_linear_gelu(g, c->t[0], c->t[1], c->t[2]);
}

Test(fused, linear_gelu_gradients) {
    fused_case c = {0};
    c.t[0] = param(1, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(2, 0.5f, DT_SHAPE(9, 7));
    c.t[2] = param(3, 0.5f, DT_SHAPE(9));
    check("linear_gelu with bias", build_linear_gelu, &c);
    dt_tensor_free(c.t[2]);
    c.t[2] = NULL;
    check("linear_gelu without bias", build_linear_gelu, &c);
    free_case(&c);
}

static dt_tensor *build_linear_residual(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_linear_residual(g, c->t[0], c->t[1], c->t[2], c->t[3]);
}

/* residual and x are other ops' outputs: their gradients start as fresh buffers. */
static dt_tensor *build_linear_residual_inner(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_linear_residual(g, ag_scale(g, c->t[0], -0.5f), ag_scale(g, c->t[1], 1.5f), c->t[2], c->t[3]);
}

/* One tensor is both the residual and the input: its gradient is written, then added to. */
static dt_tensor *build_linear_residual_shared(ag_ctx *g, void *u) {
    fused_case *c = u;
    dt_tensor *h = ag_scale(g, c->t[0], 2.0f);
    return ag_linear_residual(g, h, h, c->t[2], c->t[3]);
}

Test(fused, linear_residual_gradients) {
    fused_case c = {0};
    c.t[0] = param(4, 1.0f, DT_SHAPE(2, 6, 8)); /* residual [.., N] */
    c.t[1] = param(5, 1.0f, DT_SHAPE(2, 6, 5)); /* x [.., K] */
    c.t[2] = param(6, 0.5f, DT_SHAPE(8, 5));    /* weight [N, K] */
    c.t[3] = param(7, 0.5f, DT_SHAPE(8));
    check("linear_residual", build_linear_residual, &c);
    check("linear_residual over op outputs", build_linear_residual_inner, &c);
    free_case(&c);

    fused_case s = {0};
    s.t[0] = param(8, 1.0f, DT_SHAPE(7, 6));
    s.t[2] = param(9, 0.5f, DT_SHAPE(6, 6));
    check("linear_residual with residual == x", build_linear_residual_shared, &s);
    free_case(&s);
}

static dt_tensor *build_mlp(ag_ctx *g, void *u) {
    fused_case *c = u;
    /* x through an op, so d_x lands in a fresh buffer */
    return ag_mlp_gelu(g, c->t[0], ag_scale(g, c->t[1], 1.0f), c->t[2], c->t[3], c->t[4], c->t[5]);
}

Test(fused, mlp_gelu_gradients) {
    fused_case c = {0};
    c.t[0] = param(10, 1.0f, DT_SHAPE(3, 4, 6)); /* residual [.., C] */
    c.t[1] = param(11, 1.0f, DT_SHAPE(3, 4, 6)); /* x [.., C] */
    c.t[2] = param(12, 0.5f, DT_SHAPE(17, 6));   /* fc [F, C] */
    c.t[3] = param(13, 0.5f, DT_SHAPE(17));
    c.t[4] = param(14, 0.5f, DT_SHAPE(6, 17)); /* proj [C, F] */
    c.t[5] = param(15, 0.5f, DT_SHAPE(6));
    check("mlp_gelu", build_mlp, &c);
    free_case(&c);
}

static dt_tensor *build_embedding_pos(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_embedding_pos(g, c->t[0], c->ids[0], c->t[1], c->ids[1]);
}

Test(fused, embedding_pos_gradients) {
    fused_case c = {0};
    c.t[0] = param(16, 1.0f, DT_SHAPE(9, 5));
    c.t[1] = param(17, 1.0f, DT_SHAPE(4, 5));
    c.ids[0] = dt_tensor_new(DT_I32, DT_SHAPE(3, 4));
    c.ids[1] = dt_tensor_new(DT_I32, DT_SHAPE(3, 4));
    for (int i = 0; i < 12; i++) {
        dt_i32(c.ids[0])[i] = (i * 5) % 7; /* repeats; rows 7, 8 unused */
        dt_i32(c.ids[1])[i] = i % 4;
    }
    check("embedding_pos", build_embedding_pos, &c);
    for (int i = 7 * 5; i < 9 * 5; i++)
        cr_assert_eq(c.t[0]->grad[i], 0.0f, "an unused row got gradient");
    free_case(&c);
}

static dt_tensor *build_coupled(ag_ctx *g, void *u) {
    fused_case *c = u;
    /* residual and coupled source are op outputs (fresh gradient buffers) */
    return ag_linear_coupled(g, ag_scale(g, c->t[0], 1.0f), c->t[1], c->t[2], c->t[3], 0, ag_scale(g, c->t[4], 1.0f),
                             c->t[5]);
}

static dt_tensor *build_coupled_gelu(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_linear_coupled(g, NULL, c->t[1], c->t[2], c->t[3], 1, c->t[4], c->t[5]);
}

static dt_tensor *build_add_mul_vec(ag_ctx *g, void *u) {
    fused_case *c = u;
    return ag_add_mul_vec(g, c->t[0], c->t[4], c->t[5]);
}

Test(fused, coupled_maps_gradients) {
    fused_case c = {0};
    c.t[0] = param(40, 1.0f, DT_SHAPE(2, 5, 9)); /* residual [.., N] */
    c.t[1] = param(41, 1.0f, DT_SHAPE(2, 5, 6)); /* x [.., K] */
    c.t[2] = param(42, 0.5f, DT_SHAPE(9, 6));    /* weight [N, K] */
    c.t[3] = param(43, 0.5f, DT_SHAPE(9));       /* bias */
    c.t[4] = param(44, 1.0f, DT_SHAPE(2, 5, 9)); /* coupled [.., N] */
    c.t[5] = param(45, 1.0f, DT_SHAPE(9));       /* couple [N] */
    check("linear_coupled (residual, coupling)", build_coupled, &c);
    dt_tensor *residual = c.t[0];
    c.t[0] = NULL; /* not an input of the next two */
    check("linear_coupled (GELU, coupling)", build_coupled_gelu, &c);
    c.t[0] = residual;
    dt_tensor *saved[3] = {c.t[1], c.t[2], c.t[3]};
    c.t[1] = c.t[2] = c.t[3] = NULL;
    check("add_mul_vec", build_add_mul_vec, &c);
    c.t[1] = saved[0], c.t[2] = saved[1], c.t[3] = saved[2];
    free_case(&c);
}

/* ---------------- the promised forwards ---------------- */

static void assert_same_floats(const dt_tensor *a, const dt_tensor *b, const char *what) {
    cr_assert_not_null(a, "%s: %s", what, dt_error_message());
    cr_assert_not_null(b, "%s: %s", what, dt_error_message());
    cr_assert(dt_same_shape(a, b), "%s: shapes differ", what);
    cr_assert(memcmp(a->data, b->data, (size_t)a->size * sizeof(float)) == 0, "%s: not bit-for-bit equal", what);
}

Test(fused, forwards_equal_the_unfused_ops_bit_for_bit) {
    k_set_threads(2); /* and with the GEMMs split: 300 rows x 96 x 80 is above the cutoff */
    dt_tensor *residual = param(20, 1.0f, DT_SHAPE(300, 96)), *x = param(21, 1.0f, DT_SHAPE(300, 96));
    dt_tensor *fc = param(22, 0.1f, DT_SHAPE(80, 96)), *fc_bias = param(23, 0.1f, DT_SHAPE(80));
    dt_tensor *proj = param(24, 0.1f, DT_SHAPE(96, 80)), *proj_bias = param(25, 0.1f, DT_SHAPE(96));
    dt_tensor *wo = param(26, 0.1f, DT_SHAPE(96, 96));
    ag_reset(&ctx);
    assert_same_floats(ag_linear_residual(&ctx, residual, x, wo, proj_bias),
                       ag_add(&ctx, residual, ag_linear(&ctx, x, wo, proj_bias)), "linear_residual");
    dt_tensor *hidden = ag_linear_gelu(&ctx, x, fc, fc_bias);
    assert_same_floats(ag_mlp_gelu(&ctx, residual, x, fc, fc_bias, proj, proj_bias),
                       ag_linear_residual(&ctx, residual, hidden, proj, proj_bias), "mlp_gelu");
    /* linear_gelu against its definition in double */
    const float *h = dt_f32(hidden);
    for (int64_t i = 0; i < 300; i += 37)
        for (int64_t j = 0; j < 80; j += 7) {
            double pre = dt_f32(fc_bias)[j];
            for (int64_t k = 0; k < 96; k++)
                pre += (double)dt_f32(x)[i * 96 + k] * dt_f32(fc)[j * 96 + k];
            const double expected = 0.5 * pre * (1.0 + tanh(sqrt(2.0 / M_PI) * (pre + 0.044715 * pre * pre * pre)));
            cr_assert(fabs(h[i * 80 + j] - expected) <= 1e-5 * (1.0 + fabs(expected)), "linear_gelu (%ld,%ld)", (long)i,
                      (long)j);
        }
    dt_tensor *table = param(27, 1.0f, DT_SHAPE(11, 96)), *positions_table = param(28, 1.0f, DT_SHAPE(5, 96));
    dt_tensor *tokens = dt_tensor_new(DT_I32, DT_SHAPE(4, 5)), *positions = dt_tensor_new(DT_I32, DT_SHAPE(4, 5));
    for (int i = 0; i < 20; i++)
        dt_i32(tokens)[i] = (i * 3) % 11, dt_i32(positions)[i] = i % 5;
    assert_same_floats(ag_embedding_pos(&ctx, table, tokens, positions_table, positions),
                       ag_add(&ctx, ag_embedding(&ctx, table, tokens), ag_embedding(&ctx, positions_table, positions)),
                       "embedding_pos");
    /* A zero coupling term gives the uncoupled numbers bit for bit (couple = off == zero coupling). */
    dt_tensor *coupled = param(29, 1.0f, DT_SHAPE(300, 96)), *zeros = param(30, 1.0f, DT_SHAPE(96));
    memset(zeros->data, 0, 96 * sizeof(float));
    assert_same_floats(ag_linear_coupled(&ctx, residual, x, wo, proj_bias, 0, coupled, zeros),
                       ag_linear_residual(&ctx, residual, x, wo, proj_bias), "linear_coupled, zero coupling");
    dt_tensor *zeros_f = param(31, 1.0f, DT_SHAPE(80)), *coupled_f = param(32, 1.0f, DT_SHAPE(300, 80));
    memset(zeros_f->data, 0, 80 * sizeof(float));
    assert_same_floats(ag_linear_coupled(&ctx, NULL, x, fc, fc_bias, 1, coupled_f, zeros_f), hidden,
                       "linear_coupled GELU, zero coupling");
    dt_tensor_free(coupled), dt_tensor_free(zeros), dt_tensor_free(zeros_f), dt_tensor_free(coupled_f);
    /* Shape errors name the op. */
    cr_assert_null(ag_linear_residual(&ctx, x, residual, fc, NULL));
    cr_assert(strstr(dt_error_message(), "linear_residual"), "%s", dt_error_message());
    cr_assert_null(ag_mlp_gelu(&ctx, residual, x, fc, fc_bias, fc, NULL));
    cr_assert(strstr(dt_error_message(), "mlp_gelu"), "%s", dt_error_message());
    dt_tensor *list[] = {residual, x, fc, fc_bias, proj, proj_bias, wo, table, positions_table, tokens, positions};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        dt_tensor_free(list[i]);
    k_set_threads(1);
}

/* ---------------- gradient-buffer reuse ---------------- */

Test(fused, backward_hands_activation_gradients_back) {
    enum { DEPTH = 24, ROWS = 128, COLS = 64 };
    dt_tensor *x = param(30, 1.0f, DT_SHAPE(ROWS, COLS));
    ag_reset(&ctx);
    dt_tensor *h = x, *middle = NULL;
    for (int i = 0; i < DEPTH; i++) {
        h = ag_gelu(&ctx, ag_scale(&ctx, h, 1.1f));
        if (i == DEPTH / 2) middle = h;
    }
    dt_tensor *loss = ag_sum(&ctx, h);
    const size_t forward_bytes = ctx.arena.total_used;
    memset(x->grad, 0, (size_t)x->size * sizeof(float));
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
    /* 2 * DEPTH activation gradients of 32 KB each: with reuse only a few exist at once. */
    const size_t buffer = (size_t)ROWS * COLS * sizeof(float);
    cr_assert(ctx.arena.peak <= forward_bytes + 4 * buffer, "backward grew the arena by %zu bytes (%zu buffers)",
              ctx.arena.peak - forward_bytes, (ctx.arena.peak - forward_bytes) / buffer);
    cr_assert_null(middle->grad, "an op output's gradient is handed back after its backward");
    cr_assert_not_null(x->grad, "a leaf keeps its gradient");
    /* The gradient itself: d/dx of sum(f(f(...f(x)))) by the chain rule in double, on a few elements. */
    for (int64_t e = 0; e < ROWS * COLS; e += 997) {
        double value = dt_f32(x)[e], derivative = 1.0;
        for (int i = 0; i < DEPTH; i++) {
            const double u = 1.1 * value, c = sqrt(2.0 / M_PI), v = c * (u + 0.044715 * u * u * u), t = tanh(v);
            derivative *= 1.1 * (0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * u * u));
            value = 0.5 * u * (1.0 + t);
        }
        cr_assert(fabs(x->grad[e] - derivative) <= 1e-4 * (1.0 + fabs(derivative)), "d x[%ld] = %g, expected %g",
                  (long)e, (double)x->grad[e], derivative);
    }
    /* A second backward over the same tape (buffers now reused, holding old
     * values) adds exactly the same gradient again. */
    float once = x->grad[5];
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK);
    cr_assert(fabsf(x->grad[5] - 2.0f * once) <= 1e-6f * fabsf(once), "%g vs 2 * %g", (double)x->grad[5], (double)once);
    dt_tensor_free(x);
}

Test(fused, grad_for_write_and_temp_buffers) {
    ag_reset(&ctx);
    dt_tensor *t = ag_tensor(&ctx, DT_F32, DT_SHAPE(10, 3));
    cr_assert_not_null(t);
    int accumulate = -1;
    cr_assert_null(ag_grad_for_write(&ctx, t, &accumulate), "no gradient without requires_grad");
    t->requires_grad = 1;
    float *g = ag_grad_for_write(&ctx, t, &accumulate);
    cr_assert(g && accumulate == 0, "a fresh buffer is for writing");
    float *again = ag_grad_for_write(&ctx, t, &accumulate);
    cr_assert(again == g && accumulate == 1, "an existing one is for adding");
    ag_release_grad(&ctx, t);
    cr_assert_null(t->grad);
    float *zeroed = ag_grad(&ctx, t);
    cr_assert(zeroed == g, "the handed-back buffer is reused");
    for (int i = 0; i < 30; i++)
        cr_assert_eq(zeroed[i], 0.0f, "ag_grad zero-fills a reused buffer");
    /* temp buffers share the pool: a smaller request reuses a released larger one */
    float *big = ag_temp(&ctx, 1000);
    cr_assert_not_null(big);
    ag_temp_release(&ctx, big);
    cr_assert(ag_temp(&ctx, 500) == big);
    /* a heap parameter's gradient is always added to */
    dt_tensor *w = param(31, 1.0f, DT_SHAPE(4));
    cr_assert(ag_grad_for_write(&ctx, w, &accumulate) == w->grad && accumulate == 1);
    ag_release_grad(&ctx, w);
    cr_assert_not_null(w->grad, "a parameter's heap gradient is never handed back");
    dt_tensor_free(w);
}
