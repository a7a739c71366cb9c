/* The bf16 attention kernels (kernels/attention_amx.h), on each engine the
 * CPU has (AMX tiles, AVX512_BF16's vdpbf16ps), against the naive
 * double-precision attention on the bf16-rounded operands (q, k, v and d_out
 * rounded as the kernels round them), forward and backward, across the tile
 * boundary, GQA groups, every served head width, the accumulate and write
 * forms and NULL gradients; bit-identical for any thread count; and the
 * engine choice (DBRANCH_BF16_ATTENTION). On a CPU with neither engine the
 * kernel tests are skipped (the float32 kernels, tested elsewhere, then run
 * instead), and the engine tests check the refusal. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/isa.h"
#include "kernels/type_traits.h"
#include "support/naive_attention.h"

typedef naive_attention_shape shape;

static int64_t q_size(shape s) { return s.B * s.T * s.H * s.hd; }
static int64_t kv_size(shape s) { return s.B * s.T * s.Hkv * s.hd; }

static float *random_floats(dt_rng *rng, int64_t n, float std) {
    float *x = malloc((size_t)n * sizeof *x);
    cr_assert_not_null(x);
    dt_rng_fill_normal(rng, x, n, std);
    return x;
}
static double *doubles(int64_t n) {
    double *x = calloc((size_t)n, sizeof *x);
    cr_assert_not_null(x);
    return x;
}
static float *rounded_copy(const float *x, int64_t n) {
    float *y = malloc((size_t)n * sizeof *y);
    cr_assert_not_null(y);
    for (int64_t i = 0; i < n; i++)
        y[i] = k_bf16_to_float(k_bf16_from_float(x[i]));
    return y;
}
static void *scratch_of(size_t bytes) {
    void *p = NULL;
    cr_assert(posix_memalign(&p, 64, bytes > 0 ? bytes : 64) == 0);
    return p;
}

/* The bf16 engines this CPU runs, into engines[]; skips the test when none. */
static int engines_here(k_bf16_attention_engine engines[2]) {
    int n = 0;
    if (k_bf16_attention_available(K_BF16_ATTENTION_AMX)) engines[n++] = K_BF16_ATTENTION_AMX;
    if (k_bf16_attention_available(K_BF16_ATTENTION_AVX512_BF16)) engines[n++] = K_BF16_ATTENTION_AVX512_BF16;
    if (n == 0) cr_skip_test("this CPU has neither AMX-BF16 tiles nor AVX512_BF16");
    return n;
}

static k_bf16_attention_engine engine_under_test = K_BF16_ATTENTION_AMX;

/* Runs check once per engine this CPU has, with engine_under_test set. */
static void for_each_engine(void (*check)(void)) {
    k_bf16_attention_engine engines[2];
    for (int e = 0, n = engines_here(engines); e < n; e++) {
        engine_under_test = engines[e];
        check();
    }
}

/* |got - (base + want)| <= tol * max|want| elementwise (base NULL: 0). The
 * bound: besides the rounded inputs (which the reference shares), the kernel
 * rounds P (and dS) to bf16, a relative error of at most 2^-9 per weight, in
 * sums whose terms are bounded by the largest output; 2^-6 leaves room for
 * the float32 sums and the softmax statistics. A layout or mask error is
 * O(max|want|). Plus float32's rounding of base + x, 2^-23 |base + x|. */
static void assert_close(const char *what, const float *got, const float *base, const double *want, int64_t n,
                         shape s) {
    double largest = 0.0;
    for (int64_t i = 0; i < n; i++)
        largest = fmax(largest, fabs(want[i]));
    const double bound = 0x1p-6 * fmax(largest, 1e-2); /* T = 1: the exact gradient is 0, float32's is not */
    for (int64_t i = 0; i < n; i++) {
        const double expected = (base ? (double)base[i] : 0.0) + want[i];
        const double err = fabs((double)got[i] - expected);
        cr_assert(err <= bound + 0x1p-23 * fabs(expected),
                  "%s %s[%lld]: got %.7g want %.7g (err %.3g > %.3g) B=%lld T=%lld H=%lld Hkv=%lld hd=%lld",
                  k_bf16_attention_name(engine_under_test), what, (long long)i, got[i], expected, err, bound,
                  (long long)s.B, (long long)s.T, (long long)s.H, (long long)s.Hkv, (long long)s.hd);
    }
}

