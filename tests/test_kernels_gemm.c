/* Tests for k_gemm, k_linear_forward/backward and the thread-count setting.
 *
 * Expected values come from naive triple loops in double written here; sizes
 * are odd (1, 7, 33, 130) and leading dimensions padded, so a wrong transpose,
 * stride or accumulation mode shows up as a large error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm.h"

/* Fills x[n] with uniform values in [-1, 1). */
static void fill_uniform(dt_rng *rng, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = 2.0f * dt_rng_uniform(rng) - 1.0f;
}

static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}

/* Reads op(X)[i][k] of a row-major X with row stride ld. */
static double op_at(const float *X, int64_t ld, int trans, int64_t i, int64_t k) {
    return trans ? (double)X[k * ld + i] : (double)X[i * ld + k];
}

/* One GEMM case: random A, B, C with padded strides; compare every element of
 * C with a double reference, and check the padding of C is untouched. */
static void check_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                       uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
    float *A = alloc_floats(a_rows * lda), *B = alloc_floats(b_rows * ldb), *C = alloc_floats(M * ldc);
    float *C0 = alloc_floats(M * ldc);
    fill_uniform(&rng, A, a_rows * lda);
    fill_uniform(&rng, B, b_rows * ldb);
    fill_uniform(&rng, C, M * ldc);
    for (int64_t i = 0; i < M * ldc; i++)
        C0[i] = C[i];

    k_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);

    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double sum = 0.0, magnitude = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double product = op_at(A, lda, trans_a, i, k) * op_at(B, ldb, trans_b, k, j);
                sum += product;
                magnitude += fabs(product);
            }
            double expected = alpha * sum + beta * (double)C0[i * ldc + j];
            double scale = fabs(alpha) * magnitude + fabs(beta * (double)C0[i * ldc + j]) + 1e-30;
            double got = C[i * ldc + j];
            cr_assert(fabs(got - expected) <= 1e-5 * scale,
                      "gemm ta=%d tb=%d M=%ld N=%ld K=%ld at (%ld,%ld): got %.9g expected %.9g", trans_a, trans_b,
                      (long)M, (long)N, (long)K, (long)i, (long)j, got, expected);
        }
        for (int64_t j = N; j < ldc; j++)
            cr_assert(C[i * ldc + j] == C0[i * ldc + j], "gemm wrote into the padding of C at (%ld,%ld)", (long)i,
                      (long)j);
    }
    free(A);
    free(B);
    free(C);
    free(C0);
}

Test(kernels_gemm, all_transposes_odd_sizes_padded_strides) {
    /* the last two are above k_gemm's single-thread cutoff: split by rows, then by columns */
    const int64_t sizes[][3] = {{1, 1, 1},    {7, 5, 3},      {33, 17, 9},   {130, 67, 45},
                                {5, 130, 33}, {300, 131, 67}, {67, 301, 131}};
    uint64_t seed = 1;
    for (int trans_a = 0; trans_a < 2; trans_a++)
        for (int trans_b = 0; trans_b < 2; trans_b++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                check_gemm(trans_a, trans_b, sizes[s][0], sizes[s][1], sizes[s][2], 0.75f, -0.5f, seed++);
                check_gemm(trans_a, trans_b, sizes[s][0], sizes[s][1], sizes[s][2], 1.0f, 1.0f, seed++);
                check_gemm(trans_a, trans_b, sizes[s][0], sizes[s][1], sizes[s][2], -1.25f, 0.0f, seed++);
            }
}

