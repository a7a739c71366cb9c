/* Type traits (ggml's type_traits are the model): one row of a table per
 * element type a weight may be stored in, with what a kernel needs to use it
 * without an `if` per type: its size, conversion of a row to and from
 * float32, and the dot product of a stored row with a float32 vector. A
 * kernel that takes weights of another type asks k_type_traits_of(dtype) and
 * calls through the row; adding a type is one entry here.
 *
 * bfloat16 (DT_BF16): the upper 16 bits of an IEEE float32. Conversion from
 * float rounds to nearest, ties to even, keeps infinities and turns NaN into a
 * quiet NaN of the same sign (never into infinity); to float is exact. */
#ifndef K_TYPE_TRAITS_H
#define K_TYPE_TRAITS_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct k_type_traits {
    dt_dtype dtype;
    const char *name;
    int64_t bytes; /* per element */
    /* dst [n] (float32) = src [n] (this type) */
    void (*to_float)(float *dst, const void *src, int64_t n);
    /* dst [n] (this type) = src [n] (float32), rounded as above */
    void (*from_float)(void *dst, const float *src, int64_t n);
    /* sum_i row[i] * x[i], row [n] of this type, x [n] float32, accumulated in float32 lanes */
    float (*dot)(const void *row, const float *x, int64_t n);
} k_type_traits;

/* NULL for a type weights cannot be stored in (int32). */
const k_type_traits *k_type_traits_of(dt_dtype dtype);

/* One bfloat16 value, for tests and scalar code. */
uint16_t k_bf16_from_float(float x);
float k_bf16_to_float(uint16_t x);
/* The float32 bits x rounded to bfloat16 and kept in the top half (the low 16
 * bits zero), as k_bf16_from_float rounds, without branches so loops over it
 * vectorise. */
static inline uint32_t k_bf16_rounded_bits(uint32_t bits) {
    const uint32_t is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t nearest = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u; /* ties to even; overflow -> inf */
    const uint32_t quiet = (bits | 0x00400000u) & 0xffff0000u;                     /* NaN: quiet, same sign */
    return is_nan ? quiet : nearest;
}
/* dst [n] = src [n] rounded as k_bf16_from_float, on the calling thread, in
 * vector lanes (branch-free bits): the core of every float32 -> bf16
 * conversion (k_bf16_round threads it; kernels that produce a bf16 operand
 * call it on their own rows). */
void k_bf16_round_range(uint16_t *restrict dst, const float *restrict src, int64_t n);

#endif
