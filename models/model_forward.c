/* The training forward pass (SPEC §1-§2): embeddings, the blocks of the
 * primary path, the decode branch trajectory, and the readout (cross-entropy,
 * or the mixture NLL for a Decode-Branch model).
 *
 * One block function serves both trajectories. The primary block records the
 * intermediates the branch reads (q1 before RoPE, K after RoPE, V, z1, m1, the
 * router logits); the branch block runs the same code on its own stream g with
 * its weights (the primary's pointers when share = on), adds the coupling
 * terms, and attends over the primary's K/V instead of computing its own. So
 * the primary never depends on the branch, and the branch costs one extra
 * trajectory without the K/V projections. */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/mixture.h"
#include "models/model.h"
#include "models/moe.h"

typedef enum { ROLE_PRIMARY = 0, ROLE_BRANCH = 1 } block_role;

/* What primary block l leaves for the branch (SPEC §2 names). */
typedef struct primary_state {
    dt_tensor *q1;            /* [B,T,H*hd] query before RoPE */
    dt_tensor *k, *v;         /* [B,T,Hkv*hd] keys after RoPE, values */
    dt_tensor *z1;            /* [B,T,F] MLP hidden activation (dense layers) */
    dt_tensor *m1;            /* [B,T,C] FFN output */
    dt_tensor *router_logits; /* [B*T,E] moe: the primary router's logits (replay picks from them) */
} primary_state;

/* LayerNorm (nanogpt) or RMSNorm over the last dim: x [B,T,C], weight/bias [C]. */
static dt_tensor *norm_forward(ag_ctx *ctx, const model_config *c, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    if (c->family == FAMILY_NANOGPT) return ag_layernorm(ctx, x, weight, bias, (float)c->norm_eps);
    return ag_rmsnorm(ctx, x, weight, (float)c->norm_eps);
}

/* How the branch reads the primary's intermediates (q1, z1, m1, K, V): with
 * detach_primary they are constants to it (SPEC §2). */
static dt_tensor *from_primary(ag_ctx *ctx, const model_config *c, dt_tensor *t) {
    return c->detach_primary ? ag_detach(ctx, t) : t;
}

/* The FFN of a dense layer: m = down(z) with z = act(x) (+ couple_hidden ⊙ z1
 * on the branch). x [B,T,C] normed input -> m [B,T,C]; or, given the
 * residual stream [B,T,C], residual + m in one op (the same numbers, without
 * keeping m: for when nothing reads m1), on the branch with + couple_out ⊙ m1. */
static dt_tensor *dense_ffn_forward(ag_ctx *ctx, const model *m, const model_layer *layer,
                                    const model_block_weights *w, block_role role, dt_tensor *x,
                                    primary_state *state, dt_tensor *residual) {
    const model_config *c = &m->config;
    dt_tensor *hidden, *down, *down_bias; // hidden [B,T,F]
    if (c->family == FAMILY_NANOGPT && residual && !layer->couple_hidden)
        /* nothing reads z1: one op that recomputes the GELU output in its backward */
        return ag_mlp_gelu(ctx, residual, x, w->fc, w->fc_bias, w->proj, w->proj_bias);
    /* the branch's coupling term on the hidden activation, when there is one */
    dt_tensor *z1 = role == ROLE_BRANCH && layer->couple_hidden ? from_primary(ctx, c, state->z1) : NULL;
    if (c->family == FAMILY_NANOGPT) {
        hidden = z1 ? ag_linear_coupled(ctx, NULL, x, w->fc, w->fc_bias, 1, z1, layer->couple_hidden)
                    : ag_linear_gelu(ctx, x, w->fc, w->fc_bias); /* bias and GELU fused */
        down = w->proj;
        down_bias = w->proj_bias;
    } else {
        hidden = ag_swiglu(ctx, ag_linear(ctx, x, w->w1, NULL), ag_linear(ctx, x, w->w3, NULL));
        if (z1) hidden = ag_add_mul_vec(ctx, hidden, z1, layer->couple_hidden);
        down = w->w2;
        down_bias = NULL;
    }
    if (role == ROLE_PRIMARY) state->z1 = hidden;
    if (residual && role == ROLE_BRANCH && layer->couple_out) /* g + m2, m2 = down(z2) + couple_out ⊙ m1 */
        return ag_linear_coupled(ctx, residual, hidden, down, down_bias, 0, from_primary(ctx, c, state->m1),
                                 layer->couple_out);
    if (residual) return ag_linear_residual(ctx, residual, hidden, down, down_bias);
    return ag_linear(ctx, hidden, down, down_bias);
}

