/* The decode-only multi-row GEMV (eval/matvec.h) against naive double loops,
 * on shapes that exercise every tail (K % 16, N % 4, odd M), at every
 * instruction-set level (and both walks of the AVX-512 one), with float32
 * and bf16 weights. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "eval/matvec.h"
#include "kernels/isa.h"
#include "kernels/type_traits.h"

/* Every kernel this CPU runs: each instruction-set level, and at AVX-512
 * both walks (eval_matvec_walk). */
static int n_kernels(void) { return (int)k_isa_supported() + 1 + (k_isa_supported() == K_ISA_AVX512); }

/* Forces kernel i of n_kernels() and returns its level. */
static int force_kernel(int i) {
    const int level = i > (int)K_ISA_AVX512 ? (int)K_ISA_AVX512 : i;
    cr_assert_eq(k_isa_force((k_isa)level), DT_OK, "%s", dt_error_message());
    eval_matvec_walk_force(i > (int)K_ISA_AVX512 ? EVAL_MATVEC_ROWWISE : EVAL_MATVEC_INTERLEAVED);
    return level;
}

static void check_matvec(int64_t M, int64_t K, int64_t N, int with_bias) {
    dt_rng rng;
    dt_rng_seed(&rng, (uint64_t)(M * 1000003 + K * 1009 + N));
    float *in = malloc((size_t)(M * K) * sizeof(float)), *w = malloc((size_t)(N * K) * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *out = malloc((size_t)(M * N) * sizeof(float));
    dt_rng_fill_normal(&rng, in, M * K, 1.0f);
    dt_rng_fill_normal(&rng, w, N * K, 1.0f);
    dt_rng_fill_normal(&rng, bias, N, 1.0f);
    eval_matvec(out, in, w, with_bias ? bias : NULL, M, K, N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double want = with_bias ? bias[n] : 0.0, magnitude = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                want += (double)in[m * K + k] * w[n * K + k];
                magnitude += fabs((double)in[m * K + k] * w[n * K + k]);
            }
            cr_assert(fabs(out[m * N + n] - want) <= 1e-5 * magnitude + 1e-6,
                      "M=%lld K=%lld N=%lld out[%lld,%lld] = %g, want %g", (long long)M, (long long)K, (long long)N,
                      (long long)m, (long long)n, out[m * N + n], want);
        }
    free(in);
    free(w);
    free(bias);
    free(out);
}

Test(matvec, tails_and_rows) {
    const int64_t Ms[] = {1, 2, 3, 4}, Ks[] = {1, 7, 16, 17, 100}, Ns[] = {1, 3, 4, 5, 33};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++)
                check_matvec(Ms[a], Ks[b], Ns[c], (a + b + c) % 2);
}

Test(matvec, parallel_sizes) { /* large enough for the OpenMP path */
    check_matvec(1, 768, 515, 1);
    check_matvec(2, 300, 1031, 0);
}

/* A batch equals its jobs run one by one (mixed M, N not multiple of 4, bias or not). */
Test(matvec, batch_equals_separate_products) {
    enum { K = 200 };
    const int64_t Ns[3] = {301, 64, 7}, Ms[3] = {2, 1, 2};
    dt_rng rng;
    dt_rng_seed(&rng, 77);
    float *in = malloc(2 * K * sizeof(float)), *bias = malloc(301 * sizeof(float));
    dt_rng_fill_normal(&rng, in, 2 * K, 1.0f);
    dt_rng_fill_normal(&rng, bias, 301, 1.0f);
    eval_matvec_job jobs[3];
    float *weights[3], *batched[3], *single[3];
    for (int j = 0; j < 3; j++) {
        weights[j] = malloc((size_t)(Ns[j] * K) * sizeof(float));
        batched[j] = malloc((size_t)(2 * Ns[j]) * sizeof(float));
        single[j] = malloc((size_t)(2 * Ns[j]) * sizeof(float));
        dt_rng_fill_normal(&rng, weights[j], Ns[j] * K, 1.0f);
        jobs[j] = (eval_matvec_job){batched[j], in, weights[j], j == 1 ? NULL : bias, Ms[j], K, Ns[j], DT_F32};
        eval_matvec(single[j], in, weights[j], j == 1 ? NULL : bias, Ms[j], K, Ns[j]);
    }
    eval_matvec_batch(jobs, 3);
    for (int j = 0; j < 3; j++) {
        cr_expect_arr_eq(batched[j], single[j], (size_t)(Ms[j] * Ns[j]) * sizeof(float), "job %d", j);
        free(weights[j]);
        free(batched[j]);
        free(single[j]);
    }
    free(in);
    free(bias);
}

