/* Internal to kernels/: the mixture objective's kernels of one instruction-set level
 * (mixture_isa.c, compiled once per level), as a table whose entries have
 * the types of mixture.h's functions; mixture.c calls the active level's. */
#ifndef K_MIXTURE_OPS_H
#define K_MIXTURE_OPS_H

#include "kernels/mixture.h"

typedef struct k_mixture_ops {
    __typeof__(k_mixture_forward) *mixture_forward;
    __typeof__(k_mixture_forward_saving) *mixture_forward_saving;
    __typeof__(k_mixture_saved_bytes) *mixture_saved_bytes;
    __typeof__(k_mixture_alpha_range) *mixture_alpha_range;
    __typeof__(k_mixture_alpha) *mixture_alpha;
    __typeof__(k_mixture_backward) *mixture_backward;
    __typeof__(k_mixture_backward_saved) *mixture_backward_saved;
} k_mixture_ops;

extern const k_mixture_ops k_mixture_ops_avx512, k_mixture_ops_avx2, k_mixture_ops_scalar;

#endif
