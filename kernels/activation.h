/* Pointwise activations: GELU (tanh form), SiLU, SwiGLU. Backward accumulates (+=).
 * Each forward has a single-threaded core k_<op>_range (kernels/norm.h names
 * the scheme): the same arguments on a range of elements (pointwise) or rows. */
#ifndef K_ACTIVATION_H
#define K_ACTIVATION_H

#include <stdint.h>

/* out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void k_gelu_forward(float *out, const float *in, int64_t n);
void k_gelu_forward_range(float *out, const float *in, int64_t n);
void k_gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n);

/* The bias of a linear map and the GELU after it, fused (one pass each way):
 * pre [M,N] += bias [N] in place (bias may be NULL), out [M,N] = gelu(pre).
 * pre + bias and gelu round exactly as the separate ops do. */
void k_bias_gelu_forward(float *out, float *pre, const float *bias, int64_t M, int64_t N);
void k_bias_gelu_forward_range(float *out, float *pre, const float *bias, int64_t rows, int64_t N);
/* The same with a coupling term added in the same pass (the decode branch's
 * z2): out = gelu(pre + bias) + coupled [M,N] ⊙ couple [N]. */
void k_bias_gelu_couple_forward(float *out, float *pre, const float *bias, const float *coupled, const float *couple,
                                int64_t M, int64_t N);
void k_bias_gelu_couple_forward_range(float *out, float *pre, const float *bias, const float *coupled,
                                      const float *couple, int64_t rows, int64_t N);
/* g = d_out ⊙ gelu'(pre) [M,N]: d_pre = g (accumulate = 0: overwritten, no
 * zero-fill needed) or d_pre += g (accumulate = 1); d_bias [N] += column sums
 * of g (may be NULL). Column blocks run in parallel and each sums its rows in
 * order: deterministic for any thread count. */
void k_bias_gelu_backward(float *d_pre, int accumulate, float *d_bias, const float *d_out, const float *pre, int64_t M,
                          int64_t N);
/* The backward of a GELU whose output was not kept, in one sweep over pre
 * [M,N]: hidden [M,N] = gelu(pre), the numbers k_bias_gelu_forward (no bias)
 * gives, and d_pre [M,N] = d_hidden ⊙ gelu'(pre), those of
 * k_bias_gelu_backward with accumulate = 0; d_bias [N] += column sums (may be
 * NULL). d_pre may be d_hidden. */
void k_gelu_recompute_backward(float *hidden, float *d_pre, float *d_bias, const float *d_hidden, const float *pre,
                               int64_t M, int64_t N);

/* The same two with bfloat16 outputs, for an MLP whose products read bf16
 * operands (train.precision = bf16): each output element is the float32
 * result above rounded to bf16 (kernels/type_traits.h), and d_bias and pre
 * get the float32 values bit for bit; the float32 hidden layer and d_pre
 * never reach memory, only their 2-byte copies do. */
void k_bias_gelu_forward_bf16(uint16_t *out, float *pre, const float *bias, int64_t M, int64_t N);
void k_bias_gelu_forward_bf16_range(uint16_t *out, float *pre, const float *bias, int64_t rows, int64_t N);
void k_gelu_recompute_backward_bf16(uint16_t *hidden, uint16_t *d_pre, float *d_bias, const float *d_hidden,
                                    const float *pre, int64_t M, int64_t N);

/* out[n] = x * sigmoid(x) */
void k_silu_forward(float *out, const float *in, int64_t n);
void k_silu_forward_range(float *out, const float *in, int64_t n);
void k_silu_backward(float *d_in, const float *d_out, const float *in, int64_t n);

/* out[n] = silu(gate[n]) * up[n]  (the SwiGLU product silu(w1 x) * (w3 x)) */
void k_swiglu_forward(float *out, const float *gate, const float *up, int64_t n);
void k_swiglu_forward_range(float *out, const float *gate, const float *up, int64_t n);
/* d_gate, d_up [n] accumulate; either may be NULL. */
void k_swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up, int64_t n);

#endif
