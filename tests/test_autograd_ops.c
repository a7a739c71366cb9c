/* Finite-difference gradient checks for every differentiable op in
 * autograd/ops.h, every input of multi-input ops, at odd sizes. The expected
 * gradients are central differences of the forward (tests/support/gradcheck),
 * never the ops' own backward.
 *
 * Tolerance: the checker's error is |analytic - numeric| relative to the
 * larger of |numeric| and 10% of that input's largest gradient. Float32
 * forwards with eps = 1e-2 give errors around 1e-4..1e-3; a dropped factor of
 * 2, a sign or a missing term gives errors of order 0.1..2. */
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
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    /* Thousands of tiny forwards: waking a second BLIS/OpenMP thread per GEMM
     * costs more than the GEMM (seconds under ASan on a shared machine). The
     * threaded kernel paths are covered by the kernel tests and by the other
     * autograd test files. */
    k_set_threads(1);
}
static void teardown(void) { ag_ctx_free(&ctx); }

TestSuite(grad, .init = setup, .fini = teardown);

/* The inputs and constants of one op under test. */
typedef struct {
    dt_tensor *t[6];   /* float inputs (heap, requires_grad); NULL slots allowed */
    dt_tensor *ids[2]; /* int32 constants */
    int64_t i[4];
    float f[4];
    int flag[4];
    dt_tensor *alpha; /* mixture: last alpha_out */
} op_case;

static dt_tensor *param(uint64_t seed, float std, int ndim, const int64_t *shape) {
    dt_tensor *t = gradcheck_param(seed, std, ndim, shape);
    cr_assert_not_null(t);
    return t;
}

static dt_tensor *ids(uint64_t seed, int64_t limit, int ndim, const int64_t *shape) {
    dt_tensor *t = dt_tensor_new(DT_I32, ndim, shape);
    cr_assert_not_null(t);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < t->size; i++)
        dt_i32(t)[i] = (int32_t)dt_rng_below(&rng, (uint64_t)limit);
    return t;
}

static void free_case(op_case *c) {
    for (int i = 0; i < 6; i++)
        dt_tensor_free(c->t[i]);
    for (int i = 0; i < 2; i++)
        dt_tensor_free(c->ids[i]);
}

/* Runs the checker over the listed inputs (indices into c->t); returns the
 * worst error, which the calling test asserts below tol. The checker's report
 * is logged (as an error when the check fails, so the failure says why). */
static double check_inputs(const char *what, gradcheck_build_fn build, op_case *c, const int *which, int n_which,
                           double eps, double tol) {
    dt_tensor *inputs[6];
    for (int i = 0; i < n_which; i++)
        inputs[i] = c->t[which[i]];
    char report[512];
    double error = gradcheck(&ctx, build, c, inputs, n_which, eps, tol, report, sizeof report);
    if (error < tol)
        cr_log_info("%s: %s", what, report);
    else
        cr_log_error("%s: %s", what, report);
    return error;
}

/* Checks every non-NULL float input. */
static double check_all(const char *what, gradcheck_build_fn build, op_case *c) {
    int which[6], n = 0;
    for (int i = 0; i < 6; i++)
        if (c->t[i]) which[n++] = i;
    return check_inputs(what, build, c, which, n, EPS, TOL);
}

/* ---------------- linear ---------------- */

static dt_tensor *build_linear(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_linear(g, c->t[0], c->t[1], c->t[2]);
}

Test(grad, linear_with_bias_3d_input) {
    op_case c = {0};
    c.t[0] = param(1, 1.0f, DT_SHAPE(3, 5, 7)); /* x [B,T,K]: leading dims flatten to 15 rows */
    c.t[1] = param(2, 0.5f, DT_SHAPE(9, 7));    /* weight [N,K] */
    c.t[2] = param(3, 1.0f, DT_SHAPE(9));       /* bias [N] */
    cr_assert(check_all("linear+bias", build_linear, &c) < TOL, "%s: see the logged report", "linear+bias");
    free_case(&c);
}

Test(grad, linear_without_bias) {
    op_case c = {0};
    c.t[0] = param(4, 1.0f, DT_SHAPE(11, 6));
    c.t[1] = param(5, 0.5f, DT_SHAPE(5, 6));
    cr_assert(check_all("linear", build_linear, &c) < TOL, "%s: see the logged report", "linear");
    free_case(&c);
}

/* ---------------- elementwise ---------------- */

