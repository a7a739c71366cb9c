/* The Recurrent Transformer layer's training forward (SPEC §6.4): a scan over
 * the positions, recorded on the tape.
 *
 * Layer l with input x_t and output out_t: q_t, k~_t, v~_t come from
 * Norm1(x_t) for every t at once (batched); position t then attends over the
 * persistent pairs k^_s, v^_s = Norm1(out_s) Wk/Wv of s < t and its own
 * temporary pair, and out_t = y_t + FFN(Norm2(y_t)) follows; only then is
 * (k^_t, v^_t) known. So the scan runs, per position, the attention of one
 * query, Wo, the FFN and the two key/value maps on [B,1,C] rows.
 *
 * The persistent pairs live in one [T,B,Hkv*hd] buffer per layer (a position
 * is one contiguous [B,Hkv*hd] slice): the op that writes slice s ("persist")
 * has that slice as its output, with its gradient preset to the same slice of
 * the buffer's gradient, and every later attention op adds its key gradients
 * straight into the buffer's gradient. Every reader of slice s is recorded
 * after its writer, so the writer's backward sees the full sum (the tape's
 * reverse order), and ag_backward zeroes the slices when it starts. */
#include <string.h>

#include "autograd/ops.h"
#include "kernels/recurrent_attention.h"
#include "kernels/rope.h"
#include "kernels/topk.h"
#include "models/block_forward.h"
#include "models/moe.h"
#include "models/position_kinds.h"
#include "models/recurrent.h"

/* ---- take_row: x [B,T,C] -> row t as [B,1,C] ---- */

static void take_row_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x);
    if (!d_x) return;
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], t = node->iarg[0];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            d_x[(b * T + t) * C + c] += node->out->grad[b * C + c];
}

static dt_tensor *take_row(ag_ctx *ctx, dt_tensor *x, int64_t t) {
    if (!x) return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2];
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(B, 1, C));
    if (!out) return NULL;
    for (int64_t b = 0; b < B; b++)
        memcpy(dt_f32(out) + b * C, dt_f32(x) + (b * T + t) * C, (size_t)C * sizeof(float));
    dt_tensor *inputs[1] = {x};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, "recurrent_take_row", take_row_backward, out, inputs, 1);
        if (!node) return NULL;
        node->iarg[0] = t;
    }
    return out;
}

/* ---- stack_rows: T tensors of B rows [B,(1,)X] -> [B,T,X] ---- */

static void stack_rows_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *const *parts = node->saved;
    const int64_t B = node->out->shape[0], T = node->out->shape[1], X = node->out->shape[2];
    for (int64_t t = 0; t < T; t++) {
        float *d_part = ag_grad(ctx, parts[t]);
        if (!d_part) continue;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < X; i++)
                d_part[b * X + i] += node->out->grad[(b * T + t) * X + i];
    }
}

static dt_tensor *stack_rows(ag_ctx *ctx, dt_tensor **parts, int64_t B, int64_t T) {
    for (int64_t t = 0; t < T; t++)
        if (!parts[t]) return NULL;
    const int64_t X = parts[0]->size / B;
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(B, T, X));
    if (!out) return NULL;
    int needs = 0;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t b = 0; b < B; b++)
            memcpy(dt_f32(out) + (b * T + t) * X, dt_f32(parts[t]) + b * X, (size_t)X * sizeof(float));
        needs |= ag_needs_grad(ctx, &parts[t], 1);
    }
    if (needs) {
        ag_node *node = ag_record(ctx, "recurrent_stack_rows", stack_rows_backward, out, parts, 1);
        if (!node) return NULL;
        node->saved = parts; /* all T inputs (the node's in[] holds only the first) */
    }
    return out;
}

/* ---- persist: x [B,1,W] -> slice s of the persistent buffer [T,B,W] ---- */

/* The persistent buffer of one layer: [T,B,W], its gradient preset (in grad mode). */
static dt_tensor *persistent_buffer(ag_ctx *ctx, int64_t T, int64_t B, int64_t W) {
    dt_tensor *p = ag_tensor(ctx, DT_F32, DT_SHAPE(T, B, W));
    if (!p) return NULL;
    memset(p->data, 0, (size_t)p->size * sizeof(float));
    if (ctx->grad_enabled) {
        p->grad = ag_scratch(ctx, (size_t)p->size * sizeof(float));
        if (!p->grad) return NULL;
        memset(p->grad, 0, (size_t)p->size * sizeof(float));
        p->requires_grad = 1;
    }
    return p;
}

