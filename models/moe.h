/* The mixture-of-experts FFN (SPEC §1) as used by both trajectories of a
 * model (SPEC §2): router, top-k choice, gates, per-expert SwiGLU and the
 * gated combine. Internal to the models layer (model_forward.c uses it).
 *
 * Why one function for both paths: the primary chooses its experts from its
 * own router logits; the branch either replays the primary's choice ("replay":
 * experts from the primary's logits, gates from its own) or chooses from its
 * own logits ("own"). Only where the top-k is taken differs. */
#ifndef MODEL_MOE_H
#define MODEL_MOE_H

#include <stdint.h>

#include "autograd/tape.h"
#include "core/tensor.h"

typedef struct model_moe_result {
    dt_tensor *out;           /* [N,C] sum over chosen experts of gate * SwiGLU_e(x) */
    dt_tensor *router_logits; /* [N,E] x Wr^T (this path's router) */
    dt_tensor *experts;       /* int32 [N,k] chosen experts, descending by selection logit */
} model_moe_result;

/* The tensors of one MoE layer (the "moe" FFN kind's slots, models/ffn_moe.c). */
typedef struct model_moe_weights {
    dt_tensor *router;       /* [E,C] */
    dt_tensor *w1, *w3, *w2; /* [E,F,C] [E,F,C] [E,C,F] */
    /* Product experts (SPEC §6.1): 0 = SwiGLU; 2, 3, 4 factors (w1 ⊙ w3 (⊙ w4 (⊙ w5))). */
    int product_degree;
    dt_tensor *w4, *w5;   /* [E,F,C] when the degree needs them */
    dt_tensor *prod_norm; /* [E,F] RMSNorm weight of the product (ffn_prod_norm), or NULL */
    float norm_eps;
} model_moe_weights;

/* x [N,C] (the normed FFN input); weights->router [E,C], w1/w3 [E,F,C], w2 [E,C,F].
 * select_logits [N,E] or NULL: whose top-k picks the experts (NULL: this
 * path's own router logits); gates are always the softmax of this path's
 * router logits over the chosen k. Returns DT_ERR with a message on failure. */
dt_status model_moe_forward(ag_ctx *ctx, const model_moe_weights *weights, dt_tensor *x, int64_t k,
                            const dt_tensor *select_logits, model_moe_result *result);

/* Fractions f_e = counts_e / (N*k) of the (token, slot) assignments in
 * experts int32 [N,k] over E experts, into fractions [E] (SPEC §1 balance). */
void model_moe_fractions(float *fractions, const dt_tensor *experts, int64_t n_expert);

/* A differentiable view of expert e's matrix: weight [E,R,S] -> [R,S] (or
 * [E,S] -> [S]) sharing the parameter's data; its gradient lands in the
 * parameter's gradient. */
dt_tensor *model_expert_matrix(ag_ctx *ctx, dt_tensor *weight, int64_t e);

#endif
