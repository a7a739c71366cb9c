/* Latent feedback (SPEC §6.5, the full-bandwidth transformer, arXiv
 * 2608.08888): a pass of the model may take, instead of the looked-up
 * embeddings e, input vectors fused from the previous pass's top state
 * h = Norm_f(h_L) (the LM head's input):
 *
 *     u_0 = e_0;  u_t = RMSNorm_in( (h_{t-1} W_u^T) ⊙ sigmoid(RMSNorm_tok(e_t) W_g^T) ),  t >= 1
 *
 * with feedback.w_u, feedback.w_g [C,C] and feedback.norm_tok, feedback.norm_in
 * [C]. A training forward runs K passes (pass 1 plain, passes 2..K fused from
 * the pass before) with objective CE(1) + lambda/(K-1) sum_{k>=2} CE(k).
 * Training adds jitter U(-delta, delta) to h before fusing and, with prefix
 * mixin, a per-row prefix length p uniform in 0..T-1 whose positions t <= p
 * take u_t = e_t.
 *
 * The fusion in two forms: taped (training, model_forward.c) and on one row
 * of floats (soft decoding, eval/decode.c). */
#ifndef MODEL_FEEDBACK_H
#define MODEL_FEEDBACK_H

#include <stdint.h>

#include "autograd/tape.h"

typedef struct model model;

/* The most passes a forward runs (train.feedback_passes, /ref passes). */
enum { MODEL_FEEDBACK_MAX_PASSES = 64 };

/* How a forward runs the passes (model_forward_feedback). */
typedef struct model_feedback_run {
    int64_t passes;    /* K >= 1 (0 means 1): pass 1 plain, passes 2..K fused */
    double lambda;     /* weight of the feedback passes' mean CE in the objective */
    float jitter;      /* delta of the U(-delta, delta) added to h^(k-1) (0: none) */
    int prefix_mixin;  /* per row and feedback pass, positions t <= p take e_t */
    uint64_t seed;     /* the step's draws (prefix lengths, jitter) */
    int64_t first_row; /* global index of the tokens' row 0: a row's draws do not depend on how rows are split */
} model_feedback_run;

/* K = 1, lambda = 1, no jitter, no prefix mixin: the plain model (standard decoding). */
model_feedback_run model_feedback_plain(void);

/* The input of feedback pass `pass` (>= 2): top [B,T,C] the previous pass's
 * top state, e [B,T,C] the embeddings -> u [B,T,C]. */
dt_tensor *model_feedback_fuse(ag_ctx *ctx, const model *m, dt_tensor *top, dt_tensor *e, const model_feedback_run *run,
                               int64_t pass);

/* One row: u [C] = fuse(h_prev [C], e [C]); scratch [2C]. u may not alias the inputs. */
void model_feedback_fuse_row(float *u, const float *h_prev, const float *e, const model *m, float *scratch);

/* The taped unit under the norm, exposed for its gradient check:
 * z [B,T,C], z[b,0] = 0, z[b,t] = a[b,t-1] ⊙ sigmoid(g[b,t]) (a, g [B,T,C]). */
dt_tensor *model_feedback_shift_gate(ag_ctx *ctx, dt_tensor *a, dt_tensor *g);

#endif
