/* Forward values of the ops against naive double-precision loops written
 * from the SPEC formulas: checks the glue (argument order, flattening, GQA
 * head mapping, positions, row layout) as well as the op-local code that is
 * not a kernel (clip, logsumexp2, concat/slice, gather_cols, reductions, the
 * balance term). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "support/gradcheck.h"

static ag_ctx ctx;

static void setup(void) { cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK); }
static void teardown(void) { ag_ctx_free(&ctx); }

TestSuite(forward, .init = setup, .fini = teardown);

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

/* |got - expected| <= tol * max(1, max |expected|) elementwise. */
static void expect_close(const char *what, const dt_tensor *got, const double *expected, int64_t n, double tol) {
    cr_assert_not_null(got, "%s: %s", what, dt_error_message());
    cr_assert_eq(got->size, n, "%s: %lld elements, expected %lld", what, (long long)got->size, (long long)n);
    double scale = 1.0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(expected[i]));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(dt_f32(got)[i] - expected[i]) <= tol * scale, "%s[%lld] = %.7g, expected %.7g", what,
                  (long long)i, (double)dt_f32(got)[i], expected[i]);
}

Test(forward, linear_flattens_leading_dims) {
    int64_t B = 2, T = 3, K = 5, N = 7;
    dt_tensor *x = param(1, 1.0f, DT_SHAPE(B, T, K)), *w = param(2, 1.0f, DT_SHAPE(N, K)),
              *b = param(3, 1.0f, DT_SHAPE(N));
    dt_tensor *y = ag_linear(&ctx, x, w, b);
    cr_assert_not_null(y);
    cr_assert(y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == N);
    double expected[2 * 3 * 7];
    for (int64_t m = 0; m < B * T; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = dt_f32(b)[n];
            for (int64_t k = 0; k < K; k++)
                s += (double)dt_f32(x)[m * K + k] * dt_f32(w)[n * K + k];
            expected[m * N + n] = s;
        }
    expect_close("linear", y, expected, B * T * N, 1e-5);
    dt_tensor_free(x);
    dt_tensor_free(w);
    dt_tensor_free(b);
}

/* Causal GQA attention in double, straight from SPEC §1. */
static void naive_attention(double *out, const float *q, const float *k, const float *v, int64_t B, int64_t T,
                            int64_t H, int64_t Hkv, int64_t hd) {
    double scores[128];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t kv = h / (H / Hkv);
            for (int64_t t = 0; t < T; t++) {
                const float *qt = q + (b * T + t) * H * hd + h * hd;
                double mx = -INFINITY, z = 0.0;
                for (int64_t s = 0; s <= t; s++) {
                    const float *ks = k + (b * T + s) * Hkv * hd + kv * hd;
                    double dot = 0.0;
                    for (int64_t d = 0; d < hd; d++)
                        dot += (double)qt[d] * ks[d];
                    scores[s] = dot / sqrt((double)hd);
                    mx = fmax(mx, scores[s]);
                }
                for (int64_t s = 0; s <= t; s++)
                    z += exp(scores[s] - mx);
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int64_t s = 0; s <= t; s++)
                        acc += exp(scores[s] - mx) / z * v[(b * T + s) * Hkv * hd + kv * hd + d];
                    out[(b * T + t) * H * hd + h * hd + d] = acc;
                }
            }
        }
}