/* ---- instruction-set levels and bf16 weights ------------------------------ */

/* Every level this CPU runs (kernels/isa.h), forced in turn: the float32
 * products against double sums, and the bf16 products (a) bit for bit equal
 * to the float32 products of the same level on the bf16-rounded weights
 * (widening is exact and the lanes and order are the float32 kernel's), and
 * (b) against double sums on the unrounded weights within the derived bound
 * 2^-8 S + gamma_{K+1} (1 + 2^-8) (S + |b|), S = sum_k |w_k x_k|: rounding
 * moves each weight by at most 2^-8 of itself (8 significant bits), and a
 * float32 sum of K products plus a bias is within gamma_{K+1} = (K+1) u /
 * (1 - (K+1) u), u = 2^-24, of its exact value in any order, FMA or not. */
static void check_levels(int64_t M, int64_t K, int64_t N, int with_bias) {
    dt_rng rng;
    dt_rng_seed(&rng, (uint64_t)(M * 7919 + K * 104729 + N));
    float *in = malloc((size_t)(M * K) * sizeof(float)), *w = malloc((size_t)(N * K) * sizeof(float));
    float *rounded = malloc((size_t)(N * K) * sizeof(float)), *bias = malloc((size_t)N * sizeof(float));
    uint16_t *w16 = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *out32 = malloc((size_t)(M * N) * sizeof(float)), *out16 = malloc((size_t)(M * N) * sizeof(float));
    dt_rng_fill_normal(&rng, in, M * K, 1.0f);
    dt_rng_fill_normal(&rng, w, N * K, 1.0f);
    dt_rng_fill_normal(&rng, bias, N, 1.0f);
    eval_matvec_bf16_pack(w16, w, N, K);
    for (int64_t i = 0; i < N * K; i++)
        rounded[i] = k_bf16_to_float(k_bf16_from_float(w[i]));
    const float *b = with_bias ? bias : NULL;
    const double u = ldexp(1.0, -24), gamma = (double)(K + 1) * u / (1.0 - (double)(K + 1) * u);
    for (int kernel = 0; kernel < n_kernels(); kernel++) {
        const int level = force_kernel(kernel);
        cr_assert_eq(k_isa_active(), (k_isa)level);
        eval_matvec(out32, in, rounded, b, M, K, N);
        eval_matvec_typed(out16, in, w16, DT_BF16, b, M, K, N);
        for (int64_t i = 0; i < M * N; i++)
            cr_assert_eq(out16[i], out32[i], "%s M=%lld K=%lld N=%lld: bf16 %.9g, float32 on rounded %.9g",
                         k_isa_name((k_isa)level), (long long)M, (long long)K, (long long)N, out16[i], out32[i]);
        eval_matvec(out32, in, w, b, M, K, N);
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double exact = with_bias ? bias[n] : 0.0, S = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    exact += (double)in[m * K + k] * w[n * K + k];
                    S += fabs((double)in[m * K + k] * w[n * K + k]);
                }
                const double B = with_bias ? fabs(bias[n]) : 0.0;
                cr_assert(fabs(out32[m * N + n] - exact) <= gamma * (S + B),
                          "%s float32 M=%lld K=%lld N=%lld: %g vs %g", k_isa_name((k_isa)level), (long long)M,
                          (long long)K, (long long)N, out32[m * N + n], exact);
                const double bound = ldexp(S, -8) + gamma * (1.0 + ldexp(1.0, -8)) * (S + B);
                cr_assert(fabs(out16[m * N + n] - exact) <= bound, "%s bf16 M=%lld K=%lld N=%lld: %g vs %g (bound %g)",
                          k_isa_name((k_isa)level), (long long)M, (long long)K, (long long)N, out16[m * N + n], exact,
                          bound);
            }
    }
    k_isa_reset();
    eval_matvec_walk_reset();
    free(in);
    free(w);
    free(rounded);
    free(bias);
    free(w16);
    free(out32);
    free(out16);
}