/* beta == 0 overwrites C: NaN already in C must not survive (BLAS semantics). */
Test(kernels_gemm, beta_zero_ignores_nan_in_c) {
    float A[6] = {1, 2, 3, 4, 5, 6}; /* [2,3] */
    float B[6] = {1, 0, 0, 1, 1, 1}; /* [3,2] */
    float C[4] = {NAN, NAN, NAN, NAN};
    k_gemm(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
    /* row 0: [1+3, 2+3], row 1: [4+6, 5+6] */
    cr_assert(C[0] == 4.0f && C[1] == 5.0f && C[2] == 10.0f && C[3] == 11.0f, "got %g %g %g %g", C[0], C[1], C[2],
              C[3]);
}

/* K == 0: the product is empty, C = beta * C. */
Test(kernels_gemm, empty_inner_dimension_scales_c) {
    float C[3] = {1.0f, -2.0f, 4.0f};
    float dummy = 0.0f;
    k_gemm(0, 0, 1, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 0.5f, C, 3);
    cr_assert(C[0] == 0.5f && C[1] == -1.0f && C[2] == 2.0f);
}

/* Naive double reference of out = in · W^T + b. */
static void naive_linear(double *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K,
                         int64_t N) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double sum = bias ? (double)bias[j] : 0.0;
            for (int64_t k = 0; k < K; k++)
                sum += (double)in[i * K + k] * (double)weight[j * K + k];
            out[i * N + j] = sum;
        }
}

static void assert_close(const float *got, const double *expected, int64_t n, double rel, const char *what) {
    double max_abs = 0.0;
    for (int64_t i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs(expected[i]));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs((double)got[i] - expected[i]) <= rel * (max_abs + 1e-30), "%s[%ld]: got %.9g expected %.9g",
                  what, (long)i, (double)got[i], expected[i]);
}

Test(kernels_gemm, linear_forward_with_and_without_bias) {
    const int64_t sizes[][3] = {{1, 1, 1}, {7, 3, 5}, {33, 9, 17}, {130, 67, 45}};
    dt_rng rng;
    dt_rng_seed(&rng, 42);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
        float *in = alloc_floats(M * K), *weight = alloc_floats(N * K), *bias = alloc_floats(N);
        float *out = alloc_floats(M * N);
        double *expected = malloc((size_t)(M * N) * sizeof(double));
        fill_uniform(&rng, in, M * K);
        fill_uniform(&rng, weight, N * K);
        fill_uniform(&rng, bias, N);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            for (int64_t i = 0; i < M * N; i++)
                out[i] = NAN; /* forward overwrites */
            k_linear_forward(out, in, weight, with_bias ? bias : NULL, M, K, N);
            naive_linear(expected, in, weight, with_bias ? bias : NULL, M, K, N);
            assert_close(out, expected, M * N, 1e-5, with_bias ? "linear out (bias)" : "linear out");
        }
        free(in);
        free(weight);
        free(bias);
        free(out);
        free(expected);
    }
}

/* Backward accumulates into pre-filled buffers; every NULL combination is tried. */
Test(kernels_gemm, linear_backward_accumulates_and_skips_null) {
    const int64_t sizes[][3] = {{1, 1, 1}, {7, 3, 5}, {33, 9, 17}, {130, 67, 45}};
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
        float *in = alloc_floats(M * K), *weight = alloc_floats(N * K), *d_out = alloc_floats(M * N);
        float *d_in = alloc_floats(M * K), *d_weight = alloc_floats(N * K), *d_bias = alloc_floats(N);
        float *d_in0 = alloc_floats(M * K), *d_weight0 = alloc_floats(N * K), *d_bias0 = alloc_floats(N);
        double *e_in = malloc((size_t)(M * K) * sizeof(double)), *e_weight = malloc((size_t)(N * K) * sizeof(double));
        double *e_bias = malloc((size_t)N * sizeof(double));
        fill_uniform(&rng, in, M * K);
        fill_uniform(&rng, weight, N * K);
        fill_uniform(&rng, d_out, M * N);
        fill_uniform(&rng, d_in0, M * K);
        fill_uniform(&rng, d_weight0, N * K);
        fill_uniform(&rng, d_bias0, N);

        for (int mask = 0; mask < 8; mask++) {
            for (int64_t i = 0; i < M * K; i++)
                d_in[i] = d_in0[i];
            for (int64_t i = 0; i < N * K; i++)
                d_weight[i] = d_weight0[i];
            for (int64_t i = 0; i < N; i++)
                d_bias[i] = d_bias0[i];
            k_linear_backward((mask & 1) ? d_in : NULL, (mask & 2) ? d_weight : NULL, (mask & 4) ? d_bias : NULL, d_out,
                              in, weight, M, K, N);
            for (int64_t i = 0; i < M; i++)
                for (int64_t k = 0; k < K; k++) {
                    double sum = 0.0;
                    for (int64_t j = 0; j < N; j++)
                        sum += (double)d_out[i * N + j] * weight[j * K + k];
                    e_in[i * K + k] = d_in0[i * K + k] + ((mask & 1) ? sum : 0.0);
                }
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) {
                    double sum = 0.0;
                    for (int64_t i = 0; i < M; i++)
                        sum += (double)d_out[i * N + j] * in[i * K + k];
                    e_weight[j * K + k] = d_weight0[j * K + k] + ((mask & 2) ? sum : 0.0);
                }
            for (int64_t j = 0; j < N; j++) {
                double sum = 0.0;
                for (int64_t i = 0; i < M; i++)
                    sum += d_out[i * N + j];
                e_bias[j] = d_bias0[j] + ((mask & 4) ? sum : 0.0);
            }
            assert_close(d_in, e_in, M * K, 1e-5, "d_in");
            assert_close(d_weight, e_weight, N * K, 1e-5, "d_weight");
            assert_close(d_bias, e_bias, N, 1e-5, "d_bias");
        }
        free(in);
        free(weight);
        free(d_out);
        free(d_in);
        free(d_weight);
        free(d_bias);
        free(d_in0);
        free(d_weight0);
        free(d_bias0);
        free(e_in);
        free(e_weight);
        free(e_bias);
    }
}