Test(forward, attention_gqa_matches_naive_causal_softmax) {
    int64_t B = 2, T = 9, H = 6, Hkv = 2, hd = 5;
    dt_tensor *q = param(4, 1.0f, DT_SHAPE(B, T, H * hd));
    dt_tensor *k = param(5, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    dt_tensor *v = param(6, 1.0f, DT_SHAPE(B, T, Hkv * hd));
    static double expected[2 * 9 * 6 * 5];
    naive_attention(expected, dt_f32(q), dt_f32(k), dt_f32(v), B, T, H, Hkv, hd);
    expect_close("attention", ag_attention(&ctx, q, k, v, H, Hkv), expected, B * T * H * hd, 1e-5);
    dt_tensor_free(q);
    dt_tensor_free(k);
    dt_tensor_free(v);
}

Test(forward, rope_rotates_interleaved_pairs_out_of_place) {
    int64_t B = 2, T = 6, H = 2, hd = 8;
    double theta = 10000.0;
    dt_tensor *x = param(7, 1.0f, DT_SHAPE(B, T, H * hd));
    float before[2 * 6 * 16];
    memcpy(before, x->data, sizeof before);
    dt_tensor *y = ag_rope(&ctx, x, H, theta);
    cr_assert_eq(memcmp(before, x->data, sizeof before), 0, "rope must not modify its input");
    double expected[2 * 6 * 16];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < hd / 2; j++) {
                    int64_t i = (b * T + t) * H * hd + h * hd + 2 * j;
                    double angle = (double)t * pow(theta, -2.0 * (double)j / (double)hd);
                    double x0 = before[i], x1 = before[i + 1];
                    expected[i] = x0 * cos(angle) - x1 * sin(angle);
                    expected[i + 1] = x0 * sin(angle) + x1 * cos(angle);
                }
    expect_close("rope", y, expected, B * T * H * hd, 1e-5);
    dt_tensor_free(x);
}

Test(forward, norms_and_activations) {
    int64_t M = 5, C = 7;
    dt_tensor *x = param(8, 2.0f, DT_SHAPE(M, C)), *w = param(9, 1.0f, DT_SHAPE(C)), *b = param(10, 1.0f, DT_SHAPE(C));
    dt_tensor *u = param(11, 1.0f, DT_SHAPE(M, C));
    double ln[35], ln_nobias[35], rms[35], gelu[35], silu[35], swiglu[35], sm[35], lsm[35];
    const float *xv = dt_f32(x);
    for (int64_t m = 0; m < M; m++) {
        double mean = 0.0, var = 0.0, sq = 0.0, mx = -INFINITY, z = 0.0;
        for (int64_t c = 0; c < C; c++)
            mean += xv[m * C + c] / (double)C;
        for (int64_t c = 0; c < C; c++) {
            double d = xv[m * C + c] - mean;
            var += d * d / (double)C;
            sq += (double)xv[m * C + c] * xv[m * C + c] / (double)C;
            mx = fmax(mx, xv[m * C + c]);
        }
        for (int64_t c = 0; c < C; c++)
            z += exp(xv[m * C + c] - mx);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = m * C + c;
            double xi = xv[i];
            ln_nobias[i] = (xi - mean) / sqrt(var + 1e-5) * dt_f32(w)[c];
            ln[i] = ln_nobias[i] + dt_f32(b)[c];
            rms[i] = xi / sqrt(sq + 1e-5) * dt_f32(w)[c];
            gelu[i] = 0.5 * xi * (1.0 + tanh(sqrt(2.0 / M_PI) * (xi + 0.044715 * xi * xi * xi)));
            silu[i] = xi / (1.0 + exp(-xi));
            swiglu[i] = silu[i] * dt_f32(u)[i];
            sm[i] = exp(xi - mx) / z;
            lsm[i] = xi - mx - log(z);
        }
    }
    expect_close("layernorm", ag_layernorm(&ctx, x, w, b, 1e-5f), ln, M * C, 2e-5);
    expect_close("layernorm without bias", ag_layernorm(&ctx, x, w, NULL, 1e-5f), ln_nobias, M * C, 2e-5);
    expect_close("rmsnorm", ag_rmsnorm(&ctx, x, w, 1e-5f), rms, M * C, 2e-5);
    expect_close("gelu", ag_gelu(&ctx, x), gelu, M * C, 2e-6);
    expect_close("silu", ag_silu(&ctx, x), silu, M * C, 2e-6);
    expect_close("swiglu", ag_swiglu(&ctx, x, u), swiglu, M * C, 2e-6);
    expect_close("softmax", ag_softmax(&ctx, x), sm, M * C, 2e-6);
    expect_close("log_softmax", ag_log_softmax(&ctx, x), lsm, M * C, 2e-6);
    dt_tensor_free(x);
    dt_tensor_free(w);
    dt_tensor_free(b);
    dt_tensor_free(u);
}

