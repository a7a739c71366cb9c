/* The model description: every architectural choice of a model, resolved per
 * layer, built once from a validated configuration (model_arch_build).
 *
 * Training forward (model_forward.c), batched prefill and the one-position
 * decode step (eval/decode.c), the parameter registry (model.c) and the cost
 * model (model_info.c) all read this record instead of switching on `family`
 * each. A family is a preset of independent choices (model_family_preset):
 * norm kind, position scheme, linear biases, FFN kind, tied head. Kinds are
 * entries of tables (norm_kinds.c, position_kinds.c, ffn_kinds.c): a new one
 * is a new file plus one table line (docs/ARCHITECTURE.md has the recipe).
 *
 * The decode branch's coupling contract (SPEC §2) is declared here too:
 * model_primary_state is what the primary's block l hands to the branch. */
#ifndef MODEL_ARCH_H
#define MODEL_ARCH_H

#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"
#include "models/config.h"

typedef struct model_norm_kind model_norm_kind;
typedef struct model_position_kind model_position_kind;
typedef struct model_ffn_kind model_ffn_kind;

/* What a family chooses (SPEC §1's table, one row each). */
typedef struct model_family_preset {
    const char *norm;     /* norm kind name: "layernorm" | "rmsnorm" */
    const char *position; /* position scheme: "learned" | "rope" */
    const char *ffn;      /* FFN kind: "gelu_mlp" | "swiglu" | "moe" */
    int linear_bias;      /* attention and FFN projections carry biases */
    int tie_embeddings;   /* default of the tie_embeddings key */
} model_family_preset;

const model_family_preset *model_family_preset_of(model_family family);

/* One layer's shape. Layers are alike today; the record is per layer so
 * options such as per-layer head counts need no new plumbing. */
typedef struct model_layer_arch {
    int64_t n_head, n_kv_head, head_dim; /* H, Hkv, hd */
    int64_t q_width, kv_width;           /* H*hd, Hkv*hd */
    int64_t d_ff;                        /* F: the FFN's hidden width */
    const model_ffn_kind *ffn;
    /* Product FFN (SPEC §6.1), for the "product" kind and MoE experts: the
     * number of factors (2, 3 = TriPLU, 4; 0 = the kind's own activation)
     * and whether the product is RMS-normalised before the down projection. */
    int product_degree, prod_norm;
    /* The branch's coupling vectors in this layer (SPEC §2), when it has them. */
    int couple_q, couple_hidden, couple_out;
    /* [n_head] the position scheme's score-bias slopes for this layer's heads
     * (ALiBi, SPEC §6.4), handed to the attention kernels; NULL without. */
    const float *score_slopes;
} model_layer_arch;

typedef struct model_arch {
    int64_t C, V, L, T_max;
    const model_norm_kind *norm;
    const model_position_kind *position;
    int linear_bias;
    int tie_embeddings;
    float norm_eps;
    double rope_theta;
    int has_branch;         /* branch = decode */
    int branch_own_emb;     /* branch.tok_emb exists (branch_emb = own) */
    int branch_own_weights; /* share = off: the branch's own wq, wo and FFN */
    int tok_emb_tables;     /* 1, or 2: the primary input sums tok_emb and tok_emb2 (no branch) */
    int64_t tok_emb2_layer; /* tok_emb2[x] joins the input of this block (0: the embedding itself) */
    /* Largest per-layer widths, for buffers sized once. */
    int64_t max_q_width, max_kv_width, max_d_ff, max_head_dim, max_n_head, max_n_kv_head;
    int64_t n_expert, top_k, top_k_branch; /* 0 for dense FFN kinds */
    /* Residual scheme: the running sum, or attention residuals (SPEC §6.3)
     * routing over blocks of route_per_block sublayers with route_heads heads. */
    int routed;
    int64_t route_heads, route_blocks, route_per_block;
    /* Looped stack (SPEC §6.6): the L blocks applied n_loop times (1: once),
     * each application with its own K/V; with disco, DiscoLoop between
     * applications: softmax(logits / disco_tau) kept at its disco_top
     * largest entries (resolved: 1..V), gate fixed at disco_alpha or learned. */
    int64_t n_loop;
    int disco, disco_gate_learned;
    int64_t disco_top;
    double disco_tau, disco_alpha;
    int recurrent;            /* SPEC §6.4: keys and values of earlier positions from each layer's output */
    model_layer_arch *layers; /* [L] */
    float *slopes_memory;     /* every layer's score_slopes, back to back (score-bias schemes) */
} model_arch;

/* Builds the description of a validated config (model_config_validate). */
dt_status model_arch_build(model_arch *arch, const model_config *config);
void model_arch_free(model_arch *arch);

/* The coupling contract of SPEC §2: what primary block l leaves for the
 * branch at every position (training: [B,T,*] tape tensors; decode: rows). */
typedef struct model_primary_state {
    dt_tensor *q1;                    /* [B,T,H*hd] query before the position scheme */
    dt_tensor *k, *v;                 /* [B,T,Hkv*hd] keys (positioned) and values (recurrent: the temporary pairs) */
    dt_tensor *k_persist, *v_persist; /* recurrent (SPEC §6.4): [T,B,Hkv*hd] the persistent pairs, else NULL */
    dt_tensor *z1;                    /* [B,T,F] FFN hidden activation (kinds with one) */
    dt_tensor *m1;                    /* [B,T,C] FFN output */
    dt_tensor *router_logits;         /* [B*T,E] MoE: the primary router's logits (replay picks from them) */
} model_primary_state;

#endif
