/* The public functions of softmax.h: each calls the table of the active
 * instruction-set level (kernels/isa.h); the bodies are in softmax_isa.c. */
#include "kernels/softmax.h"

#include "kernels/isa.h"
#include "kernels/softmax_ops.h"

void k_softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->softmax_forward(out, in, M, N);
}

void k_softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->softmax_forward_range(out, in, rows, N);
}

void k_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->softmax_backward(d_in, d_out, out, M, N);
}

void k_log_softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->log_softmax_forward(out, in, M, N);
}

void k_log_softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->log_softmax_forward_range(out, in, rows, N);
}

void k_log_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
    K_ISA_PICK(k_softmax_ops)->log_softmax_backward(d_in, d_out, out, M, N);
}

void k_cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int64_t M, int64_t V) {
    K_ISA_PICK(k_softmax_ops)->cross_entropy_forward(losses, logits, targets, M, V);
}

void k_cross_entropy_backward(float *d_logits, const float *d_losses, const float *logits, const int32_t *targets,
                              int64_t M, int64_t V) {
    K_ISA_PICK(k_softmax_ops)->cross_entropy_backward(d_logits, d_losses, logits, targets, M, V);
}

void k_cross_entropy_forward_stats(float *losses, float *stats, const float *logits, const int32_t *targets, int64_t M,
                                   int64_t V) {
    K_ISA_PICK(k_softmax_ops)->cross_entropy_forward_stats(losses, stats, logits, targets, M, V);
}

void k_cross_entropy_forward_stats_range(float *losses, float *stats, const float *logits, const int32_t *targets,
                                         int64_t rows, int64_t V) {
    K_ISA_PICK(k_softmax_ops)->cross_entropy_forward_stats_range(losses, stats, logits, targets, rows, V);
}

void k_cross_entropy_backward_stats(float *d_logits, const float *d_losses, const float *logits, const float *stats,
                                    const int32_t *targets, int64_t M, int64_t V) {
    K_ISA_PICK(k_softmax_ops)->cross_entropy_backward_stats(d_logits, d_losses, logits, stats, targets, M, V);
}
