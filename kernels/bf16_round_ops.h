/* Internal to kernels/: the float32 -> bfloat16 rounding of one
 * instruction-set level (bf16_round_isa.c, compiled once per level), as a
 * table; type_traits.c calls the active level's. */
#ifndef K_BF16_ROUND_OPS_H
#define K_BF16_ROUND_OPS_H

#include "kernels/type_traits.h"

typedef struct k_bf16_round_ops {
    __typeof__(k_bf16_round_range) *round_range;
} k_bf16_round_ops;

extern const k_bf16_round_ops k_bf16_round_ops_avx512, k_bf16_round_ops_avx2, k_bf16_round_ops_scalar;

#endif