Test(forward, elementwise_reductions_and_shapes) {
    dt_tensor *a = param(12, 1.0f, DT_SHAPE(3, 4)), *b = param(13, 1.0f, DT_SHAPE(3, 2));
    dt_tensor *v = param(14, 1.0f, DT_SHAPE(4)), *s = param(15, 1.0f, DT_SHAPE(3));
    const float *av = dt_f32(a), *bv = dt_f32(b);
    double cat[18], sl[6], clip[12], addv[12], mulv[12], rows[12], scaled[12], total = 0.0;
    for (int m = 0; m < 3; m++) {
        for (int c = 0; c < 4; c++) {
            int i = m * 4 + c;
            cat[m * 6 + c] = av[i];
            clip[i] = fmin(fmax(av[i], (double)-0.3f), (double)0.4f);
            addv[i] = (double)av[i] + dt_f32(v)[c];
            mulv[i] = (double)av[i] * dt_f32(v)[c];
            rows[i] = (double)av[i] * dt_f32(s)[m];
            scaled[i] = -2.5 * av[i];
            total += av[i];
        }
        for (int c = 0; c < 2; c++)
            cat[m * 6 + 4 + c] = bv[m * 2 + c];
        for (int c = 0; c < 2; c++)
            sl[m * 2 + c] = av[m * 4 + 1 + c];
    }
    expect_close("concat_last", ag_concat_last(&ctx, a, b), cat, 18, 0.0);
    expect_close("slice_last", ag_slice_last(&ctx, a, 1, 2), sl, 6, 0.0);
    expect_close("clip", ag_clip(&ctx, a, -0.3f, 0.4f), clip, 12, 0.0);
    expect_close("add_vec", ag_add_vec(&ctx, a, v), addv, 12, 1e-7);
    expect_close("mul_vec", ag_mul_vec(&ctx, a, v), mulv, 12, 1e-7);
    expect_close("scale_rows", ag_scale_rows(&ctx, a, s), rows, 12, 1e-7);
    expect_close("scale", ag_scale(&ctx, a, -2.5f), scaled, 12, 1e-7);
    expect_close("sum", ag_sum(&ctx, a), &total, 1, 1e-6);
    double mean = total / 12.0;
    expect_close("mean", ag_mean(&ctx, a), &mean, 1, 1e-6);
    dt_tensor_free(a);
    dt_tensor_free(b);
    dt_tensor_free(v);
    dt_tensor_free(s);
}

Test(forward, logsumexp2_is_stable_and_handles_dropped_terms) {
    dt_tensor *a = dt_tensor_new(DT_F32, DT_SHAPE(6)), *b = dt_tensor_new(DT_F32, DT_SHAPE(6));
    const float av[6] = {0.0f, 1000.0f, -1000.0f, -INFINITY, 2.0f, -INFINITY};
    const float bv[6] = {0.0f, 999.0f, -1001.0f, 3.0f, -INFINITY, -INFINITY};
    memcpy(a->data, av, sizeof av);
    memcpy(b->data, bv, sizeof bv);
    a->requires_grad = b->requires_grad = 1;
    dt_tensor *y = ag_logsumexp2(&ctx, a, b);
    cr_assert_not_null(y);
    const double expected[5] = {log(2.0), 1000.0 + log1p(exp(-1.0)), -1000.0 + log1p(exp(-1.0)), 3.0, 2.0};
    for (int i = 0; i < 5; i++)
        cr_assert(fabs(dt_f32(y)[i] - expected[i]) <= 1e-6 * fmax(1.0, fabs(expected[i])), "element %d: %.9g vs %.9g",
                  i, (double)dt_f32(y)[i], expected[i]);
    cr_assert(isinf(dt_f32(y)[5]) && dt_f32(y)[5] < 0, "both dropped: -inf");
    /* Backward through a clip that maps -inf to a constant: gradients finite, softmax weights. */
    dt_tensor *loss = ag_sum(&ctx, ag_clip(&ctx, y, -1e30f, 1e30f));
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
    const double grad_a[6] = {0.5, 1.0 / (1.0 + exp(-1.0)), 1.0 / (1.0 + exp(-1.0)), 0.0, 1.0, 0.0};
    for (int i = 0; i < 6; i++) {
        cr_assert(isfinite(a->grad[i]) && isfinite(b->grad[i]), "element %d: NaN/inf gradient", i);
        cr_assert(fabs(a->grad[i] - grad_a[i]) < 1e-6, "d a[%d] = %.9g, expected %.9g", i, (double)a->grad[i],
                  grad_a[i]);
        double grad_b = i == 5 ? 0.0 : 1.0 - grad_a[i];
        cr_assert(fabs(b->grad[i] - grad_b) < 1e-6, "d b[%d] = %.9g, expected %.9g", i, (double)b->grad[i], grad_b);
    }
    dt_tensor_free(a);
    dt_tensor_free(b);
}

