/* bfloat16 matrix products (kernels/gemm_bf16.h), on both engines: against
 * a float64 product of the bf16-rounded operands within a bound derived from
 * float32 summation, the widen engine bit for bit against k_gemm on
 * pre-rounded operands, a given bf16 copy against the float32 it was rounded
 * from, every transpose, alpha, beta and row stride, the bias form, and
 * proof the rounding happens (the unrounded float32 product differs). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "kernels/type_traits.h"
#include "support/onednn_bf16.h"

static float *random_floats(dt_rng *rng, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    cr_assert(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = 2.0f * dt_rng_uniform(rng) - 1.0f;
    return x;
}

static float rounded(float x) { return k_bf16_to_float(k_bf16_from_float(x)); }

/* op(X)[i][k] of a row-major X with row stride ld */
static float element(const float *X, int transposed, int64_t ld, int64_t i, int64_t k) {
    return transposed ? X[k * ld + i] : X[i * ld + k];
}

typedef struct product_case {
    int trans_a, trans_b;
    int64_t M, N, K;
    int64_t pad; /* extra columns in every row stride */
    float alpha, beta;
} product_case;

static const product_case cases[] = {
    {0, 1, 67, 45, 33, 0, 1.0f, 0.0f},  /* the linear forward: x W^T */
    {0, 0, 64, 48, 40, 3, 1.0f, 1.0f},  /* d_x += d_y W, strided */
    {1, 0, 40, 24, 70, 0, 1.0f, 1.0f},  /* d_W += d_y^T x */
    {1, 1, 17, 29, 13, 5, -0.5f, 0.25f} /* both transposed, alpha and beta */
};

/* Runs one case on the active engine and checks it against float64 on the
 * rounded operands: |error| <= (K + 2) * 2^-23 * sum |a b| + |beta c| terms. */
static void check_case(const product_case *pc, int give_bf16_copies) {
    dt_rng rng;
    dt_rng_seed(&rng, (uint64_t)(pc->M * 131 + pc->N * 7 + pc->K));
    const int64_t a_rows = pc->trans_a ? pc->K : pc->M, a_cols = (pc->trans_a ? pc->M : pc->K);
    const int64_t b_rows = pc->trans_b ? pc->N : pc->K, b_cols = (pc->trans_b ? pc->K : pc->N);
    const int64_t lda = a_cols + pc->pad, ldb = b_cols + pc->pad, ldc = pc->N + pc->pad;
    float *A = random_floats(&rng, a_rows * lda), *B = random_floats(&rng, b_rows * ldb);
    float *C = random_floats(&rng, pc->M * ldc);
    float *C0 = malloc((size_t)(pc->M * ldc) * sizeof *C0);
    memcpy(C0, C, (size_t)(pc->M * ldc) * sizeof *C0);
    uint16_t *A16 = NULL, *B16 = NULL;
    if (give_bf16_copies) {
        A16 = malloc((size_t)(a_rows * lda) * sizeof *A16);
        B16 = malloc((size_t)(b_rows * ldb) * sizeof *B16);
        k_bf16_round(A16, A, a_rows * lda);
        k_bf16_round(B16, B, b_rows * ldb);
    }
    k_gemm_bf16(pc->trans_a, pc->trans_b, pc->M, pc->N, pc->K, pc->alpha, give_bf16_copies ? NULL : A, A16, lda,
                give_bf16_copies ? NULL : B, B16, ldb, pc->beta, C, ldc);
    const double unit = ldexp(1.0, -23);
    for (int64_t i = 0; i < pc->M; i++)
        for (int64_t j = 0; j < pc->N; j++) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < pc->K; k++) {
                const double product = (double)rounded(element(A, pc->trans_a, lda, i, k)) *
                                       (double)rounded(element(B, pc->trans_b, ldb, k, j));
                exact += product;
                magnitude += fabs(product);
            }
            const double c0 = C0[i * ldc + j];
            const double expected = pc->alpha * exact + pc->beta * c0;
            const double bound = (pc->K + 2) * unit * (fabs(pc->alpha) * magnitude + fabs(pc->beta * c0)) + 1e-30;
            cr_assert(fabs(C[i * ldc + j] - expected) <= bound, "%s C[%lld][%lld] = %.9g, expected %.9g (bound %.3g)",
                      k_bf16_gemm_name(k_bf16_gemm_active()), (long long)i, (long long)j, C[i * ldc + j], expected,
                      bound);
        }
    /* the padding between rows of C is never written */
    for (int64_t i = 0; i < pc->M; i++)
        for (int64_t j = pc->N; j < ldc; j++)
            cr_assert_eq(C[i * ldc + j], C0[i * ldc + j]);
    free(A), free(B), free(C), free(C0), free(A16), free(B16);
}

