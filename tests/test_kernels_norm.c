/* Tests for LayerNorm and RMSNorm (kernels/norm.h).
 *
 * Forwards are checked against naive double loops written here; backwards
 * against central finite differences of that double forward (so the expected
 * gradient is accurate to ~1e-9, and a tolerance of 1e-4 relative catches any
 * wrong term), with outputs pre-filled to check the += semantics. A loss
 * L = sum(d_out * out) turns the [M,C] output into a scalar. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"

#define EPS     1e-5f
#define FD_STEP 1e-5

static void fill_uniform(dt_rng *rng, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * dt_rng_uniform(rng);
}

static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}

static double *alloc_doubles(int64_t n) {
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert_not_null(x);
    return x;
}

/* |got - expected| <= rel * (|expected| + 0.1 * max|expected|) element by element. */
static void assert_close(const float *got, const double *expected, int64_t n, double rel, const char *what) {
    double max_abs = 0.0;
    for (int64_t i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs(expected[i]));
    for (int64_t i = 0; i < n; i++) {
        double tol = rel * (fabs(expected[i]) + 0.1 * max_abs) + 1e-30;
        cr_assert(fabs((double)got[i] - expected[i]) <= tol, "%s[%ld]: got %.9g expected %.9g (tol %.3g)", what,
                  (long)i, (double)got[i], expected[i], tol);
    }
}

/* The problem both norms are tested on, held in double for the references. */
typedef struct {
    int64_t M, C;
    double *x, *weight, *bias, *upstream; /* [M,C], [C], [C] (bias may be NULL), [M,C] */
    int rms;                              /* 1: RMSNorm, 0: LayerNorm */
} norm_problem;

/* sum over rows [r0, r1) of upstream * norm(x) in double */
static double norm_loss(const norm_problem *p, int64_t r0, int64_t r1) {
    double loss = 0.0;
    for (int64_t i = r0; i < r1; i++) {
        const double *x = p->x + i * p->C;
        double mean = 0.0, var = 0.0;
        if (!p->rms) {
            for (int64_t j = 0; j < p->C; j++)
                mean += x[j];
            mean /= (double)p->C;
        }
        for (int64_t j = 0; j < p->C; j++)
            var += (x[j] - mean) * (x[j] - mean);
        var /= (double)p->C;
        double rstd = 1.0 / sqrt(var + (double)EPS);
        for (int64_t j = 0; j < p->C; j++) {
            double y = (x[j] - mean) * rstd * p->weight[j] + (p->bias ? p->bias[j] : 0.0);
            loss += p->upstream[i * p->C + j] * y;
        }
    }
    return loss;
}

/* d loss / d value, where value lives in one of the problem's arrays. Perturbing x
 * row i only changes rows [r0, r1) = [i, i+1), so only those are evaluated. */
static double central_difference(norm_problem *p, double *value, int64_t r0, int64_t r1) {
    double saved = *value;
    *value = saved + FD_STEP;
    double up = norm_loss(p, r0, r1);
    *value = saved - FD_STEP;
    double down = norm_loss(p, r0, r1);
    *value = saved;
    return (up - down) / (2.0 * FD_STEP);
}

static void to_double(double *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i];
}

/* Runs forward + backward of one norm on [M,C] and checks everything. `offset`
 * shifts the inputs (a large offset with a small spread stresses the variance). */