/* The balance terms of the primary's MoE layers (SPEC §1), as they are made. */
typedef struct balance_terms {
    dt_tensor *sum;     /* [1] sum over the layers so far (NULL: none yet) */
    int64_t count;      /* layers so far */
    float **fractions;  /* [n_layer] each term's f, as its backward reads it */
    float *mean_probs;  /* [n_layer, E] */
} balance_terms;

/* The FFN of a moe layer. x [B,T,C] normed input -> [B,T,C]. The primary adds
 * its balance term to *balance; the branch adds none (SPEC §2). */
static dt_tensor *moe_ffn_forward(ag_ctx *ctx, const model *m, const model_block_weights *w, block_role role,
                                  dt_tensor *x, primary_state *state, balance_terms *balance) {
    const model_config *c = &m->config;
    if (!x) return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], N = B * T;
    dt_tensor *flat = ag_reshape(ctx, x, DT_SHAPE(N, C));
    model_moe_result moe;
    if (role == ROLE_PRIMARY) {
        if (model_moe_forward(ctx, w, flat, c->top_k, NULL, &moe) != DT_OK) return NULL;
        state->router_logits = moe.router_logits;
        /* Switch balance (SPEC §1): f_e from the primary's assignments, a constant. */
        float *fractions = ag_scratch(ctx, (size_t)c->n_expert * sizeof *fractions);
        if (!fractions) return NULL;
        model_moe_fractions(fractions, moe.experts, c->n_expert);
        const int64_t l = balance->count++;
        dt_tensor *term = ag_moe_balance_ex(ctx, moe.router_logits, fractions, &balance->fractions[l],
                                            balance->mean_probs + l * c->n_expert);
        balance->sum = balance->sum ? ag_add(ctx, balance->sum, term) : term;
    } else {
        /* replay: experts from the primary's router logits, gates from the branch's own. */
        const dt_tensor *select = c->branch_routing == ROUTING_REPLAY ? state->router_logits : NULL;
        if (model_moe_forward(ctx, w, flat, c->top_k_branch, select, &moe) != DT_OK) return NULL;
    }
    return ag_reshape(ctx, moe.out, DT_SHAPE(B, T, C));
}

/* Block l on the stream x [B,T,C] -> [B,T,C], as the primary (fills *state)
 * or as the branch (reads *state). */
static dt_tensor *block_forward(ag_ctx *ctx, const model *m, int64_t l, block_role role, dt_tensor *x,
                                primary_state *state, balance_terms *balance) {
    const model_config *c = &m->config;
    const model_layer *layer = &m->layers[l];
    const model_block_weights *w = role == ROLE_PRIMARY ? &layer->primary : &layer->branch;
    const int rotary = c->family != FAMILY_NANOGPT;

    /* Attention. */
    dt_tensor *xn = norm_forward(ctx, c, x, layer->attn_norm, layer->attn_norm_bias); // [B,T,C]
    dt_tensor *q;                                                                       // [B,T,H*hd]
    if (role == ROLE_BRANCH && layer->couple_q) /* q2 = Norm1(g) Wq^T + bq + couple_q ⊙ q1, one op */
        q = ag_linear_coupled(ctx, NULL, xn, w->wq, w->wq_bias, 0, from_primary(ctx, c, state->q1), layer->couple_q);
    else
        q = ag_linear(ctx, xn, w->wq, w->wq_bias);
    dt_tensor *k, *v;                                                                   // [B,T,Hkv*hd]
    if (role == ROLE_PRIMARY) {
        state->q1 = q;
        k = ag_linear(ctx, xn, w->wk, w->wk_bias);
        v = ag_linear(ctx, xn, w->wv, w->wv_bias);
        if (rotary) k = ag_rope(ctx, k, c->n_kv_head, c->rope_theta);
        state->k = k;
        state->v = v;
    } else {
        k = from_primary(ctx, c, state->k);
        v = from_primary(ctx, c, state->v);
    }
    if (rotary) q = ag_rope(ctx, q, c->n_head, c->rope_theta);
    dt_tensor *y = ag_attention(ctx, q, k, v, c->n_head, c->n_kv_head); // [B,T,H*hd]
    x = ag_linear_residual(ctx, x, y, w->wo, w->wo_bias);                  /* x + (y Wo^T + bo) */

    /* FFN. */
    dt_tensor *xn2 = norm_forward(ctx, c, x, layer->ffn_norm, layer->ffn_norm_bias); // [B,T,C]
    /* The primary keeps m1 when the branch reads it (couple_out); otherwise
     * the down projection goes straight onto the residual stream, the
     * branch's with its coupling term. */
    if (c->family != FAMILY_MOE && !(role == ROLE_PRIMARY && layer->couple_out))
        return dense_ffn_forward(ctx, m, layer, w, role, xn2, state, x);
    dt_tensor *ffn_out = c->family == FAMILY_MOE ? moe_ffn_forward(ctx, m, w, role, xn2, state, balance)
                                                 : dense_ffn_forward(ctx, m, layer, w, role, xn2, state, NULL);
    if (role == ROLE_PRIMARY)
        state->m1 = ffn_out;
    else if (layer->couple_out)
        ffn_out = ag_add_mul_vec(ctx, ffn_out, from_primary(ctx, c, state->m1), layer->couple_out);
    return ag_add(ctx, x, ffn_out);
}

