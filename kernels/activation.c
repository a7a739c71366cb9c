/* Pointwise activations: GELU (tanh form, SPEC §1), SiLU and the SwiGLU product.
 * Backward functions accumulate (+=); NULL outputs are skipped. */
#include "kernels/activation.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC          0.044715f

/* in, out [n]; out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void k_gelu_forward(float *out, const float *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

/* d_in, d_out, in [n]; d_in += d_out * gelu'(x), where
 * gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
void k_gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
        float t = tanhf(u);
        float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float derivative = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
        d_in[i] += d_out[i] * derivative;
    }
}

/* sigmoid without overflow: exp is only ever taken of a non-positive number. */
static inline float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* in, out [n]; out = x * sigmoid(x) */
void k_silu_forward(float *out, const float *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] * sigmoid(in[i]);
}

/* d_in, d_out, in [n]; silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
void k_silu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        float x = in[i], s = sigmoid(x);
        d_in[i] += d_out[i] * s * (1.0f + x * (1.0f - s));
    }
}

/* gate, up, out [n]; out = silu(gate) * up */
void k_swiglu_forward(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

/* d_gate, d_up, d_out, gate, up [n]
 * d_gate += d_out * up * silu'(gate) ; d_up += d_out * silu(gate) */
void k_swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoid(g);
        if (d_gate) d_gate[i] += d_out[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (d_up) d_up[i] += d_out[i] * g * s;
    }
}