typedef struct persist_saved {
    const float *table; /* [T, hd/2, 2] rotation table, or NULL */
    int64_t n_head, head_dim;
} persist_saved;

static void persist_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *x = node->in[0];
    float *d_x = ag_grad(ctx, x);
    if (!d_x) return;
    const persist_saved *saved = node->saved;
    const int64_t B = x->shape[0], W = dt_cols(x), s = node->iarg[0];
    if (saved->table)
        k_rope_backward(d_x, node->out->grad, saved->table, B, 1, s, saved->n_head, saved->head_dim);
    else
        for (int64_t i = 0; i < B * W; i++)
            d_x[i] += node->out->grad[i];
}

static dt_status persist(ag_ctx *ctx, dt_tensor *x, dt_tensor *buffer, int64_t s, const persist_saved *rotation) {
    if (!x) return DT_ERR;
    const int64_t B = buffer->shape[1], W = buffer->shape[2];
    dt_tensor *slice = ag_scratch(ctx, sizeof *slice);
    if (!slice || dt_tensor_init(slice, DT_F32, DT_SHAPE(B, 1, W), dt_f32(buffer) + s * B * W) != DT_OK) return DT_ERR;
    memcpy(slice->data, x->data, (size_t)(B * W) * sizeof(float));
    if (rotation->table) k_rope_forward(dt_f32(slice), rotation->table, B, 1, s, rotation->n_head, rotation->head_dim);
    dt_tensor *inputs[1] = {x};
    if (buffer->grad && ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, "recurrent_persist", persist_backward, slice, inputs, 1);
        if (!node) return DT_ERR;
        slice->grad = buffer->grad + s * B * W; /* the buffer's gradient, where the readers add */
        node->saved = (void *)rotation;
        node->iarg[0] = s;
    }
    return DT_OK;
}

/* ---- attention of query positions [t0, t1) ---- */

typedef struct attention_saved {
    float *lse; /* [B, t1-t0, H] */
    const float *slopes;
    int64_t H, Hkv, t0, t1;
} attention_saved;

/* The keys query (b, t) sees: persistent rows of batch b (B*W apart) below t, and row t's temporary pair. */
static k_recurrent_keys keys_of(const attention_saved *a, dt_tensor *const *in, int64_t b, int64_t t) {
    const dt_tensor *k = in[1], *v = in[2], *kp = in[3], *vp = in[4];
    const int64_t B = k->shape[0], T = k->shape[1], W = k->shape[2];
    return (k_recurrent_keys){dt_f32(kp) + b * W,
                              dt_f32(vp) + b * W,
                              B * W,
                              dt_f32(k) + (b * T + t) * W,
                              dt_f32(v) + (b * T + t) * W,
                              t,
                              a->H,
                              a->Hkv,
                              W / a->Hkv,
                              a->slopes};
}

static void attention_backward(ag_ctx *ctx, ag_node *node) {
    const attention_saved *a = node->saved;
    dt_tensor *q = node->in[0], *k = node->in[1];
    const int64_t B = k->shape[0], T = k->shape[1], W = k->shape[2], Q = q->shape[2], n = a->t1 - a->t0;
    float *d_q = ag_grad(ctx, q), *d_k = ag_grad(ctx, k), *d_v = ag_grad(ctx, node->in[2]);
    float *d_kp = ag_grad(ctx, node->in[3]), *d_vp = ag_grad(ctx, node->in[4]);
    float *scratch = ag_temp(ctx, a->H); /* the backward's [H] */
    if (!scratch) return;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = a->t0; t < a->t1; t++) {
            const k_recurrent_keys keys = keys_of(a, node->in, b, t);
            const int64_t row = b * n + (t - a->t0), tmp = (b * T + t) * W;
            const k_recurrent_key_grads grads = {d_kp ? d_kp + b * W : NULL, d_vp ? d_vp + b * W : NULL,
                                                 d_k ? d_k + tmp : NULL, d_v ? d_v + tmp : NULL};
            k_recurrent_attention_backward(d_q ? d_q + (b * T + t) * Q : NULL, &grads, node->out->grad + row * Q,
                                           dt_f32(q) + (b * T + t) * Q, dt_f32(node->out) + row * Q,
                                           a->lse + row * a->H, 1, &keys, scratch);
        }
    ag_temp_release(ctx, scratch);
}