Test(matvec, every_level_float32_and_bf16) {
    /* K: below, at and past the vector widths (8, 16), the packed bf16 block (32) and their tails; N: full and
     * short blocks of 8 rows */
    const int64_t Ms[] = {1, 2, 3}, Ks[] = {1, 7, 8, 9, 16, 17, 31, 32, 40, 48, 65, 257}, Ns[] = {1, 5, 8, 9, 33};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 12; k++)
            for (int n = 0; n < 5; n++)
                check_levels(Ms[a], Ks[k], Ns[n], (a + k + n) % 2);
    check_levels(2, 768, 515, 1); /* the OpenMP path */
}

/* Two input rows at once (grouped decode's stacked primary and branch rows)
 * give each row exactly the product of that row alone (baseline decode), at
 * every level and for both weight types: the kernels run the same FMAs per
 * (weight row, input row) whatever the number of input rows. */
static void check_two_rows_as_one(int64_t K, int64_t N) {
    dt_rng rng;
    dt_rng_seed(&rng, (uint64_t)(K * 31 + N));
    float *in = malloc((size_t)(2 * K) * sizeof(float)), *w = malloc((size_t)(N * K) * sizeof(float));
    uint16_t *w16 = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *two = malloc((size_t)(2 * N) * sizeof(float)), *one = malloc((size_t)N * sizeof(float));
    dt_rng_fill_normal(&rng, in, 2 * K, 1.0f);
    dt_rng_fill_normal(&rng, w, N * K, 1.0f);
    eval_matvec_bf16_pack(w16, w, N, K);
    for (int kernel = 0; kernel < n_kernels(); kernel++) {
        const int level = force_kernel(kernel);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            const void *weight = bf16 ? (const void *)w16 : (const void *)w;
            const dt_dtype type = bf16 ? DT_BF16 : DT_F32;
            eval_matvec_typed(two, in, weight, type, NULL, 2, K, N);
            for (int64_t m = 0; m < 2; m++) {
                eval_matvec_typed(one, in + m * K, weight, type, NULL, 1, K, N);
                cr_assert_arr_eq(two + m * N, one, (size_t)N * sizeof(float), "%s %s K=%lld N=%lld: input row %lld",
                                 k_isa_name((k_isa)level), bf16 ? "bf16" : "float32", (long long)K, (long long)N,
                                 (long long)m);
            }
        }
    }
    k_isa_reset();
    eval_matvec_walk_reset();
    free(in);
    free(w);
    free(w16);
    free(two);
    free(one);
}

Test(matvec, two_input_rows_give_each_row_its_own_product) {
    const int64_t Ks[] = {7, 32, 40, 257, 768}, Ns[] = {5, 8, 33, 515};
    for (int k = 0; k < 5; k++)
        for (int n = 0; n < 4; n++)
            check_two_rows_as_one(Ks[k], Ns[n]);
}

/* The level is forced down, never up, and words other than the three are refused. */
Test(matvec, isa_levels_forced_down_only) {
    k_isa level;
    cr_assert_eq(k_isa_parse("avx2", &level), DT_OK);
    cr_assert_eq(level, K_ISA_AVX2);
    cr_assert_eq(k_isa_parse("sse2", &level), DT_ERR);
    cr_assert(strstr(dt_error_message(), "'sse2'"), "%s", dt_error_message());
    cr_assert_eq(k_isa_force((k_isa)7), DT_ERR);
    if (k_isa_supported() < K_ISA_AVX512) {
        cr_assert_eq(k_isa_force(K_ISA_AVX512), DT_ERR);
        cr_assert(strstr(dt_error_message(), "supports up to"), "%s", dt_error_message());
    }
    cr_assert_eq(k_isa_force(K_ISA_SCALAR), DT_OK);
    cr_assert_eq(k_isa_active(), K_ISA_SCALAR);
    k_isa_reset();
    cr_assert_eq(k_isa_active(), k_isa_supported());
}

