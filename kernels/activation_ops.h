/* Internal to kernels/: the activations of one instruction-set level
 * (activation_isa.c, compiled once per level), as a table whose entries have
 * the types of activation.h's functions; activation.c calls the active
 * level's. */
#ifndef K_ACTIVATION_OPS_H
#define K_ACTIVATION_OPS_H

#include "kernels/activation.h"

typedef struct k_activation_ops {
    __typeof__(k_gelu_forward) *gelu_forward;
    __typeof__(k_gelu_forward_range) *gelu_forward_range;
    __typeof__(k_gelu_backward) *gelu_backward;
    __typeof__(k_bias_gelu_forward) *bias_gelu_forward;
    __typeof__(k_bias_gelu_forward_range) *bias_gelu_forward_range;
    __typeof__(k_bias_gelu_couple_forward) *bias_gelu_couple_forward;
    __typeof__(k_bias_gelu_couple_forward_range) *bias_gelu_couple_forward_range;
    __typeof__(k_bias_gelu_backward) *bias_gelu_backward;
    __typeof__(k_gelu_recompute_backward) *gelu_recompute_backward;
    __typeof__(k_bias_gelu_forward_bf16) *bias_gelu_forward_bf16;
    __typeof__(k_bias_gelu_forward_bf16_range) *bias_gelu_forward_bf16_range;
    __typeof__(k_gelu_recompute_backward_bf16) *gelu_recompute_backward_bf16;
    __typeof__(k_silu_forward) *silu_forward;
    __typeof__(k_silu_forward_range) *silu_forward_range;
    __typeof__(k_silu_backward) *silu_backward;
    __typeof__(k_swiglu_forward) *swiglu_forward;
    __typeof__(k_swiglu_forward_range) *swiglu_forward_range;
    __typeof__(k_swiglu_backward) *swiglu_backward;
} k_activation_ops;

extern const k_activation_ops k_activation_ops_avx512, k_activation_ops_avx2, k_activation_ops_scalar;

#endif
