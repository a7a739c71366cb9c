/* Internal to kernels/: LayerNorm and RMSNorm of one instruction-set level
 * (norm_isa.c, compiled once per level), as a table whose entries have
 * the types of norm.h's functions; norm.c calls the active level's. */
#ifndef K_NORM_OPS_H
#define K_NORM_OPS_H

#include "kernels/norm.h"

typedef struct k_norm_ops {
    __typeof__(k_layernorm_forward) *layernorm_forward;
    __typeof__(k_layernorm_forward_range) *layernorm_forward_range;
    __typeof__(k_layernorm_backward) *layernorm_backward;
    __typeof__(k_rmsnorm_forward) *rmsnorm_forward;
    __typeof__(k_rmsnorm_forward_range) *rmsnorm_forward_range;
    __typeof__(k_rmsnorm_backward) *rmsnorm_backward;
} k_norm_ops;

extern const k_norm_ops k_norm_ops_avx512, k_norm_ops_avx2, k_norm_ops_scalar;

#endif
