/* A model: its configuration, its parameters (SPEC §3 names), and the
 * training-time forward pass that builds the autograd tape.
 *
 * The decode branch is one mechanism over any family: the branch trajectory
 * runs the same block code as the primary with its own embedding, reading the
 * primary's per-layer intermediates (q1, z1, m1, K, V) through the coupling
 * vectors and the shared attention. */
#ifndef MODEL_MODEL_H
#define MODEL_MODEL_H

#include <stdint.h>

#include "autograd/tape.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "models/arch.h"
#include "models/config.h"
#include "models/feedback.h"
#include "models/ffn.h"
#include "models/norm_kinds.h"
#include "models/position_kinds.h"
#include "models/probe.h"

/* The weights a block applies; the primary's, or with share = off the branch's own copies.
 * Pointers are NULL when absent (biases without linear_bias, ...). */
typedef struct model_block_weights {
    dt_tensor *wq, *wq_bias, *wk, *wk_bias, *wv, *wv_bias, *wo, *wo_bias; /* [H*hd,C] [Hkv*hd,C] [Hkv*hd,C] [C,H*hd] */
    dt_tensor *ffn[MODEL_FFN_SLOTS]; /* the layer's FFN kind's tensors, in its declaration order (models/ffn.h) */
} model_block_weights;

typedef struct model_layer {
    dt_tensor *attn_norm, *attn_norm_bias; /* [C] */
    dt_tensor *ffn_norm, *ffn_norm_bias;   /* [C] */
    model_block_weights primary;
    model_block_weights branch; /* == primary (same pointers) when share = on */
    dt_tensor *couple_q;        /* [H*hd]  (NULL when couple = off or no branch) */
    dt_tensor *couple_hidden;   /* [F]     (dense layers only) */
    dt_tensor *couple_out;      /* [C] */
    const float *rope_table;    /* [T_max, hd/2, 2] for this layer's head width (rotary schemes) */
    /* attn_res (SPEC §6.3): the routes into this layer's two sublayers, [C] each (NULL without). */
    dt_tensor *route_attn_query, *route_attn_norm, *route_ffn_query, *route_ffn_norm;
} model_layer;

typedef enum { PARAM_PRIMARY = 0, PARAM_BRANCH = 1 } model_param_group;

typedef struct model_param {
    char name[96];           /* SPEC §3 name, e.g. "layers.0.attn.wq.weight" */
    dt_tensor *tensor;       /* view into params_memory / grads_memory, requires_grad */
    model_param_group group; /* primary path or branch-only */
    int is_matrix;           /* 2-D (or expert 3-D) weight: weight decay / Muon apply */
    int is_embedding;        /* tok_emb, tok_emb2, pos_emb, branch.tok_emb, lm_head */
    model_init_kind init;    /* how model_init_weights draws it */
} model_param;

typedef struct model {
    model_config config;
    model_arch arch;     /* the resolved description every executor reads (models/arch.h) */
    model_param *params; /* in SPEC §3 order */
    int n_params;
    dt_tensor *tok_emb;                      /* [V,C] */
    dt_tensor *tok_emb2;                     /* [V,C] tok_emb_tables = 2: added to tok_emb at the input; else NULL */
    dt_tensor *pos_emb;                      /* [T_max,C] nanogpt */
    dt_tensor *final_norm, *final_norm_bias; /* [C] */
    dt_tensor *lm_head;                      /* [V,C]; == tok_emb when tied */
    dt_tensor *branch_tok_emb;               /* [V,C]; == tok_emb when branch_emb = shared; NULL without branch */
    dt_tensor *route_final_query, *route_final_norm; /* [C] attn_res: the route into the final norm */
    dt_tensor *disco_norm;                           /* [C] DiscoLoop's RMSNorm_d weight (SPEC §6.6; NULL without) */
    dt_tensor *disco_gate_weight, *disco_gate_bias;  /* [C], [1] disco_gate = learned */
    dt_tensor *feedback_w_u, *feedback_w_g;          /* [C,C] latent feedback (SPEC §6.5; NULL without) */
    dt_tensor *feedback_norm_tok, *feedback_norm_in; /* [C] */
    model_layer *layers;                             /* [n_layer] */
    float *rope_table;                               /* [block_size, hd/2, 2] cos/sin (rotary position schemes) */
    float *params_memory;     /* [n_floats] every parameter's weights, SPEC §3 order; the tensors are views */
    float *grads_memory;      /* [n_floats] their gradients at the same offsets */
    int64_t n_floats;         /* each parameter starts on a 16-float boundary (zero padding between) */
    uint16_t *bf16_memory;    /* [n_floats] bf16 copies of params_memory (model_enable_bf16), else NULL */
    const model_probe *probe; /* NULL but under dbranch analyze (models/probe.h) */
} model;

