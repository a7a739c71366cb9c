/* Figures of a model computed from its configuration alone (no weights are
 * allocated, so they work for any size): parameter counts per group and per
 * layer, FLOPs per token for prefill and per decode step, and the bytes of
 * weights and KV cache a decode step reads, for the baseline and for
 * Decode-Branch decode grouped and un-grouped (SPEC §2 "Grouped decode").
 * `dbranch info` prints them; the decode benchmark and the experiments use
 * them to turn measured times into bandwidths and FLOP rates. */
#ifndef MODEL_MODEL_INFO_H
#define MODEL_MODEL_INFO_H

#include <stdint.h>

#include "models/config.h"

typedef struct model_info {
    model_config config; /* validated copy */
    int64_t context;     /* KV positions each decode query reads */

    /* Parameter counts (floats), as model_create would allocate them. */
    int64_t params_primary; /* everything the baseline model has */
    int64_t params_branch;  /* branch-only: branch.tok_emb, coupling vectors, share = off copies */
    int64_t params_total;
    int64_t layer_params_primary; /* one layer (all layers are alike) */
    int64_t layer_params_branch;  /* one layer: coupling vectors + share = off copies */
    int64_t other_params_primary; /* outside the layers: tok_emb (+ tok_emb2), pos_emb, final_norm, lm_head */
    int64_t other_params_branch;  /* outside the layers: branch.tok_emb */

    /* Matrix parameters one token multiplies through (MoE: router + the
     * experts it uses). FLOPs below are 2 per multiply-add; norms,
     * activations, softmax and the coupling products are left out (O(C) per
     * token against O(C^2)). */
    int64_t matmul_params_primary; /* per token: attention q,k,v,o + FFN + LM head */
    int64_t matmul_params_branch;  /* per branch row: q, o, FFN (top_k_branch experts) + LM head; no K/V */
    /* Prefill, primary only, per token at T = block_size:
     * 2 * matmul_params_primary + n_layer * 4 * T * H*hd (q.k and p.v over T keys). */
    double prefill_flops_per_token;
    /* One decode step at `context`: attention reads `context` keys. */
    double decode_flops_baseline; /* 2 * matmul_params_primary + n_layer * 4 * context * H*hd */
    double decode_flops_branch;   /* baseline + 2 * matmul_params_branch + n_layer * 4 * context * H*hd */

    /* Bytes of weights read per decode step (float32): every tensor the step
     * touches once, vectors included; an embedding contributes one row. */
    double weight_bytes_baseline;
    double weight_bytes_grouped;   /* Decode-Branch, both rows per weight load */
    double weight_bytes_ungrouped; /* Decode-Branch, two separate passes: the sum */
    /* The same with bf16 decode weights (eval/decode_weights.h): every
     * matrix 2 bytes per element; vectors and embedding rows float32. */
    double weight_bytes_bf16_baseline, weight_bytes_bf16_grouped, weight_bytes_bf16_ungrouped;
    /* Experts loaded per MoE layer per step (0 for dense families). Grouped
     * with replay: the union of the primary's top_k and the branch's
     * top_k_branch, which replay takes from the same ranking: max(top_k,
     * top_k_branch). With own routing the union depends on the tokens:
     * min(n_expert, top_k + top_k_branch) is its upper bound, used here. */
    int64_t experts_baseline, experts_grouped, experts_ungrouped;

    /* Training (bench train's convention, PaLM / nanoGPT): FLOPs per token
     * 6 N + 3 * attention_flops_per_key * T, with N every primary parameter
     * but pos_emb (experts at top_k / E); the branch adds 6 N_branch (the
     * shared tensors it applies, not wk/wv nor embeddings, its own tensors,
     * and the head) and its own attention term. */
    double train_flop_params, train_flop_params_branch;
    double attention_flops_per_key; /* sum over layers of 4 H*hd: q.k and p.v per key, per token */
    /* Floats per token a training backward needs from the forward, as an
     * efficient trainer (llm.c) keeps them (bench train's memory estimate). */
    double activation_floats, activation_floats_branch;

    /* KV-cache bytes read per decode step: n_layer * 2 * context * Hkv*hd * 4.
     * Grouped: both queries in one pass over the cache; un-grouped: twice. */
    double kv_bytes_baseline, kv_bytes_grouped, kv_bytes_ungrouped;

    /* Latent feedback (SPEC §6.5; 0 without): feedback.* parameters (in
     * other_params_primary), and what a soft decode step adds to a standard
     * one (the fusion: W_u and W_g products, the two RMSNorm weights). A
     * training step of K passes costs K plain forwards plus K - 1 fusions. */
    int64_t feedback_params;      /* 2 C^2 + 2 C */
    double feedback_weight_bytes; /* per soft step */
    double feedback_decode_flops; /* per soft step: 2 * 2 C^2 */
} model_info;

/* Validates a copy of *config and fills *info. context <= 0 means block_size;
 * a context beyond block_size is an error (the model has no positions there). */
dt_status model_info_compute(const model_config *config, int64_t context, model_info *info);

#endif
