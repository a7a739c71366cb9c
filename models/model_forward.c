/* The training forward pass (SPEC §1-§2): embeddings, the blocks of the
 * primary path, the decode branch trajectory, and the readout (cross-entropy,
 * or the mixture NLL for a Decode-Branch model); with latent feedback
 * (SPEC §6.5) the K passes of the primary path (models/feedback.h fuses each
 * pass's input).
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
#include "models/attn_res.h"
#include "models/block_forward.h"
#include "models/disco.h"
#include "models/model.h"
#include "models/moe.h"
#include "models/recurrent.h"

typedef enum { ROLE_PRIMARY = 0, ROLE_BRANCH = 1 } block_role;

/* The model's norm kind over the last dim: x [B,T,C], weight/bias [C]. */
static dt_tensor *norm_forward(ag_ctx *ctx, const model *m, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    return m->arch.norm->forward(ctx, x, weight, bias, m->arch.norm_eps);
}

/* The probe's views (models/probe.h): the primary trajectory only. */
static int probing(const model *m, block_role role) { return m->probe && role == ROLE_PRIMARY; }

static void probe_input(const model *m, block_role role, int64_t j, const dt_tensor *x) {
    if (probing(m, role) && x && m->probe->sublayer_input) m->probe->sublayer_input(m->probe->user, j, x);
}

static void probe_output(const model *m, block_role role, int64_t j, const dt_tensor *out) {
    if (probing(m, role) && out && m->probe->sublayer_output) m->probe->sublayer_output(m->probe->user, j, out);
}

/* How the branch reads the primary's intermediates (q1, z1, m1, K, V): with
 * detach_primary they are constants to it (SPEC §2). */
static dt_tensor *from_primary(ag_ctx *ctx, const model_config *c, dt_tensor *t) {
    return c->detach_primary ? ag_detach(ctx, t) : t;
}

/* The FFN of layer l through its kind (models/ffn.h): x [B,T,C] normed input
 * -> m [B,T,C]; or, given the residual stream, residual + m in fused ops when
 * the kind has them and nothing reads m1. */
static dt_tensor *ffn_forward(ag_ctx *ctx, const model *m, int64_t l, block_role role, dt_tensor *x,
                              model_primary_state *state, model_ffn_balance *balance, dt_tensor *residual) {
    const model_config *c = &m->config;
    const model_layer *layer = &m->layers[l];
    const model_layer_arch *la = &m->arch.layers[l];
    const int branch = role == ROLE_BRANCH;
    model_ffn_train call = {
        .ctx = ctx,
        .arch = &m->arch,
        .layer = la,
        .w = branch ? layer->branch.ffn : layer->primary.ffn,
        .branch = branch,
        .x = x,
        .residual = residual,
        .keep_hidden = !branch && layer->couple_hidden,
        .state = state,
        .balance = balance,
        .top_k = branch ? m->arch.top_k_branch : m->arch.top_k,
        .replay = c->branch_routing == ROUTING_REPLAY,
    };
    if (branch && layer->couple_hidden) {
        call.z1 = from_primary(ctx, c, state->z1);
        call.couple_hidden = layer->couple_hidden;
    }
    if (branch && layer->couple_out && residual) {
        call.m1 = from_primary(ctx, c, state->m1);
        call.couple_out = layer->couple_out;
    }
    return la->ffn->forward(&call);
}

/* The attention sublayer of block l on the stream x [B,T,C], as the primary
 * (fills *state) or as the branch (reads *state): o = Attn(Norm1(x)) [B,T,C],
 * or with add_residual x + o (one fused op). */