Test(forward, indexing) {
    dt_tensor *w = param(16, 1.0f, DT_SHAPE(9, 3));
    dt_tensor *tok = ids(17, 9, DT_SHAPE(2, 4));
    dt_tensor *e = ag_embedding(&ctx, w, tok);
    cr_assert_not_null(e);
    cr_assert(e->ndim == 3 && e->shape[0] == 2 && e->shape[1] == 4 && e->shape[2] == 3);
    double expected[8 * 3];
    for (int n = 0; n < 8; n++)
        for (int c = 0; c < 3; c++)
            expected[n * 3 + c] = dt_f32(w)[dt_i32(tok)[n] * 3 + c];
    expect_close("embedding", e, expected, 24, 0.0);
    expect_close("gather_rows", ag_gather_rows(&ctx, w, ag_reshape(&ctx, tok, DT_SHAPE(8))), expected, 24, 0.0);

    dt_tensor *src = param(18, 1.0f, DT_SHAPE(8, 3));
    double scattered[5 * 3] = {0};
    dt_tensor *to = ids(19, 5, DT_SHAPE(8));
    for (int m = 0; m < 8; m++)
        for (int c = 0; c < 3; c++)
            scattered[dt_i32(to)[m] * 3 + c] += dt_f32(src)[m * 3 + c];
    expect_close("scatter_add_rows", ag_scatter_add_rows(&ctx, src, to, 5), scattered, 15, 1e-6);

    dt_tensor *cols = ids(20, 3, DT_SHAPE(8, 2));
    double picked[16];
    for (int m = 0; m < 8; m++)
        for (int j = 0; j < 2; j++)
            picked[m * 2 + j] = dt_f32(src)[m * 3 + dt_i32(cols)[m * 2 + j]];
    expect_close("gather_cols", ag_gather_cols(&ctx, src, cols), picked, 16, 0.0);
    dt_tensor *all[] = {w, tok, src, to, cols};
    for (int i = 0; i < 5; i++)
        dt_tensor_free(all[i]);
}

/* log softmax(x)[y] of one row, in double. */
static double log_prob(const float *x, int64_t V, int32_t y) {
    double mx = -INFINITY, z = 0.0;
    for (int64_t v = 0; v < V; v++)
        mx = fmax(mx, x[v]);
    for (int64_t v = 0; v < V; v++)
        z += exp(x[v] - mx);
    return x[y] - mx - log(z);
}