dt_tensor *model_recurrent_attention(ag_ctx *ctx, const model_layer_arch *la, dt_tensor *q, dt_tensor *k, dt_tensor *v,
                                     dt_tensor *k_persist, dt_tensor *v_persist, int64_t t0, int64_t t1,
                                     const float *slopes) {
    if (!q || !k || !v || !k_persist || !v_persist) return NULL;
    const int64_t B = q->shape[0], T = q->shape[1], Q = q->shape[2], n = t1 - t0, H = la->n_head;
    attention_saved *a = ag_scratch(ctx, sizeof *a);
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(B, n, Q));
    if (!a || !out) return NULL;
    *a = (attention_saved){ag_scratch(ctx, (size_t)(B * n * H) * sizeof(float)), slopes, H, la->n_kv_head, t0, t1};
    float *scratch = ag_temp(ctx, t1);
    if (!a->lse || !scratch) return NULL;
    dt_tensor *inputs[5] = {q, k, v, k_persist, v_persist};
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = t0; t < t1; t++) {
            const k_recurrent_keys keys = keys_of(a, inputs, b, t);
            const int64_t row = b * n + (t - t0);
            k_recurrent_attention_forward_range(dt_f32(out) + row * Q, a->lse + row * H, dt_f32(q) + (b * T + t) * Q, 1,
                                                &keys, 0, la->n_kv_head, scratch);
        }
    ag_temp_release(ctx, scratch);
    if (ag_needs_grad(ctx, inputs, 5)) {
        ag_node *node = ag_record(ctx, "recurrent_attention", attention_backward, out, inputs, 5);
        if (!node) return NULL;
        node->saved = a;
    }
    return out;
}

/* ---- the tiled schedule: finish (query t) and merge (key block ending at t) ---- */

static model_recurrent_schedule schedule = MODEL_RECURRENT_SCAN;

void model_recurrent_set_schedule(model_recurrent_schedule which) { schedule = which; }
model_recurrent_schedule model_recurrent_get_schedule(void) { return schedule; }

/* One layer's tiled attention: the kernel's running state, and in grad mode
 * every query's output gradient and delta, which the finish ops' backward
 * leave for the merge ops' (the finish of a query is recorded after every
 * block merged into it, so its backward runs first). */
typedef struct tiled_layer {
    k_recurrent_tiles tiles;
    float *d_out, *delta; /* [B,T,H*hd], [B,T,H] */
    float dummy_grad;     /* the merge ops' output gradient: never read */
} tiled_layer;

static tiled_layer *tiled_begin(ag_ctx *ctx, const model_layer_arch *la, dt_tensor *q, dt_tensor *k, dt_tensor *v,
                                dt_tensor *kp, dt_tensor *vp) {
    const int64_t B = q->shape[0], T = q->shape[1], H = la->n_head, Q = q->shape[2];
    tiled_layer *a = ag_scratch(ctx, sizeof *a);
    if (!a) return NULL;
    memset(a, 0, sizeof *a);
    a->tiles = (k_recurrent_tiles){B,
                                   T,
                                   H,
                                   la->n_kv_head,
                                   la->head_dim,
                                   dt_f32(q),
                                   dt_f32(kp),
                                   dt_f32(vp),
                                   dt_f32(k),
                                   dt_f32(v),
                                   la->score_slopes, /* ALiBi [H], or NULL */
                                   ag_scratch(ctx, (size_t)(B * T * H) * sizeof(float)),
                                   ag_scratch(ctx, (size_t)(B * T * H) * sizeof(float)),
                                   ag_scratch(ctx, (size_t)(B * T * Q) * sizeof(float)),
                                   ag_scratch(ctx, (size_t)(B * T * H) * sizeof(float))};
    if (!a->tiles.max || !a->tiles.sum || !a->tiles.acc || !a->tiles.lse) return NULL;
    if (ctx->grad_enabled) {
        a->d_out = ag_scratch(ctx, (size_t)(B * T * Q) * sizeof(float));
        a->delta = ag_scratch(ctx, (size_t)(B * T * H) * sizeof(float));
        if (!a->d_out || !a->delta) return NULL;
        memset(a->d_out, 0, (size_t)(B * T * Q) * sizeof(float));
        memset(a->delta, 0, (size_t)(B * T * H) * sizeof(float));
    }
    k_recurrent_tiles_start(&a->tiles);
    return a;
}

