/* Tests for the kernels added for training speed: the vectorised exp
 * (kernels/vec_math.h), the fused bias + GELU pair, the cross-entropy pair that
 * keeps its row statistics, the embedding accumulate, and the AVX-512 GEMM
 * micro-kernel path of k_gemm on shapes that cross its register and cache
 * blocks (24 x 16 tiles; 480 rows, 256 inner, 3072 columns).
 *
 * Expected values come from formulas evaluated in double here (libm exp/tanh,
 * naive loops), never from the kernels under test; the bf16-output GELU
 * kernels are checked against the float32 kernels they promise to round. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/gemm_ukernel.h"
#include "kernels/isa.h"
#include "kernels/softmax.h"
#include "kernels/type_traits.h"
#include "kernels/vec_math.h"

static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}

static void fill_uniform(dt_rng *rng, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * dt_rng_uniform(rng);
}

/* ---------------- exp ---------------- */

Test(kernels_vec_math, exp_within_two_ulp_and_saturates) {
    double worst = 0.0;
    float worst_x = 0.0f;
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
        const double expected = exp((double)x);
        const double error = fabs((double)k_exp(x) - expected) / expected;
        if (error > worst) worst = error, worst_x = x;
    }
    cr_assert(worst < 2.5e-7, "k_exp relative error %.3g at x = %g (2 ulp = 2.4e-7)", worst, (double)worst_x);
    cr_assert(k_exp(0.0f) == 1.0f);
    /* Out of range: clamped, finite, never inf; NaN stays NaN. */
    cr_assert(isfinite(k_exp(1000.0f)) && k_exp(1000.0f) > 1e38f);
    cr_assert(k_exp(-1000.0f) >= 0.0f && k_exp(-1000.0f) < 1e-37f);
    cr_assert(k_exp(-INFINITY) < 1e-37f && isfinite(k_exp(INFINITY)));
    cr_assert(isnan(k_exp(NAN)));
    cr_assert(k_sigmoid(100.0f) == 1.0f && k_sigmoid(-100.0f) < 1e-37f);
    cr_assert(fabs(k_sigmoid(0.7f) - 1.0 / (1.0 + exp(-0.7))) < 1e-7);
}

/* ---------------- fused bias + GELU ---------------- */