Test(forward, cross_entropy_and_mixture_nll) {
    int64_t M = 6, V = 10;
    dt_tensor *lp = param(21, 2.0f, DT_SHAPE(2, 3, V)), *lq = param(22, 1.0f, DT_SHAPE(2, 3, V));
    dt_tensor *y = ids(23, V, DT_SHAPE(2, 3));
    /* Row 0 peaked on one token: alpha inside (0.5, 1), so the clip is exercised both ways. */
    for (int64_t v = 0; v < V; v++)
        dt_f32(lp)[v] = 0.3f * dt_f32(lp)[v] + (v == 0 ? 4.0f : 0.0f);
    double ce[6], nll[6], alpha[6];
    for (int64_t m = 0; m < M; m++) {
        const float *p = dt_f32(lp) + m * V;
        double mx = -INFINITY, z = 0.0, s = 0.0;
        for (int64_t v = 0; v < V; v++)
            mx = fmax(mx, p[v]);
        for (int64_t v = 0; v < V; v++)
            z += exp(p[v] - mx);
        for (int64_t v = 0; v < V; v++)
            s += exp(2.0 * (p[v] - mx)) / (z * z);
        alpha[m] = fmin(fmax(s, 0.5), 1.0);
        double log_p = log_prob(p, V, dt_i32(y)[m]), log_q = log_prob(dt_f32(lq) + m * V, V, dt_i32(y)[m]);
        ce[m] = -log_p;
        nll[m] = -log(alpha[m] * exp(log_p) + (1.0 - alpha[m]) * exp(log_q));
    }
    cr_assert(alpha[0] > 0.5 && alpha[0] < 1.0, "row 0 should have an unclipped alpha (%.3f)", alpha[0]);
    expect_close("cross_entropy", ag_cross_entropy(&ctx, lp, y), ce, M, 1e-5);
    dt_tensor *alpha_out = NULL;
    expect_close("mixture_nll", ag_mixture_nll(&ctx, lp, lq, y, 0.5f, 1.0f, 0, 0, &alpha_out), nll, M, 1e-5);
    expect_close("alpha", alpha_out, alpha, M, 1e-6);
    cr_assert_eq(alpha_out->requires_grad, 0, "alpha_out is a constant");
    dt_tensor_free(lp);
    dt_tensor_free(lq);
    dt_tensor_free(y);
}

Test(forward, mixture_with_alpha_clipped_at_one_has_no_nan) {
    /* A row so peaked that sum p^2 rounds to 1: alpha = 1 drops the branch's term. */
    int64_t V = 6;
    dt_tensor *lp = dt_tensor_new(DT_F32, DT_SHAPE(1, V)), *lq = param(24, 1.0f, DT_SHAPE(1, V));
    dt_tensor *y = dt_tensor_new(DT_I32, DT_SHAPE(1));
    dt_f32(lp)[2] = 60.0f;
    dt_i32(y)[0] = 2;
    lp->requires_grad = 1;
    cr_assert_eq(dt_tensor_alloc_grad(lp), DT_OK);
    dt_tensor *alpha = NULL;
    dt_tensor *nll = ag_mixture_nll(&ctx, lp, lq, y, 0.5f, 1.0f, 0, 0, &alpha);
    cr_assert_not_null(nll);
    cr_assert_eq(dt_f32(alpha)[0], 1.0f);
    cr_assert(isfinite(dt_f32(nll)[0]) && fabs(dt_f32(nll)[0]) < 1e-6, "nll %.9g", (double)dt_f32(nll)[0]);
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, nll)), DT_OK);
    for (int64_t v = 0; v < V; v++) {
        cr_assert(isfinite(lp->grad[v]) && isfinite(lq->grad[v]), "NaN gradient at %lld", (long long)v);
        cr_assert_eq(lq->grad[v], 0.0f, "the dropped branch term gets no gradient");
    }
    dt_tensor_free(lp);
    dt_tensor_free(lq);
    dt_tensor_free(y);
}

Test(forward, moe_balance_term) {
    int64_t N = 7, E = 4;
    dt_tensor *r = param(25, 1.0f, DT_SHAPE(N, E));
    const float f[4] = {0.5f, 0.25f, 0.125f, 0.125f};
    double total = 0.0;
    for (int64_t n = 0; n < N; n++) {
        const float *x = dt_f32(r) + n * E;
        double mx = -INFINITY, z = 0.0;
        for (int64_t e = 0; e < E; e++)
            mx = fmax(mx, x[e]);
        for (int64_t e = 0; e < E; e++)
            z += exp(x[e] - mx);
        for (int64_t e = 0; e < E; e++)
            total += f[e] * exp(x[e] - mx) / z / (double)N;
    }
    double expected = (double)E * total;
    expect_close("moe_balance", ag_moe_balance(&ctx, r, f), &expected, 1, 1e-6);
    /* Uniform routing and uniform fractions give exactly 1 (the Switch minimum). */
    memset(r->data, 0, (size_t)r->size * sizeof(float));
    double one = 1.0;
    expect_close("moe_balance uniform", ag_moe_balance(&ctx, r, (const float[4]){0.25f, 0.25f, 0.25f, 0.25f}), &one, 1,
                 1e-6);
    dt_tensor_free(r);
}
