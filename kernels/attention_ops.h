/* Internal to kernels/: the attention kernels of one instruction-set level
 * (attention_isa.c, compiled once per level), as a table whose entries have
 * the types of attention.h's functions; attention.c calls the active
 * level's. The unbiased forms and the shape checks are level-independent
 * and live in attention.c. */
#ifndef K_ATTENTION_OPS_H
#define K_ATTENTION_OPS_H

#include "kernels/attention.h"

typedef struct k_attention_ops {
    __typeof__(k_attention_forward_biased) *forward_biased;
    __typeof__(k_attention_backward_biased) *backward_biased;
    __typeof__(k_attention_decode_cache_range_biased) *decode_range_biased;
    __typeof__(k_attention_decode_cache_biased) *decode_biased;
} k_attention_ops;

extern const k_attention_ops k_attention_ops_avx512, k_attention_ops_avx2, k_attention_ops_scalar;

#endif
