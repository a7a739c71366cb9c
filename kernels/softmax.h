/* Softmax, log-softmax and the fused softmax + cross-entropy, over the last dimension.
 * Backward functions accumulate (+=). The forwards have single-threaded cores
 * k_<op>_range on `rows` rows (kernels/norm.h names the scheme). */
#ifndef K_SOFTMAX_H
#define K_SOFTMAX_H

#include <stdint.h>

/* in, out [M,N] */
void k_softmax_forward(float *out, const float *in, int64_t M, int64_t N);
void k_softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N);
/* d_in += out * (d_out - sum(d_out * out)) */
void k_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N);

void k_log_softmax_forward(float *out, const float *in, int64_t M, int64_t N);
void k_log_softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N);
/* d_in += d_out - exp(out) * sum(d_out) */
void k_log_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N);

/* losses[M] = -log softmax(logits[M,V])[targets[m]] */
void k_cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int64_t M, int64_t V);
/* d_logits[M,V] += d_losses[m] * (softmax(logits[m]) - onehot(targets[m])) */
void k_cross_entropy_backward(float *d_logits, const float *d_losses, const float *logits, const int32_t *targets,
                              int64_t M, int64_t V);

/* The same pair with the forward's row statistics kept for the backward, so
 * it does not recompute them: stats [M,2] holds each row's max and
 * log sum exp(x - max) (the forward's stats may be NULL). */
void k_cross_entropy_forward_stats(float *losses, float *stats, const float *logits, const int32_t *targets, int64_t M,
                                   int64_t V);
void k_cross_entropy_forward_stats_range(float *losses, float *stats, const float *logits, const int32_t *targets,
                                         int64_t rows, int64_t V);
void k_cross_entropy_backward_stats(float *d_logits, const float *d_losses, const float *logits, const float *stats,
                                    const int32_t *targets, int64_t M, int64_t V);

#endif