static double gelu_double(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static double gelu_derivative_double(double x) {
    const double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

Test(kernels_fused, bias_gelu_forward_matches_formula) {
    const int64_t M = 37, N = 70; /* N not a multiple of 16 or 64 */
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    float *pre = alloc_floats(M * N), *pre0 = alloc_floats(M * N), *bias = alloc_floats(N), *out = alloc_floats(M * N);
    fill_uniform(&rng, pre, M * N, -6.0f, 6.0f);
    fill_uniform(&rng, bias, N, -1.0f, 1.0f);
    memcpy(pre0, pre, (size_t)(M * N) * sizeof(float));
    k_bias_gelu_forward(out, pre, bias, M, N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float x = pre0[i * N + j] + bias[j];
            cr_assert(pre[i * N + j] == x, "pre + bias stored back at (%ld,%ld)", (long)i, (long)j);
            const double expected = gelu_double(x);
            cr_assert(fabs(out[i * N + j] - expected) <= 1e-6 * (1.0 + fabs(expected)),
                      "gelu(%g) = %.9g, expected %.9g", (double)x, (double)out[i * N + j], expected);
        }
    /* Without a bias: pre unchanged, out = gelu(pre). */
    memcpy(pre, pre0, (size_t)(M * N) * sizeof(float));
    k_bias_gelu_forward(out, pre, NULL, M, N);
    for (int64_t i = 0; i < M * N; i++) {
        cr_assert(pre[i] == pre0[i]);
        cr_assert(fabs(out[i] - gelu_double(pre0[i])) <= 1e-6 * (1.0 + fabs(gelu_double(pre0[i]))));
    }
    /* Far tails: exactly x and (almost) 0, no NaN. */
    float tails[2] = {30.0f, -30.0f}, tails_out[2];
    k_bias_gelu_forward(tails_out, tails, NULL, 1, 2);
    cr_assert(tails_out[0] == 30.0f && fabsf(tails_out[1]) < 1e-30f);
    free(pre), free(pre0), free(bias), free(out);
}

Test(kernels_fused, bias_gelu_backward_writes_or_adds_and_sums_bias) {
    const int64_t M = 45, N = 131; /* three column blocks, the last partial */
    dt_rng rng;
    dt_rng_seed(&rng, 6);
    float *pre = alloc_floats(M * N), *d_out = alloc_floats(M * N), *d_pre = alloc_floats(M * N);
    float *d_bias = alloc_floats(N);
    fill_uniform(&rng, pre, M * N, -5.0f, 5.0f);
    fill_uniform(&rng, d_out, M * N, -1.0f, 1.0f);
    for (int64_t i = 0; i < M * N; i++)
        d_pre[i] = NAN; /* accumulate = 0 must not read it */
    for (int64_t j = 0; j < N; j++)
        d_bias[j] = 0.25f;
    k_bias_gelu_backward(d_pre, 0, d_bias, d_out, pre, M, N);
    for (int64_t j = 0; j < N; j++) {
        double column = 0.0;
        for (int64_t i = 0; i < M; i++) {
            const double g = d_out[i * N + j] * gelu_derivative_double(pre[i * N + j]);
            column += g;
            cr_assert(fabs(d_pre[i * N + j] - g) <= 1e-5 * (1.0 + fabs(g)), "d_pre (%ld,%ld) = %g, expected %g",
                      (long)i, (long)j, (double)d_pre[i * N + j], g);
        }
        cr_assert(fabs(d_bias[j] - (0.25 + column)) <= 1e-4 * (1.0 + fabs(column)), "d_bias[%ld]", (long)j);
    }
    /* accumulate = 1 adds onto what is there; a NULL d_bias is skipped. */
    for (int64_t i = 0; i < M * N; i++)
        d_pre[i] = 1.0f;
    k_bias_gelu_backward(d_pre, 1, NULL, d_out, pre, M, N);
    for (int64_t i = 0; i < M * N; i++) {
        const double g = d_out[i] * gelu_derivative_double(pre[i]);
        cr_assert(fabs(d_pre[i] - (1.0 + g)) <= 1e-5 * (1.0 + fabs(g)));
    }
    /* d_pre may alias d_out (the MLP's backward runs it in place). */
    float *in_place = alloc_floats(M * N);
    memcpy(in_place, d_out, (size_t)(M * N) * sizeof(float));
    k_bias_gelu_backward(in_place, 0, NULL, in_place, pre, M, N);
    for (int64_t i = 0; i < M * N; i++) {
        const double g = d_out[i] * gelu_derivative_double(pre[i]);
        cr_assert(fabs(in_place[i] - g) <= 1e-5 * (1.0 + fabs(g)));
    }
    free(pre), free(d_out), free(d_pre), free(d_bias), free(in_place);
}

/* The column sums of the bias gradient do not depend on the thread count. */
Test(kernels_fused, bias_gelu_backward_thread_count_independent) {
    const int64_t M = 300, N = 257; /* above the parallel cutoff */
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    float *pre = alloc_floats(M * N), *d_out = alloc_floats(M * N), *d_pre[2], *d_bias[2];
    fill_uniform(&rng, pre, M * N, -3.0f, 3.0f);
    fill_uniform(&rng, d_out, M * N, -1.0f, 1.0f);
    for (int run = 0; run < 2; run++) {
        k_set_threads(run + 1);
        d_pre[run] = alloc_floats(M * N);
        d_bias[run] = calloc((size_t)N, sizeof(float));
        k_bias_gelu_backward(d_pre[run], 0, d_bias[run], d_out, pre, M, N);
    }
    k_set_threads(2);
    cr_assert(memcmp(d_pre[0], d_pre[1], (size_t)(M * N) * sizeof(float)) == 0);
    cr_assert(memcmp(d_bias[0], d_bias[1], (size_t)N * sizeof(float)) == 0);
    free(pre), free(d_out);
    for (int run = 0; run < 2; run++)
        free(d_pre[run]), free(d_bias[run]);
}

/* Column sums in row order from 0, in float, as the kernels promise them. */
static void column_sums_in_order(float *sums, const float *g, int64_t M, int64_t N) {
    for (int64_t j = 0; j < N; j++) {
        float sum = 0.0f;
        for (int64_t i = 0; i < M; i++)
            sum += g[i * N + j];
        sums[j] = sum;
    }
}

/* Wider than the 8192 columns whose sums one pass keeps: the bias gradient
 * is still each column's float sum in row order, bit for bit, at one thread
 * and at two (each thread's share then spans passes of its own). */
Test(kernels_fused, bias_gelu_backward_sums_wide_matrices_in_row_order) {
    const int64_t M = 5, N = 2 * 8192 + 80;
    dt_rng rng;
    dt_rng_seed(&rng, 10);
    float *pre = alloc_floats(M * N), *d_out = alloc_floats(M * N), *d_pre = alloc_floats(M * N);
    float *d_bias = alloc_floats(N), *expected = alloc_floats(N);
    fill_uniform(&rng, pre, M * N, -4.0f, 4.0f);
    fill_uniform(&rng, d_out, M * N, -1.0f, 1.0f);
    for (int threads = 1; threads <= 2; threads++) {
        k_set_threads(threads);
        memset(d_bias, 0, (size_t)N * sizeof(float));
        k_bias_gelu_backward(d_pre, 0, d_bias, d_out, pre, M, N);
        column_sums_in_order(expected, d_pre, M, N);
        for (int64_t j = 0; j < N; j++)
            cr_assert_eq(d_bias[j], expected[j], "%d threads: d_bias[%ld] = %.9g, row-order sum %.9g", threads, (long)j,
                         (double)d_bias[j], (double)expected[j]);
    }
    k_set_threads(2);
    free(pre), free(d_out), free(d_pre), free(d_bias), free(expected);
}

/* The bf16-output forms are the float32 kernels rounded: every element of
 * their outputs is k_bf16_from_float of the float32 kernel's, and pre and
 * d_bias are the float32 kernels' bits, at one thread and at two; N spans
 * pieces of both widths (256 forward, 64 backward) with partial ones. */
Test(kernels_fused, bf16_outputs_are_the_float32_kernels_rounded) {
    const int64_t M = 70, N = 600;
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    float *pre = alloc_floats(M * N), *bias = alloc_floats(N), *d_hidden = alloc_floats(M * N);
    fill_uniform(&rng, pre, M * N, -6.0f, 6.0f);
    fill_uniform(&rng, bias, N, -1.0f, 1.0f);
    fill_uniform(&rng, d_hidden, M * N, -1.0f, 1.0f);
    float *pre32 = alloc_floats(M * N), *pre16 = alloc_floats(M * N), *out32 = alloc_floats(M * N);
    float *hidden32 = alloc_floats(M * N), *d_pre32 = alloc_floats(M * N);
    float *d_bias32 = alloc_floats(N), *d_bias16 = alloc_floats(N);
    uint16_t *out16 = malloc((size_t)(M * N) * sizeof(uint16_t)),
             *hidden16 = malloc((size_t)(M * N) * sizeof(uint16_t));
    uint16_t *d_pre16 = malloc((size_t)(M * N) * sizeof(uint16_t));
    cr_assert(out16 && hidden16 && d_pre16);
    for (int threads = 1; threads <= 2; threads++) {
        k_set_threads(threads);
        memcpy(pre32, pre, (size_t)(M * N) * sizeof(float));
        memcpy(pre16, pre, (size_t)(M * N) * sizeof(float));
        k_bias_gelu_forward(out32, pre32, bias, M, N);
        k_bias_gelu_forward_bf16(out16, pre16, bias, M, N);
        cr_assert(memcmp(pre16, pre32, (size_t)(M * N) * sizeof(float)) == 0, "pre + bias differs");
        for (int64_t i = 0; i < M * N; i++)
            cr_assert_eq(out16[i], k_bf16_from_float(out32[i]), "%d threads: gelu[%ld]", threads, (long)i);
        for (int64_t j = 0; j < N; j++)
            d_bias32[j] = d_bias16[j] = 0.5f;
        k_gelu_recompute_backward(hidden32, d_pre32, d_bias32, d_hidden, pre, M, N);
        k_gelu_recompute_backward_bf16(hidden16, d_pre16, d_bias16, d_hidden, pre, M, N);
        for (int64_t i = 0; i < M * N; i++) {
            cr_assert_eq(hidden16[i], k_bf16_from_float(hidden32[i]), "%d threads: hidden[%ld]", threads, (long)i);
            cr_assert_eq(d_pre16[i], k_bf16_from_float(d_pre32[i]), "%d threads: d_pre[%ld]", threads, (long)i);
        }
        cr_assert(memcmp(d_bias16, d_bias32, (size_t)N * sizeof(float)) == 0, "d_bias differs");
    }
    k_set_threads(2);
    free(pre), free(bias), free(d_hidden), free(pre32), free(pre16), free(out32), free(hidden32), free(d_pre32);
    free(d_bias32), free(d_bias16), free(out16), free(hidden16), free(d_pre16);
}

/* ---------------- cross-entropy with saved statistics ---------------- */

Test(kernels_fused, cross_entropy_stats_pair_matches_double) {
    const int64_t M = 23, V = 300; /* V spans two exp blocks of 256 */
    dt_rng rng;
    dt_rng_seed(&rng, 8);
    float *logits = alloc_floats(M * V), *losses = alloc_floats(M), *stats = alloc_floats(2 * M);
    float *d_logits = alloc_floats(M * V), *d_losses = alloc_floats(M);
    int32_t targets[23];
    fill_uniform(&rng, logits, M * V, -8.0f, 8.0f);
    logits[5 * V + 7] = 900.0f; /* a row that overflows expf without the max shift */
    fill_uniform(&rng, d_losses, M, 0.5f, 1.5f);
    for (int64_t i = 0; i < M; i++)
        targets[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V);
    for (int64_t i = 0; i < M * V; i++)
        d_logits[i] = 0.5f;
    k_cross_entropy_forward_stats(losses, stats, logits, targets, M, V);
    k_cross_entropy_backward_stats(d_logits, d_losses, logits, stats, targets, M, V);
    for (int64_t i = 0; i < M; i++) {
        const float *x = logits + i * V;
        double max = x[0], sum = 0.0;
        for (int64_t j = 1; j < V; j++)
            max = fmax(max, x[j]);
        for (int64_t j = 0; j < V; j++)
            sum += exp((double)x[j] - max);
        const double lse = max + log(sum);
        cr_assert(fabs(losses[i] - (lse - x[targets[i]])) <= 1e-5 * (1.0 + fabs(lse)), "loss row %ld", (long)i);
        cr_assert(stats[2 * i] == (float)max, "stats max row %ld", (long)i);
        for (int64_t j = 0; j < V; j++) {
            const double expected = 0.5 + d_losses[i] * (exp((double)x[j] - lse) - (j == targets[i] ? 1.0 : 0.0));
            cr_assert(fabs(d_logits[i * V + j] - expected) <= 2e-6, "d_logits (%ld,%ld) = %.9g, expected %.9g", (long)i,
                      (long)j, (double)d_logits[i * V + j], expected);
        }
    }
    /* The plain pair gives the same losses (forward without stats). */
    float *plain = alloc_floats(M);
    k_cross_entropy_forward(plain, logits, targets, M, V);
    cr_assert(memcmp(plain, losses, (size_t)M * sizeof(float)) == 0);
    free(logits), free(losses), free(stats), free(d_logits), free(d_losses), free(plain);
}

/* ---------------- embedding accumulate ---------------- */

Test(kernels_fused, embedding_accumulate_adds_rows) {
    const int64_t V = 5, C = 19, N = 7;
    float weight[5 * 19], out[7 * 19], before[7 * 19];
    const int32_t tokens[7] = {4, 0, 4, 2, 1, 1, 3};
    for (int64_t i = 0; i < V * C; i++)
        weight[i] = 0.5f * (float)i - 3.0f;
    for (int64_t i = 0; i < N * C; i++)
        out[i] = before[i] = 0.25f * (float)(i % 11);
    k_embedding_accumulate(out, weight, tokens, N, C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < C; j++)
            cr_assert(out[n * C + j] == before[n * C + j] + weight[tokens[n] * C + j]);
}

/* ---------------- the AVX-512 GEMM path ---------------- */

/* k_gemm against a double reference, every element; C has padded rows. */
static void check_gemm_large(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float beta, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K,
                  b_cols = trans_b ? K : N;
    const int64_t lda = a_cols + 1, ldb = b_cols + 3, ldc = N + 4;
    float *A = alloc_floats(a_rows * lda), *B = alloc_floats(b_rows * ldb), *C = alloc_floats(M * ldc);
    float *C0 = alloc_floats(M * ldc);
    fill_uniform(&rng, A, a_rows * lda, -1.0f, 1.0f);
    fill_uniform(&rng, B, b_rows * ldb, -1.0f, 1.0f);
    fill_uniform(&rng, C, M * ldc, -1.0f, 1.0f);
    if (beta == 0.0f)
        for (int64_t i = 0; i < M * ldc; i++)
            C[i] = NAN; /* beta = 0 overwrites, NaN must not survive */
    memcpy(C0, C, (size_t)(M * ldc) * sizeof(float));
    k_gemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    double *row = malloc((size_t)N * sizeof(double)), *magnitude = malloc((size_t)N * sizeof(double));
    cr_assert(row && magnitude);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++)
            row[j] = magnitude[j] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
            const float *b_row = trans_b ? NULL : B + k * ldb;
            for (int64_t j = 0; j < N; j++) {
                const double product = a * (trans_b ? B[j * ldb + k] : b_row[j]);
                row[j] += product;
                magnitude[j] += fabs(product);
            }
        }
        for (int64_t j = 0; j < N; j++) {
            const double c0 = beta == 0.0f ? 0.0 : (double)C0[i * ldc + j];
            const double expected = row[j] + beta * c0;
            cr_assert(fabs(C[i * ldc + j] - expected) <= 1e-5 * (magnitude[j] + fabs(c0) + 1e-30),
                      "ta=%d tb=%d M=%ld N=%ld K=%ld at (%ld,%ld): %.9g vs %.9g", trans_a, trans_b, (long)M, (long)N,
                      (long)K, (long)i, (long)j, (double)C[i * ldc + j], expected);
        }
        for (int64_t j = N; j < ldc; j++)
            cr_assert(memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) == 0);
    }
    free(A), free(B), free(C), free(C0), free(row), free(magnitude);
}