/* The AVX-512 level's rowwise walk is the AVX2 level's kernel, bit for bit,
 * and the interleaved walk is another kernel (it sums in another order);
 * DBRANCH_MATVEC's words. */
Test(matvec, avx512_walks_are_two_kernels) {
    cr_assert_eq(setenv("DBRANCH_MATVEC", "diagonal", 1), 0);
    cr_assert_eq(eval_matvec_walk_from_environment(), DT_ERR);
    cr_assert(strstr(dt_error_message(), "'diagonal'"), "%s", dt_error_message());
    cr_assert_eq(setenv("DBRANCH_MATVEC", "rowwise", 1), 0);
    cr_assert_eq(eval_matvec_walk_from_environment(), DT_OK);
    cr_assert_eq(eval_matvec_walk_active(), EVAL_MATVEC_ROWWISE);
    cr_assert_eq(unsetenv("DBRANCH_MATVEC"), 0);
    eval_matvec_walk_reset();
    cr_assert_eq(eval_matvec_walk_active(), eval_matvec_walk_default());
    if (k_isa_supported() < K_ISA_AVX512) {
        cr_log_info("no AVX-512 on this CPU: the walks are not reachable");
        return;
    }
    enum { M = 2, K = 768, N = 64 };
    dt_rng rng;
    dt_rng_seed(&rng, 77);
    float *in = malloc(M * K * sizeof(float)), *w = malloc(N * K * sizeof(float));
    float *avx2 = malloc(M * N * sizeof(float)), *rowwise = malloc(M * N * sizeof(float));
    float *interleaved = malloc(M * N * sizeof(float));
    dt_rng_fill_normal(&rng, in, M * K, 1.0f);
    dt_rng_fill_normal(&rng, w, N * K, 1.0f);
    cr_assert_eq(k_isa_force(K_ISA_AVX2), DT_OK);
    eval_matvec(avx2, in, w, NULL, M, K, N);
    cr_assert_eq(k_isa_force(K_ISA_AVX512), DT_OK);
    eval_matvec_walk_force(EVAL_MATVEC_ROWWISE);
    eval_matvec(rowwise, in, w, NULL, M, K, N);
    eval_matvec_walk_force(EVAL_MATVEC_INTERLEAVED);
    eval_matvec(interleaved, in, w, NULL, M, K, N);
    cr_assert_arr_eq(rowwise, avx2, M * N * sizeof(float));
    cr_assert(memcmp(interleaved, avx2, M * N * sizeof(float)) != 0, "the interleaved walk ran the one-row kernel");
    k_isa_reset();
    eval_matvec_walk_reset();
    free(in), free(w), free(avx2), free(rowwise), free(interleaved);
}

/* The packed bf16 layout (matvec.h): element i of a full 32-block at 2i, 16+i at 2i+1, the tail in order. */
Test(matvec, bf16_packing_positions) {
    cr_assert_eq(eval_matvec_bf16_position(0, 64), 0);
    cr_assert_eq(eval_matvec_bf16_position(1, 64), 2);
    cr_assert_eq(eval_matvec_bf16_position(15, 64), 30);
    cr_assert_eq(eval_matvec_bf16_position(16, 64), 1);
    cr_assert_eq(eval_matvec_bf16_position(31, 64), 31);
    cr_assert_eq(eval_matvec_bf16_position(33, 64), 34);
    cr_assert_eq(eval_matvec_bf16_position(48, 64), 33);
    cr_assert_eq(eval_matvec_bf16_position(32, 40), 32, "the tail of 8 stays in order");
    cr_assert_eq(eval_matvec_bf16_position(39, 40), 39);
    cr_assert_eq(eval_matvec_bf16_position(5, 31), 5, "a row shorter than a block is not packed");
    const float src[2] = {1.0f, -2.5f};
    uint16_t dst[2];
    eval_matvec_bf16_pack(dst, src, 2, 1);
    cr_assert_eq(dst[0], 0x3f80);
    cr_assert_eq(dst[1], 0xc020);
}
