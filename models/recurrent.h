/* The Recurrent Transformer layer (SPEC §6.4, arXiv 2604.21215), training
 * forward: each layer's keys and values for earlier positions come from the
 * layer's own output. Called from the training forward's stack
 * (models/model_forward.c) for the primary path when recurrent = 1; the
 * decode branch runs its usual block and attends through
 * model_recurrent_attention over the primary's keys. */
#ifndef MODEL_RECURRENT_H
#define MODEL_RECURRENT_H

#include "models/ffn.h"
#include "models/model.h"

/* Primary block l on its input x [B,T,C] -> out [B,T,C], a scan over the
 * positions. Fills *state: q1, the temporary pairs k, v [B,T,Hkv*hd] (k
 * rotated), the persistent pairs k_persist, v_persist [T,B,Hkv*hd], and z1,
 * m1, router logits for the branch; adds the MoE balance term of the layer
 * over all positions to *balance. */
dt_tensor *model_recurrent_layer(ag_ctx *ctx, const model *m, int64_t l, dt_tensor *x, model_primary_state *state,
                                 model_ffn_balance *balance);

/* Taped attention of query positions [t0, t1): q [B,T,H*hd] (positioned) at
 * position t over the persistent pairs k_persist, v_persist [T,B,Hkv*hd] rows
 * 0..t-1 and the temporary pair k, v [B,T,Hkv*hd] row t -> [B, t1-t0, H*hd].
 * slopes [H] or NULL: an ALiBi bias (kernels/recurrent_attention.h). */
dt_tensor *model_recurrent_attention(ag_ctx *ctx, const model_layer_arch *la, dt_tensor *q, dt_tensor *k, dt_tensor *v,
                                     dt_tensor *k_persist, dt_tensor *v_persist, int64_t t0, int64_t t1,
                                     const float *slopes);

/* The evaluation order of the primary's recurrent attention in training
 * (docs/DECISIONS.md): both compute the same function (test
 * recurrent::tiled_equals_scan).
 *   SCAN   per position, the query over all its keys (kernels' per-query form)
 *   TILED  the paper's schedule: key block [t+1-T', t], T' = (t+1) & -(t+1),
 *          merged into query block [t+1, t+T'] once out_t is known
 * Process-wide; set it before training starts (the workers only read it). */
typedef enum { MODEL_RECURRENT_SCAN = 0, MODEL_RECURRENT_TILED = 1 } model_recurrent_schedule;
void model_recurrent_set_schedule(model_recurrent_schedule which);
model_recurrent_schedule model_recurrent_get_schedule(void);

#endif
