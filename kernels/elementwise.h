/* Elementwise arithmetic, broadcasts of a [C] vector over rows, row scaling,
 * and row gather / scatter-add by index (MoE dispatch and combine).
 * Backward functions accumulate (+=); NULL outputs are skipped.
 * The forwards have single-threaded cores k_<op>_range (kernels/norm.h names
 * the scheme): the same arguments on n elements, or on `rows` rows of [M,C]
 * (an idx or s of [M] offset with the rows). */
#ifndef K_ELEMENTWISE_H
#define K_ELEMENTWISE_H

#include <stdint.h>

void k_add(float *out, const float *a, const float *b, int64_t n); /* out = a + b */
void k_add_range(float *out, const float *a, const float *b, int64_t n);
void k_mul(float *out, const float *a, const float *b, int64_t n); /* out = a * b */
void k_mul_range(float *out, const float *a, const float *b, int64_t n);
void k_scale(float *out, const float *a, float s, int64_t n); /* out = s * a */
void k_scale_range(float *out, const float *a, float s, int64_t n);
void k_accumulate(float *dst, const float *src, int64_t n); /* dst += src */
void k_accumulate_range(float *dst, const float *src, int64_t n);
void k_accumulate_scaled(float *dst, const float *src, float s, int64_t n); /* dst += s * src */
void k_accumulate_scaled_range(float *dst, const float *src, float s, int64_t n);
/* d_a += d_out * b ; d_b += d_out * a */
void k_mul_backward(float *d_a, float *d_b, const float *d_out, const float *a, const float *b, int64_t n);

/* x, out [M,C]; v [C] */
void k_add_vec(float *out, const float *x, const float *v, int64_t M, int64_t C); /* out = x + v */
void k_add_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C);
void k_mul_vec(float *out, const float *x, const float *v, int64_t M, int64_t C); /* out = x * v */
void k_mul_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C);
/* out [M,C] += y [M,C] * v [C] (a coupling term added in place) */
void k_accumulate_mul_vec(float *out, const float *y, const float *v, int64_t M, int64_t C);
void k_accumulate_mul_vec_range(float *out, const float *y, const float *v, int64_t rows, int64_t C);
/* d_x [M,C] += d_out * v ; d_v [C] += sum over rows of d_out * x */
void k_mul_vec_backward(float *d_x, float *d_v, const float *d_out, const float *x, const float *v, int64_t M,
                        int64_t C);
/* d_v [C] += sum over rows of d_out */
void k_sum_rows(float *d_v, const float *d_out, int64_t M, int64_t C);

/* out[M,C] = x[M,C] * s[M] (per-row scale) */
void k_scale_rows(float *out, const float *x, const float *s, int64_t M, int64_t C);
void k_scale_rows_range(float *out, const float *x, const float *s, int64_t rows, int64_t C);
/* d_x [M,C] += d_out * s ; d_s [M] += row dot(d_out, x) */
void k_scale_rows_backward(float *d_x, float *d_s, const float *d_out, const float *x, const float *s, int64_t M,
                           int64_t C);

/* out[M,C] = x[idx[m], :] ; x [N,C] */
void k_gather_rows(float *out, const float *x, const int32_t *idx, int64_t M, int64_t C);
void k_gather_rows_range(float *out, const float *x, const int32_t *idx, int64_t rows, int64_t C);
/* out[idx[m], :] += src[m, :] ; out [N,C] (sequential over m: deterministic) */
void k_scatter_add_rows(float *out, const float *src, const int32_t *idx, int64_t M, int64_t C);

#endif