Test(kernels_gemm_ukernel, context_and_shape_rule) {
    if (k_isa_active() == K_ISA_AVX512) {
        cr_assert_not_null(k_gemm_ukernel_context(), "at the AVX-512 level the micro-kernel is registered");
        cr_assert(k_gemm_ukernel_pays(768, 512, 128));
    } else {
        cr_assert_null(k_gemm_ukernel_context());
        cr_assert(!k_gemm_ukernel_pays(768, 512, 128), "below AVX-512 every product stays on BLIS");
    }
    cr_assert(!k_gemm_ukernel_pays(37, 45, 19), "small products stay on BLIS's own path");
    cr_assert(!k_gemm_ukernel_pays(4096, 1, 384), "matrix-vector products stay on BLIS's own path");
}

Test(kernels_gemm_ukernel, crosses_register_and_cache_blocks) {
    k_set_threads(1);
    /* Edge tiles in both directions (M % 24, N % 16), K past one 256 block, M past one 480 block. */
    check_gemm_large(0, 1, 491, 77, 269, 1.0f, 11);
    check_gemm_large(0, 0, 65, 97, 300, 0.0f, 12);
    check_gemm_large(1, 0, 130, 64, 513, 1.0f, 13);
    check_gemm_large(1, 1, 64, 70, 17, 0.0f, 14);
    /* N past one 3072 block. */
    check_gemm_large(0, 1, 70, 3100, 20, 0.0f, 15);
    k_set_threads(2); /* and split over two threads by rows */
    check_gemm_large(0, 1, 500, 96, 130, 1.0f, 16);
}