/* Called from inside the caller's own parallel region (k_gemm then runs on
 * the calling thread): every product is still right. */
Test(kernels_gemm, inside_caller_parallel_region) {
    k_set_threads(2);
    int failures = 0;
#pragma omp parallel for schedule(static) reduction(+ : failures)
    for (int problem = 0; problem < 4; problem++) {
        const int64_t M = 131, N = 129, K = 127; /* above the single-thread cutoff */
        dt_rng rng;
        dt_rng_seed(&rng, 500 + (uint64_t)problem);
        float *A = malloc((size_t)(M * K) * sizeof(float)), *B = malloc((size_t)(K * N) * sizeof(float));
        float *C = malloc((size_t)(M * N) * sizeof(float));
        fill_uniform(&rng, A, M * K);
        fill_uniform(&rng, B, K * N);
        k_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double sum = 0.0, magnitude = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    sum += (double)A[i * K + k] * B[k * N + j];
                    magnitude += fabs((double)A[i * K + k] * B[k * N + j]);
                }
                failures += fabs(C[i * N + j] - sum) > 1e-5 * magnitude;
            }
        free(A);
        free(B);
        free(C);
    }
    cr_assert_eq(failures, 0, "%d wrong elements", failures);
}

Test(kernels_gemm, set_threads_round_trips) {
    k_set_threads(1);
    cr_assert_eq(k_get_threads(), 1);
    k_set_threads(2);
    cr_assert_eq(k_get_threads(), 2);
    k_set_threads(0); /* clamped: a thread count is at least 1 */
    cr_assert_eq(k_get_threads(), 1);
    k_set_threads(2);
}

/* A GEMM big enough to be split across threads agrees between 1 and 2 threads
 * (to float rounding) and is bit-identical between two runs with 2 threads. */
Test(kernels_gemm, thread_count_independent) {
    const int64_t M = 301, N = 257, K = 129;
    dt_rng rng;
    dt_rng_seed(&rng, 99);
    float *A = alloc_floats(M * K), *B = alloc_floats(N * K);
    float *C1 = alloc_floats(M * N), *C2 = alloc_floats(M * N), *C2b = alloc_floats(M * N);
    fill_uniform(&rng, A, M * K);
    fill_uniform(&rng, B, N * K);
    k_set_threads(1);
    k_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
    k_set_threads(2);
    k_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
    k_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2b, N);
    for (int64_t i = 0; i < M * N; i++) {
        cr_assert(fabsf(C1[i] - C2[i]) <= 1e-5f * (1.0f + fabsf(C1[i])), "1 vs 2 threads differ at %ld", (long)i);
        cr_assert(C2[i] == C2b[i], "two runs with 2 threads differ at %ld", (long)i);
    }
    free(A);
    free(B);
    free(C1);
    free(C2);
    free(C2b);
}