static dt_tensor *attention_sublayer(ag_ctx *ctx, const model *m, int64_t l, block_role role, dt_tensor *x,
                                     model_primary_state *state, int add_residual) {
    const model_config *c = &m->config;
    const model_layer *layer = &m->layers[l];
    const model_layer_arch *la = &m->arch.layers[l];
    const model_block_weights *w = role == ROLE_PRIMARY ? &layer->primary : &layer->branch;
    const model_position_kind *position = m->arch.position;

    /* q, k and v all read xn: under bf16, rounded once for their products */
    dt_tensor *xn = ag_bf16_operand(ctx, norm_forward(ctx, m, x, layer->attn_norm, layer->attn_norm_bias)); // [B,T,C]
    dt_tensor *q;                               // [B,T,H*hd]
    if (role == ROLE_BRANCH && layer->couple_q) /* q2 = Norm1(g) Wq^T + bq + couple_q ⊙ q1, one op */
        q = ag_linear_coupled(ctx, NULL, xn, w->wq, w->wq_bias, 0, from_primary(ctx, c, state->q1), layer->couple_q);
    else
        q = ag_linear(ctx, xn, w->wq, w->wq_bias);
    dt_tensor *k, *v; // [B,T,Hkv*hd]
    if (role == ROLE_PRIMARY) {
        state->q1 = q;
        k = ag_linear(ctx, xn, w->wk, w->wk_bias);
        v = ag_linear(ctx, xn, w->wv, w->wv_bias);
        if (position->rotary) k = position->rotate(ctx, k, la->n_kv_head, m->arch.rope_theta);
        state->k = k;
        state->v = v;
    } else {
        k = from_primary(ctx, c, state->k);
        v = from_primary(ctx, c, state->v);
    }
    if (position->rotary) q = position->rotate(ctx, q, la->n_head, m->arch.rope_theta);
    if (probing(m, role) && q && k && m->probe->attention)
        m->probe->attention(m->probe->user, l, q, k, la->n_head, la->n_kv_head, la->head_dim);
    dt_tensor *y; // [B,T,H*hd]
    /* ALiBi's slopes (NULL for other schemes): the branch's query at t sees the primary's keys s <= t, same bias */
    if (state->k_persist) /* the branch of a recurrent layer (SPEC §6.4): the primary's query's keys */
        y = model_recurrent_attention(ctx, la, q, k, v, from_primary(ctx, c, state->k_persist),
                                      from_primary(ctx, c, state->v_persist), 0, q->shape[1], la->score_slopes);
    else
        y = ag_attention_biased(ctx, q, k, v, la->n_head, la->n_kv_head, la->score_slopes);
    y = ag_bf16_operand(ctx, y); /* read by Wo's product and again by its d_W */
    if (add_residual) return ag_linear_residual(ctx, x, y, w->wo, w->wo_bias); /* x + (y Wo^T + bo) */
    return ag_linear(ctx, y, w->wo, w->wo_bias);
}

/* The FFN sublayer of block l on the stream x [B,T,C]: m = FFN(Norm2(x)) with
 * the branch's couple_out term, or with add_residual x + m. */
static dt_tensor *ffn_sublayer(ag_ctx *ctx, const model *m, int64_t l, block_role role, dt_tensor *x,
                               model_primary_state *state, model_ffn_balance *balance, int add_residual) {
    const model_config *c = &m->config;
    const model_layer *layer = &m->layers[l];
    /* the FFN's products (SwiGLU's two, or one and its d_W) read xn2: under bf16, rounded once */
    dt_tensor *xn2 = ag_bf16_operand(ctx, norm_forward(ctx, m, x, layer->ffn_norm, layer->ffn_norm_bias)); // [B,T,C]
    /* The primary keeps m1 when the branch reads it (couple_out); otherwise a
     * kind that can puts its down projection straight onto the residual
     * stream, the branch's with its coupling term. */
    if (add_residual && m->arch.layers[l].ffn->fuses_residual && !(role == ROLE_PRIMARY && layer->couple_out))
        return ffn_forward(ctx, m, l, role, xn2, state, balance, x);
    dt_tensor *ffn_out = ffn_forward(ctx, m, l, role, xn2, state, balance, NULL);
    if (role == ROLE_PRIMARY)
        state->m1 = ffn_out;
    else if (layer->couple_out)
        ffn_out = ag_add_mul_vec(ctx, ffn_out, from_primary(ctx, c, state->m1), layer->couple_out);
    return add_residual ? ag_add(ctx, x, ffn_out) : ffn_out;
}

dt_tensor *model_block_norm(ag_ctx *ctx, const model *m, dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    return norm_forward(ctx, m, x, weight, bias);
}

