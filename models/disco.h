/* DiscoLoop (SPEC §6.6, arXiv 2607.00341): between two applications k < K
 * of a looped stack (n_loop = K), the stream H^(k) reads its own expected
 * output embedding back in:
 *
 *   p      = softmax( Norm_f(H^(k)) W_out^T / disco_tau ), kept at its
 *            disco_top largest entries (ties: lower index first) and renormalised
 *   Phi    = p W_out                                  [C] per position
 *   H~^(k) = H^(k) + a ⊙ RMSNorm_d(Phi)               weight disco.norm.weight [C]
 *
 * a = disco_alpha (disco_gate = fixed) or sigmoid(H^(k)_t · disco.gate.weight
 * + disco.gate.bias) (learned; one gate for every boundary). The gradient
 * flows through the kept probabilities and Phi; the kept set is a constant.
 *
 * The same arithmetic in two forms: taped (training, model_forward.c) and on
 * rows of floats (prefill and the decode step, eval/decode.c). */
#ifndef MODEL_DISCO_H
#define MODEL_DISCO_H

#include <stdint.h>

#include "autograd/tape.h"
#include "models/model.h"

/* ---- taped ---- */

/* h [B,T,C] = H^(k); logits [B,T,V] = Norm_f(h) W_out^T (the head on h) ->
 * H~^(k) [B,T,C]. */
dt_tensor *model_disco_forward(ag_ctx *ctx, const model *m, dt_tensor *h, dt_tensor *logits);

/* ---- rows (decode engine; single-threaded) ---- */

/* Scratch of model_disco_rows for up to M rows. */
typedef struct model_disco_scratch {
    float *p;     /* [M,V] the kept probabilities */
    int32_t *idx; /* [M,disco_top] the kept entries */
    float *phi;   /* [M,C] */
    float *rstd;  /* [M] */
} model_disco_scratch;

/* h [M,C] += a ⊙ RMSNorm_d(p W_out) in place, with logits [M,V] the head
 * on h (scaled by 1/disco_tau in place). Returns the weight floats it read:
 * the kept rows of W_out (all V rows once when M > 2 keeps everything: one
 * product), disco.norm and the gate. */
int64_t model_disco_rows(const model *m, float *h, float *logits, int64_t M, const model_disco_scratch *scratch);

/* Weight floats model_disco_rows reads for M <= 2 rows (a decode step):
 * each row's kept rows of W_out, disco.norm, and the learned gate (the cost
 * model's figure, models/model_info.c). */
int64_t model_disco_rows_floats(const model_arch *a, int64_t M);

#endif
