/* The public functions of mixture.h: each calls the table of the active
 * instruction-set level (kernels/isa.h); the bodies are in mixture_isa.c. */
#include "kernels/mixture.h"

#include "kernels/isa.h"
#include "kernels/mixture_ops.h"

void k_mixture_forward(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p, const float *logits_q,
                       const int32_t *targets, int64_t M, int64_t V, float alpha_min, float alpha_max) {
    K_ISA_PICK(k_mixture_ops)
        ->mixture_forward(nll, alpha, ce_p, ce_q, logits_p, logits_q, targets, M, V, alpha_min, alpha_max);
}

void k_mixture_forward_saving(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p,
                              const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                              float alpha_max, void *saved) {
    K_ISA_PICK(k_mixture_ops)
        ->mixture_forward_saving(nll, alpha, ce_p, ce_q, logits_p, logits_q, targets, M, V, alpha_min, alpha_max,
                                 saved);
}

size_t k_mixture_saved_bytes(int64_t M) { return K_ISA_PICK(k_mixture_ops)->mixture_saved_bytes(M); }

void k_mixture_alpha_range(float *alpha, double *one_minus_alpha, const float *logits_p, int64_t rows, int64_t V,
                           float alpha_min, float alpha_max) {
    K_ISA_PICK(k_mixture_ops)->mixture_alpha_range(alpha, one_minus_alpha, logits_p, rows, V, alpha_min, alpha_max);
}

void k_mixture_alpha(float *alpha, const float *logits_p, int64_t M, int64_t V, float alpha_min, float alpha_max) {
    K_ISA_PICK(k_mixture_ops)->mixture_alpha(alpha, logits_p, M, V, alpha_min, alpha_max);
}

void k_mixture_backward(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                        const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                        float alpha_max, int alpha_detach) {
    K_ISA_PICK(k_mixture_ops)
        ->mixture_backward(d_logits_p, d_logits_q, d_nll, logits_p, logits_q, targets, M, V, alpha_min, alpha_max,
                           alpha_detach);
}

void k_mixture_backward_saved(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                              const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                              float alpha_max, int alpha_detach, const void *saved) {
    K_ISA_PICK(k_mixture_ops)
        ->mixture_backward_saved(d_logits_p, d_logits_q, d_nll, logits_p, logits_q, targets, M, V, alpha_min, alpha_max,
                                 alpha_detach, saved);
}
