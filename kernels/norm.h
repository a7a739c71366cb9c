/* LayerNorm (weight + bias) and RMSNorm over the last dimension.
 * Forward saves per-row statistics for backward; backward accumulates (+=).
 *
 * Naming, for every header of kernels/: k_<op> is the OpenMP wrapper over a
 * whole tensor (it may open a parallel region, so a caller already inside one,
 * like the decode step team of eval/team.h, must not use it: a nested region
 * costs ~1 us even when inactive); k_<op>_range is its single-threaded core on
 * a range: of rows (row kernels), of elements (pointwise kernels), of kv heads
 * (k_attention_decode_range); same arguments, the caller offsetting the
 * pointers. The wrapper calls the core on each thread's share
 * (kernels/parallel.h), so both give the same bits. Kernels without a
 * _range form (backward passes, GEMM) are called only from outside teams.
 */
#ifndef K_NORM_H
#define K_NORM_H

#include <stdint.h>

/* in, out [M,C]; weight, bias [C]; mean, rstd [M] (saved for backward).
 * out = (in - mean) * rstd * weight + bias, rstd = 1/sqrt(biased var + eps) */
void k_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                         int64_t M, int64_t C, float eps);
/* core: in, out [rows,C]; mean, rstd [rows] */
void k_layernorm_forward_range(float *out, float *mean, float *rstd, const float *in, const float *weight,
                               const float *bias, int64_t rows, int64_t C, float eps);
/* d_in [M,C], d_weight [C], d_bias [C] accumulate; any may be NULL. */
void k_layernorm_backward(float *d_in, float *d_weight, float *d_bias, const float *d_out, const float *in,
                          const float *weight, const float *mean, const float *rstd, int64_t M, int64_t C);

/* in, out [M,C]; weight [C]; rstd [M]. out = in * rstd * weight, rstd = 1/sqrt(mean(in^2) + eps) */
void k_rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight, int64_t M, int64_t C, float eps);
/* core: in, out [rows,C]; rstd [rows] */
void k_rmsnorm_forward_range(float *out, float *rstd, const float *in, const float *weight, int64_t rows, int64_t C,
                             float eps);
void k_rmsnorm_backward(float *d_in, float *d_weight, const float *d_out, const float *in, const float *weight,
                        const float *rstd, int64_t M, int64_t C);

#endif