typedef struct inputs {
    float *q, *k, *v, *d_out;        /* as the model has them */
    float *q16, *k16, *v16, *dout16; /* rounded to bf16, for the reference */
} inputs;

static inputs make_inputs(shape s, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    inputs in;
    /* std 1.5: scores of a few units, the softmax far from uniform */
    in.q = random_floats(&rng, q_size(s), 1.5f);
    in.k = random_floats(&rng, kv_size(s), 1.5f);
    in.v = random_floats(&rng, kv_size(s), 1.0f);
    in.d_out = random_floats(&rng, q_size(s), 1.0f);
    in.q16 = rounded_copy(in.q, q_size(s));
    in.k16 = rounded_copy(in.k, kv_size(s));
    in.v16 = rounded_copy(in.v, kv_size(s));
    in.dout16 = rounded_copy(in.d_out, q_size(s));
    return in;
}

static void free_inputs(inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->d_out);
    free(in->q16), free(in->k16), free(in->v16), free(in->dout16);
}

static void amx_forward(float *out, float *lse, const inputs *in, shape s) {
    void *scratch = scratch_of(k_attention_amx_forward_scratch(s.B, s.T, s.Hkv, s.hd));
    k_attention_amx_forward(engine_under_test, out, lse, in->q, in->k, in->v, s.B, s.T, s.H, s.Hkv, s.hd, scratch);
    free(scratch);
}

static void check_forward(shape s, uint64_t seed) {
    inputs in = make_inputs(s, seed);
    float *out = malloc((size_t)q_size(s) * sizeof *out), *lse = malloc((size_t)(s.B * s.H * s.T) * sizeof *lse);
    double *want = doubles(q_size(s)), *want_lse = doubles(s.B * s.H * s.T);
    naive_attention_forward(want, want_lse, in.q16, in.k16, in.v16, s, NULL);
    amx_forward(out, lse, &in, s);
    assert_close("out", out, NULL, want, q_size(s), s);
    /* lse: the scores' sums are of exact bf16 products, so only float32
     * summation and the exponentials separate it from the reference */
    for (int64_t i = 0; i < s.B * s.H * s.T; i++)
        cr_assert(fabs(lse[i] - want_lse[i]) <= 1e-4 * (1.0 + fabs(want_lse[i])), "lse[%lld]: %.7g vs %.7g",
                  (long long)i, lse[i], want_lse[i]);
    free(out), free(lse), free(want), free(want_lse);
    free_inputs(&in);
}