static void check_norm(int rms, int64_t M, int64_t C, float offset, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    float *x = alloc_floats(M * C), *weight = alloc_floats(C), *bias = alloc_floats(C), *out = alloc_floats(M * C);
    float *mean = alloc_floats(M), *rstd = alloc_floats(M), *d_out = alloc_floats(M * C);
    float *d_x = alloc_floats(M * C), *d_weight = alloc_floats(C), *d_bias = alloc_floats(C);
    fill_uniform(&rng, x, M * C, offset - 2.0f, offset + 2.0f);
    fill_uniform(&rng, weight, C, 0.5f, 1.5f);
    fill_uniform(&rng, bias, C, -1.0f, 1.0f);
    fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
    fill_uniform(&rng, d_x, M * C, -1.0f, 1.0f); /* pre-filled: backward must add */
    fill_uniform(&rng, d_weight, C, -1.0f, 1.0f);
    fill_uniform(&rng, d_bias, C, -1.0f, 1.0f);

    norm_problem p = {
        M, C, alloc_doubles(M * C), alloc_doubles(C), rms ? NULL : alloc_doubles(C), alloc_doubles(M * C), rms};
    to_double(p.x, x, M * C);
    to_double(p.weight, weight, C);
    if (!rms) to_double(p.bias, bias, C);
    to_double(p.upstream, d_out, M * C);

    if (rms) {
        k_rmsnorm_forward(out, rstd, x, weight, M, C, EPS);
    } else {
        k_layernorm_forward(out, mean, rstd, x, weight, bias, M, C, EPS);
    }

    /* forward and saved statistics against double loops */
    double *expected = alloc_doubles(M * C), *expected_mean = alloc_doubles(M), *expected_rstd = alloc_doubles(M);
    for (int64_t i = 0; i < M; i++) {
        const double *xr = p.x + i * C;
        double mu = 0.0, var = 0.0;
        if (!rms) {
            for (int64_t j = 0; j < C; j++)
                mu += xr[j];
            mu /= (double)C;
        }
        for (int64_t j = 0; j < C; j++)
            var += (xr[j] - mu) * (xr[j] - mu);
        double r = 1.0 / sqrt(var / (double)C + (double)EPS);
        expected_mean[i] = mu;
        expected_rstd[i] = r;
        for (int64_t j = 0; j < C; j++)
            expected[i * C + j] = (xr[j] - mu) * r * p.weight[j] + (rms ? 0.0 : p.bias[j]);
    }
    /* With a large offset the float mean's own rounding (|offset| * 6e-8) shows
     * in x - mean; the statistics below are still checked to 1e-6. */
    assert_close(out, expected, M * C, offset != 0.0f ? 1e-4 : 2e-5, rms ? "rmsnorm out" : "layernorm out");
    for (int64_t i = 0; i < M; i++) {
        cr_assert(fabs(rstd[i] - expected_rstd[i]) <= 1e-6 * expected_rstd[i], "rstd[%ld] %.9g vs %.9g", (long)i,
                  (double)rstd[i], expected_rstd[i]);
        if (!rms)
            cr_assert(fabs(mean[i] - expected_mean[i]) <= 1e-6 * (fabs(expected_mean[i]) + 1e-3),
                      "mean[%ld] %.9g vs %.9g", (long)i, (double)mean[i], expected_mean[i]);
    }

    /* backward: expected = pre-filled value + finite-difference gradient */
    double *e_x = alloc_doubles(M * C), *e_weight = alloc_doubles(C), *e_bias = alloc_doubles(C);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < C; j++)
            e_x[i * C + j] = d_x[i * C + j] + central_difference(&p, &p.x[i * C + j], i, i + 1);
    for (int64_t j = 0; j < C; j++) {
        e_weight[j] = d_weight[j] + central_difference(&p, &p.weight[j], 0, M);
        if (!rms) e_bias[j] = d_bias[j] + central_difference(&p, &p.bias[j], 0, M);
    }
    if (rms) {
        k_rmsnorm_backward(d_x, d_weight, d_out, x, weight, rstd, M, C);
    } else {
        k_layernorm_backward(d_x, d_weight, d_bias, d_out, x, weight, mean, rstd, M, C);
        assert_close(d_bias, e_bias, C, 1e-4, "layernorm d_bias");
    }
    /* The offset stress case amplifies float rounding of x - mean in d_x. */
    double rel = offset != 0.0f ? 1e-3 : 1e-4;
    assert_close(d_x, e_x, M * C, rel, rms ? "rmsnorm d_in" : "layernorm d_in");
    assert_close(d_weight, e_weight, C, 1e-4, rms ? "rmsnorm d_weight" : "layernorm d_weight");

    free(x), free(weight), free(bias), free(out), free(mean), free(rstd), free(d_out), free(d_x), free(d_weight);
    free(d_bias), free(p.x), free(p.weight), free(p.bias), free(p.upstream), free(expected), free(expected_mean);
    free(expected_rstd), free(e_x), free(e_weight), free(e_bias);
}

static const int64_t SIZES[][2] = {{1, 1}, {1, 7}, {7, 33}, {33, 7}, {130, 67}};

Test(kernels_norm, layernorm_forward_backward_odd_sizes) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++)
        check_norm(0, SIZES[s][0], SIZES[s][1], 0.0f, 10 + s);
}

Test(kernels_norm, rmsnorm_forward_backward_odd_sizes) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++)
        check_norm(1, SIZES[s][0], SIZES[s][1], 0.0f, 20 + s);
}

/* Rows centred far from zero: a one-pass E[x^2] - E[x]^2 in float would lose
 * the variance; the forward must still match double to the tolerance above. */
Test(kernels_norm, layernorm_large_mean_small_spread) { check_norm(0, 7, 257, 300.0f, 31); }