static void check_all_cases(k_bf16_gemm_engine engine) {
    cr_assert_eq(k_bf16_gemm_force(engine), DT_OK, "%s", dt_error_message());
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(&cases[c], 0);
        check_case(&cases[c], 1);
    }
    k_bf16_gemm_reset();
}

Test(gemm_bf16, widen_engine_matches_float64_on_rounded_operands) { check_all_cases(K_BF16_GEMM_WIDEN); }

Test(gemm_bf16, onednn_engine_matches_float64_on_rounded_operands) {
    test_require_onednn_bf16();
    check_all_cases(K_BF16_GEMM_ONEDNN);
}

/* Twice through the same shapes: the second pass runs on cached primitives. */
Test(gemm_bf16, onednn_cached_primitives_give_the_same_bits) {
    test_require_onednn_bf16();
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_ONEDNN), DT_OK);
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    const int64_t M = 96, N = 80, K = 64;
    float *A = random_floats(&rng, M * K), *B = random_floats(&rng, N * K);
    float *first = calloc((size_t)(M * N), sizeof *first), *second = calloc((size_t)(M * N), sizeof *second);
    k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, B, NULL, K, 0.0f, first, N);
    k_gemm_bf16(0, 0, M, K, N, 1.0f, first, NULL, N, B, NULL, K, 0.0f, A, K); /* another shape in between */
    k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, B, NULL, K, 0.0f, second, N);
    k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, B, NULL, K, 0.0f, first, N);
    cr_assert(!memcmp(first, second, (size_t)(M * N) * sizeof *first));
    free(A), free(B), free(first), free(second);
    k_bf16_gemm_reset();
}

/* The widen engine is k_gemm on the rounded operands, to the bit. */
Test(gemm_bf16, widen_is_float32_gemm_of_rounded_operands_bit_for_bit) {
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_WIDEN), DT_OK);
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    const int64_t M = 130, N = 70, K = 50;
    float *A = random_floats(&rng, M * K), *B = random_floats(&rng, N * K);
    float *A_rounded = malloc((size_t)(M * K) * sizeof *A_rounded), *B_rounded = malloc((size_t)(N * K) * sizeof *B);
    for (int64_t i = 0; i < M * K; i++)
        A_rounded[i] = rounded(A[i]);
    for (int64_t i = 0; i < N * K; i++)
        B_rounded[i] = rounded(B[i]);
    float *got = calloc((size_t)(M * N), sizeof *got), *want = calloc((size_t)(M * N), sizeof *want);
    float *unrounded = calloc((size_t)(M * N), sizeof *unrounded);
    k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, B, NULL, K, 0.0f, got, N);
    k_gemm(0, 1, M, N, K, 1.0f, A_rounded, K, B_rounded, K, 0.0f, want, N);
    k_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, unrounded, N);
    cr_assert(!memcmp(got, want, (size_t)(M * N) * sizeof *got));
    /* and the rounding is real: the float32 product of the raw operands differs */
    cr_assert(memcmp(got, unrounded, (size_t)(M * N) * sizeof *got) != 0);
    free(A), free(B), free(A_rounded), free(B_rounded), free(got), free(want), free(unrounded);
    k_bf16_gemm_reset();
}