dt_tensor *model_block_ffn(ag_ctx *ctx, const model *m, int64_t l, int branch, dt_tensor *x, model_primary_state *state,
                           model_ffn_balance *balance, int add_residual) {
    return ffn_sublayer(ctx, m, l, branch ? ROLE_BRANCH : ROLE_PRIMARY, x, state, balance, add_residual);
}

/* One trajectory's stack on its embedding h [B,T,C] -> the final norm's input
 * [B,T,C]: blocks on the running residual sum, or with attn_res (SPEC §6.3)
 * every sublayer fed by its route over the trajectory's own sources (the
 * branch's with the shared queries and norms). late [B,T,C] (or NULL) joins
 * the residual stream before block tok_emb2_layer (plain stacks only). */
static dt_tensor *stack_forward(ag_ctx *ctx, const model *m, block_role role, dt_tensor *h, model_primary_state *states,
                                model_ffn_balance *balance, dt_tensor *late) {
    const model_arch *a = &m->arch;
    if (!a->routed) {
        for (int64_t l = 0; l < a->L && h; l++) {
            if (late && l == a->tok_emb2_layer) h = ag_add(ctx, h, late);
            probe_input(m, role, 2 * l, h);
            if (a->recurrent && role == ROLE_PRIMARY) { /* SPEC §6.4: a scan (models/recurrent_forward.c) */
                h = model_recurrent_layer(ctx, m, l, h, &states[l], balance);
                continue;
            }
            h = attention_sublayer(ctx, m, l, role, h, &states[l], 1);
            probe_input(m, role, 2 * l + 1, h);
            h = ffn_sublayer(ctx, m, l, role, h, &states[l], balance, 1);
        }
        probe_input(m, role, 2 * a->L, h);
        return h;
    }
    model_route_sources sources;
    if (model_route_begin(ctx, &sources, h, a->route_blocks, a->route_per_block, a->route_heads, a->norm_eps) != DT_OK)
        return NULL;
    for (int64_t l = 0; l < a->L; l++) {
        const model_layer *layer = &m->layers[l];
        dt_tensor *in = model_route_forward(ctx, &sources, layer->route_attn_query, layer->route_attn_norm);
        probe_input(m, role, 2 * l, in);
        dt_tensor *out = attention_sublayer(ctx, m, l, role, in, &states[l], 0);
        probe_output(m, role, 2 * l, out);
        if (model_route_add(ctx, &sources, out) != DT_OK) return NULL;
        in = model_route_forward(ctx, &sources, layer->route_ffn_query, layer->route_ffn_norm);
        probe_input(m, role, 2 * l + 1, in);
        out = ffn_sublayer(ctx, m, l, role, in, &states[l], balance, 0);
        probe_output(m, role, 2 * l + 1, out);
        if (model_route_add(ctx, &sources, out) != DT_OK) return NULL;
    }
    dt_tensor *final = model_route_forward(ctx, &sources, m->route_final_query, m->route_final_norm);
    probe_input(m, role, 2 * a->L, final);
    return final;
}

/* Final norm and the head: stream [B,T,C] -> logits [B,T,V]; *top (when
 * asked) gets the head's input Norm_f(x) [B,T,C], latent feedback's top state. */
static dt_tensor *head_forward(ag_ctx *ctx, const model *m, dt_tensor *x, dt_tensor **top) {
    dt_tensor *xn = ag_bf16_operand(ctx, norm_forward(ctx, m, x, m->final_norm, m->final_norm_bias));
    if (top) *top = xn;
    return ag_linear(ctx, xn, m->lm_head, NULL);
}

/* Token embedding (+ learned positions for nanogpt): tokens [B,T] -> [B,T,C]. */
static dt_tensor *embed_forward(ag_ctx *ctx, const model *m, dt_tensor *table, dt_tensor *tokens,
                                dt_tensor *positions) {
    if (positions) return ag_embedding_pos(ctx, table, tokens, m->pos_emb, positions); /* one op, no two lookups kept */
    return ag_embedding(ctx, table, tokens);
}

