/* float32 -> bfloat16 rounding of a run of values, the core of every
 * conversion under train.precision = bf16 (weights once per step, every
 * activation operand of a product). Compiled once per instruction-set level
 * (kernels/isa_variant.h): built for a plain x86-64 the loop ran 4 lanes
 * wide, and the portable binary spent 3.7% of a bf16 char step here against
 * the native build's 1.6%. type_traits.c's k_bf16_round_range calls the
 * active level's. */
#include "kernels/bf16_round_ops.h"
#include "kernels/isa_variant.h"

// dst [n] = src [n] rounded to nearest, ties to even (k_bf16_rounded_bits)
static void bf16_round_range(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    const uint32_t *s = (const uint32_t *)(const void *)src;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dst[i] = (uint16_t)(k_bf16_rounded_bits(s[i]) >> 16);
}

const k_bf16_round_ops K_ISA_VARIANT_NAME(k_bf16_round_ops) = {.round_range = bf16_round_range};