/* What a forward pass returns (arena tensors of the step's ag_ctx). */
typedef struct model_outputs {
    dt_tensor *loss;           /* [1] the training objective (SPEC §2, aux term included) */
    dt_tensor *loss_reported;  /* [1] the mixture NLL (== CE(p) without a branch), aux excluded */
    dt_tensor *loss_primary;   /* [1] CE of the primary logits */
    dt_tensor *loss_branch;    /* [1] CE of the branch logits (NULL without a branch) */
    dt_tensor *aux;            /* [1] mean over MoE layers of the balance term (moe only) */
    dt_tensor *alpha;          /* [B,T] mixture weight (branch only) */
    dt_tensor *logits_primary; /* [B,T,V] */
    dt_tensor *logits_branch;  /* [B,T,V] (branch only) */
    /* MoE balance terms, one per application of a MoE layer (moe only;
     * train/parallel_step.c makes them those of the whole batch when threads
     * split its rows): */
    int64_t moe_layers;        /* how many (n_loop * n_layer for moe, else 0) */
    float **balance_fractions; /* [moe_layers] -> f [E] each term's backward reads */
    float *router_mean_probs;  /* [moe_layers, E] mean router probabilities over the tokens */
    /* Latent feedback (SPEC §6.5): the passes run and each one's CE (with targets). */
    int64_t passes;
    float *loss_passes; /* [passes] */
} model_outputs;

/* Validates the config, allocates every parameter (zeros) with its gradient,
 * all in the two flat buffers. */
dt_status model_create(model *m, const model_config *config);
void model_free(model *m);
/* SPEC init: normal(0, 0.02) matrices/embeddings, residual projections scaled
 * by 1/sqrt(2 n_layer), zero biases and coupling vectors, unit norm weights. */
void model_init_weights(model *m, dt_rng *rng);
/* Gives every parameter a bfloat16 copy (dt_tensor.bf16, one flat buffer at
 * params_memory's offsets), filled now: what bf16 products read for weights
 * (train.precision = bf16). Idempotent. */
dt_status model_enable_bf16(model *m);
/* Rounds the weights into their bf16 copies again (after the weights change:
 * the trainer calls it once per step); nothing without model_enable_bf16. */
void model_refresh_bf16(model *m);
/* Looks up a parameter by SPEC name; NULL when absent. */
model_param *model_find_param(const model *m, const char *name);
void model_zero_grad(model *m);
int64_t model_param_count(const model *m, int group /* -1 for all */);

/* Training forward. tokens int32 [B, T] inputs; targets int32 [B, T] (may be
 * NULL: logits only). Builds the tape on ctx. */
dt_status model_forward(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets, model_outputs *out);
/* The same with the passes of latent feedback (SPEC §6.5) as `run` says (NULL:
 * one plain pass, which is what model_forward runs): logits_primary and
 * loss_primary are pass K's, loss the K-pass objective (+ aux over every
 * application of every MoE layer). passes > 1 needs feedback = 1. */
dt_status model_forward_feedback(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets,
                                 const model_feedback_run *run, model_outputs *out);
/* One pass of latent feedback, for evaluating by passes (eval/feedback_passes.h):
 * tokens int32 [B,T]; top_prev NULL (the plain pass) or the previous pass's
 * top state [B,T,C], fused with no jitter and no prefix mixin -> *logits
 * [B,T,V] and *top [B,T,C] (this pass's Norm_f(h_L)), both in ctx. Pass k of
 * model_forward_feedback's K-pass forward is this pass fed pass k-1's top. */
dt_status model_forward_feedback_pass(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *top_prev, dt_tensor **logits,
                                      dt_tensor **top);

#endif
