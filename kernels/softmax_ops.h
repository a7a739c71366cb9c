/* Internal to kernels/: softmax, log-softmax and cross-entropy of one instruction-set level
 * (softmax_isa.c, compiled once per level), as a table whose entries have
 * the types of softmax.h's functions; softmax.c calls the active level's. */
#ifndef K_SOFTMAX_OPS_H
#define K_SOFTMAX_OPS_H

#include "kernels/softmax.h"

typedef struct k_softmax_ops {
    __typeof__(k_softmax_forward) *softmax_forward;
    __typeof__(k_softmax_forward_range) *softmax_forward_range;
    __typeof__(k_softmax_backward) *softmax_backward;
    __typeof__(k_log_softmax_forward) *log_softmax_forward;
    __typeof__(k_log_softmax_forward_range) *log_softmax_forward_range;
    __typeof__(k_log_softmax_backward) *log_softmax_backward;
    __typeof__(k_cross_entropy_forward) *cross_entropy_forward;
    __typeof__(k_cross_entropy_backward) *cross_entropy_backward;
    __typeof__(k_cross_entropy_forward_stats) *cross_entropy_forward_stats;
    __typeof__(k_cross_entropy_forward_stats_range) *cross_entropy_forward_stats_range;
    __typeof__(k_cross_entropy_backward_stats) *cross_entropy_backward_stats;
} k_softmax_ops;

extern const k_softmax_ops k_softmax_ops_avx512, k_softmax_ops_avx2, k_softmax_ops_scalar;

#endif