/* k_gemm_bf16_bias: C = x W^T + bias against float64 on the rounded operands
 * plus the bias, NaN in C beforehand never read, the padding between rows
 * never written; on the widen engine bit for bit the bias written into C
 * and the product added (beta = 1), and with bias = NULL the beta = 0
 * product. */
static void check_bias_product(k_bf16_gemm_engine engine) {
    cr_assert_eq(k_bf16_gemm_force(engine), DT_OK, "%s", dt_error_message());
    enum { M = 37, N = 29, K = 45, LDC = N + 3 };
    dt_rng rng;
    dt_rng_seed(&rng, 77);
    float *A = random_floats(&rng, M * K), *W = random_floats(&rng, N * K), *bias = random_floats(&rng, N);
    float *C = malloc(M * LDC * sizeof *C), *reference = malloc(M * LDC * sizeof *reference);
    cr_assert(C && reference);
    for (int64_t i = 0; i < M * LDC; i++)
        C[i] = reference[i] = NAN;
    cr_assert_eq(k_gemm_bf16_bias(0, 1, M, N, K, 1.0f, A, NULL, K, W, NULL, K, bias, C, LDC), DT_OK);
    const double unit = ldexp(1.0, -23);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double exact = bias[j], magnitude = fabs(bias[j]);
            for (int64_t k = 0; k < K; k++) {
                const double product = (double)rounded(A[i * K + k]) * (double)rounded(W[j * K + k]);
                exact += product;
                magnitude += fabs(product);
            }
            cr_assert(fabs(C[i * LDC + j] - exact) <= (K + 2) * unit * magnitude, "%s C[%lld][%lld] = %.9g, %.9g",
                      k_bf16_gemm_name(engine), (long long)i, (long long)j, C[i * LDC + j], exact);
        }
        for (int64_t j = N; j < LDC; j++)
            cr_assert(isnan(C[i * LDC + j]), "padding written");
    }
    if (engine == K_BF16_GEMM_WIDEN) {
        for (int64_t i = 0; i < M; i++)
            memcpy(reference + i * LDC, bias, N * sizeof *bias);
        k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, W, NULL, K, 1.0f, reference, LDC);
        for (int64_t i = 0; i < M; i++)
            cr_assert(!memcmp(C + i * LDC, reference + i * LDC, N * sizeof *C), "widen: row %lld differs",
                      (long long)i);
    }
    /* no bias: the beta = 0 product */
    cr_assert_eq(k_gemm_bf16_bias(0, 1, M, N, K, 1.0f, A, NULL, K, W, NULL, K, NULL, C, LDC), DT_OK);
    k_gemm_bf16(0, 1, M, N, K, 1.0f, A, NULL, K, W, NULL, K, 0.0f, reference, LDC);
    for (int64_t i = 0; i < M; i++)
        cr_assert(!memcmp(C + i * LDC, reference + i * LDC, N * sizeof *C), "no bias: row %lld differs", (long long)i);
    free(A), free(W), free(bias), free(C), free(reference);
    k_bf16_gemm_reset();
}

Test(gemm_bf16, bias_product_adds_the_bias_once) {
    check_bias_product(K_BF16_GEMM_WIDEN);
    test_require_onednn_bf16();
    check_bias_product(K_BF16_GEMM_ONEDNN);
}

/* beta = 0 overwrites C: NaN already there never leaks through. */
static void check_beta_zero_overwrites_nan(k_bf16_gemm_engine engine) {
    cr_assert_eq(k_bf16_gemm_force(engine), DT_OK);
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1}; /* A [2,3], B [2,3] (trans_b) */
    float C[4] = {NAN, NAN, NAN, NAN};
    k_gemm_bf16(0, 1, 2, 2, 3, 1.0f, A, NULL, 3, B, NULL, 3, 0.0f, C, 2);
    /* C[i][j] = A row i . B row j, worked by hand: rows (1,2,3), (4,5,6) against (1,0,0), (1,1,1) */
    cr_assert_eq(C[0], 1.0f);
    cr_assert_eq(C[1], 6.0f);
    cr_assert_eq(C[2], 4.0f);
    cr_assert_eq(C[3], 15.0f);
    k_bf16_gemm_reset();
}