/* Reductions into d_weight / d_bias give identical bits for 1 and 2 threads
 * and for two runs (the column-parallel pass fixes the summation order). */
Test(kernels_norm, backward_thread_count_independent) {
    const int64_t M = 300, C = 257;
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    float *x = alloc_floats(M * C), *weight = alloc_floats(C), *bias = alloc_floats(C), *out = alloc_floats(M * C);
    float *mean = alloc_floats(M), *rstd = alloc_floats(M), *d_out = alloc_floats(M * C);
    fill_uniform(&rng, x, M * C, -2.0f, 2.0f);
    fill_uniform(&rng, weight, C, 0.5f, 1.5f);
    fill_uniform(&rng, bias, C, -1.0f, 1.0f);
    fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
    float *results[3][3]; /* [run][d_in, d_weight, d_bias] */
    const int threads[3] = {1, 2, 2};
    for (int run = 0; run < 3; run++) {
        k_set_threads(threads[run]);
        results[run][0] = calloc((size_t)(M * C), sizeof(float));
        results[run][1] = calloc((size_t)C, sizeof(float));
        results[run][2] = calloc((size_t)C, sizeof(float));
        k_layernorm_forward(out, mean, rstd, x, weight, bias, M, C, EPS);
        k_layernorm_backward(results[run][0], results[run][1], results[run][2], d_out, x, weight, mean, rstd, M, C);
        k_rmsnorm_forward(out, rstd, x, weight, M, C, EPS);
        k_rmsnorm_backward(results[run][0], results[run][1], d_out, x, weight, rstd, M, C);
    }
    k_set_threads(2);
    for (int run = 1; run < 3; run++) {
        for (int64_t i = 0; i < M * C; i++)
            cr_assert(results[run][0][i] == results[0][0][i], "d_in run %d", run);
        for (int64_t j = 0; j < C; j++) {
            cr_assert(results[run][1][j] == results[0][1][j], "d_weight run %d col %ld", run, (long)j);
            cr_assert(results[run][2][j] == results[0][2][j], "d_bias run %d col %ld", run, (long)j);
        }
    }
    for (int run = 0; run < 3; run++)
        free(results[run][0]), free(results[run][1]), free(results[run][2]);
    free(x), free(weight), free(bias), free(out), free(mean), free(rstd), free(d_out);
}

/* NULL outputs are skipped: only d_in requested leaves nothing else touched,
 * and d_weight alone matches the full call's d_weight. */
Test(kernels_norm, backward_null_outputs) {
    const int64_t M = 7, C = 33;
    dt_rng rng;
    dt_rng_seed(&rng, 8);
    float x[7 * 33], weight[33], bias[33], out[7 * 33], mean[7], rstd[7], d_out[7 * 33];
    fill_uniform(&rng, x, M * C, -2.0f, 2.0f);
    fill_uniform(&rng, weight, C, 0.5f, 1.5f);
    fill_uniform(&rng, bias, C, -1.0f, 1.0f);
    fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
    k_layernorm_forward(out, mean, rstd, x, weight, bias, M, C, EPS);
    float full_x[7 * 33] = {0}, full_w[33] = {0}, full_b[33] = {0}, only_w[33] = {0}, only_b[33] = {0};
    k_layernorm_backward(full_x, full_w, full_b, d_out, x, weight, mean, rstd, M, C);
    k_layernorm_backward(NULL, only_w, NULL, d_out, x, weight, mean, rstd, M, C);
    k_layernorm_backward(NULL, NULL, only_b, d_out, x, weight, mean, rstd, M, C);
    k_layernorm_backward(NULL, NULL, NULL, d_out, x, weight, mean, rstd, M, C);
    for (int64_t j = 0; j < C; j++)
        cr_assert(only_w[j] == full_w[j] && only_b[j] == full_b[j]);
    float rms_x[7 * 33] = {0}, rms_w[33] = {0};
    k_rmsnorm_forward(out, rstd, x, weight, M, C, EPS);
    k_rmsnorm_backward(rms_x, NULL, d_out, x, weight, rstd, M, C);
    k_rmsnorm_backward(NULL, rms_w, d_out, x, weight, rstd, M, C);
    double sum_x = 0.0, sum_w = 0.0;
    for (int64_t i = 0; i < M * C; i++)
        sum_x += fabs(rms_x[i]);
    for (int64_t j = 0; j < C; j++)
        sum_w += fabs(rms_w[j]);
    cr_assert(sum_x > 0.0 && sum_w > 0.0, "each call wrote its one requested output");
}
