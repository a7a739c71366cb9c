/* Pointwise activations: GELU (tanh form, SPEC §1), SiLU and the SwiGLU product.
 * Backward functions accumulate (+=); NULL outputs are skipped.
 *
 * Every loop here vectorises: the exponentials come from kernels/vec_math.h
 * (no libm calls), and GELU's tanh is rewritten as a sigmoid (one exp). */
#include "kernels/activation.h"

#include "kernels/vec_math.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC          0.044715f

/* With u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) = sigmoid(2u), so
 * GELU is x * sigmoid(2u). */
static inline float gelu_gate(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return k_sigmoid(2.0f * u);
}

/* in, out [n]; out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void k_gelu_forward(float *out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i];
        out[i] = x * gelu_gate(x);
    }
}

/* d_in, d_out, in [n]; d_in += d_out * gelu'(x). With s = sigmoid(2u), so that
 * 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s):
 * gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
void k_gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i], s = gelu_gate(x);
        const float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
        d_in[i] += d_out[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
    }
}

/* pre, out [M,N]; bias [N] or NULL; pre += bias, out = gelu(pre) */
void k_bias_gelu_forward(float *out, float *pre, const float *bias, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        float *p = pre + i * N, *y = out + i * N;
        if (bias) {
#pragma omp simd
            for (int64_t j = 0; j < N; j++) {
                const float x = p[j] + bias[j];
                p[j] = x;
                y[j] = x * gelu_gate(x);
            }
        } else {
#pragma omp simd
            for (int64_t j = 0; j < N; j++)
                y[j] = p[j] * gelu_gate(p[j]);
        }
    }
}

/* pre, out, coupled [M,N]; bias, couple [N] (bias may be NULL) */
void k_bias_gelu_couple_forward(float *out, float *pre, const float *bias, const float *coupled, const float *couple,
                                int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        float *p = pre + i * N, *y = out + i * N;
        const float *z = coupled + i * N;
#pragma omp simd
        for (int64_t j = 0; j < N; j++) {
            const float x = bias ? p[j] + bias[j] : p[j];
            p[j] = x;
            y[j] = x * gelu_gate(x) + z[j] * couple[j];
        }
    }
}

/* Columns per block of k_bias_gelu_backward's column-parallel pass. */
#define COLUMN_BLOCK 64

/* d_pre, d_out, pre [M,N]; d_bias [N] or NULL (formula as k_gelu_backward) */
void k_bias_gelu_backward(float *d_pre, int accumulate, float *d_bias, const float *d_out, const float *pre, int64_t M,
                          int64_t N) {
    const int64_t n_blocks = (N + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t block = 0; block < n_blocks; block++) {
        const int64_t j0 = block * COLUMN_BLOCK, width = N - j0 < COLUMN_BLOCK ? N - j0 : COLUMN_BLOCK;
        float column_sum[COLUMN_BLOCK] = {0};
        for (int64_t i = 0; i < M; i++) {
            const float *x = pre + i * N + j0, *dy = d_out + i * N + j0;
            float *dx = d_pre + i * N + j0;
#pragma omp simd
            for (int64_t j = 0; j < width; j++) {
                const float s = gelu_gate(x[j]);
                const float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x[j] * x[j]);
                const float g = dy[j] * (s + 2.0f * x[j] * s * (1.0f - s) * du_dx);
                dx[j] = accumulate ? dx[j] + g : g;
                column_sum[j] += g;
            }
        }
        if (d_bias)
            for (int64_t j = 0; j < width; j++) d_bias[j0 + j] += column_sum[j];
    }
}

/* in, out [n]; out = x * sigmoid(x) */
void k_silu_forward(float *out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] * k_sigmoid(in[i]);
}

/* d_in, d_out, in [n]; silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
void k_silu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i], s = k_sigmoid(x);
        d_in[i] += d_out[i] * s * (1.0f + x * (1.0f - s));
    }
}

/* gate, up, out [n]; out = silu(gate) * up */
void k_swiglu_forward(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] * k_sigmoid(gate[i]) * up[i];
}

/* d_gate, d_up, d_out, gate, up [n]
 * d_gate += d_out * up * silu'(gate) ; d_up += d_out * silu(gate) */
void k_swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up, int64_t n) {
    if (d_gate) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i], s = k_sigmoid(g);
            d_gate[i] += d_out[i] * up[i] * s * (1.0f + g * (1.0f - s));
        }
    }
    if (d_up) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++)
            d_up[i] += d_out[i] * gate[i] * k_sigmoid(gate[i]);
    }
}