static dt_tensor *build_add(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_add(g, c->t[0], c->t[1]);
}
static dt_tensor *build_mul(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_mul(g, c->t[0], c->t[1]);
}
static dt_tensor *build_add_self(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_add(g, c->t[0], c->t[0]);
}
static dt_tensor *build_mul_self(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_mul(g, c->t[0], c->t[0]);
}
static dt_tensor *build_scale(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_scale(g, c->t[0], c->f[0]);
}

Test(grad, add_and_mul) {
    op_case c = {0};
    c.t[0] = param(6, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(7, 1.0f, DT_SHAPE(3, 5, 7));
    cr_assert(check_all("add", build_add, &c) < TOL, "%s: see the logged report", "add");
    cr_assert(check_all("mul", build_mul, &c) < TOL, "%s: see the logged report", "mul");
    free_case(&c);
}

Test(grad, add_and_mul_of_a_tensor_with_itself) {
    op_case c = {0};
    c.t[0] = param(8, 1.0f, DT_SHAPE(5, 3));
    cr_assert(check_all("x + x", build_add_self, &c) < TOL, "%s: see the logged report", "x + x");
    cr_assert(check_all("x * x", build_mul_self, &c) < TOL, "%s: see the logged report", "x * x");
    free_case(&c);
}

Test(grad, scale) {
    op_case c = {0};
    c.t[0] = param(9, 1.0f, DT_SHAPE(7, 3));
    c.f[0] = -1.7f;
    cr_assert(check_all("scale", build_scale, &c) < TOL, "%s: see the logged report", "scale");
    free_case(&c);
}

static dt_tensor *build_add_vec(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_add_vec(g, c->t[0], c->t[1]);
}
static dt_tensor *build_mul_vec(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_mul_vec(g, c->t[0], c->t[1]);
}
static dt_tensor *build_scale_rows(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_scale_rows(g, c->t[0], c->t[1]);
}

Test(grad, vector_broadcasts_and_row_scaling) {
    op_case c = {0};
    c.t[0] = param(10, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(11, 1.0f, DT_SHAPE(7));
    cr_assert(check_all("add_vec", build_add_vec, &c) < TOL, "%s: see the logged report", "add_vec");
    cr_assert(check_all("mul_vec", build_mul_vec, &c) < TOL, "%s: see the logged report", "mul_vec");
    free_case(&c);

    op_case r = {0};
    r.t[0] = param(12, 1.0f, DT_SHAPE(13, 5));
    r.t[1] = param(13, 1.0f, DT_SHAPE(13));
    cr_assert(check_all("scale_rows", build_scale_rows, &r) < TOL, "%s: see the logged report", "scale_rows");
    free_case(&r);
}

static dt_tensor *build_clip(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_clip(g, c->t[0], c->f[0], c->f[1]);
}

Test(grad, clip_passes_gradient_only_inside_the_bounds) {
    op_case c = {0};
    c.t[0] = param(14, 1.0f, DT_SHAPE(5, 9));
    c.f[0] = -0.5f;
    c.f[1] = 0.7f;
    /* Keep every value at least 0.05 from a bound so x +/- eps stays on one side. */
    float *x = dt_f32(c.t[0]);
    int inside = 0, outside = 0;
    for (int64_t i = 0; i < c.t[0]->size; i++) {
        if (fabsf(x[i] - c.f[0]) < 0.05f) x[i] = c.f[0] - 0.1f;
        if (fabsf(x[i] - c.f[1]) < 0.05f) x[i] = c.f[1] + 0.1f;
        if (x[i] >= c.f[0] && x[i] <= c.f[1])
            inside++;
        else
            outside++;
    }
    cr_assert(inside > 5 && outside > 5, "the sample should hit both regions (%d in, %d out)", inside, outside);
    cr_assert(check_all("clip", build_clip, &c) < TOL, "%s: see the logged report", "clip");
    for (int64_t i = 0; i < c.t[0]->size; i++)
        if (x[i] < c.f[0] || x[i] > c.f[1]) cr_assert_eq(c.t[0]->grad[i], 0.0f, "element %lld outside", (long long)i);
    free_case(&c);
}

static dt_tensor *build_logsumexp2(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_logsumexp2(g, c->t[0], c->t[1]);
}

Test(grad, logsumexp2_finite_and_dropped_terms) {
    op_case c = {0};
    c.t[0] = param(15, 2.0f, DT_SHAPE(3, 7));
    c.t[1] = param(16, 2.0f, DT_SHAPE(3, 7));
    /* A few dropped terms: -inf stays -inf under +/- eps, so its numeric gradient is exactly 0. */
    dt_f32(c.t[0])[2] = -INFINITY;
    dt_f32(c.t[1])[9] = -INFINITY;
    dt_f32(c.t[0])[20] = 40.0f; /* a large gap: the other term underflows */
    cr_assert(check_all("logsumexp2", build_logsumexp2, &c) < TOL, "%s: see the logged report", "logsumexp2");
    cr_assert_eq(c.t[0]->grad[2], 0.0f);
    cr_assert_eq(c.t[1]->grad[9], 0.0f);
    free_case(&c);
}

/* ---------------- reductions and shape ---------------- */

static dt_tensor *build_sum(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_sum(g, c->t[0]);
}
static dt_tensor *build_mean(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_mean(g, c->t[0]);
}
/* A nonlinearity after the reduction makes d out / d x depend on the scalar's gradient. */
static dt_tensor *build_mean_squared(ag_ctx *g, void *u) {
    op_case *c = u;
    dt_tensor *m = ag_mean(g, c->t[0]);
    return ag_mul(g, m, m);
}

Test(grad, sum_and_mean) {
    op_case c = {0};
    c.t[0] = param(17, 1.0f, DT_SHAPE(3, 5, 7));
    cr_assert(check_all("sum", build_sum, &c) < TOL, "%s: see the logged report", "sum");
    cr_assert(check_all("mean", build_mean, &c) < TOL, "%s: see the logged report", "mean");
    cr_assert(check_all("mean^2", build_mean_squared, &c) < TOL, "%s: see the logged report", "mean^2");
    free_case(&c);
}

static dt_tensor *build_reshape(ag_ctx *g, void *u) {
    op_case *c = u;
    /* Reshape then an op that mixes positions differently than the original layout. */
    dt_tensor *r = ag_reshape(g, c->t[0], DT_SHAPE(5, 21));
    return ag_mul_vec(g, r, c->t[1]);
}

Test(grad, reshape) {
    op_case c = {0};
    c.t[0] = param(18, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(19, 1.0f, DT_SHAPE(21));
    cr_assert(check_all("reshape", build_reshape, &c) < TOL, "%s: see the logged report", "reshape");
    free_case(&c);
}

static dt_tensor *build_concat(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_concat_last(g, c->t[0], c->t[1]);
}
static dt_tensor *build_slice(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_slice_last(g, c->t[0], c->i[0], c->i[1]);
}

Test(grad, concat_and_slice_last) {
    op_case c = {0};
    c.t[0] = param(20, 1.0f, DT_SHAPE(3, 5, 4));
    c.t[1] = param(21, 1.0f, DT_SHAPE(3, 5, 3));
    cr_assert(check_all("concat_last", build_concat, &c) < TOL, "%s: see the logged report", "concat_last");
    free_case(&c);

    op_case s = {0};
    s.t[0] = param(22, 1.0f, DT_SHAPE(3, 5, 9));
    s.i[0] = 2;
    s.i[1] = 4;
    cr_assert(check_all("slice_last", build_slice, &s) < TOL, "%s: see the logged report", "slice_last");
    /* Columns outside the slice get no gradient. */
    for (int64_t m = 0; m < 15; m++)
        for (int64_t j = 0; j < 9; j++)
            if (j < 2 || j >= 6) cr_assert_eq(s.t[0]->grad[m * 9 + j], 0.0f);
    free_case(&s);
}

/* ---------------- indexing ---------------- */

static dt_tensor *build_embedding(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_embedding(g, c->t[0], c->ids[0]);
}
static dt_tensor *build_gather_rows(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_gather_rows(g, c->t[0], c->ids[0]);
}
static dt_tensor *build_scatter_add_rows(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_scatter_add_rows(g, c->t[0], c->ids[0], c->i[0]);
}
static dt_tensor *build_gather_cols(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_gather_cols(g, c->t[0], c->ids[0]);
}

Test(grad, embedding_with_repeated_tokens) {
    op_case c = {0};
    c.t[0] = param(23, 1.0f, DT_SHAPE(11, 6));
    c.ids[0] = ids(24, 5, DT_SHAPE(3, 5)); /* ids < 5 of V = 11: repeats, and rows that get no gradient */
    cr_assert(check_all("embedding", build_embedding, &c) < TOL, "%s: see the logged report", "embedding");
    for (int64_t i = 5 * 6; i < 11 * 6; i++)
        cr_assert_eq(c.t[0]->grad[i], 0.0f, "unused row got gradient");
    free_case(&c);
}

Test(grad, gather_scatter_rows_and_gather_cols) {
    op_case c = {0};
    c.t[0] = param(25, 1.0f, DT_SHAPE(8, 5));
    c.ids[0] = ids(26, 8, DT_SHAPE(11));
    cr_assert(check_all("gather_rows", build_gather_rows, &c) < TOL, "%s: see the logged report", "gather_rows");
    free_case(&c);

    op_case s = {0};
    s.t[0] = param(27, 1.0f, DT_SHAPE(11, 5));
    s.ids[0] = ids(28, 8, DT_SHAPE(11));
    s.i[0] = 8;
    cr_assert(check_all("scatter_add_rows", build_scatter_add_rows, &s) < TOL, "%s: see the logged report",
              "scatter_add_rows");
    free_case(&s);

    op_case k = {0};
    k.t[0] = param(29, 1.0f, DT_SHAPE(7, 9));
    k.ids[0] = ids(30, 9, DT_SHAPE(7, 3));
    cr_assert(check_all("gather_cols", build_gather_cols, &k) < TOL, "%s: see the logged report", "gather_cols");
    free_case(&k);
}

/* ---------------- norms and activations ---------------- */

static dt_tensor *build_layernorm(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_layernorm(g, c->t[0], c->t[1], c->t[2], 1e-5f);
}
static dt_tensor *build_rmsnorm(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_rmsnorm(g, c->t[0], c->t[1], 1e-5f);
}

Test(grad, layernorm_with_and_without_bias) {
    op_case c = {0};
    c.t[0] = param(31, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(32, 1.0f, DT_SHAPE(7));
    c.t[2] = param(33, 1.0f, DT_SHAPE(7));
    cr_assert(check_all("layernorm+bias", build_layernorm, &c) < TOL, "%s: see the logged report", "layernorm+bias");
    dt_tensor_free(c.t[2]);
    c.t[2] = NULL;
    cr_assert(check_all("layernorm", build_layernorm, &c) < TOL, "%s: see the logged report", "layernorm");
    free_case(&c);
}

Test(grad, rmsnorm) {
    op_case c = {0};
    c.t[0] = param(34, 1.0f, DT_SHAPE(3, 5, 7));
    c.t[1] = param(35, 1.0f, DT_SHAPE(7));
    cr_assert(check_all("rmsnorm", build_rmsnorm, &c) < TOL, "%s: see the logged report", "rmsnorm");
    free_case(&c);
}

static dt_tensor *build_gelu(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_gelu(g, c->t[0]);
}
static dt_tensor *build_silu(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_silu(g, c->t[0]);
}
static dt_tensor *build_swiglu(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_swiglu(g, c->t[0], c->t[1]);
}
static dt_tensor *build_softmax(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_softmax(g, c->t[0]);
}
static dt_tensor *build_log_softmax(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_log_softmax(g, c->t[0]);
}

Test(grad, gelu_silu_swiglu) {
    op_case c = {0};
    c.t[0] = param(36, 2.0f, DT_SHAPE(5, 7));
    cr_assert(check_all("gelu", build_gelu, &c) < TOL, "%s: see the logged report", "gelu");
    cr_assert(check_all("silu", build_silu, &c) < TOL, "%s: see the logged report", "silu");
    c.t[1] = param(37, 1.0f, DT_SHAPE(5, 7));
    cr_assert(check_all("swiglu", build_swiglu, &c) < TOL, "%s: see the logged report", "swiglu");
    free_case(&c);
}

Test(grad, softmax_and_log_softmax) {
    op_case c = {0};
    c.t[0] = param(38, 2.0f, DT_SHAPE(3, 5, 9));
    cr_assert(check_all("softmax", build_softmax, &c) < TOL, "%s: see the logged report", "softmax");
    cr_assert(check_all("log_softmax", build_log_softmax, &c) < TOL, "%s: see the logged report", "log_softmax");
    free_case(&c);
}

/* ---------------- rope and attention ---------------- */

static dt_tensor *build_rope(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_rope(g, c->t[0], c->i[0], 10000.0);
}

Test(grad, rope) {
    op_case c = {0};
    c.t[0] = param(39, 1.0f, DT_SHAPE(2, 5, 3 * 6)); /* 3 heads of width 6 */
    c.i[0] = 3;
    cr_assert(check_all("rope", build_rope, &c) < TOL, "%s: see the logged report", "rope");
    free_case(&c);
}

static dt_tensor *build_attention(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_attention(g, c->t[0], c->t[1], c->t[2], c->i[0], c->i[1]);
}
/* With ALiBi's score bias (SPEC §6.4), slopes c->f[0..H-1]. */
static dt_tensor *build_attention_biased(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_attention_biased(g, c->t[0], c->t[1], c->t[2], c->i[0], c->i[1], c->f);
}

/* The attention gradient check of one head layout (with slopes [H <= 4]: the
 * biased op); returns the worst error. */
static double check_attention_slopes(const char *what, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                                     uint64_t seed, const float *slopes) {
    op_case c = {0};
    if (slopes) memcpy(c.f, slopes, (size_t)H * sizeof(float));
    c.t[0] = param(seed, 1.0f, DT_SHAPE(B, T, H * hd));
    c.t[1] = param(seed + 1, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    c.t[2] = param(seed + 2, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    c.i[0] = H;
    c.i[1] = Hkv;
    double error = check_all(what, slopes ? build_attention_biased : build_attention, &c);
    free_case(&c);
    return error;
}
static double check_attention(const char *what, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                              uint64_t seed) {
    return check_attention_slopes(what, B, T, H, Hkv, hd, seed, NULL);
}

Test(grad, attention_gqa_mha_mqa) {
    cr_assert(check_attention("attention GQA H=4 Hkv=2", 2, 7, 4, 2, 6, 40) < TOL, "%s: see the logged report",
              "attention GQA H=4 Hkv=2");
    cr_assert(check_attention("attention MHA H=3", 1, 5, 3, 3, 5, 50) < TOL, "%s: see the logged report",
              "attention MHA H=3");
    cr_assert(check_attention("attention MQA H=3 Hkv=1", 2, 3, 3, 1, 4, 60) < TOL, "%s: see the logged report",
              "attention MQA H=3 Hkv=1");
}

Test(grad, attention_longer_than_one_tile) {
    /* T = 70 crosses the kernel's 64-query tile; check a sample of elements. */
    op_case c = {0};
    int64_t B = 1, T = 70, H = 2, Hkv = 1, hd = 4;
    c.t[0] = param(70, 1.0f, DT_SHAPE(B, T, H * hd));
    c.t[1] = param(71, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    c.t[2] = param(72, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    c.i[0] = H;
    c.i[1] = Hkv;
    gradcheck_options options = gradcheck_defaults();
    options.max_checks_per_input = 120;
    char report[512];
    double error = gradcheck_ex(&ctx, build_attention, &c, c.t, 3, &options, NULL, report, sizeof report);
    cr_assert(error < TOL, "attention T=70: %s", report);
    free_case(&c);
}

/* ALiBi's score bias (SPEC §6.4): the bias is a constant, so the gradients
 * are the unbiased formulas at the biased probabilities; steep slopes make
 * the bias dominate some scores. The cross form (the decode branch's: q from
 * x2, k and v from x1) goes through projections. */
static dt_tensor *build_cross_attention_biased(ag_ctx *g, void *u) {
    op_case *c = u;
    dt_tensor *q = ag_linear(g, c->t[4], c->t[1], NULL);
    dt_tensor *k = ag_linear(g, c->t[0], c->t[2], NULL);
    dt_tensor *v = ag_linear(g, c->t[0], c->t[3], NULL);
    return ag_attention_biased(g, q, k, v, c->i[0], c->i[1], c->f);
}

Test(grad, attention_alibi_bias) {
    const float slopes[4] = {1.5f, 0.5f, 0.25f, 2.0f / 16.0f}; /* query heads 0-3, two per kv head */
    cr_assert(check_attention_slopes("attention alibi GQA", 2, 7, 4, 2, 6, 90, slopes) < TOL,
              "%s: see the logged report", "attention alibi GQA");
    cr_assert(check_attention_slopes("attention alibi MQA", 1, 9, 3, 1, 5, 93, slopes) < TOL,
              "%s: see the logged report", "attention alibi MQA");
    op_case x = {0};
    memcpy(x.f, slopes, sizeof slopes);
    x.t[0] = param(96, 1.0f, DT_SHAPE(2, 5, 8));
    x.t[1] = param(97, 0.4f, DT_SHAPE(4 * 2, 8));
    x.t[2] = param(98, 0.4f, DT_SHAPE(2 * 2, 8));
    x.t[3] = param(99, 0.4f, DT_SHAPE(2 * 2, 8));
    x.t[4] = param(100, 1.0f, DT_SHAPE(2, 5, 8));
    x.i[0] = 4;
    x.i[1] = 2;
    int cross_inputs[] = {0, 1, 2, 3, 4};
    cr_assert(check_inputs("cross attention alibi", build_cross_attention_biased, &x, cross_inputs, 5, EPS, TOL) < TOL,
              "%s: see the logged report", "cross attention alibi");
    free_case(&x);
}

/* The self form as a model uses it: q, k, v projected from one x, RoPE on q and k. */
static dt_tensor *build_self_attention(ag_ctx *g, void *u) {
    op_case *c = u;
    dt_tensor *x = c->t[0];
    dt_tensor *q = ag_rope(g, ag_linear(g, x, c->t[1], NULL), c->i[0], 10000.0);
    dt_tensor *k = ag_rope(g, ag_linear(g, x, c->t[2], NULL), c->i[1], 10000.0);
    dt_tensor *v = ag_linear(g, x, c->t[3], NULL);
    return ag_attention(g, q, k, v, c->i[0], c->i[1]);
}

/* The cross form of the decode branch: q from the branch path x2, k and v from the primary path x1. */
static dt_tensor *build_cross_attention(ag_ctx *g, void *u) {
    op_case *c = u;
    dt_tensor *q = ag_linear(g, c->t[4], c->t[1], NULL);
    dt_tensor *k = ag_linear(g, c->t[0], c->t[2], NULL);
    dt_tensor *v = ag_linear(g, c->t[0], c->t[3], NULL);
    return ag_attention(g, q, k, v, c->i[0], c->i[1]);
}

Test(grad, attention_self_and_cross_forms_through_projections) {
    op_case c = {0};
    int64_t B = 2, T = 5, C = 8, H = 4, Hkv = 2, hd = 2;
    c.t[0] = param(80, 1.0f, DT_SHAPE(B, T, C));     /* x (primary) */
    c.t[1] = param(81, 0.4f, DT_SHAPE(H * hd, C));   /* wq */
    c.t[2] = param(82, 0.4f, DT_SHAPE(Hkv * hd, C)); /* wk */
    c.t[3] = param(83, 0.4f, DT_SHAPE(Hkv * hd, C)); /* wv */
    c.i[0] = H;
    c.i[1] = Hkv;
    int self_inputs[] = {0, 1, 2, 3};
    cr_assert(check_inputs("self attention", build_self_attention, &c, self_inputs, 4, EPS, TOL) < TOL,
              "%s: see the logged report", "self attention");
    c.t[4] = param(84, 1.0f, DT_SHAPE(B, T, C)); /* x2 (branch) */
    int cross_inputs[] = {0, 1, 2, 3, 4};
    cr_assert(check_inputs("cross attention", build_cross_attention, &c, cross_inputs, 5, EPS, TOL) < TOL,
              "%s: see the logged report", "cross attention");
    free_case(&c);
}

/* ---------------- losses ---------------- */

static dt_tensor *build_cross_entropy(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_cross_entropy(g, c->t[0], c->ids[0]);
}

Test(grad, cross_entropy) {
    op_case c = {0};
    c.t[0] = param(90, 2.0f, DT_SHAPE(3, 5, 9));
    c.ids[0] = ids(91, 9, DT_SHAPE(3, 5));
    cr_assert(check_all("cross_entropy", build_cross_entropy, &c) < TOL, "%s: see the logged report", "cross_entropy");
    free_case(&c);
}

static dt_tensor *build_mixture(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_mixture_nll(g, c->t[0], c->t[1], c->ids[0], c->f[0], c->f[1], c->flag[0], c->flag[1], &c->alpha);
}

/* logits_p rows with a spread of peakedness so sum p^2 covers (0, 1): row m is
 * scaled by 0.3 + 0.45 m. */
static op_case mixture_case(uint64_t seed, int64_t M, int64_t V) {
    op_case c = {0};
    c.t[0] = param(seed, 1.0f, DT_SHAPE(M, V));
    c.t[1] = param(seed + 1, 1.5f, DT_SHAPE(M, V));
    c.ids[0] = ids(seed + 2, V, DT_SHAPE(M));
    for (int64_t m = 0; m < M; m++)
        for (int64_t v = 0; v < V; v++)
            dt_f32(c.t[0])[m * V + v] *= 0.3f + 0.45f * (float)m;
    return c;
}

/* sum_v p(v)^2 of row m, in double. */
static double collision(const dt_tensor *logits, int64_t m) {
    int64_t V = dt_cols(logits);
    const float *x = dt_f32(logits) + m * V;
    double mx = -INFINITY, z = 0.0, s = 0.0;
    for (int64_t v = 0; v < V; v++)
        mx = fmax(mx, x[v]);
    for (int64_t v = 0; v < V; v++)
        z += exp(x[v] - mx);
    for (int64_t v = 0; v < V; v++)
        s += exp(2 * (x[v] - mx)) / (z * z);
    return s;
}

/* Sharpens (scales up) any logits_p row whose S lies within 0.03 of a clip
 * bound, so x +/- eps never crosses the kink; S grows with the scale. */
static void keep_rows_off_bounds(dt_tensor *logits_p, float lo, float hi) {
    int64_t M = dt_rows(logits_p), V = dt_cols(logits_p);
    for (int64_t m = 0; m < M; m++)
        for (int tries = 0; tries < 50; tries++) {
            double s = collision(logits_p, m);
            if (fabs(s - lo) > 0.03 && fabs(s - hi) > 0.03) break;
            for (int64_t v = 0; v < V; v++)
                dt_f32(logits_p)[m * V + v] *= 1.15f;
        }
}

Test(grad, mixture_adaptive_alpha) {
    int64_t M = 9, V = 7;
    op_case c = mixture_case(100, M, V);
    c.f[0] = 0.3f;
    c.f[1] = 0.8f;
    keep_rows_off_bounds(c.t[0], c.f[0], c.f[1]);
    /* Both regimes (clipped and inside), and no row within reach of a kink. */
    int clipped = 0, inside = 0;
    for (int64_t m = 0; m < M; m++) {
        double s = collision(c.t[0], m);
        cr_assert(fabs(s - c.f[0]) > 0.02 && fabs(s - c.f[1]) > 0.02, "row %lld: S = %.4f too near a bound",
                  (long long)m, s);
        if (s > c.f[0] && s < c.f[1])
            inside++;
        else
            clipped++;
    }
    cr_assert(inside >= 2 && clipped >= 2, "%d rows inside, %d clipped", inside, clipped);
    cr_assert(check_all("mixture adaptive", build_mixture, &c) < TOL, "%s: see the logged report", "mixture adaptive");
    free_case(&c);
}

Test(grad, mixture_default_bounds) {
    op_case c = mixture_case(110, 9, 7);
    c.f[0] = 0.5f;
    c.f[1] = 1.0f;
    keep_rows_off_bounds(c.t[0], c.f[0], c.f[1]);
    int inside = 0;
    for (int64_t m = 0; m < 9; m++) {
        double s = collision(c.t[0], m);
        cr_assert(fabs(s - 0.5) > 0.02, "row %lld too near the bound", (long long)m);
        inside += s > 0.5;
    }
    cr_assert(inside >= 2, "only %d rows with alpha above 0.5", inside);
    cr_assert(check_all("mixture 0.5..1", build_mixture, &c) < TOL, "%s: see the logged report", "mixture 0.5..1");
    free_case(&c);
}

Test(grad, mixture_fixed_alpha_and_single_readouts) {
    op_case c = mixture_case(120, 5, 11);
    c.f[0] = c.f[1] = 0.5f;
    cr_assert(check_all("mixture fixed 0.5", build_mixture, &c) < TOL, "%s: see the logged report",
              "mixture fixed 0.5");
    for (int64_t m = 0; m < 5; m++)
        cr_assert_eq(dt_f32(c.alpha)[m], 0.5f);

    c.f[0] = c.f[1] = 0.0f; /* branch-only readout: the primary's term is dropped */
    cr_assert(check_all("mixture 0/0", build_mixture, &c) < TOL, "%s: see the logged report", "mixture 0/0");
    for (int64_t i = 0; i < c.t[0]->size; i++)
        cr_assert_eq(c.t[0]->grad[i], 0.0f, "0/0: no gradient to logits_p");

    c.f[0] = c.f[1] = 1.0f; /* primary-only readout */
    cr_assert(check_all("mixture 1/1", build_mixture, &c) < TOL, "%s: see the logged report", "mixture 1/1");
    for (int64_t i = 0; i < c.t[1]->size; i++)
        cr_assert_eq(c.t[1]->grad[i], 0.0f, "1/1: no gradient to logits_q");
    free_case(&c);
}

Test(grad, mixture_detach_primary) {
    op_case c = mixture_case(130, 9, 7);
    c.f[0] = 0.3f;
    c.f[1] = 0.8f;
    c.flag[0] = 1; /* detach_primary */
    keep_rows_off_bounds(c.t[0], c.f[0], c.f[1]);
    int q_only[] = {1};
    cr_assert(check_inputs("mixture detach_primary (logits_q)", build_mixture, &c, q_only, 1, EPS, TOL) < TOL,
              "%s: see the logged report", "mixture detach_primary (logits_q)");
    /* logits_p requires a gradient but this op must send it none. */
    memset(c.t[0]->grad, 0, (size_t)c.t[0]->size * sizeof(float));
    ag_reset(&ctx);
    dt_tensor *nll = build_mixture(&ctx, &c);
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, nll)), DT_OK, "%s", dt_error_message());
    for (int64_t i = 0; i < c.t[0]->size; i++)
        cr_assert_eq(c.t[0]->grad[i], 0.0f);
    free_case(&c);
}

/* -log(alpha p_y + (1 - alpha) q_y) of one row in double, alpha given. */
static double mixture_row_nll(const double *lp, const double *lq, int64_t V, int32_t y, double alpha) {
    double mp = -INFINITY, mq = -INFINITY, zp = 0.0, zq = 0.0;
    for (int64_t v = 0; v < V; v++) {
        mp = fmax(mp, lp[v]);
        mq = fmax(mq, lq[v]);
    }
    for (int64_t v = 0; v < V; v++) {
        zp += exp(lp[v] - mp);
        zq += exp(lq[v] - mq);
    }
    double py = exp(lp[y] - mp) / zp, qy = exp(lq[y] - mq) / zq;
    return -log(alpha * py + (1.0 - alpha) * qy);
}

Test(grad, mixture_alpha_detach_matches_frozen_alpha_derivative) {
    /* With alpha_detach the gradient to logits_p is the derivative with alpha
     * held at its forward value: compare against double-precision central
     * differences of exactly that function. */
    int64_t M = 6, V = 7;
    op_case c = mixture_case(140, M, V);
    c.f[0] = 0.3f;
    c.f[1] = 0.8f;
    c.flag[1] = 1; /* alpha_detach */
    keep_rows_off_bounds(c.t[0], c.f[0], c.f[1]);
    int q_only[] = {1};
    cr_assert(check_inputs("mixture alpha_detach (logits_q)", build_mixture, &c, q_only, 1, EPS, TOL) < TOL,
              "%s: see the logged report", "mixture alpha_detach (logits_q)");

    memset(c.t[0]->grad, 0, (size_t)c.t[0]->size * sizeof(float));
    ag_reset(&ctx);
    dt_tensor *nll = build_mixture(&ctx, &c);
    cr_assert_not_null(nll);
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, nll)), DT_OK, "%s", dt_error_message());
    int inside = 0;
    double worst = 0.0, scale = 0.0;
    for (int64_t m = 0; m < M; m++) {
        double s = collision(c.t[0], m), alpha = fmin(fmax(s, c.f[0]), c.f[1]);
        inside += s > c.f[0] && s < c.f[1];
        cr_assert(fabs(dt_f32(c.alpha)[m] - alpha) < 1e-6, "alpha row %lld", (long long)m);
        const float *lp = dt_f32(c.t[0]) + m * V, *lq = dt_f32(c.t[1]) + m * V;
        int32_t y = dt_i32(c.ids[0])[m];
        double row_p[64], row_q[64];
        for (int64_t j = 0; j < V; j++)
            row_q[j] = lq[j];
        for (int64_t v = 0; v < V; v++) {
            const double h = 1e-5;
            for (int64_t j = 0; j < V; j++)
                row_p[j] = lp[j];
            row_p[v] = lp[v] + h;
            double up = mixture_row_nll(row_p, row_q, V, y, alpha);
            row_p[v] = lp[v] - h;
            double down = mixture_row_nll(row_p, row_q, V, y, alpha);
            double expected = (up - down) / (2 * h), got = c.t[0]->grad[m * V + v];
            worst = fmax(worst, fabs(got - expected));
            scale = fmax(scale, fabs(expected));
        }
    }
    cr_assert_geq(inside, 2, "alpha_detach only matters where alpha is not clipped");
    cr_assert(worst < 1e-4 * fmax(scale, 1.0), "alpha_detach gradient off by %.3g (scale %.3g)", worst, scale);
    free_case(&c);
}

static dt_tensor *build_moe_balance(ag_ctx *g, void *u) {
    op_case *c = u;
    return ag_moe_balance(g, c->t[0], c->f);
}

Test(grad, moe_balance) {
    op_case c = {0};
    c.t[0] = param(150, 1.5f, DT_SHAPE(11, 4)); /* router logits [N, E] */
    c.f[0] = 0.1f;
    c.f[1] = 0.4f;
    c.f[2] = 0.15f;
    c.f[3] = 0.35f;
    cr_assert(check_all("moe_balance", build_moe_balance, &c) < TOL, "%s: see the logged report", "moe_balance");
    free_case(&c);
}
