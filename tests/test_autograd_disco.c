/* The taped ops of DiscoLoop (SPEC §6.6, autograd/ops_disco.c): the
 * renormalised top-k softmax (values by hand, the tie rule, zero gradient
 * outside the kept set), the expected row p · table and the sigmoid gate,
 * each against central finite differences of its own forward
 * (tests/support/gradcheck), never its backward. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "support/gradcheck.h"

#define TOL 1e-2
#define EPS 1e-3

static ag_ctx ctx;

static void setup(void) {
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    k_set_threads(1); /* thousands of tiny forwards (see test_autograd_ops.c) */
}
static void teardown(void) { ag_ctx_free(&ctx); }

TestSuite(disco_ops, .init = setup, .fini = teardown);

typedef struct {
    dt_tensor *t[3];
    int64_t top;
} op_case;

static double check(const char *what, gradcheck_build_fn build, op_case *c, int n) {
    char report[512];
    double error = gradcheck(&ctx, build, c, c->t, n, EPS, TOL, report, sizeof report);
    if (error < TOL)
        cr_log_info("%s: %s", what, report);
    else
        cr_log_error("%s: %s", what, report);
    return error;
}

static dt_tensor *build_topk_softmax(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_topk_softmax(g, c->t[0], c->top);
}
static dt_tensor *build_expected_rows(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_expected_rows(g, c->t[0], c->t[1]);
}
static dt_tensor *build_sigmoid_gate(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_sigmoid_gate(g, c->t[0], c->t[1], c->t[2]);
}

/* Kept entries by hand; equal values keep the lower index (SPEC §6.6). */
Test(disco_ops, topk_softmax_values_and_ties) {
    dt_tensor *x = ag_tensor(&ctx, DT_F32, DT_SHAPE(2, 4));
    const float in[8] = {1, 3, 3, 0, /* */ 0, 2, 0, 1};
    memcpy(x->data, in, sizeof in);
    const float *p = dt_f32(ag_topk_softmax(&ctx, x, 1));
    const float one[8] = {0, 1, 0, 0, 0, 1, 0, 0};
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(p[i], one[i], 1e-7, "top 1, entry %d: %g", i, p[i]);
    p = dt_f32(ag_topk_softmax(&ctx, x, 2));
    const double e = exp(-1.0); /* row 2 keeps 2 and 1: softmax(2, 1) */
    const float two[8] = {0, 0.5f, 0.5f, 0, 0, (float)(1 / (1 + e)), 0, (float)(e / (1 + e))};
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(p[i], two[i], 1e-6, "top 2, entry %d: %g", i, p[i]);
    p = dt_f32(ag_topk_softmax(&ctx, x, 3)); /* row 2: 0 at index 0 is kept, the equal 0 at index 2 is not */
    cr_expect(p[4] > 0 && p[6] == 0.0f, "tie at the threshold: %g %g", p[4], p[6]);
    p = dt_f32(ag_topk_softmax(&ctx, x, 9)); /* top >= N: the plain softmax */
    double sum = 0.0;
    for (int i = 0; i < 4; i++)
        sum += exp(in[i]);
    cr_expect_float_eq(p[0], exp(1.0) / sum, 1e-6);
    cr_expect_null(ag_topk_softmax(&ctx, x, 0));
    cr_expect(strstr(dt_error_message(), "top"), "%s", dt_error_message());
}

/* Separated values (steps of 0.4 in random order) so an eps step never
 * changes which entries are kept: the kept set is a constant of the op. */
static dt_tensor *separated(uint64_t seed, int64_t M, int64_t N) {
    dt_tensor *x = gradcheck_param(seed, 1.0f, DT_SHAPE(M, N));
    cr_assert_not_null(x);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            dt_f32(x)[i * N + j] = 0.4f * (float)((j * 5 + i * 3) % N) - 1.5f;
    return x;
}

Test(disco_ops, topk_softmax_gradient) {
    const int64_t tops[3] = {1, 3, 9};
    for (int i = 0; i < 3; i++) {
        op_case c = {{separated(7 + i, 5, 9)}, tops[i]};
        cr_assert(check("topk_softmax", build_topk_softmax, &c, 1) < TOL, "top %lld: see the logged report",
                  (long long)tops[i]);
        dt_tensor_free(c.t[0]);
    }
}

/* The gradient reaches the kept logits only. */
Test(disco_ops, topk_softmax_no_gradient_outside_the_kept_set) {
    dt_tensor *x = separated(11, 3, 9);
    ag_ctx_free(&ctx);
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *p = ag_topk_softmax(&ctx, x, 3);
    dt_tensor *w = ag_tensor(&ctx, DT_F32, DT_SHAPE(3, 9));
    for (int64_t i = 0; i < 27; i++)
        dt_f32(w)[i] = (float)(i % 7) - 3.0f;
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, ag_mul(&ctx, p, w))), DT_OK, "%s", dt_error_message());
    int kept = 0, nonzero_grads = 0;
    for (int64_t i = 0; i < 27; i++) {
        kept += dt_f32(p)[i] > 0;
        if (dt_f32(p)[i] == 0.0f)
            cr_expect_eq(x->grad[i], 0.0f, "dropped entry %lld has gradient %g", (long long)i, x->grad[i]);
        nonzero_grads += x->grad[i] != 0.0f;
    }
    cr_expect_eq(kept, 9, "3 kept per row");
    cr_expect_gt(nonzero_grads, 0);
    dt_tensor_free(x);
}

Test(disco_ops, expected_rows_gradient) {
    op_case c = {{gradcheck_param(21, 1.0f, DT_SHAPE(2, 3, 7)), gradcheck_param(22, 0.5f, DT_SHAPE(7, 5))}, 0};
    cr_assert(check("expected_rows", build_expected_rows, &c, 2) < TOL, "see the logged report");
    /* value by hand: p = e_j picks row j of the table */
    dt_tensor *p = ag_tensor(&ctx, DT_F32, DT_SHAPE(1, 7));
    memset(p->data, 0, 7 * sizeof(float));
    dt_f32(p)[4] = 1.0f;
    const float *row = dt_f32(ag_expected_rows(&ctx, p, c.t[1]));
    for (int k = 0; k < 5; k++)
        cr_expect_float_eq(row[k], dt_f32(c.t[1])[4 * 5 + k], 1e-7);
    cr_expect_null(ag_expected_rows(&ctx, c.t[1], c.t[1]), "p [.., 5] against table [7, 5]");
    dt_tensor_free(c.t[0]);
    dt_tensor_free(c.t[1]);
}

Test(disco_ops, sigmoid_gate_gradient) {
    op_case c = {{gradcheck_param(31, 1.0f, DT_SHAPE(4, 3, 6)), gradcheck_param(32, 0.5f, DT_SHAPE(6)),
                  gradcheck_param(33, 1.0f, DT_SHAPE(1))},
                 0};
    cr_assert(check("sigmoid_gate", build_sigmoid_gate, &c, 3) < TOL, "see the logged report");
    /* value by hand: a = sigmoid(x · w + b) */
    const float *a = dt_f32(ag_sigmoid_gate(&ctx, c.t[0], c.t[1], c.t[2]));
    double z = dt_f32(c.t[2])[0];
    for (int k = 0; k < 6; k++)
        z += (double)dt_f32(c.t[0])[6 + k] * dt_f32(c.t[1])[k];
    cr_expect_float_eq(a[1], 1.0 / (1.0 + exp(-z)), 1e-6);
    for (int i = 0; i < 3; i++)
        dt_tensor_free(c.t[i]);
}