static void finish_backward(ag_ctx *ctx, ag_node *node) {
    tiled_layer *a = node->saved;
    const int64_t t = node->iarg[0], B = a->tiles.B, T = a->tiles.T, Q = node->out->shape[2];
    for (int64_t b = 0; b < B; b++)
        memcpy(a->d_out + (b * T + t) * Q, node->out->grad + b * Q, (size_t)Q * sizeof(float));
    k_recurrent_tiles_finish_backward(&a->tiles, t, node->out->grad, dt_f32(node->out), a->delta,
                                      ag_grad(ctx, node->in[0]), ag_grad(ctx, node->in[1]), ag_grad(ctx, node->in[2]));
}

// q [B,T,H*hd]; k, v [B,T,W] -> query t's attention [B,1,H*hd]
static dt_tensor *tiled_finish(ag_ctx *ctx, tiled_layer *a, dt_tensor *q, dt_tensor *k, dt_tensor *v, int64_t t) {
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(q->shape[0], 1, q->shape[2]));
    if (!out) return NULL;
    k_recurrent_tiles_finish(&a->tiles, t, dt_f32(out));
    dt_tensor *inputs[3] = {q, k, v};
    if (ag_needs_grad(ctx, inputs, 3)) {
        ag_node *node = ag_record(ctx, "recurrent_tiles_finish", finish_backward, out, inputs, 3);
        if (!node) return NULL;
        node->saved = a;
        node->iarg[0] = t;
    }
    return out;
}

static void merge_backward(ag_ctx *ctx, ag_node *node) {
    tiled_layer *a = node->saved;
    k_recurrent_tiles_merge_backward(&a->tiles, node->iarg[0], a->d_out, a->delta, ag_grad(ctx, node->in[0]),
                                     ag_grad(ctx, node->in[1]), ag_grad(ctx, node->in[2]));
}

/* Merges the key block ending at t (its persistent pairs just written) into
 * the queries after it. The op's output is a placeholder no one reads: its
 * gradient is preset so the tape runs the backward. */
static dt_status tiled_merge(ag_ctx *ctx, tiled_layer *a, dt_tensor *q, dt_tensor *kp, dt_tensor *vp, int64_t t) {
    k_recurrent_tiles_merge(&a->tiles, t);
    dt_tensor *inputs[3] = {q, kp, vp};
    if (!ag_needs_grad(ctx, inputs, 3)) return DT_OK;
    dt_tensor *placeholder = ag_tensor(ctx, DT_F32, DT_SHAPE(1));
    if (!placeholder) return DT_ERR;
    ag_node *node = ag_record(ctx, "recurrent_tiles_merge", merge_backward, placeholder, inputs, 3);
    if (!node) return DT_ERR;
    placeholder->grad = &a->dummy_grad;
    node->saved = a;
    node->iarg[0] = t;
    return DT_OK;
}

/* ---- the layer ---- */

/* The MoE balance term of layer l over all its positions (SPEC §1), from the
 * stacked router logits [N,E]: the per-position FFN calls' own terms are
 * dropped (the term is a product of two means over the whole batch). */
static dt_status add_balance(ag_ctx *ctx, const model *m, dt_tensor *router_logits, model_ffn_balance *balance) {
    const int64_t N = router_logits->shape[0], E = m->arch.n_expert, k = m->arch.top_k;
    dt_tensor *experts = ag_tensor(ctx, DT_I32, DT_SHAPE(N, k));
    float *fractions = ag_scratch(ctx, (size_t)E * sizeof *fractions);
    if (!experts || !fractions) return DT_ERR;
    k_topk(dt_i32(experts), NULL, dt_f32(router_logits), N, E, k); /* the same choice the FFN made */
    model_moe_fractions(fractions, experts, E);
    const int64_t l = balance->count++;
    dt_tensor *term =
        ag_moe_balance_ex(ctx, router_logits, fractions, &balance->fractions[l], balance->mean_probs + l * E);
    balance->sum = balance->sum ? ag_add(ctx, balance->sum, term) : term;
    return balance->sum ? DT_OK : DT_ERR;
}