/* Final norm and the head: stream [B,T,C] -> logits [B,T,V]. */
static dt_tensor *head_forward(ag_ctx *ctx, const model *m, dt_tensor *x) {
    dt_tensor *xn = norm_forward(ctx, &m->config, x, m->final_norm, m->final_norm_bias);
    return ag_linear(ctx, xn, m->lm_head, NULL);
}

/* Token embedding (+ learned positions for nanogpt): tokens [B,T] -> [B,T,C]. */
static dt_tensor *embed_forward(ag_ctx *ctx, const model *m, dt_tensor *table, dt_tensor *tokens,
                                dt_tensor *positions) {
    if (positions) return ag_embedding_pos(ctx, table, tokens, m->pos_emb, positions); /* one op, no two lookups kept */
    return ag_embedding(ctx, table, tokens);
}

/* Tokens or targets: int32 [B,T] with every id in [0, V). */
static dt_status check_ids(const model *m, const dt_tensor *ids, const char *what) {
    if (ids->dtype != DT_I32 || ids->ndim != 2) {
        char buf[64];
        return dt_errorf("model_forward: %s must be int32 [B, T], got %s %s", what,
                         ids->dtype == DT_I32 ? "int32" : "float32", dt_shape_str(ids, buf, sizeof buf));
    }
    const int32_t *id = dt_i32(ids);
    for (int64_t i = 0; i < ids->size; i++)
        if (id[i] < 0 || id[i] >= m->config.vocab_size)
            return dt_errorf("model_forward: %s id %d at [%lld, %lld] is outside the vocabulary [0, %lld)", what, id[i],
                             (long long)(i / ids->shape[1]), (long long)(i % ids->shape[1]),
                             (long long)m->config.vocab_size);
    return DT_OK;
}

/* alpha [B,T] = clip(sum_v p(v)^2, min, max) from logits [B,T,V] (logits-only
 * calls, where the mixture NLL is not formed): the mixture kernel's alpha, the
 * numbers ag_mixture_nll reports. A constant. */
static dt_tensor *alpha_forward(ag_ctx *ctx, const model_config *c, const dt_tensor *logits) {
    dt_tensor *alpha = ag_tensor(ctx, DT_F32, DT_SHAPE(logits->shape[0], logits->shape[1]));
    if (!alpha) return NULL;
    k_mixture_alpha(dt_f32(alpha), dt_f32(logits), dt_rows(logits), dt_cols(logits), (float)c->mix_alpha_min,
                    (float)c->mix_alpha_max);
    return alpha;
}

