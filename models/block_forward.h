/* The pieces of the training forward's block (models/model_forward.c) that
 * an attention variant's own block reuses: the model's norm and the FFN
 * sublayer of layer l, both trajectories (SPEC §1-§2). The recurrent layer
 * (models/recurrent_forward.c, SPEC §6.4) runs them one position at a time. */
#ifndef MODEL_BLOCK_FORWARD_H
#define MODEL_BLOCK_FORWARD_H

#include "models/ffn.h"
#include "models/model.h"

/* The model's norm kind over the last dim: x [..., C], weight/bias [C]. */
dt_tensor *model_block_norm(ag_ctx *ctx, const model *m, dt_tensor *x, dt_tensor *weight, dt_tensor *bias);

/* m = FFN_l(Norm2_l(x)) on x [B,T,C] (x + m with add_residual), as the
 * primary (branch = 0: fills state's z1, m1, router logits; adds its balance
 * term) or the branch (reads state). */
dt_tensor *model_block_ffn(ag_ctx *ctx, const model *m, int64_t l, int branch, dt_tensor *x, model_primary_state *state,
                           model_ffn_balance *balance, int add_residual);

#endif
