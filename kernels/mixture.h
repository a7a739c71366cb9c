/* The Decode-Branch mixture readout and its negative log-likelihood (SPEC §2),
 * fused so the [M,V] probabilities are never stored.
 *
 * Per row m, with p = softmax(logits_p[m]), q = softmax(logits_q[m]):
 *   alpha = clip(sum_v p(v)^2, alpha_min, alpha_max)
 *   nll   = -logsumexp(log alpha + log p(y), log1p(-alpha) + log q(y))
 * A term whose weight is exactly 0 is dropped (never log 0), and alpha is then
 * a constant. The clip passes gradient only for alpha_min <= S <= alpha_max
 * with alpha_min < alpha_max. */
#ifndef K_MIXTURE_H
#define K_MIXTURE_H

#include <stdint.h>

/* logits_p, logits_q [M,V]; targets [M]; outputs nll, alpha, ce_p, ce_q [M] (ce_p/ce_q may be NULL). */
void k_mixture_forward(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p,
                       const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                       float alpha_max);

/* d_logits_p, d_logits_q [M,V] accumulate (+=) d_nll[m] * d nll[m] / d logits.
 * d_logits_p NULL: the primary is a constant (detach_primary).
 * alpha_detach: no gradient through alpha (only through p(y)). */
void k_mixture_backward(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                        const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                        float alpha_max, int alpha_detach);

#endif
