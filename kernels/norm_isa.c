/* LayerNorm (weight + bias) and RMSNorm over the last dimension (SPEC §1).
 *
 * Per-row statistics are accumulated in double (two passes for LayerNorm) so
 * they match a float64 reference to ~1e-7 relative even for wide rows; the
 * elementwise work stays in float. The row sums are `omp simd` reductions:
 * without that licence to reassociate, GCC keeps a float reduction scalar
 * (one add per element, four times slower than the rest of the row).
 * Backward computes d_in row-parallel, then
 * d_weight / d_bias in a second, column-parallel pass in which one thread owns
 * each column and sums its rows in order: deterministic for any thread count,
 * with no per-thread partial buffers. Compiled once per instruction-set
 * level (kernels/isa_variant.h; why: softmax_isa.c); norm.c calls the
 * active level's table. */
#include "kernels/isa_variant.h"
#include "kernels/norm_ops.h"

#include <math.h>

#include "kernels/parallel.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768
/* Columns per block in the column-parallel weight reductions. */
#define COLUMN_BLOCK 64

/* in, out [rows,C]; weight, bias [C]; mean, rstd [rows] */
static void layernorm_forward_range(float *out, float *mean, float *rstd, const float *in, const float *weight,
                                    const float *bias, int64_t rows, int64_t C, float eps) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x = in + i * C;
        float *y = out + i * C;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < C; j++)
            sum += x[j];
        double row_mean = sum / (double)C;
        double sum_sq = 0.0; /* second pass: no cancellation from E[x^2] - E[x]^2 */
#pragma omp simd reduction(+ : sum_sq)
        for (int64_t j = 0; j < C; j++) {
            double centred = (double)x[j] - row_mean;
            sum_sq += centred * centred;
        }
        double row_rstd = 1.0 / sqrt(sum_sq / (double)C + (double)eps);
        float m = (float)row_mean, r = (float)row_rstd;
        if (bias)
            for (int64_t j = 0; j < C; j++)
                y[j] = (x[j] - m) * r * weight[j] + bias[j];
        else /* tolerated: a LayerNorm without bias */
            for (int64_t j = 0; j < C; j++)
                y[j] = (x[j] - m) * r * weight[j];
        mean[i] = m;
        rstd[i] = r;
    }
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *weight,
                              const float *bias, int64_t M, int64_t C, float eps) {
    K_FOR_SHARES(
        M, M * C > PARALLEL_MIN_ELEMENTS,
        layernorm_forward_range(out + i0 * C, mean + i0, rstd + i0, in + i0 * C, weight, bias, i1 - i0, C, eps));
}

/* d_in, d_out, in [M,C]; d_weight, d_bias, weight [C]; mean, rstd [M].
 * With xhat = (x - mean) * rstd and g = d_out * weight:
 *   d_in += rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   d_weight += sum over rows of d_out * xhat ; d_bias += sum over rows of d_out */
static void layernorm_backward(float *d_in, float *d_weight, float *d_bias, const float *d_out, const float *in,
                               const float *weight, const float *mean, const float *rstd, int64_t M, int64_t C) {
    if (d_in) {
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < M; i++) {
            const float *x = in + i * C, *dy = d_out + i * C;
            float *dx = d_in + i * C;
            float m = mean[i], r = rstd[i];
            double sum_g = 0.0, sum_g_xhat = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
            for (int64_t j = 0; j < C; j++) {
                float g = dy[j] * weight[j];
                sum_g += g;
                sum_g_xhat += (double)g * (double)((x[j] - m) * r);
            }
            float mean_g = (float)(sum_g / (double)C), mean_g_xhat = (float)(sum_g_xhat / (double)C);
            for (int64_t j = 0; j < C; j++) {
                float xhat = (x[j] - m) * r;
                dx[j] += r * (dy[j] * weight[j] - mean_g - xhat * mean_g_xhat);
            }
        }
    }
    if (d_weight || d_bias) {
        int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t block = 0; block < n_blocks; block++) {
            int64_t j0 = block * COLUMN_BLOCK;
            int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
            for (int64_t i = 0; i < M; i++) {
                const float *x = in + i * C, *dy = d_out + i * C;
                float m = mean[i], r = rstd[i];
                if (d_weight)
                    for (int64_t j = j0; j < j1; j++)
                        d_weight[j] += dy[j] * ((x[j] - m) * r);
                if (d_bias)
                    for (int64_t j = j0; j < j1; j++)
                        d_bias[j] += dy[j];
            }
        }
    }
}

/* in, out [rows,C]; weight [C]; rstd [rows] */
static void rmsnorm_forward_range(float *out, float *rstd, const float *in, const float *weight, int64_t rows,
                                  int64_t C, float eps) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x = in + i * C;
        float *y = out + i * C;
        double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
        for (int64_t j = 0; j < C; j++)
            sum_sq += (double)x[j] * (double)x[j];
        float r = (float)(1.0 / sqrt(sum_sq / (double)C + (double)eps));
        for (int64_t j = 0; j < C; j++)
            y[j] = x[j] * r * weight[j];
        rstd[i] = r;
    }
}

static void rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight, int64_t M, int64_t C,
                            float eps) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS,
                 rmsnorm_forward_range(out + i0 * C, rstd + i0, in + i0 * C, weight, i1 - i0, C, eps));
}

/* d_in, d_out, in [M,C]; d_weight, weight [C]; rstd [M].
 * y = x * r * w with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C:
 *   d_in += r * (d_out * w) - x * r^3 * mean(d_out * w * x)
 *   d_weight += sum over rows of d_out * x * r */
static void rmsnorm_backward(float *d_in, float *d_weight, const float *d_out, const float *in, const float *weight,
                             const float *rstd, int64_t M, int64_t C) {
    if (d_in) {
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < M; i++) {
            const float *x = in + i * C, *dy = d_out + i * C;
            float *dx = d_in + i * C;
            float r = rstd[i];
            double sum_g_x = 0.0;
#pragma omp simd reduction(+ : sum_g_x)
            for (int64_t j = 0; j < C; j++)
                sum_g_x += (double)(dy[j] * weight[j]) * (double)x[j];
            float correction = (float)((double)r * r * r * sum_g_x / (double)C);
            for (int64_t j = 0; j < C; j++)
                dx[j] += r * dy[j] * weight[j] - x[j] * correction;
        }
    }
    if (d_weight) {
        int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t block = 0; block < n_blocks; block++) {
            int64_t j0 = block * COLUMN_BLOCK;
            int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
            for (int64_t i = 0; i < M; i++) {
                const float *x = in + i * C, *dy = d_out + i * C;
                float r = rstd[i];
                for (int64_t j = j0; j < j1; j++)
                    d_weight[j] += dy[j] * x[j] * r;
            }
        }
    }
}

const k_norm_ops K_ISA_VARIANT_NAME(k_norm_ops) = {
    .layernorm_forward = layernorm_forward,
    .layernorm_forward_range = layernorm_forward_range,
    .layernorm_backward = layernorm_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_forward_range = rmsnorm_forward_range,
    .rmsnorm_backward = rmsnorm_backward,
};
