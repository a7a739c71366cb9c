/* The public functions of elementwise.h: each calls the table of the active
 * instruction-set level (kernels/isa.h); the bodies are in elementwise_isa.c. */
#include "kernels/elementwise.h"

#include "kernels/elementwise_ops.h"
#include "kernels/isa.h"

void k_add(float *out, const float *a, const float *b, int64_t n) { K_ISA_PICK(k_elementwise_ops)->add(out, a, b, n); }

void k_add_range(float *out, const float *a, const float *b, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->add_range(out, a, b, n);
}

void k_mul(float *out, const float *a, const float *b, int64_t n) { K_ISA_PICK(k_elementwise_ops)->mul(out, a, b, n); }

void k_mul_range(float *out, const float *a, const float *b, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->mul_range(out, a, b, n);
}

void k_scale(float *out, const float *a, float s, int64_t n) { K_ISA_PICK(k_elementwise_ops)->scale(out, a, s, n); }

void k_scale_range(float *out, const float *a, float s, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->scale_range(out, a, s, n);
}

void k_accumulate(float *dst, const float *src, int64_t n) { K_ISA_PICK(k_elementwise_ops)->accumulate(dst, src, n); }

void k_accumulate_range(float *dst, const float *src, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->accumulate_range(dst, src, n);
}

void k_accumulate_scaled(float *dst, const float *src, float s, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->accumulate_scaled(dst, src, s, n);
}

void k_accumulate_scaled_range(float *dst, const float *src, float s, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->accumulate_scaled_range(dst, src, s, n);
}

void k_mul_backward(float *d_a, float *d_b, const float *d_out, const float *a, const float *b, int64_t n) {
    K_ISA_PICK(k_elementwise_ops)->mul_backward(d_a, d_b, d_out, a, b, n);
}

void k_add_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->add_vec(out, x, v, M, C);
}

void k_add_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->add_vec_range(out, x, v, rows, C);
}

void k_mul_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->mul_vec(out, x, v, M, C);
}

void k_mul_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->mul_vec_range(out, x, v, rows, C);
}

void k_accumulate_mul_vec(float *out, const float *y, const float *v, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->accumulate_mul_vec(out, y, v, M, C);
}

void k_accumulate_mul_vec_range(float *out, const float *y, const float *v, int64_t rows, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->accumulate_mul_vec_range(out, y, v, rows, C);
}

void k_mul_vec_backward(float *d_x, float *d_v, const float *d_out, const float *x, const float *v, int64_t M,
                        int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->mul_vec_backward(d_x, d_v, d_out, x, v, M, C);
}

void k_sum_rows(float *d_v, const float *d_out, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->sum_rows(d_v, d_out, M, C);
}

void k_scale_rows(float *out, const float *x, const float *s, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->scale_rows(out, x, s, M, C);
}

void k_scale_rows_range(float *out, const float *x, const float *s, int64_t rows, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->scale_rows_range(out, x, s, rows, C);
}

void k_scale_rows_backward(float *d_x, float *d_s, const float *d_out, const float *x, const float *s, int64_t M,
                           int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->scale_rows_backward(d_x, d_s, d_out, x, s, M, C);
}

void k_gather_rows(float *out, const float *x, const int32_t *idx, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->gather_rows(out, x, idx, M, C);
}

void k_gather_rows_range(float *out, const float *x, const int32_t *idx, int64_t rows, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->gather_rows_range(out, x, idx, rows, C);
}

void k_scatter_add_rows(float *out, const float *src, const int32_t *idx, int64_t M, int64_t C) {
    K_ISA_PICK(k_elementwise_ops)->scatter_add_rows(out, src, idx, M, C);
}