/* The primary path's input: tok_emb[x] (+ pos_emb[t]) (+ tok_emb2[x] with
 * tok_emb_tables = 2 and tok_emb2_layer = 0, added last, as the decode step
 * adds it). [B,T] -> [B,T,C]. */
static dt_tensor *primary_embed_forward(ag_ctx *ctx, const model *m, dt_tensor *tokens, dt_tensor *positions) {
    dt_tensor *e = embed_forward(ctx, m, m->tok_emb, tokens, positions);
    if (!m->tok_emb2 || m->arch.tok_emb2_layer > 0) return e;
    return ag_add(ctx, e, ag_embedding(ctx, m->tok_emb2, tokens)); /* ag_add passes a NULL on */
}

/* tok_emb2[x] [B,T,C] when it joins a later block (tok_emb2_layer > 0), else NULL. */
static dt_tensor *late_embed_forward(ag_ctx *ctx, const model *m, dt_tensor *tokens) {
    return m->tok_emb2 && m->arch.tok_emb2_layer > 0 ? ag_embedding(ctx, m->tok_emb2, tokens) : NULL;
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
static dt_status readout_forward(ag_ctx *ctx, const model *m, dt_tensor *targets, const model_ffn_balance *balance,
                                 model_outputs *out) {
    const model_config *c = &m->config;
    dt_tensor *objective;
    if (!out->logits_branch) {
        out->loss_primary = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
        out->loss_reported = out->loss_primary;
        objective = out->loss_primary;
    } else {
        dt_tensor *alpha = NULL, *ce_p = NULL, *ce_q = NULL; // [B*T]: constants of the mixture's own pass
        dt_tensor *nll =
            ag_mixture_nll_ce(ctx, out->logits_primary, out->logits_branch, targets, (float)c->mix_alpha_min,
                              (float)c->mix_alpha_max, c->detach_primary, c->alpha_detach, &alpha, &ce_p, &ce_q);
        if (!nll || !alpha) return DT_ERR;
        out->loss_reported = ag_mean(ctx, nll);
        out->alpha = ag_reshape(ctx, alpha, DT_SHAPE(targets->shape[0], targets->shape[1]));
        if (c->detach_primary) {
            /* The primary learns from its own CE; the mixture term saw p and alpha as constants. */
            out->loss_primary = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
            objective = ag_add(ctx, out->loss_primary, out->loss_reported);
        } else {
            out->loss_primary = ag_mean(ctx, ce_p); /* reported only (a constant: no tape) */
            objective = out->loss_reported;
        }
        out->loss_branch = ag_mean(ctx, ce_q);
    }
    if (balance->sum) {
        /* aux: mean over MoE layers (every application of each: K·L terms with
         * n_loop > 1), added once outside the mixture. */
        out->moe_layers = balance->count;
        out->balance_fractions = balance->fractions;
        out->router_mean_probs = balance->mean_probs;
        out->aux = ag_scale(ctx, balance->sum, 1.0f / (float)balance->count);
        objective = ag_add(ctx, objective, ag_scale(ctx, out->aux, (float)c->aux_loss_coef));
    }
    out->loss = objective;
    if (!out->loss || !out->loss_reported || !out->loss_primary || (out->logits_branch && !out->loss_branch))
        return DT_ERR;
    return DT_OK;
}

/* Pass k of latent feedback (SPEC §6.5) on the embeddings e [B,T,C]: plain
 * (top_prev NULL) or fused from the previous pass's top state top_prev
 * [B,T,C] -> logits [B,T,V], and *top [B,T,C] this pass's top state. */
static dt_tensor *feedback_pass(ag_ctx *ctx, const model *m, dt_tensor *e, dt_tensor *top_prev,
                                const model_feedback_run *run, int64_t k, model_primary_state *states,
                                model_ffn_balance *balance, dt_tensor **top) {
    dt_tensor *u = top_prev ? model_feedback_fuse(ctx, m, top_prev, e, run, k) : e;
    return head_forward(ctx, m, stack_forward(ctx, m, ROLE_PRIMARY, u, states, balance, NULL), top);
}

/* The K passes of latent feedback (SPEC §6.5) on the embeddings e [B,T,C]:
 * logits_primary and loss_primary are pass K's, and with targets the
 * objective CE(1) + lambda/(K-1) sum_{k>=2} CE(k) (+ the aux term over every
 * application). Gradient flows through every pass. */
static dt_status feedback_forward(ag_ctx *ctx, const model *m, dt_tensor *e, dt_tensor *targets,
                                  const model_feedback_run *run, int64_t K, model_primary_state *states,
                                  model_ffn_balance *balance, model_outputs *out) {
    dt_tensor *top = NULL, *feedback_sum = NULL, *first = NULL;
    out->passes = K;
    if (targets && !(out->loss_passes = ag_scratch(ctx, (size_t)K * sizeof *out->loss_passes))) return DT_ERR;
    for (int64_t k = 1; k <= K; k++) {
        out->logits_primary = feedback_pass(ctx, m, e, k == 1 ? NULL : top, run, k, states, balance, &top);
        if (!out->logits_primary) return DT_ERR;
        if (!targets) continue;
        dt_tensor *ce = ag_mean(ctx, ag_cross_entropy(ctx, out->logits_primary, targets));
        if (!ce) return DT_ERR;
        out->loss_passes[k - 1] = dt_f32(ce)[0];
        if (k == 1)
            first = ce;
        else
            feedback_sum = feedback_sum ? ag_add(ctx, feedback_sum, ce) : ce;
        out->loss_primary = ce;
    }
    if (!targets) return DT_OK;
    out->loss_reported = out->loss_primary;
    dt_tensor *objective =
        K > 1 ? ag_add(ctx, first, ag_scale(ctx, feedback_sum, (float)(run->lambda / (double)(K - 1)))) : first;
    if (balance->sum) {
        out->moe_layers = balance->count;
        out->balance_fractions = balance->fractions;
        out->router_mean_probs = balance->mean_probs;
        out->aux = ag_scale(ctx, balance->sum, 1.0f / (float)balance->count);
        objective = ag_add(ctx, objective, ag_scale(ctx, out->aux, (float)m->config.aux_loss_coef));
    }
    out->loss = objective;
    return out->loss && out->loss_reported ? DT_OK : DT_ERR;
}

dt_status model_forward(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets, model_outputs *out) {
    return model_forward_feedback(m, ctx, tokens, targets, NULL, out);
}

/* What every forward sets up: the tokens (and targets) checked against the
 * model, the learned positions (nanogpt), the per-layer states, and the MoE
 * balance arrays for `applications` applications of each layer. */
typedef struct forward_setup {
    dt_tensor *positions;        /* int32 [B,T]: t at every (b, t); NULL without a learned table */
    model_primary_state *states; /* [n_layer] */
    model_ffn_balance balance;
} forward_setup;

static dt_status forward_begin(const model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets, int64_t applications,
                               forward_setup *s) {
    memset(s, 0, sizeof *s);
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
    if (m->arch.position->learned_table) {
        s->positions = ag_tensor(ctx, DT_I32, DT_SHAPE(B, T));
        if (!s->positions) return DT_ERR;
        for (int64_t i = 0; i < B * T; i++)
            dt_i32(s->positions)[i] = (int32_t)(i % T);
    }
    s->states = ag_scratch(ctx, (size_t)c->n_layer * sizeof *s->states);
    if (!s->states) return DT_ERR;
    memset(s->states, 0, (size_t)c->n_layer * sizeof *s->states);
    if (m->arch.n_expert > 0) { /* one balance term per application of each MoE layer (n_loop or feedback passes) */
        const int64_t terms = applications * c->n_layer;
        s->balance.fractions = ag_scratch(ctx, (size_t)terms * sizeof *s->balance.fractions);
        s->balance.mean_probs = ag_scratch(ctx, (size_t)(terms * c->n_expert) * sizeof *s->balance.mean_probs);
        if (!s->balance.fractions || !s->balance.mean_probs) return DT_ERR;
    }
    return DT_OK;
}

dt_status model_forward_feedback_pass(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *top_prev, dt_tensor **logits,
                                      dt_tensor **top) {
    *logits = *top = NULL;
    if (top_prev && !m->config.feedback)
        return dt_errorf("model_forward: a feedback pass needs a model with feedback = 1");
    forward_setup s;
    if (forward_begin(m, ctx, tokens, NULL, 1, &s) != DT_OK) return DT_ERR;
    if (top_prev && (top_prev->dtype != DT_F32 || top_prev->ndim != 3 || top_prev->shape[0] != tokens->shape[0] ||
                     top_prev->shape[1] != tokens->shape[1] || top_prev->shape[2] != m->config.d_model)) {
        char buf[64];
        return dt_errorf("model_forward: the previous top state must be float32 [B, T, C] of the tokens' B, T, got %s",
                         dt_shape_str(top_prev, buf, sizeof buf));
    }
    const model_feedback_run run = model_feedback_plain(); /* no jitter, no prefix mixin: the pass index is unused */
    dt_tensor *e = primary_embed_forward(ctx, m, tokens, s.positions);
    *logits = feedback_pass(ctx, m, e, top_prev, &run, 2, s.states, &s.balance, top);
    return *logits && *top ? DT_OK : DT_ERR;
}

dt_status model_forward_feedback(model *m, ag_ctx *ctx, dt_tensor *tokens, dt_tensor *targets,
                                 const model_feedback_run *run, model_outputs *out) {
    memset(out, 0, sizeof *out);
    const model_feedback_run plain = model_feedback_plain();
    if (!run) run = &plain;
    const int64_t K = run->passes > 0 ? run->passes : 1;
    if (K > MODEL_FEEDBACK_MAX_PASSES)
        return dt_errorf("model_forward: %lld feedback passes (at most %d)", (long long)K, MODEL_FEEDBACK_MAX_PASSES);
    if (K > 1 && !m->config.feedback)
        return dt_errorf("model_forward: %lld feedback passes need a model with feedback = 1", (long long)K);
    const model_config *c = &m->config;
    const int64_t n_loop = m->arch.n_loop;
    forward_setup s;
    if (forward_begin(m, ctx, tokens, targets, K * n_loop, &s) != DT_OK) return DT_ERR;
    dt_tensor *positions = s.positions;
    model_primary_state *states = s.states;
    model_ffn_balance balance = s.balance;
    const int has_branch = c->branch == BRANCH_DECODE;

    /* Primary path (SPEC §1). */
    if (c->feedback) /* no branch with feedback (SPEC §6) */
        return feedback_forward(ctx, m, primary_embed_forward(ctx, m, tokens, positions), targets, run, K, states,
                                &balance, out);
    /* SPEC §6.6: the stack applied n_loop times with the same weights (each
     * application its own K/V), DiscoLoop between applications. */
    dt_tensor *h = primary_embed_forward(ctx, m, tokens, positions);
    dt_tensor *late = late_embed_forward(ctx, m, tokens); /* NULL but for tok_emb2_layer > 0 (n_loop = 1 there) */
    for (int64_t k = 0; k < n_loop; k++) {
        h = stack_forward(ctx, m, ROLE_PRIMARY, h, states, &balance, late);
        if (k + 1 < n_loop && m->arch.disco) h = model_disco_forward(ctx, m, h, head_forward(ctx, m, h, NULL));
    }
    out->logits_primary = head_forward(ctx, m, h, NULL);
    if (!out->logits_primary) return DT_ERR;

    /* Decode branch (SPEC §2): its own embedding, the primary's K/V and intermediates. */
    if (has_branch) {
        dt_tensor *table = m->branch_tok_emb ? m->branch_tok_emb : m->tok_emb;
        dt_tensor *g =
            stack_forward(ctx, m, ROLE_BRANCH, embed_forward(ctx, m, table, tokens, positions), states, NULL, NULL);
        out->logits_branch = head_forward(ctx, m, g, NULL);
        if (!out->logits_branch) return DT_ERR;
    }

    if (!targets) {
        if (has_branch) out->alpha = alpha_forward(ctx, c, out->logits_primary);
        return has_branch && !out->alpha ? DT_ERR : DT_OK;
    }
    return readout_forward(ctx, m, targets, &balance, out);
}
