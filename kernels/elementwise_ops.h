/* Internal to kernels/: the elementwise kernels of one instruction-set level
 * (elementwise_isa.c, compiled once per level), as a table whose entries have
 * the types of elementwise.h's functions; elementwise.c calls the active level's. */
#ifndef K_ELEMENTWISE_OPS_H
#define K_ELEMENTWISE_OPS_H

#include "kernels/elementwise.h"

typedef struct k_elementwise_ops {
    __typeof__(k_add) *add;
    __typeof__(k_add_range) *add_range;
    __typeof__(k_mul) *mul;
    __typeof__(k_mul_range) *mul_range;
    __typeof__(k_scale) *scale;
    __typeof__(k_scale_range) *scale_range;
    __typeof__(k_accumulate) *accumulate;
    __typeof__(k_accumulate_range) *accumulate_range;
    __typeof__(k_accumulate_scaled) *accumulate_scaled;
    __typeof__(k_accumulate_scaled_range) *accumulate_scaled_range;
    __typeof__(k_mul_backward) *mul_backward;
    __typeof__(k_add_vec) *add_vec;
    __typeof__(k_add_vec_range) *add_vec_range;
    __typeof__(k_mul_vec) *mul_vec;
    __typeof__(k_mul_vec_range) *mul_vec_range;
    __typeof__(k_accumulate_mul_vec) *accumulate_mul_vec;
    __typeof__(k_accumulate_mul_vec_range) *accumulate_mul_vec_range;
    __typeof__(k_mul_vec_backward) *mul_vec_backward;
    __typeof__(k_sum_rows) *sum_rows;
    __typeof__(k_scale_rows) *scale_rows;
    __typeof__(k_scale_rows_range) *scale_rows_range;
    __typeof__(k_scale_rows_backward) *scale_rows_backward;
    __typeof__(k_gather_rows) *gather_rows;
    __typeof__(k_gather_rows_range) *gather_rows_range;
    __typeof__(k_scatter_add_rows) *scatter_add_rows;
} k_elementwise_ops;

extern const k_elementwise_ops k_elementwise_ops_avx512, k_elementwise_ops_avx2, k_elementwise_ops_scalar;

#endif