dt_tensor *model_recurrent_layer(ag_ctx *ctx, const model *m, int64_t l, dt_tensor *x, model_primary_state *state,
                                 model_ffn_balance *balance) {
    if (!x) return NULL;
    const model_layer *layer = &m->layers[l];
    const model_layer_arch *la = &m->arch.layers[l];
    const model_block_weights *w = &layer->primary;
    const model_position_kind *position = m->arch.position;
    const int64_t B = x->shape[0], T = x->shape[1], W = la->kv_width, E = m->arch.n_expert;

    /* Everything that depends on the layer's input only, for all positions at once. */
    dt_tensor *xn = model_block_norm(ctx, m, x, layer->attn_norm, layer->attn_norm_bias); // [B,T,C]
    dt_tensor *q = ag_linear(ctx, xn, w->wq, w->wq_bias);                                 // [B,T,H*hd]
    dt_tensor *k = ag_linear(ctx, xn, w->wk, w->wk_bias);                                 // [B,T,W]
    dt_tensor *v = ag_linear(ctx, xn, w->wv, w->wv_bias);                                 // [B,T,W]
    state->q1 = q;
    persist_saved *rotation = ag_scratch(ctx, sizeof *rotation);
    if (!rotation) return NULL;
    *rotation = (persist_saved){NULL, la->n_kv_head, la->head_dim};
    if (position->rotary) {
        q = position->rotate(ctx, q, la->n_head, m->arch.rope_theta);
        k = position->rotate(ctx, k, la->n_kv_head, m->arch.rope_theta);
        float *table = ag_scratch(ctx, (size_t)(T * la->head_dim) * sizeof(float)); // [T, hd/2, 2]
        if (!table) return NULL;
        k_rope_table(table, T, la->head_dim, m->arch.rope_theta);
        rotation->table = table;
    }
    static const persist_saved unrotated = {NULL, 0, 0};
    state->k = k;
    state->v = v;
    state->k_persist = persistent_buffer(ctx, T, B, W);
    state->v_persist = persistent_buffer(ctx, T, B, W);
    dt_tensor **outs = ag_scratch(ctx, 4 * (size_t)T * sizeof *outs);
    if (!state->k_persist || !state->v_persist || !outs) return NULL;
    dt_tensor **z1s = outs + T, **m1s = outs + 2 * T, **routers = outs + 3 * T;

    /* The scan: position t needs the persistent pairs of 0..t-1. */
    tiled_layer *tiled = NULL;
    if (schedule == MODEL_RECURRENT_TILED &&
        !(tiled = tiled_begin(ctx, la, q, k, v, state->k_persist, state->v_persist)))
        return NULL;
    float *dropped_fractions[1];
    for (int64_t t = 0; t < T; t++) {
        dt_tensor *att = tiled ? tiled_finish(ctx, tiled, q, k, v, t)
                               : model_recurrent_attention(ctx, la, q, k, v, state->k_persist, state->v_persist, t,
                                                           t + 1, la->score_slopes);         // [B,1,H*hd]
        dt_tensor *y = ag_linear_residual(ctx, take_row(ctx, x, t), att, w->wo, w->wo_bias); // [B,1,C]
        model_primary_state row = {0};
        model_ffn_balance dropped = {NULL, 0, dropped_fractions, NULL};
        if (E > 0 && !(dropped.mean_probs = ag_scratch(ctx, (size_t)E * sizeof(float)))) return NULL;
        outs[t] = model_block_ffn(ctx, m, l, 0, y, &row, &dropped, 1); // out_t [B,1,C]
        z1s[t] = row.z1;
        m1s[t] = row.m1;
        routers[t] = row.router_logits;
        if (!outs[t]) return NULL;
        if (t + 1 == T) break; /* no later position reads the last pair */
        dt_tensor *on = model_block_norm(ctx, m, outs[t], layer->attn_norm, layer->attn_norm_bias);
        if (persist(ctx, ag_linear(ctx, on, w->wk, w->wk_bias), state->k_persist, t, rotation) != DT_OK ||
            persist(ctx, ag_linear(ctx, on, w->wv, w->wv_bias), state->v_persist, t, &unrotated) != DT_OK)
            return NULL;
        if (tiled && tiled_merge(ctx, tiled, q, state->k_persist, state->v_persist, t) != DT_OK) return NULL;
    }
    /* What the branch reads of the primary, and the balance term, over all positions. */
    if (z1s[0]) state->z1 = stack_rows(ctx, z1s, B, T);
    if (m1s[0]) state->m1 = stack_rows(ctx, m1s, B, T);
    if (routers[0]) {
        state->router_logits = ag_reshape(ctx, stack_rows(ctx, routers, B, T), DT_SHAPE(B * T, E));
        if (!state->router_logits || add_balance(ctx, m, state->router_logits, balance) != DT_OK) return NULL;
    }
    return stack_rows(ctx, outs, B, T);
}
