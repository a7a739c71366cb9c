/* The public functions of norm.h: each calls the table of the active
 * instruction-set level (kernels/isa.h); the bodies are in norm_isa.c. */
#include "kernels/norm.h"

#include "kernels/isa.h"
#include "kernels/norm_ops.h"

void k_layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *weight, const float *bias,
                         int64_t M, int64_t C, float eps) {
    K_ISA_PICK(k_norm_ops)->layernorm_forward(out, mean, rstd, in, weight, bias, M, C, eps);
}

void k_layernorm_forward_range(float *out, float *mean, float *rstd, const float *in, const float *weight,
                               const float *bias, int64_t rows, int64_t C, float eps) {
    K_ISA_PICK(k_norm_ops)->layernorm_forward_range(out, mean, rstd, in, weight, bias, rows, C, eps);
}

void k_layernorm_backward(float *d_in, float *d_weight, float *d_bias, const float *d_out, const float *in,
                          const float *weight, const float *mean, const float *rstd, int64_t M, int64_t C) {
    K_ISA_PICK(k_norm_ops)->layernorm_backward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, M, C);
}

void k_rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight, int64_t M, int64_t C, float eps) {
    K_ISA_PICK(k_norm_ops)->rmsnorm_forward(out, rstd, in, weight, M, C, eps);
}

void k_rmsnorm_forward_range(float *out, float *rstd, const float *in, const float *weight, int64_t rows, int64_t C,
                             float eps) {
    K_ISA_PICK(k_norm_ops)->rmsnorm_forward_range(out, rstd, in, weight, rows, C, eps);
}

void k_rmsnorm_backward(float *d_in, float *d_weight, const float *d_out, const float *in, const float *weight,
                        const float *rstd, int64_t M, int64_t C) {
    K_ISA_PICK(k_norm_ops)->rmsnorm_backward(d_in, d_weight, d_out, in, weight, rstd, M, C);
}
