/* Tests for softmax, log-softmax and cross-entropy (kernels/softmax.h).
 *
 * Forwards against naive double loops; backwards against central finite
 * differences of a double forward (L = sum(d_out * out)), with pre-filled
 * outputs to check +=. Large logits check the max subtraction. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/softmax.h"

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

/* One row [n] of x in double: its logsumexp computed the textbook way (no
 * max subtraction: the test keeps |x| small enough for that in double). */
static double naive_logsumexp(const double *x, int64_t n) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        sum += exp(x[j]);
    return log(sum);
}

enum { SOFTMAX, LOG_SOFTMAX };

/* sum_j upstream[j] * f(x)[j] for one row, f = softmax or log-softmax, in double. */
static double row_loss(int kind, const double *x, const double *upstream, int64_t n) {
    double lse = naive_logsumexp(x, n), loss = 0.0;
    for (int64_t j = 0; j < n; j++)
        loss += upstream[j] * (kind == SOFTMAX ? exp(x[j] - lse) : x[j] - lse);
    return loss;
}

static void check_softmax_kind(int kind, int64_t M, int64_t N, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    float *x = alloc_floats(M * N), *out = alloc_floats(M * N), *d_out = alloc_floats(M * N);
    float *d_in = alloc_floats(M * N);
    double *xd = alloc_doubles(M * N), *up = alloc_doubles(M * N), *expected = alloc_doubles(M * N);
    double *e_in = alloc_doubles(M * N);
    fill_uniform(&rng, x, M * N, -4.0f, 4.0f);
    fill_uniform(&rng, d_out, M * N, -1.0f, 1.0f);
    fill_uniform(&rng, d_in, M * N, -1.0f, 1.0f);
    for (int64_t i = 0; i < M * N; i++)
        xd[i] = x[i], up[i] = d_out[i];

    if (kind == SOFTMAX)
        k_softmax_forward(out, x, M, N);
    else
        k_log_softmax_forward(out, x, M, N);
    for (int64_t i = 0; i < M; i++) {
        double lse = naive_logsumexp(xd + i * N, N);
        for (int64_t j = 0; j < N; j++)
            expected[i * N + j] = kind == SOFTMAX ? exp(xd[i * N + j] - lse) : xd[i * N + j] - lse;
    }
    assert_close(out, expected, M * N, 1e-5, kind == SOFTMAX ? "softmax" : "log_softmax");

    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double *v = &xd[i * N + j], saved = *v;
            *v = saved + FD_STEP;
            double plus = row_loss(kind, xd + i * N, up + i * N, N);
            *v = saved - FD_STEP;
            double minus = row_loss(kind, xd + i * N, up + i * N, N);
            *v = saved;
            e_in[i * N + j] = d_in[i * N + j] + (plus - minus) / (2.0 * FD_STEP);
        }
    if (kind == SOFTMAX)
        k_softmax_backward(d_in, d_out, out, M, N);
    else
        k_log_softmax_backward(d_in, d_out, out, M, N);
    assert_close(d_in, e_in, M * N, 1e-4, kind == SOFTMAX ? "softmax d_in" : "log_softmax d_in");
    free(x), free(out), free(d_out), free(d_in), free(xd), free(up), free(expected), free(e_in);
}

static const int64_t SIZES[][2] = {{1, 1}, {1, 7}, {7, 33}, {33, 7}, {130, 67}};

Test(kernels_softmax, softmax_forward_backward) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++)
        check_softmax_kind(SOFTMAX, SIZES[s][0], SIZES[s][1], s);
}

Test(kernels_softmax, log_softmax_forward_backward) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++)
        check_softmax_kind(LOG_SOFTMAX, SIZES[s][0], SIZES[s][1], 100 + s);
}

/* Logits around 1000 would overflow expf without the max subtraction. */
Test(kernels_softmax, large_logits_stay_finite) {
    float x[5] = {1000.0f, 1001.0f, 999.0f, 1000.5f, -1000.0f}, out[5], log_out[5], loss;
    int32_t target = 1;
    k_softmax_forward(out, x, 1, 5);
    k_log_softmax_forward(log_out, x, 1, 5);
    k_cross_entropy_forward(&loss, x, &target, 1, 5);
    double shifted[5], lse = 0.0;
    for (int j = 0; j < 5; j++)
        shifted[j] = (double)x[j] - 1001.0, lse += exp(shifted[j]);
    lse = log(lse);
    for (int j = 0; j < 5; j++) {
        cr_assert(fabs(out[j] - exp(shifted[j] - lse)) <= 1e-6, "softmax[%d] = %g", j, out[j]);
        cr_assert(fabs(log_out[j] - (shifted[j] - lse)) <= 1e-5 * (1.0 + fabs(shifted[j] - lse)),
                  "log_softmax[%d] = %g", j, log_out[j]);
    }
    cr_assert(fabs(loss - (lse - shifted[1])) <= 1e-6, "cross-entropy %g vs %g", loss, lse - shifted[1]);
}

