/* The type-traits table (kernels/type_traits.h): bfloat16 rounding against
 * values worked out by hand from the bit patterns, round trips, NaN and
 * infinity, the vectorised row rounding against the scalar one, and the row
 * dot products against float64 sums. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/gemm_bf16.h"
#include "kernels/type_traits.h"

static float from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

Test(type_traits, table_rows) {
    const k_type_traits *f32 = k_type_traits_of(DT_F32), *bf16 = k_type_traits_of(DT_BF16);
    cr_assert(f32 && bf16);
    cr_assert_eq(f32->bytes, 4);
    cr_assert_eq(bf16->bytes, 2);
    cr_assert_eq(bf16->dtype, DT_BF16);
    cr_assert_null(k_type_traits_of(DT_I32), "int32 is not a weight type");
    cr_assert_eq(dt_dtype_bytes(DT_BF16), 2);
}

Test(type_traits, bf16_rounds_to_nearest_even) {
    /* 1 + 2^-8 lies exactly between bf16 1.0 (0x3f80) and 1 + 2^-7 (0x3f81): ties go to even 0x3f80 */
    cr_assert_eq(k_bf16_from_float(from_bits(0x3f808000u)), 0x3f80);
    /* ... and 1 + 3*2^-8 between 0x3f81 and 0x3f82: to even 0x3f82 */
    cr_assert_eq(k_bf16_from_float(from_bits(0x3f818000u)), 0x3f82);
    /* just above and below the half-way point */
    cr_assert_eq(k_bf16_from_float(from_bits(0x3f808001u)), 0x3f81);
    cr_assert_eq(k_bf16_from_float(from_bits(0x3f807fffu)), 0x3f80);
    /* the largest finite float rounds up to infinity; infinities stay */
    cr_assert_eq(k_bf16_from_float(from_bits(0x7f7fffffu)), 0x7f80);
    cr_assert_eq(k_bf16_from_float(INFINITY), 0x7f80);
    cr_assert_eq(k_bf16_from_float(-INFINITY), 0xff80);
    /* NaN stays NaN (a NaN whose payload is in the low bits would otherwise round to inf) */
    const uint16_t nan_low = k_bf16_from_float(from_bits(0x7f800001u));
    cr_assert(isnan(k_bf16_to_float(nan_low)), "0x%04x", nan_low);
    cr_assert(isnan(k_bf16_to_float(k_bf16_from_float(-NAN))));
    cr_assert(signbit(k_bf16_to_float(k_bf16_from_float(-NAN))));
    /* signed zero and a subnormal survive */
    cr_assert(signbit(k_bf16_to_float(k_bf16_from_float(-0.0f))));
    cr_assert_eq(k_bf16_from_float(from_bits(0x00010000u)), 0x0001);
}

Test(type_traits, rows_round_trip_and_dot) {
    enum { N = 1000 };
    float x[N], w[N], back[N];
    uint16_t w16[N];
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    dt_rng_fill_normal(&rng, x, N, 1.0f);
    dt_rng_fill_normal(&rng, w, N, 1.0f);
    const k_type_traits *bf16 = k_type_traits_of(DT_BF16), *f32 = k_type_traits_of(DT_F32);
    bf16->from_float(w16, w, N);
    bf16->to_float(back, w16, N);
    double dot64 = 0.0, dot64_rounded = 0.0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(w16[i], k_bf16_from_float(w[i]), "row and scalar conversion agree at %d", i);
        /* bf16 keeps 8 significant bits: relative rounding error at most 2^-8 */
        cr_assert(fabs(back[i] - w[i]) <= fabs(w[i]) * 0x1p-8, "%d: %g -> %g", i, w[i], back[i]);
        dot64 += (double)w[i] * x[i];
        dot64_rounded += (double)back[i] * x[i];
    }
    /* the stored row's dot is the dot of the rounded values (float32 accumulation) */
    cr_assert(fabs(bf16->dot(w16, x, N) - dot64_rounded) <= 1e-4 * sqrt((double)N), "%g vs %g", bf16->dot(w16, x, N),
              dot64_rounded);
    cr_assert(fabs(f32->dot(w, x, N) - dot64) <= 1e-4 * sqrt((double)N));
    /* a value already in bf16 converts back exactly */
    uint16_t again[N];
    bf16->from_float(again, back, N);
    cr_assert_eq(memcmp(again, w16, sizeof again), 0);
    float copy[N];
    f32->from_float(copy, w, N);
    cr_assert_eq(memcmp(copy, w, sizeof copy), 0);
}

/* The vectorised rows (k_bf16_round_range, and k_bf16_round threaded over
 * spans) give k_bf16_from_float's bits for every kind of value: ties both
 * ways, NaNs with payloads in the low bits, infinities, the largest finite
 * float, subnormals and signed zeros, at every position of a vector (the
 * special values repeat with a period that is not a multiple of 16), and
 * over a length that takes several spans and a partial one. */
Test(type_traits, vector_rounding_is_the_scalar_rounding) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7fffffu, 0x7f800000u,
                                       0xff800000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x00000000u, 0x80000000u,
                                       0x00010000u, 0x00008000u, 0x80018000u, 0x3f7fffffu, 0xc2f6e979u};
    enum { N = 3 * 65536 + 1001, N_SPECIAL = sizeof special / sizeof special[0] };
    float *x = malloc(N * sizeof(float));
    uint16_t *row = malloc(N * sizeof(uint16_t)), *threaded = malloc(N * sizeof(uint16_t));
    cr_assert(x && row && threaded);
    dt_rng rng;
    dt_rng_seed(&rng, 9);
    dt_rng_fill_normal(&rng, x, N, 3.0f);
    for (int i = 0; i < N; i += 7)
        x[i] = from_bits(special[(i / 7) % N_SPECIAL]);
    k_bf16_round_range(row, x, N);
    k_bf16_round(threaded, x, N);
    for (int i = 0; i < N; i++) {
        const uint16_t scalar = k_bf16_from_float(x[i]);
        cr_assert_eq(row[i], scalar, "element %d (0x%08x): 0x%04x, scalar 0x%04x", i, bits_of(x[i]), row[i], scalar);
        cr_assert_eq(threaded[i], scalar, "k_bf16_round, element %d", i);
    }
    free(x), free(row), free(threaded);
}
