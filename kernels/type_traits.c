/* The type-traits table (type_traits.h): float32 and bfloat16 rows. */
#include "kernels/type_traits.h"

#include <string.h>

#include "kernels/bf16_round_ops.h"
#include "kernels/isa.h"

uint16_t k_bf16_from_float(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* NaN: quiet, same sign */
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even (overflow rounds to inf) */
    return (uint16_t)(bits >> 16);
}

void k_bf16_round_range(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    K_ISA_PICK(k_bf16_round_ops)->round_range(dst, src, n); /* bf16_round_isa.c */
}

float k_bf16_to_float(uint16_t x) {
    const uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// dst [n] <- src [n]
static void f32_to_float(float *dst, const void *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_from_float(void *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

// row [n], x [n]
static float f32_dot(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

static void bf16_to_float(float *dst, const void *src, int64_t n) {
    const uint16_t *s = src;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)s[i] << 16;
        memcpy(&dst[i], &bits, sizeof bits);
    }
}

static void bf16_from_float(void *dst, const float *src, int64_t n) { k_bf16_round_range(dst, src, n); }

static float bf16_dot(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)w[i] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        sum += v * x[i];
    }
    return sum;
}

static const k_type_traits traits[] = {
    [DT_F32] = {DT_F32, "float32", 4, f32_to_float, f32_from_float, f32_dot},
    [DT_BF16] = {DT_BF16, "bfloat16", 2, bf16_to_float, bf16_from_float, bf16_dot},
};

const k_type_traits *k_type_traits_of(dt_dtype dtype) {
    if ((int)dtype < 0 || (size_t)dtype >= sizeof traits / sizeof traits[0] || !traits[dtype].name) return NULL;
    return &traits[dtype];
}