static const shape shapes[] = {
    {1, 1, 2, 2, 32},   /* one position */
    {2, 64, 4, 4, 32},  /* nanoGPT-baby's heads, one tile */
    {1, 200, 6, 2, 64}, /* GQA, a partial last tile */
    {2, 256, 6, 6, 64}, /* the char config's attention */
    {1, 130, 2, 1, 128} /* the widest head served, two tiles and a row */
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static void check_forward_shapes(void) {
    for (size_t i = 0; i < N_SHAPES; i++)
        check_forward(shapes[i], 11 + i);
}

Test(attention_amx, forward_matches_naive_on_rounded_operands) { for_each_engine(check_forward_shapes); }

/* Backward after the AMX forward (its out and lse, as training runs it):
 * d_q accumulated onto values already there, d_k written over garbage, d_v
 * accumulated, then again with d_q NULL. */
static void check_backward(shape s, uint64_t seed) {
    inputs in = make_inputs(s, seed);
    float *out = malloc((size_t)q_size(s) * sizeof *out), *lse = malloc((size_t)(s.B * s.H * s.T) * sizeof *lse);
    amx_forward(out, lse, &in, s);
    double *want_dq = doubles(q_size(s)), *want_dk = doubles(kv_size(s)), *want_dv = doubles(kv_size(s));
    naive_attention_backward(want_dq, want_dk, want_dv, in.dout16, in.q16, in.k16, in.v16, s, NULL);

    dt_rng rng;
    dt_rng_seed(&rng, seed + 1000);
    float *dq = random_floats(&rng, q_size(s), 1.0f), *dq_before = malloc((size_t)q_size(s) * sizeof(float));
    memcpy(dq_before, dq, (size_t)q_size(s) * sizeof(float));
    float *dk = random_floats(&rng, kv_size(s), 1e30f); /* written: never read */
    float *dv = random_floats(&rng, kv_size(s), 1.0f), *dv_before = malloc((size_t)kv_size(s) * sizeof(float));
    memcpy(dv_before, dv, (size_t)kv_size(s) * sizeof(float));
    void *scratch = scratch_of(k_attention_amx_backward_scratch(s.B, s.T, s.H, s.Hkv, s.hd));
    k_attention_amx_backward(engine_under_test, dq, 1, dk, 0, dv, 1, in.d_out, in.q, in.k, in.v, out, lse, s.B, s.T,
                             s.H, s.Hkv, s.hd, scratch);
    assert_close("d_q", dq, dq_before, want_dq, q_size(s), s);
    assert_close("d_k", dk, NULL, want_dk, kv_size(s), s);
    assert_close("d_v", dv, dv_before, want_dv, kv_size(s), s);

    memset(dk, 0, (size_t)kv_size(s) * sizeof(float));
    memcpy(dv, dv_before, (size_t)kv_size(s) * sizeof(float));
    k_attention_amx_backward(engine_under_test, NULL, 0, dk, 1, dv, 0, in.d_out, in.q, in.k, in.v, out, lse, s.B, s.T,
                             s.H, s.Hkv, s.hd, scratch);
    assert_close("d_k (no d_q)", dk, NULL, want_dk, kv_size(s), s);
    assert_close("d_v (no d_q, written)", dv, NULL, want_dv, kv_size(s), s);
    free(scratch), free(dq), free(dq_before), free(dk), free(dv), free(dv_before);
    free(want_dq), free(want_dk), free(want_dv), free(out), free(lse);
    free_inputs(&in);
}

static void check_backward_shapes(void) {
    for (size_t i = 0; i < N_SHAPES; i++)
        check_backward(shapes[i], 31 + i);
}

Test(attention_amx, backward_matches_naive_on_rounded_operands) { for_each_engine(check_backward_shapes); }

/* Only d_v asked for: the dP and dS products are skipped, d_v is unchanged. */
static void check_value_gradient_alone(void) {
    const shape s = {1, 150, 4, 2, 64};
    inputs in = make_inputs(s, 5);
    float *out = malloc((size_t)q_size(s) * sizeof *out), *lse = malloc((size_t)(s.B * s.H * s.T) * sizeof *lse);
    amx_forward(out, lse, &in, s);
    double *want_dq = doubles(q_size(s)), *want_dk = doubles(kv_size(s)), *want_dv = doubles(kv_size(s));
    naive_attention_backward(want_dq, want_dk, want_dv, in.dout16, in.q16, in.k16, in.v16, s, NULL);
    float *dv = calloc((size_t)kv_size(s), sizeof *dv);
    void *scratch = scratch_of(k_attention_amx_backward_scratch(s.B, s.T, s.H, s.Hkv, s.hd));
    k_attention_amx_backward(engine_under_test, NULL, 0, NULL, 0, dv, 0, in.d_out, in.q, in.k, in.v, out, lse, s.B, s.T,
                             s.H, s.Hkv, s.hd, scratch);
    assert_close("d_v", dv, NULL, want_dv, kv_size(s), s);
    free(scratch), free(dv), free(want_dq), free(want_dk), free(want_dv), free(out), free(lse);
    free_inputs(&in);
}

Test(attention_amx, backward_value_gradient_alone) { for_each_engine(check_value_gradient_alone); }

/* Proof the products round: the bf16 output differs from the float32 kernel's
 * on the unrounded inputs, by about bf16's precision, not more. */
static void check_products_are_rounded(void) {
    const shape s = {1, 128, 2, 2, 64};
    inputs in = make_inputs(s, 9);
    float *out = malloc((size_t)q_size(s) * sizeof *out), *lse = malloc((size_t)(s.B * s.H * s.T) * sizeof *lse);
    float *out32 = malloc((size_t)q_size(s) * sizeof *out32), *lse32 = malloc((size_t)(s.B * s.H * s.T) * sizeof *lse);
    amx_forward(out, lse, &in, s);
    k_attention_forward(out32, lse32, in.q, in.k, in.v, s.B, s.T, s.H, s.Hkv, s.hd);
    double largest = 0.0;
    for (int64_t i = 0; i < q_size(s); i++)
        largest = fmax(largest, fabs(out[i] - out32[i]));
    cr_assert(largest > 1e-4, "the %s output equals float32's within %g: were the operands rounded?",
              k_bf16_attention_name(engine_under_test), largest);
    cr_assert(largest < 0.1, "the %s output is %g from float32's", k_bf16_attention_name(engine_under_test), largest);
    free(out), free(lse), free(out32), free(lse32);
    free_inputs(&in);
}

Test(attention_amx, products_are_rounded_to_bf16) { for_each_engine(check_products_are_rounded); }

static void check_thread_count(void) {
    const shape s = {2, 256, 4, 2, 64};
    inputs in = make_inputs(s, 21);
    float *out[2], *lse[2], *dq[2], *dk[2], *dv[2];
    void *scratch = scratch_of(k_attention_amx_backward_scratch(s.B, s.T, s.H, s.Hkv, s.hd));
    const int saved = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 3);
        out[run] = malloc((size_t)q_size(s) * sizeof(float));
        lse[run] = malloc((size_t)(s.B * s.H * s.T) * sizeof(float));
        dq[run] = malloc((size_t)q_size(s) * sizeof(float));
        dk[run] = malloc((size_t)kv_size(s) * sizeof(float));
        dv[run] = malloc((size_t)kv_size(s) * sizeof(float));
        amx_forward(out[run], lse[run], &in, s);
        k_attention_amx_backward(engine_under_test, dq[run], 0, dk[run], 0, dv[run], 0, in.d_out, in.q, in.k, in.v,
                                 out[run], lse[run], s.B, s.T, s.H, s.Hkv, s.hd, scratch);
    }
    omp_set_num_threads(saved);
    cr_assert(!memcmp(out[0], out[1], (size_t)q_size(s) * sizeof(float)), "%s: out differs with the thread count",
              k_bf16_attention_name(engine_under_test));
    cr_assert(!memcmp(lse[0], lse[1], (size_t)(s.B * s.H * s.T) * sizeof(float)), "lse differs");
    cr_assert(!memcmp(dq[0], dq[1], (size_t)q_size(s) * sizeof(float)), "d_q differs");
    cr_assert(!memcmp(dk[0], dk[1], (size_t)kv_size(s) * sizeof(float)), "d_k differs");
    cr_assert(!memcmp(dv[0], dv[1], (size_t)kv_size(s) * sizeof(float)), "d_v differs");
    for (int run = 0; run < 2; run++)
        free(out[run]), free(lse[run]), free(dq[run]), free(dk[run]), free(dv[run]);
    free(scratch);
    free_inputs(&in);
}

