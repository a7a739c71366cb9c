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

#endif