Test(kernels_softmax, cross_entropy_forward_backward) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        int64_t M = SIZES[s][0], V = SIZES[s][1];
        dt_rng rng;
        dt_rng_seed(&rng, 200 + s);
        float *logits = alloc_floats(M * V), *losses = alloc_floats(M), *d_losses = alloc_floats(M);
        float *d_logits = alloc_floats(M * V);
        double *expected = alloc_doubles(M), *e_logits = alloc_doubles(M * V), *row = alloc_doubles(V);
        int32_t *targets = malloc((size_t)M * sizeof(int32_t));
        fill_uniform(&rng, logits, M * V, -5.0f, 5.0f);
        fill_uniform(&rng, d_losses, M, 0.2f, 2.0f);
        fill_uniform(&rng, d_logits, M * V, -1.0f, 1.0f);
        for (int64_t i = 0; i < M; i++)
            targets[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V);

        k_cross_entropy_forward(losses, logits, targets, M, V);
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < V; j++)
                row[j] = logits[i * V + j];
            expected[i] = naive_logsumexp(row, V) - row[targets[i]];
            /* finite differences of d_losses[i] * loss_i(row) */
            for (int64_t j = 0; j < V; j++) {
                double saved = row[j];
                row[j] = saved + FD_STEP;
                double plus = naive_logsumexp(row, V) - row[targets[i]];
                row[j] = saved - FD_STEP;
                double minus = naive_logsumexp(row, V) - row[targets[i]];
                row[j] = saved;
                e_logits[i * V + j] = d_logits[i * V + j] + d_losses[i] * (plus - minus) / (2.0 * FD_STEP);
            }
        }
        for (int64_t i = 0; i < M; i++)
            cr_assert(fabs(losses[i] - expected[i]) <= 1e-5 * fabs(expected[i]) + 1e-6, "loss[%ld] %.9g vs %.9g",
                      (long)i, (double)losses[i], expected[i]);
        k_cross_entropy_backward(d_logits, d_losses, logits, targets, M, V);
        assert_close(d_logits, e_logits, M * V, 1e-4, "cross-entropy d_logits");
        free(logits), free(losses), free(d_losses), free(d_logits), free(expected), free(e_logits), free(row);
        free(targets);
    }
}

/* Row-parallel kernels give identical bits for 1 and 2 threads. */
Test(kernels_softmax, thread_count_independent) {
    const int64_t M = 300, V = 257;
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    float *logits = alloc_floats(M * V), *d_losses = alloc_floats(M);
    int32_t *targets = malloc((size_t)M * sizeof(int32_t));
    fill_uniform(&rng, logits, M * V, -5.0f, 5.0f);
    fill_uniform(&rng, d_losses, M, 0.5f, 1.5f);
    for (int64_t i = 0; i < M; i++)
        targets[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V);
    float *soft[2], *grad[2], *loss[2];
    for (int run = 0; run < 2; run++) {
        k_set_threads(run + 1);
        soft[run] = alloc_floats(M * V);
        grad[run] = calloc((size_t)(M * V), sizeof(float));
        loss[run] = alloc_floats(M);
        k_softmax_forward(soft[run], logits, M, V);
        k_cross_entropy_forward(loss[run], logits, targets, M, V);
        k_cross_entropy_backward(grad[run], d_losses, logits, targets, M, V);
    }
    k_set_threads(2);
    for (int64_t i = 0; i < M * V; i++)
        cr_assert(soft[0][i] == soft[1][i] && grad[0][i] == grad[1][i]);
    for (int64_t i = 0; i < M; i++)
        cr_assert(loss[0][i] == loss[1][i]);
    for (int run = 0; run < 2; run++)
        free(soft[run]), free(grad[run]), free(loss[run]);
    free(logits), free(d_losses), free(targets);
}