Test(attention_amx, bit_identical_for_any_thread_count) { for_each_engine(check_thread_count); }

Test(attention_amx, served_shapes) {
    cr_assert(k_attention_amx_serves(6, 6, 64));
    cr_assert(k_attention_amx_serves(4, 2, 32));
    cr_assert(k_attention_amx_serves(2, 1, 128));
    cr_assert(!k_attention_amx_serves(4, 4, 16), "16 is less than one tile row");
    cr_assert(!k_attention_amx_serves(4, 4, 48), "48 is not a multiple of 32");
    cr_assert(!k_attention_amx_serves(2, 2, 256), "256 is past the stack tiles");
    cr_assert(!k_attention_amx_serves(6, 4, 64), "H must be a multiple of Hkv");
}

Test(attention_amx, engine_choice) {
    k_bf16_attention_engine engine = K_BF16_ATTENTION_FP32;
    cr_assert_eq(k_bf16_attention_parse("amx", &engine), DT_OK);
    cr_assert_eq(engine, K_BF16_ATTENTION_AMX);
    cr_assert_eq(k_bf16_attention_parse("avx512_bf16", &engine), DT_OK);
    cr_assert_eq(engine, K_BF16_ATTENTION_AVX512_BF16);
    cr_assert_eq(k_bf16_attention_parse("fp32", &engine), DT_OK);
    cr_assert_eq(engine, K_BF16_ATTENTION_FP32);
    cr_assert_eq(k_bf16_attention_parse("tiles", &engine), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tiles"), "the error names the word: %s", dt_error_message());

    /* the default: the tiles where they are, else vdpbf16ps, else float32 */
    const int has_avx512_bf16 = k_cpu_bf16_features().avx512_bf16 && k_isa_active() >= K_ISA_AVX512;
    cr_assert_eq(k_attention_avx512_bf16_available(), has_avx512_bf16);
    cr_assert_eq(k_bf16_attention_default(), k_attention_amx_available() ? K_BF16_ATTENTION_AMX
                                             : has_avx512_bf16           ? K_BF16_ATTENTION_AVX512_BF16
                                                                         : K_BF16_ATTENTION_FP32);
    cr_assert_eq(k_bf16_attention_force(K_BF16_ATTENTION_FP32), DT_OK);
    cr_assert_eq(k_bf16_attention_active(), K_BF16_ATTENTION_FP32);
    if (k_attention_amx_available()) {
        cr_assert_eq(k_bf16_attention_force(K_BF16_ATTENTION_AMX), DT_OK);
        cr_assert_eq(k_bf16_attention_active(), K_BF16_ATTENTION_AMX);
    } else {
        cr_assert_eq(k_bf16_attention_force(K_BF16_ATTENTION_AMX), DT_ERR, "amx forced on a CPU without it");
        cr_assert(strstr(dt_error_message(), "AMX"), "%s", dt_error_message());
    }
    if (has_avx512_bf16) {
        cr_assert_eq(k_bf16_attention_force(K_BF16_ATTENTION_AVX512_BF16), DT_OK);
        cr_assert_eq(k_bf16_attention_active(), K_BF16_ATTENTION_AVX512_BF16);
    } else {
        cr_assert_eq(k_bf16_attention_force(K_BF16_ATTENTION_AVX512_BF16), DT_ERR, "avx512_bf16 on a CPU without it");
        cr_assert(strstr(dt_error_message(), "AVX512_BF16"), "%s", dt_error_message());
    }
    k_bf16_attention_reset();
    cr_assert_eq(k_bf16_attention_active(), k_bf16_attention_default());
    /* a forced lower ISA level runs the float32 kernels */
    if (k_isa_supported() >= K_ISA_AVX2) {
        cr_assert_eq(k_isa_force(K_ISA_AVX2), DT_OK);
        cr_assert_eq(k_bf16_attention_default(), K_BF16_ATTENTION_FP32, "bf16 kernels under DBRANCH_ISA=avx2");
        cr_assert(!k_bf16_attention_available(K_BF16_ATTENTION_AVX512_BF16), "vdpbf16ps under DBRANCH_ISA=avx2");
        k_isa_reset();
    }
}