Test(gemm_bf16, beta_zero_overwrites_nan) {
    check_beta_zero_overwrites_nan(K_BF16_GEMM_WIDEN);
    test_require_onednn_bf16();
    check_beta_zero_overwrites_nan(K_BF16_GEMM_ONEDNN);
}

Test(gemm_bf16, rounding_matches_the_scalar_reference) {
    const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7fffffu,
                                 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x00000001u,
                                 0x80000000u, 0x3effffffu, 0xc1234567u, 0x00800000u};
    const int64_t n = sizeof patterns / sizeof patterns[0];
    float src[sizeof patterns / sizeof patterns[0]];
    memcpy(src, patterns, sizeof src);
    uint16_t got[sizeof patterns / sizeof patterns[0]];
    k_bf16_round(got, src, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], k_bf16_from_float(src[i]), "pattern %08x", patterns[i]);
}

Test(gemm_bf16, engine_words_and_environment) {
    k_bf16_gemm_engine engine;
    cr_assert_eq(k_bf16_gemm_parse("onednn", &engine), DT_OK);
    cr_assert_eq(engine, K_BF16_GEMM_ONEDNN);
    cr_assert_eq(k_bf16_gemm_parse("widen", &engine), DT_OK);
    cr_assert_eq(engine, K_BF16_GEMM_WIDEN);
    cr_assert_eq(k_bf16_gemm_parse("amx", &engine), DT_ERR);
    cr_assert(strstr(dt_error_message(), "'amx'") && strstr(dt_error_message(), "onednn|widen"), "%s",
              dt_error_message());
    setenv("DBRANCH_BF16_GEMM", "widen", 1);
    cr_assert_eq(k_bf16_gemm_from_environment(), DT_OK);
    cr_assert_eq(k_bf16_gemm_active(), K_BF16_GEMM_WIDEN);
    setenv("DBRANCH_BF16_GEMM", "fast", 1);
    cr_assert_eq(k_bf16_gemm_from_environment(), DT_ERR);
    cr_assert(strstr(dt_error_message(), "DBRANCH_BF16_GEMM"), "%s", dt_error_message());
    unsetenv("DBRANCH_BF16_GEMM");
    k_bf16_gemm_reset();
    cr_assert_eq(k_bf16_gemm_active(), k_bf16_gemm_default());
    if (k_isa_supported() >= K_ISA_AVX512) {
        cr_assert(strcmp(k_bf16_gemm_onednn_kernel(), "unavailable") != 0, "oneDNN runs bf16 matmul on AVX-512");
    } else { /* below AVX-512 oneDNN has none: asking for it is one clear error, and the default widens */
        cr_assert_str_eq(k_bf16_gemm_onednn_kernel(), "unavailable");
        cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_ONEDNN), DT_ERR);
        cr_assert(strstr(dt_error_message(), "use widen"), "%s", dt_error_message());
        cr_assert_eq(k_bf16_gemm_default(), K_BF16_GEMM_WIDEN);
    }
}

/* oneDNN's own ISA cap (read once per process, before its first primitive;
 * Criterion runs each test in a fresh process): on a CPU with AMX or
 * AVX512_BF16 the test above runs those kernels, this one oneDNN's plain
 * AVX-512 emulation, so both levels are checked wherever the suite runs. */
Test(gemm_bf16, onednn_capped_at_plain_avx512_matches_float64) {
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
    test_require_onednn_bf16();
    const char *kernel = k_bf16_gemm_onednn_kernel();
    cr_assert(strcmp(kernel, "unavailable") != 0);
    cr_assert(!strstr(kernel, "amx") && !strstr(kernel, "bf16"), "capped oneDNN still picked %s", kernel);
    check_all_cases(K_BF16_GEMM_ONEDNN);
}
