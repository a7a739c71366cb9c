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

#include <stddef.h>
#include <stdint.h>

/* logits_p, logits_q [M,V]; targets [M]; outputs nll, alpha, ce_p, ce_q [M] (ce_p/ce_q may be NULL). */
void k_mixture_forward(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p, const float *logits_q,
                       const int32_t *targets, int64_t M, int64_t V, float alpha_min, float alpha_max);
/* The same, also keeping each row's statistics (maxima, exponential sums,
 * alpha's terms, the log terms) in saved, k_mixture_saved_bytes(M) bytes, so
 * k_mixture_backward_saved need not recompute them (one pass over the
 * logits' exponentials fewer). */
void k_mixture_forward_saving(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p,
                              const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                              float alpha_max, void *saved);
size_t k_mixture_saved_bytes(int64_t M);

/* alpha alone (logits-only forwards, decode), the same numbers as
 * k_mixture_forward's alpha. One implementation for training, evaluation and
 * decode: near alpha = 1 (a confident primary) 1 - alpha is formed from the
 * non-maximal exponentials, not by subtracting from a number near 1
 * (docs/DECISIONS.md "Mixture near alpha = 1").
 * Core, single-threaded over a row range: logits_p [rows,V] -> alpha [rows]
 * and one_minus_alpha [rows] (may be NULL; exact to ~1e-7 relative even when
 * float alpha rounds to 1). */
void k_mixture_alpha_range(float *alpha, double *one_minus_alpha, const float *logits_p, int64_t rows, int64_t V,
                           float alpha_min, float alpha_max);
/* OpenMP wrapper: logits_p [M,V] -> alpha [M]. */
void k_mixture_alpha(float *alpha, const float *logits_p, int64_t M, int64_t V, float alpha_min, float alpha_max);

/* d_logits_p, d_logits_q [M,V] accumulate (+=) d_nll[m] * d nll[m] / d logits.
 * d_logits_p NULL: the primary is a constant (detach_primary).
 * alpha_detach: no gradient through alpha (only through p(y)). */
void k_mixture_backward(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                        const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                        float alpha_max, int alpha_detach);
/* The same from the statistics k_mixture_forward_saving kept for these
 * logits, targets and bounds (saved NULL: recomputed); the same bits. */
void k_mixture_backward_saved(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                              const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                              float alpha_max, int alpha_detach, const void *saved);

#endif