/* Losses of SPEC §2 from the two logits tensors (logits_branch NULL without a branch). */
static dt_status readout_forward(ag_ctx *ctx, const model *m, dt_tensor *targets, const balance_terms *balance,
                                 model_outputs *out) {
    const model_config *c = &m->config;
    dt_tensor *objective;
    if (!out->logits_branch) {
        out->loss_primary = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
        out->loss_reported = out->loss_primary;
        objective = out->loss_primary;
    } else {
        dt_tensor *alpha = NULL; // [B*T]
        dt_tensor *nll = ag_mixture_nll(ctx, out->logits_primary, out->logits_branch, targets, (float)c->mix_alpha_min,
                                        (float)c->mix_alpha_max, c->detach_primary, c->alpha_detach, &alpha);
        if (!nll || !alpha) return DT_ERR;
        out->loss_reported = ag_mean(ctx, nll);
        out->alpha = ag_reshape(ctx, alpha, DT_SHAPE(targets->shape[0], targets->shape[1]));
        if (c->detach_primary) {
            /* The primary learns from its own CE; the mixture term saw p and alpha as constants. */
            out->loss_primary = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
            objective = ag_add(ctx, out->loss_primary, out->loss_reported);
        } else {
            int grad_was = ag_set_grad_enabled(ctx, 0); /* reported only: no tape */
            out->loss_primary = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
            ag_set_grad_enabled(ctx, grad_was);
            objective = out->loss_reported;
        }
        int grad_was = ag_set_grad_enabled(ctx, 0);
        out->loss_branch = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_branch, targets));
        ag_set_grad_enabled(ctx, grad_was);
    }
    if (balance->sum) {
        /* aux: mean over MoE layers, added once outside the mixture. */
        out->moe_layers = balance->count;
        out->balance_fractions = balance->fractions;
        out->router_mean_probs = balance->mean_probs;
        out->aux = ag_scale(ctx, balance->sum, 1.0f / (float)c->n_layer);
        objective = ag_add(ctx, objective, ag_scale(ctx, out->aux, (float)c->aux_loss_coef));
    }
    out->loss = objective;
    if (!out->loss || !out->loss_reported || !out->loss_primary || (out->logits_branch && !out->loss_branch))
        return DT_ERR;
    return DT_OK;
}

dt_status model_forward(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets, model_outputs *out) {
    memset(out, 0, sizeof *out);
    const model_config *c = &m->config;
    if (!tokens) return dt_errorf("model_forward: no tokens");
    if (check_ids(m, tokens, "token") != DT_OK) return DT_ERR;
    const int64_t B = tokens->shape[0], T = tokens->shape[1];
    if (T > c->block_size)
        return dt_errorf("model_forward: sequence length %lld exceeds block_size %lld", (long long)T,
                         (long long)c->block_size);
    if (targets) {
        if (check_ids(m, targets, "target") != DT_OK) return DT_ERR;
        if (!dt_same_shape(tokens, targets)) {
            char a[64], b[64];
            return dt_errorf("model_forward: targets %s do not match tokens %s", dt_shape_str(targets, a, sizeof a),
                             dt_shape_str(tokens, b, sizeof b));
        }
    }
    const int has_branch = c->branch == BRANCH_DECODE;

    dt_tensor *positions = NULL; // int32 [B,T]: t at every (b, t)
    if (c->family == FAMILY_NANOGPT) {
        positions = ag_tensor(ctx, DT_I32, DT_SHAPE(B, T));
        if (!positions) return DT_ERR;
        for (int64_t i = 0; i < B * T; i++) dt_i32(positions)[i] = (int32_t)(i % T);
    }
    primary_state *states = ag_scratch(ctx, (size_t)c->n_layer * sizeof *states);
    if (!states) return DT_ERR;
    memset(states, 0, (size_t)c->n_layer * sizeof *states);

    /* Primary path (SPEC §1). */
    balance_terms balance = {0};
    if (c->family == FAMILY_MOE) {
        balance.fractions = ag_scratch(ctx, (size_t)c->n_layer * sizeof *balance.fractions);
        balance.mean_probs = ag_scratch(ctx, (size_t)(c->n_layer * c->n_expert) * sizeof *balance.mean_probs);
        if (!balance.fractions || !balance.mean_probs) return DT_ERR;
    }
    dt_tensor *h = embed_forward(ctx, m, m->tok_emb, tokens, positions);
    for (int64_t l = 0; l < c->n_layer; l++) h = block_forward(ctx, m, l, ROLE_PRIMARY, h, &states[l], &balance);
    out->logits_primary = head_forward(ctx, m, h);
    if (!out->logits_primary) return DT_ERR;

    /* Decode branch (SPEC §2): its own embedding, the primary's K/V and intermediates. */
    if (has_branch) {
        dt_tensor *table = m->branch_tok_emb ? m->branch_tok_emb : m->tok_emb;
        dt_tensor *g = embed_forward(ctx, m, table, tokens, positions);
        for (int64_t l = 0; l < c->n_layer; l++) g = block_forward(ctx, m, l, ROLE_BRANCH, g, &states[l], NULL);
        out->logits_branch = head_forward(ctx, m, g);
        if (!out->logits_branch) return DT_ERR;
    }

    if (!targets) {
        if (has_branch) out->alpha = alpha_forward(ctx, c, out->logits_primary);
        return has_branch && !out->alpha ? DT_ERR : DT_OK;
    }
    return readout_forward(ctx, m, targets, &balance, out);
}
