/* Validation loss of a latent feedback model (SPEC §6.5) by the number of
 * fused passes (`dbranch eval --feedback-passes 0,1,2,5,10,30`).
 *
 * At N fused passes the forward runs K = N + 1 passes, teacher-forced: pass 1
 * plain, passes 2..K fused from the previous pass's top state h = Norm_f(h_L),
 * with no jitter and no prefix mixin (the K-pass training forward without its
 * training draws), so N = 0 is the plain model. Each window runs the passes
 * once, up to the largest N: pass k is fed pass k-1's top state, and the
 * figures of every listed N are read off on the way.
 *
 * Per N: the mean cross-entropy of pass K's logits over the scored positions
 * (every position of each window), bits per byte as eval_loss.h counts them,
 * and the state change of the last two passes: the mean over scored
 * positions t of ||h^(K)_t - h^(K-1)_t||_2 / ||h^(K-1)_t||_2 (Euclidean norm
 * over the C channels; none at N = 0). Position t's state stops changing after
 * pass t + 1 (u_0 = e_0 in every pass, and h_t sees the fused inputs up to
 * t), so at N >= 1 positions t < N contribute exact zeros. */
#ifndef EVAL_FEEDBACK_PASSES_H
#define EVAL_FEEDBACK_PASSES_H

#include <stdint.h>

#include "core/error.h"
#include "data/tokens.h"
#include "eval/eval_loss.h"
#include "models/model.h"

/* At most this many values in a list, each at most EVAL_FEEDBACK_MAX_N. */
enum { EVAL_FEEDBACK_MAX_LIST = 16, EVAL_FEEDBACK_MAX_N = 1000 };

typedef struct eval_feedback_passes_result {
    int n;                                         /* entries of the list */
    int64_t fused[EVAL_FEEDBACK_MAX_LIST];         /* N, increasing */
    double loss[EVAL_FEEDBACK_MAX_LIST];           /* mean CE of pass N + 1 (nats) */
    double bits_per_byte[EVAL_FEEDBACK_MAX_LIST];  /* loss / ln 2 * n_tokens / n_bytes (0 without bytes) */
    double state_change[EVAL_FEEDBACK_MAX_LIST];   /* mean ||h^(N+1) - h^(N)|| / ||h^(N)||; NAN at N = 0 */
    int64_t seq_len, n_windows, n_tokens, n_bytes; /* the windows and the positions scored at each N */
} eval_feedback_passes_result;

/* "0,1,2,5,10,30" -> fused[0..*n): integers 0..EVAL_FEEDBACK_MAX_N, strictly
 * increasing, at most EVAL_FEEDBACK_MAX_LIST of them; an error names the value. */
dt_status eval_feedback_passes_parse(const char *text, int64_t *fused, int *n);

/* Evaluates the model (feedback = 1) at each N of fused[0..n) (as parsed) on
 * the windows options select (split, n_windows, seq_len; teacher-forced, no
 * prompt_len, feedback mode standard, one process). */
dt_status eval_feedback_passes_run(model *m, data_tokens *data, const eval_loss_options *options, const int64_t *fused,
                                   int n, eval_feedback_passes_result *result);

#endif
