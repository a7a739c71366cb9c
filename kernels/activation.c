/* The activations of activation.h: each calls the variant of the active
 * instruction-set level (activation_isa.c holds the kernels; k_isa_active()
 * is read per call, so DBRANCH_ISA and k_isa_force reach them). */
#include "kernels/activation.h"

#include "kernels/activation_ops.h"
#include "kernels/isa.h"

void k_gelu_forward(float *out, const float *in, int64_t n) { K_ISA_PICK(k_activation_ops)->gelu_forward(out, in, n); }

void k_gelu_forward_range(float *out, const float *in, int64_t n) {
    K_ISA_PICK(k_activation_ops)->gelu_forward_range(out, in, n);
}

void k_gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
    K_ISA_PICK(k_activation_ops)->gelu_backward(d_in, d_out, in, n);
}

void k_bias_gelu_forward(float *out, float *pre, const float *bias, int64_t M, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_forward(out, pre, bias, M, N);
}

void k_bias_gelu_forward_range(float *out, float *pre, const float *bias, int64_t rows, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_forward_range(out, pre, bias, rows, N);
}

void k_bias_gelu_couple_forward(float *out, float *pre, const float *bias, const float *coupled, const float *couple,
                                int64_t M, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_couple_forward(out, pre, bias, coupled, couple, M, N);
}

void k_bias_gelu_couple_forward_range(float *out, float *pre, const float *bias, const float *coupled,
                                      const float *couple, int64_t rows, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_couple_forward_range(out, pre, bias, coupled, couple, rows, N);
}

void k_bias_gelu_backward(float *d_pre, int accumulate, float *d_bias, const float *d_out, const float *pre, int64_t M,
                          int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_backward(d_pre, accumulate, d_bias, d_out, pre, M, N);
}

void k_gelu_recompute_backward(float *hidden, float *d_pre, float *d_bias, const float *d_hidden, const float *pre,
                               int64_t M, int64_t N) {
    K_ISA_PICK(k_activation_ops)->gelu_recompute_backward(hidden, d_pre, d_bias, d_hidden, pre, M, N);
}

void k_bias_gelu_forward_bf16(uint16_t *out, float *pre, const float *bias, int64_t M, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_forward_bf16(out, pre, bias, M, N);
}

void k_bias_gelu_forward_bf16_range(uint16_t *out, float *pre, const float *bias, int64_t rows, int64_t N) {
    K_ISA_PICK(k_activation_ops)->bias_gelu_forward_bf16_range(out, pre, bias, rows, N);
}

void k_gelu_recompute_backward_bf16(uint16_t *hidden, uint16_t *d_pre, float *d_bias, const float *d_hidden,
                                    const float *pre, int64_t M, int64_t N) {
    K_ISA_PICK(k_activation_ops)->gelu_recompute_backward_bf16(hidden, d_pre, d_bias, d_hidden, pre, M, N);
}

void k_silu_forward(float *out, const float *in, int64_t n) { K_ISA_PICK(k_activation_ops)->silu_forward(out, in, n); }

void k_silu_forward_range(float *out, const float *in, int64_t n) {
    K_ISA_PICK(k_activation_ops)->silu_forward_range(out, in, n);
}

void k_silu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
    K_ISA_PICK(k_activation_ops)->silu_backward(d_in, d_out, in, n);
}

void k_swiglu_forward(float *out, const float *gate, const float *up, int64_t n) {
    K_ISA_PICK(k_activation_ops)->swiglu_forward(out, gate, up, n);
}

void k_swiglu_forward_range(float *out, const float *gate, const float *up, int64_t n) {
    K_ISA_PICK(k_activation_ops)->swiglu_forward_range(out, gate, up, n);
}

void k_swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up, int64_t n) {
    K_ISA_PICK(k_activation_ops)->swiglu_backward(d_gate, d_up, d_out, gate, up, n);
}
