/* Pointwise activations: GELU (tanh form), SiLU, SwiGLU. Backward accumulates (+=). */
#ifndef K_ACTIVATION_H
#define K_ACTIVATION_H

#include <stdint.h>

/* out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void k_gelu_forward(float *out, const float *in, int64_t n);
void k_gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n);

/* out[n] = x * sigmoid(x) */
void k_silu_forward(float *out, const float *in, int64_t n);
void k_silu_backward(float *d_in, const float *d_out, const float *in, int64_t n);

/* out[n] = silu(gate[n]) * up[n]  (the SwiGLU product silu(w1 x) * (w3 x)) */
void k_swiglu_forward(float *out, const float *gate, const float *up, int64_t n);
/* d_gate, d_up [n] accumulate; either may be NULL. */
void k_swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up, int64_t n);

#endif
