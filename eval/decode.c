/* The KV-cache decode engine (see decode.h): session setup, the batched
 * primary prefill, and the one-position step over the primary row, the branch
 * row, or both stacked.
 *
 * One routine, forward_rows(), runs a decode position for a contiguous range
 * of the two rows (row 0 primary, row 1 branch). Grouped decode calls it once
 * with both rows; un-grouped decode calls it for row 0, then row 1; an
 * un-grouped prefill calls it for row 1 alone at the last prompt position (a
 * grouped prefill instead appends the branch row to the prompt's batched
 * products, see eval_decode_prefill). Every shared matrix is
 * applied by rows_linear(), which stacks the rows into one M = 2 product when
 * both are present and use the same weights (share = on), and otherwise runs
 * one M = 1 product per row with that row's weights (share = off, or one row).
 * So the three modes are the same arithmetic in a different grouping.
 *
 * Threads: a step runs as one team (eval/team.h): every thread executes
 * forward_rows(); the products are split over the team, the small serial parts
 * (norms, coupling, residuals, routing) run on one thread inside
 * EVAL_TEAM_SERIAL, and attention is split by kv head (each item also applies
 * RoPE and the query coupling to its own heads). Traffic is counted in
 * code every thread runs, by the team leader only. With matvec = BLIS the step
 * runs on the caller (BLIS threads itself) and the same code degenerates to a
 * plain sequence. */
#include "eval/decode.h"

#include <math.h>
#include <string.h>

#include "eval/matvec.h"
#include "eval/team.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/mixture.h"
#include "kernels/norm.h"
#include "kernels/recurrent_attention.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "models/attn_res.h"
#include "models/disco.h"

/* Most experts a row may choose (routing scratch lives on the stack). */
enum { MAX_TOP_K = MODEL_MAX_TOP_K };
/* Prompt rows per DiscoLoop pass of a prefill (its logits scratch is [DISCO_CHUNK, V]). */
enum { DISCO_CHUNK = 16 };

/* Sizes used everywhere below, read once from the config. */
typedef struct shapes {
    int64_t C, H, Hkv, hd, qdim, kvdim, F, V, E, L, top_k, top_k_branch;
    int moe;                /* routed experts: per-layer routing scratch */
    int max_product_degree; /* most factors of a product FFN (SPEC §6.1) in any layer */
    int recurrent;          /* SPEC §6.4: the persistent pair's products and rotation, 2 stages per layer */
} shapes;

/* Sizes from the model description (models/arch.h): the largest over the
 * layers, which size every buffer (attention widths and head counts may
 * differ per layer; layer_shapes has one layer's). */
static shapes shapes_of(const model *m) {
    const model_arch *a = &m->arch;
    shapes d;
    d.C = a->C;
    d.H = a->max_n_head;
    d.Hkv = a->max_n_kv_head;
    d.hd = a->max_head_dim;
    d.qdim = a->max_q_width;
    d.kvdim = a->max_kv_width;
    d.F = a->max_d_ff;
    d.V = a->V;
    d.E = a->n_expert;
    d.L = a->L;
    d.top_k = a->top_k;
    d.top_k_branch = a->top_k_branch;
    d.moe = d.E > 0;
    d.max_product_degree = 0;
    d.recurrent = a->recurrent;
    for (int64_t l = 0; l < a->L; l++)
        if (a->layers[l].product_degree > d.max_product_degree) d.max_product_degree = a->layers[l].product_degree;
    return d;
}

/* Layer l's attention shape (H, Hkv, hd, q and kv widths); the rest as shapes_of. */
static shapes layer_shapes(const model *m, int64_t l) {
    const model_layer_arch *la = &m->arch.layers[l];
    shapes d = shapes_of(m);
    d.H = la->n_head;
    d.Hkv = la->n_kv_head;
    d.hd = la->head_dim;
    d.qdim = la->q_width;
    d.kvdim = la->kv_width;
    return d;
}

/* The K (or V) cache of applied layer j (layer j % L of application j / L,
 * SPEC §6.6: every application has its own): head blocks [Hkv_l, n_pos_max,
 * hd_l], or rows [n_pos_max, Hkv_l*hd_l] for a recurrent model (head_blocks);
 * layers are spaced by the widest layer's n_pos_max * max_kv_width. */
static float *cache_of(const eval_decode_session *s, float *cache, int64_t j) {
    return cache + j * s->n_pos_max * s->model->arch.max_kv_width;
}

/* The caches hold head blocks (eval_decode_session.k_cache), but for a
 * recurrent model, whose kernels read rows. */
static int head_blocks(const eval_decode_session *s) { return !s->model->arch.recurrent; }

/* The K/V cache of applied layer j as the decode attention kernel reads it. */
static k_kv_cache kv_cache_of(eval_decode_session *s, int64_t j) {
    const shapes d = layer_shapes(s->model, j % s->model->arch.L);
    const float *k = cache_of(s, s->k_cache, j), *v = cache_of(s, s->v_cache, j);
    if (!head_blocks(s)) return k_kv_cache_rows(k, v, d.Hkv, d.hd);
    return (k_kv_cache){.k = k, .v = v, .pos_stride = d.hd, .head_stride = s->n_pos_max * d.hd};
}

/* Rows [n, Hkv*hd] of positions first .. first+n-1 into the head-block cache
 * `cache` of a layer, kv heads [kv_begin, kv_end). */
static void rows_into_head_blocks(const eval_decode_session *s, float *cache, const float *rows, int64_t first,
                                  int64_t n, int64_t Hkv, int64_t hd, int64_t kv_begin, int64_t kv_end) {
    for (int64_t h = kv_begin; h < kv_end; h++)
        for (int64_t t = 0; t < n; t++)
            memcpy(cache + (h * s->n_pos_max + first + t) * hd, rows + t * Hkv * hd + h * hd,
                   (size_t)hd * sizeof(float));
}

static const float *data_of(const dt_tensor *t) { return t ? (const float *)t->data : NULL; }

const char *eval_feedback_mode_name(eval_feedback_mode mode) {
    return mode == EVAL_FEEDBACK_SOFT ? "soft" : mode == EVAL_FEEDBACK_FUSED ? "fused" : "standard";
}

dt_status eval_feedback_mode_parse(const char *text, eval_feedback_mode *mode) {
    for (int i = EVAL_FEEDBACK_STANDARD; i <= EVAL_FEEDBACK_FUSED; i++)
        if (!strcmp(text, eval_feedback_mode_name((eval_feedback_mode)i))) {
            *mode = (eval_feedback_mode)i;
            return DT_OK;
        }
    return dt_errorf("--feedback '%s' must be standard, soft or fused", text);
}

const char *eval_decode_mode_name(eval_decode_mode mode) {
    switch (mode) {
    case EVAL_DECODE_BASELINE:
        return "baseline";
    case EVAL_DECODE_GROUPED:
        return "grouped";
    case EVAL_DECODE_UNGROUPED:
        return "ungrouped";
    }
    return "?";
}

/* ---- session memory ------------------------------------------------------ */

/* Stages of one step (the team's counters), an upper bound: per
 * forward_rows() pass 2 outside the layers (embedding + first norm, head) and
 * per layer at most 8 for a dense FFN (7 with the fused SwiGLU), or 7 plus at
 * most 4 per (row, expert) pair for MoE (top_k + top_k_branch pairs); two
 * passes when un-grouped. The bound
 * below keeps a margin (3 and 10 / 9 + 4 per pair); tests check no step
 * overflows it. */
static int64_t team_stages(const shapes *d, int64_t n_loop) {
    int64_t per_layer = (d->moe ? 9 + 4 * (d->top_k + d->top_k_branch) : 10) + 2 * d->recurrent;
    return 2 * (3 + n_loop * d->L * per_layer + 4 * (n_loop - 1)) + 8; /* + a DiscoLoop boundary's stages */
}

/* Two passes over the same layout: the first (arena NULL) sums the sizes so the
 * arena is created with exactly one chunk, the second hands out the buffers. */
typedef struct planner {
    dt_arena *arena;
    size_t bytes;
    int failed;
} planner;

static void *take(planner *p, int64_t count, size_t elem_bytes) {
    size_t bytes = (size_t)(count > 0 ? count : 1) * elem_bytes;
    if (!p->arena) {
        p->bytes += (bytes + DT_ARENA_ALIGN - 1) / DT_ARENA_ALIGN * DT_ARENA_ALIGN;
        return NULL;
    }
    void *ptr = dt_arena_alloc(p->arena, bytes);
    if (!ptr) p->failed = 1;
    return ptr;
}

static void layout(eval_decode_session *s, planner *p) {
    shapes d = shapes_of(s->model);
    int64_t T = s->n_pos_max, P = s->max_prompt, k = d.top_k > 0 ? d.top_k : 1;
    const size_t f = sizeof(float), i = sizeof(int32_t);
    const model_arch *a = &s->model->arch;
    s->k_cache = take(p, a->n_loop * d.L * T * d.kvdim, f); /* n_loop applications, each its own K/V */
    s->v_cache = take(p, a->n_loop * d.L * T * d.kvdim, f);
    s->k_tmp = take(p, d.L * d.kvdim, f);
    s->v_tmp = take(p, d.L * d.kvdim, f);
    s->x_persist = take(p, a->recurrent ? d.C : 0, f);
    if (a->disco) { /* DiscoLoop scratch: the step's rows, or a prefill chunk of them */
        const int64_t R = DISCO_CHUNK;
        s->disco_logits = take(p, R * d.V, f);
        s->disco.p = take(p, R * d.V, f);
        s->disco.idx = take(p, R * a->disco_top, i);
        s->disco.phi = take(p, R * d.C, f);
        s->disco.rstd = take(p, R, f);
    }
    s->q1 = take(p, d.L * d.qdim, f);
    s->z1 = take(p, d.L * d.F, f);
    s->m1 = take(p, d.L * d.C, f);
    s->router1 = take(p, d.L * d.E, f);
    s->logits = take(p, 2 * d.V, f);

    eval_decode_rows *r = &s->rows;
    r->h = take(p, 2 * d.C, f);
    r->x = take(p, 2 * d.C, f);
    r->o = take(p, 2 * d.C, f);
    r->m = take(p, 2 * d.C, f);
    r->expert_out = take(p, 2 * d.C, f);
    r->q = take(p, 2 * d.qdim, f);
    r->y = take(p, 2 * d.qdim, f);
    r->hidden_a = take(p, 2 * d.F, f);
    r->hidden_b = take(p, 2 * d.F, f);
    r->z = take(p, 2 * d.F, f);
    const int64_t extra_factors = d.max_product_degree > 2 ? d.F : 0; /* product FFNs with 3 or 4 factors */
    r->hidden_c = take(p, 2 * extra_factors, f);
    /* attn_res: each row's 2L+1 sources this position, and one route's scratch */
    const int64_t n_sources = s->model->arch.routed ? 2 * d.L + 1 : 0;
    r->history = take(p, n_sources * 2 * d.C, f);
    s->route_gathered = take(p, n_sources * d.C, f);
    s->route_logits = take(p, n_sources * s->model->arch.route_heads, f);
    r->hidden_d = take(p, 2 * extra_factors, f);
    r->mean = take(p, 2, f);
    r->rstd = take(p, 2, f);
    r->router_logits = take(p, 2 * d.E, f);
    r->attn_scratch = take(p, 2 * d.H * T, f);
    r->route_index = take(p, s->model->arch.n_loop * d.L * 2 * MAX_TOP_K, i); /* per applied layer: ffn_rows */
    r->route_gates = take(p, s->model->arch.n_loop * d.L * 2 * MAX_TOP_K, f);
    const int64_t feedback_C = s->model->config.feedback ? d.C : 0;
    s->feedback_top = feedback_C ? take(p, feedback_C, f) : NULL; /* NULL: no top state to keep */
    s->feedback_scratch = take(p, 3 * feedback_C, f);
    s->team.n_stages = (int)team_stages(&d, a->n_loop);
    s->team.stages = take(p, s->team.n_stages, sizeof(eval_team_stage));

    /* Prefill rows: the prompt plus the branch row that grouped mode appends. */
    eval_decode_prefill_buffers *b = &s->prefill;
    int64_t R = P + 1;
    b->h = take(p, R * d.C, f);
    b->x = take(p, R * d.C, f);
    b->o = take(p, R * d.C, f);
    b->m = take(p, R * d.C, f);
    b->q = take(p, R * d.qdim, f);
    b->y = take(p, R * d.qdim, f);
    b->hidden_a = take(p, R * d.F, f);
    b->hidden_b = take(p, R * d.F, f);
    b->z = take(p, R * d.F, f);
    b->hidden_c = take(p, R * extra_factors, f);
    b->history = take(p, n_sources * R * d.C, f);
    b->hidden_d = take(p, R * extra_factors, f);
    b->mean = take(p, R, f);
    b->rstd = take(p, R, f);
    b->lse = take(p, d.H * P, f);
    b->feedback_inputs = take(p, P * feedback_C, f);
    b->k_rows = take(p, a->recurrent ? 0 : P * d.kvdim, f);
    b->v_rows = take(p, a->recurrent ? 0 : P * d.kvdim, f);
    if (d.moe) {
        b->expert_in = take(p, R * d.C, f);
        b->expert_out = take(p, R * d.C, f);
        b->router_logits = take(p, R * d.E, f);
        b->topk_index = take(p, P * k, i);
        b->topk_logits = take(p, P * k, f);
        b->topk_gates = take(p, P * k, f);
        b->expert_rows = take(p, R, i);
        b->expert_gates = take(p, R, f);
    }
}

dt_status eval_decode_init(eval_decode_session *s, const model *m, eval_decode_mode mode, int64_t max_prompt) {
    memset(s, 0, sizeof *s);
    const model_config *c = &m->config;
    if (mode != EVAL_DECODE_BASELINE && mode != EVAL_DECODE_GROUPED && mode != EVAL_DECODE_UNGROUPED)
        return dt_errorf("decode: unknown mode %d", (int)mode);
    if (m->arch.position->rotary && !m->rope_table)
        return dt_errorf("decode: model has no RoPE table (family %s)", model_family_name(c->family));
    if (m->arch.n_expert > 0 && (c->top_k > MAX_TOP_K || c->top_k_branch > MAX_TOP_K))
        return dt_errorf("decode: top_k %lld / top_k_branch %lld above the engine's limit %d", (long long)c->top_k,
                         (long long)c->top_k_branch, MAX_TOP_K);
    if (max_prompt < 0 || max_prompt > c->block_size)
        return dt_errorf("decode: max_prompt %lld outside 0..block_size %lld", (long long)max_prompt,
                         (long long)c->block_size);
    s->model = m;
    s->mode = mode;
    s->matvec = EVAL_MATVEC_OWN;
    s->run_branch = c->branch == BRANCH_DECODE && mode != EVAL_DECODE_BASELINE;
    s->n_pos_max = c->block_size;
    s->max_prompt = max_prompt ? max_prompt : c->block_size;
    s->pos = -1;
    s->alpha = 1.0f;

    planner count = {0};
    layout(s, &count);
    if (dt_arena_init(&s->arena, count.bytes) != DT_OK) return dt_error_context("decode session");
    planner real = {.arena = &s->arena};
    layout(s, &real);
    if (real.failed) {
        dt_arena_free(&s->arena);
        return dt_error_context("decode session");
    }
    /* Zero everything once: the caches then never hold garbage, and the pages
     * are faulted in here rather than during the first timed step. */
    memset(s->arena.chunks[0].base, 0, s->arena.chunks[0].capacity);
    return DT_OK;
}

void eval_decode_free(eval_decode_session *s) {
    dt_arena_free(&s->arena);
    memset(s, 0, sizeof *s);
}

/* ---- building blocks ----------------------------------------------------- */

/* Traffic counters are updated in code every team thread runs, by the leader only. */
static void count_weight(eval_decode_session *s, int64_t floats) {
    if (eval_team_leader()) s->traffic.weight_bytes += (double)floats * 4.0;
}

static void count(eval_decode_session *s, double *counter, double bytes) {
    if (eval_team_leader()) *counter += bytes;
}

/* The independent M <= 2 products of the current stage (Wq, Wk, Wv; W1, W3),
 * queued per thread: every team thread builds the same list. */
static _Thread_local eval_matvec_job pending[EVAL_MATVEC_MAX_JOBS];
static _Thread_local int n_pending;

/* Runs the queued products: one team stage (or one eval_matvec_batch call). */
static void flush(eval_decode_session *s) {
    if (n_pending) eval_team_matvec(&s->team, pending, n_pending);
    n_pending = 0;
}

/* The eval_matvec job of a product, its weight in the session's stored form
 * (s->weights: bf16 twin or float32), counted as one load of the matrix at
 * that form's bytes per element (the bias stays float32). */
static eval_matvec_job matvec_job(eval_decode_session *s, float *out, const float *in, const float *weight,
                                  const float *bias, int64_t M, int64_t K, int64_t N) {
    eval_matvec_job job = {out, in, weight, bias, M, K, N, DT_F32};
    job.weight = eval_decode_weights_find(s->weights, weight, N, K, &job.wtype);
    if (eval_team_leader()) {
        s->traffic.weight_bytes += (double)(N * K) * (double)dt_dtype_bytes(job.wtype) + (bias ? 4.0 * (double)N : 0.0);
        s->traffic.matrix_loads++;
    }
    return job;
}

/* out [M,N] = in [M,K] · weight [N,K]^T + bias [N], counted as one load of the
 * matrix. M <= 2 products on the eval_matvec path are queued: they run at the
 * next flush(), together with the other independent products of the stage.
 * Anything else runs now through BLIS on the float32 weights (never inside a
 * team: see file comment), which a bf16 view has rounded to the same values. */
static void queue_linear(eval_decode_session *s, float *out, const float *in, const float *weight, const float *bias,
                         int64_t M, int64_t K, int64_t N) {
    if (s->matvec == EVAL_MATVEC_OWN && M <= 2) {
        if (n_pending == EVAL_MATVEC_MAX_JOBS) flush(s);
        pending[n_pending++] = matvec_job(s, out, in, weight, bias, M, K, N);
    } else {
        count_weight(s, N * K + (bias ? N : 0));
        if (eval_team_leader()) s->traffic.matrix_loads++;
        k_linear_forward(out, in, weight, bias, M, K, N);
    }
}

/* The same, run immediately (with whatever was queued before it). */
static void linear(eval_decode_session *s, float *out, const float *in, const float *weight, const float *bias,
                   int64_t M, int64_t K, int64_t N) {
    queue_linear(s, out, in, weight, bias, M, K, N);
    flush(s);
}

/* Rows [row0, row0 + n_rows) of in [2,K] into the same rows of out [2,N]. Row 0
 * applies (w0, b0), the primary's; row 1 applies (w1, b1), the branch's. Two
 * rows with the same matrix are one stacked product: the matrix is read once.
 * Queued: the caller flushes before reading out. */
static model_row_exec exec_of(eval_decode_session *s);

static void rows_linear(eval_decode_session *s, float *out, const float *in, int row0, int n_rows, const dt_tensor *w0,
                        const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1, int64_t K, int64_t N) {
    const model_row_exec exec = exec_of(s); /* the FFN kinds' stacking (models/ffn_common.c), one copy */
    model_rows_linear(&exec, out, in, row0, n_rows, w0, b0, w1, b1, K, N);
}

// out, in [M,C]; weight, bias [C]; mean, rstd [M]: the model's norm kind; the
// decode rows (M <= 2) on this thread (they run in serial stages of the team)
static void norm(eval_decode_session *s, float *out, float *mean, float *rstd, const float *in, const dt_tensor *weight,
                 const dt_tensor *bias, int64_t M, int64_t C) {
    const model_arch *a = &s->model->arch;
    if (M <= 2)
        a->norm->rows(out, mean, rstd, in, data_of(weight), data_of(bias), M, C, a->norm_eps);
    else
        a->norm->batch(out, mean, rstd, in, data_of(weight), data_of(bias), M, C, a->norm_eps);
}

/* What the branch row's coupling terms read in one layer: couple_q, couple_hidden, couple_out. */
static void count_coupling(eval_decode_session *s, const model_layer *layer) {
    const dt_tensor *vectors[3] = {layer->couple_q, layer->couple_hidden, layer->couple_out};
    for (int i = 0; i < 3; i++)
        if (vectors[i]) count_weight(s, vectors[i]->size);
}

/* What a norm reads: its weight (and bias). */
static void count_norm(eval_decode_session *s, const dt_tensor *weight, const dt_tensor *bias) {
    count_weight(s, weight->size + (bias ? bias->size : 0));
}

/* dst[n] += couple[n] * primary[n]: a coupling term of SPEC §2 (couple may be NULL: couple = off). */
static void add_coupling(float *dst, const dt_tensor *couple, const float *primary, int64_t n) {
    model_add_coupling(dst, data_of(couple), primary, n);
}

/* ---- one decode position ------------------------------------------------- */

/* The engine's services to the FFN kinds' decode forms (models/ffn.h). */
static void exec_linear(void *self, const model_row_product *p) {
    queue_linear(self, p->out, p->in, p->weight, p->bias, p->M, p->K, p->N);
}

static void exec_flush(void *self) { flush(self); }

static void exec_linear_pair(void *self, const model_row_product *a, const model_row_product *b,
                             void (*epilogue)(int64_t n0, int64_t n1, void *arg), void *arg) {
    eval_decode_session *s = self;
    flush(s);
    const eval_matvec_job first = matvec_job(s, a->out, a->in, a->weight, a->bias, a->M, a->K, a->N);
    const eval_matvec_job second = matvec_job(s, b->out, b->in, b->weight, b->bias, b->M, b->K, b->N);
    eval_team_matvec_pair(&s->team, &first, &second, epilogue, arg);
}

static int exec_serial_begin(void *self) { return eval_team_serial_begin(&((eval_decode_session *)self)->team); }
static void exec_serial_end(void *self) { eval_team_serial_end(&((eval_decode_session *)self)->team); }

static void exec_count_expert(void *self) {
    eval_decode_session *s = self;
    if (eval_team_leader()) s->traffic.expert_loads++;
}

static void exec_count_vector(void *self, int64_t floats) { count_weight(self, floats); }

/* The exec of this session; the paired products only on the own matvec path. */
static model_row_exec exec_of(eval_decode_session *s) {
    model_row_exec exec = {s,
                           exec_linear,
                           exec_flush,
                           exec_linear_pair,
                           exec_serial_begin,
                           exec_serial_end,
                           exec_count_expert,
                           exec_count_vector};
    if (s->matvec != EVAL_MATVEC_OWN) exec.linear_pair = NULL;
    return exec;
}

/* The FFN of rows [row0, row0 + n_rows) at layer l through its kind:
 * rows.x [2,C] -> rows.m [2,C]; the primary row saves z1 (and its router
 * logits), the branch row is coupled to them (SPEC §2). */
/* The FFN of applied layer j (layer l = j % L) on the rows. Its experts'
 * indices and gates are kept per applied layer, not per layer: the team's
 * control flow follows them, and a thread still in application k's stages
 * must not see application k + 1's choice (eval/team.h's first rule). */
static void ffn_rows(eval_decode_session *s, int64_t j, int row0, int n_rows) {
    const model *m = s->model;
    const int64_t l = j % m->arch.L;
    const model_layer *layer = &m->layers[l];
    const model_layer_arch *la = &m->arch.layers[l];
    const shapes d = shapes_of(m);
    eval_decode_rows *r = &s->rows;
    const model_row_exec exec = exec_of(s);
    const model_ffn_rows call = {
        .exec = &exec,
        .arch = &m->arch,
        .layer = la,
        .config = &m->config,
        .w = {layer->primary.ffn, layer->branch.ffn},
        .row0 = row0,
        .n_rows = n_rows,
        .x = r->x,
        .m = r->m,
        .hidden_a = r->hidden_a,
        .hidden_b = r->hidden_b,
        .hidden_c = r->hidden_c,
        .hidden_d = r->hidden_d,
        .z = r->z,
        .z1 = s->z1 + l * d.F,
        .couple_hidden = data_of(layer->couple_hidden),
        .router_logits = r->router_logits,
        .router1 = s->router1 + l * d.E,
        .route_index = {r->route_index + j * 2 * MODEL_MAX_TOP_K, r->route_index + (j * 2 + 1) * MODEL_MAX_TOP_K},
        .route_gates = {r->route_gates + j * 2 * MODEL_MAX_TOP_K, r->route_gates + (j * 2 + 1) * MODEL_MAX_TOP_K},
        .expert_out = r->expert_out,
    };
    la->ffn->rows(&call);
}

/* Where the primary row's new key (value) of applied layer j goes first: a
 * row of k_tmp (v_tmp), which prepare_heads rotates and copies into the head
 * blocks at pos; for a recurrent layer (SPEC §6.4; never looped, so j = l)
 * it stays there as the temporary pair. */
static float *new_key_row(eval_decode_session *s, int64_t j) {
    return s->k_tmp + (j % s->model->arch.L) * s->model->arch.max_kv_width;
}

static float *new_value_row(eval_decode_session *s, int64_t j) {
    return s->v_tmp + (j % s->model->arch.L) * s->model->arch.max_kv_width;
}

/* What has to happen between the Q/K/V products and attention, for the query
 * heads that read kv heads [kv_begin, kv_end) (SPEC §2): the primary row
 * saves its query before RoPE as q1 and rotates the new key row at pos; the
 * branch row's query is coupled to q1; then RoPE on the queries. It only
 * touches those heads, so the attention item of a kv head does it for its own
 * heads: no separate serial stage (one synchronisation less per layer). */
static void prepare_heads(eval_decode_session *s, int64_t j, int64_t pos, int row0, int n_rows, int64_t kv_begin,
                          int64_t kv_end) {
    const model *m = s->model;
    const int64_t l = j % m->arch.L; /* applied layer j: layer l, its own cache */
    const shapes d = layer_shapes(m, l);
    const model_layer *layer = &m->layers[l];
    const model_position_kind *position = m->arch.position;
    const int64_t group = d.H / d.Hkv, q_begin = kv_begin * group * d.hd, q_len = (kv_end - kv_begin) * group * d.hd;
    float *q = s->rows.q, *q1 = s->q1 + l * m->arch.max_q_width;
    if (row0 == 0) {
        float *k_row = new_key_row(s, j);                                 // [Hkv*hd]
        memcpy(q1 + q_begin, q + q_begin, (size_t)q_len * sizeof(float)); /* before RoPE */
        if (position->rotary)
            position->rotate_heads(k_row + kv_begin * d.hd, layer->rope_table, pos, kv_end - kv_begin, d.hd);
        if (head_blocks(s)) { /* these heads' new pair into the cache at pos */
            rows_into_head_blocks(s, cache_of(s, s->k_cache, j), k_row, pos, 1, d.Hkv, d.hd, kv_begin, kv_end);
            rows_into_head_blocks(s, cache_of(s, s->v_cache, j), new_value_row(s, j), pos, 1, d.Hkv, d.hd, kv_begin,
                                  kv_end);
        }
    }
    if (row0 + n_rows == 2 && layer->couple_q) /* branch: q2 += couple_q ⊙ q1 on these heads */
        k_accumulate_mul_vec_range(q + d.qdim + q_begin, q1 + q_begin, data_of(layer->couple_q) + q_begin, 1, q_len);
    if (position->rotary)
        for (int row = row0; row < row0 + n_rows; row++)
            position->rotate_heads(q + row * d.qdim + q_begin, layer->rope_table, pos, (kv_end - kv_begin) * group,
                                   d.hd);
}

/* Attention of the rows [row0, row0 + n_rows) at position pos over the cache
 * of layer l, one kv head (and its group of query heads) per work item, so
 * the team splits it; each item first prepares its heads (prepare_heads),
 * then runs the decode attention kernel's core on its kv head. */
typedef struct attention_args {
    eval_decode_session *s;
    int64_t j, pos; /* applied layer, position */
    int row0, n_rows;
    float *out;          /* [n_rows, H*hd] */
    const float *q;      /* [n_rows, H*hd] */
    k_kv_cache cache;    /* the layer's K/V (recurrent: rows [n_pos_max, Hkv*hd]) */
    float *scratch;      /* [n_rows, H, pos + 1] */
    const float *slopes; /* [H] score-bias slopes (ALiBi) or NULL */
    int64_t H, Hkv, hd;
} attention_args;

/* The attention kernel's core on kv heads [kv_begin, kv_end): over cache rows
 * 0..pos, or for a recurrent layer over the persistent rows 0..pos-1 and the
 * primary's temporary pair (SPEC §6.4: the branch's query sees the same keys). */
static void attention_core(const attention_args *a, int64_t kv_begin, int64_t kv_end) {
    if (!a->s->model->arch.recurrent) {
        k_attention_decode_cache_range_biased(a->out, a->q, &a->cache, a->n_rows, a->pos, a->H, a->Hkv, a->hd, kv_begin,
                                              kv_end, a->slopes, a->scratch);
        return;
    }
    const k_recurrent_keys keys = {
        a->cache.k, a->cache.v, a->Hkv * a->hd, new_key_row(a->s, a->j), new_value_row(a->s, a->j), a->pos, a->H,
        a->Hkv,     a->hd,      a->slopes}; /* ALiBi; the temporary pair at s = t gets bias 0 */
    /* each kv head's own scratch row: items of the team run at once */
    k_recurrent_attention_forward_range(a->out, NULL, a->q, a->n_rows, &keys, kv_begin, kv_end,
                                        a->scratch + kv_begin * (a->pos + 1));
}

static void attention_kv_head(int64_t kv_head, void *arg) {
    const attention_args *a = arg;
    prepare_heads(a->s, a->j, a->pos, a->row0, a->n_rows, kv_head, kv_head + 1);
    attention_core(a, kv_head, kv_head + 1);
}

/* Attention of rows [row0, row0 + n_rows) at layer l, position pos; the
 * queries (rows.q) come straight from the Wq product (prepare_heads runs here). */
static void attention_rows(eval_decode_session *s, int64_t j, int64_t pos, int row0, int n_rows) {
    const shapes d = layer_shapes(s->model, j % s->model->arch.L);
    float *out = s->rows.y + row0 * d.qdim, *q = s->rows.q + row0 * d.qdim;
    const k_kv_cache cache = kv_cache_of(s, j);
    const float *slopes = s->model->arch.layers[j % s->model->arch.L].score_slopes; /* [H] ALiBi, or NULL */
    count(s, &s->traffic.kv_read_bytes, 2.0 * (double)(pos + 1) * (double)d.kvdim * 4.0);
    if (!eval_team_active() && !s->model->arch.recurrent) { /* the kernel, threaded by itself */
        prepare_heads(s, j, pos, row0, n_rows, 0, d.Hkv);
        k_attention_decode_cache_biased(out, q, &cache, n_rows, pos, d.H, d.Hkv, d.hd, slopes, s->rows.attn_scratch);
        return;
    }
    attention_args a = {.s = s,
                        .j = j,
                        .pos = pos,
                        .row0 = row0,
                        .n_rows = n_rows,
                        .out = out,
                        .q = q,
                        .cache = cache,
                        .scratch = s->rows.attn_scratch,
                        .slopes = slopes,
                        .H = d.H,
                        .Hkv = d.Hkv,
                        .hd = d.hd};
    if (!eval_team_active()) { /* the BLIS path: this thread does every kv head */
        prepare_heads(s, j, pos, row0, n_rows, 0, d.Hkv);
        attention_core(&a, 0, d.Hkv);
        return;
    }
    eval_team_for(&s->team, d.Hkv, attention_kv_head, &a);
}

/* Recurrent layer l (SPEC §6.4), after the primary row's out_t (h row 0) is
 * known and normed into x_persist: the persistent pair k^_t, v^_t =
 * x_persist Wk^T, Wv^T, appended to the cache at pos (k rotated at pos). */
static void append_persistent_pair(eval_decode_session *s, int64_t l, int64_t pos) {
    const model *m = s->model;
    const model_layer *layer = &m->layers[l];
    const shapes dl = layer_shapes(m, l);
    float *k_row = cache_of(s, s->k_cache, l) + pos * dl.kvdim, *v_row = cache_of(s, s->v_cache, l) + pos * dl.kvdim;
    count_norm(s, layer->attn_norm, layer->attn_norm_bias);
    queue_linear(s, k_row, s->x_persist, data_of(layer->primary.wk), data_of(layer->primary.wk_bias), 1, dl.C,
                 dl.kvdim);
    queue_linear(s, v_row, s->x_persist, data_of(layer->primary.wv), data_of(layer->primary.wv_bias), 1, dl.C,
                 dl.kvdim);
    count(s, &s->traffic.kv_write_bytes, 2.0 * (double)dl.kvdim * 4.0);
    flush(s);
    if (m->arch.position->rotary) EVAL_TEAM_SERIAL(&s->team) {
            m->arch.position->rotate_heads(k_row, layer->rope_table, pos, dl.Hkv, dl.hd);
        }
}

/* The residual scheme between sublayers (models/arch.h): the running sum
 * (h += out), or with attn_res (SPEC §6.3) out recorded as sublayer j's
 * output in each row's history and h replaced by the next route over the
 * row's sources (query, norm [C]: the next sublayer's route, or the final one).
 * rows rows from row0 of h, out [., C]; history [2L+1][stride][C] by row.
 * Runs in serial stages: the traffic is counted by count_route, outside them. */
static void advance_stream(eval_decode_session *s, float *h, const float *out, int64_t row0, int64_t rows,
                           int64_t stride, float *history, int64_t j, const dt_tensor *query, const dt_tensor *norm_w) {
    const model_arch *a = &s->model->arch;
    const int64_t C = a->C;
    if (!a->routed) {
        k_accumulate_range(h, out + row0 * C, rows * C);
        return;
    }
    for (int64_t row = row0; row < row0 + rows; row++) {
        memcpy(history + ((1 + j) * stride + row) * C, out + row * C, (size_t)C * sizeof(float));
        model_route_row(h + (row - row0) * C, history + row * C, stride * C, j + 1, a->route_per_block, data_of(query),
                        data_of(norm_w), a->route_heads, C, a->norm_eps, s->route_gathered, s->route_logits);
    }
}

/* What an attn_res route reads: its query and norm weight, once for the rows
 * together. Called by every team thread (the leader counts). */
static void count_route(eval_decode_session *s, const dt_tensor *query, const dt_tensor *norm_w) {
    if (s->model->arch.routed) count_weight(s, query->size + norm_w->size);
}

/* DiscoLoop at the end of an application k < K (SPEC §6.6) for rows
 * [row0, row0 + n_rows), whose x holds Norm_f(h): the head into s->logits
 * (its rows are the step's scratch until the last application's head), then
 * h += a ⊙ RMSNorm_d(p W_out) and x = the first layer's attention norm of h. */
static void disco_step(eval_decode_session *s, int row0, int n_rows) {
    const model *m = s->model;
    const int64_t C = m->arch.C, V = m->arch.V;
    float *h = s->rows.h + row0 * C, *x = s->rows.x + row0 * C;
    count_norm(s, m->final_norm, m->final_norm_bias);
    rows_linear(s, s->logits, s->rows.x, row0, n_rows, m->lm_head, NULL, m->lm_head, NULL, C, V);
    flush(s);
    count_weight(s, model_disco_rows_floats(&m->arch, n_rows));
    EVAL_TEAM_SERIAL(&s->team) {
        model_disco_rows(m, h, s->logits + row0 * V, n_rows, &s->disco);
        norm(s, x, s->rows.mean, s->rows.rstd, h, m->layers[0].attn_norm, m->layers[0].attn_norm_bias, n_rows, C);
    }
}

/* Decode position `pos` for rows [row0, row0 + n_rows) with input token `token`:
 * row 0 (primary) writes K/V at pos and keeps q1, z1, m1, router logits; row 1
 * (branch) reads them. Leaves the rows' logits in s->logits. Run by every
 * thread of the step's team.
 *
 * Stages per dense layer: Q/K/V products; attention (RoPE inside); Wo;
 * residual + FFN norm; W1, W3 (SwiGLU applied on each claimed row range; a
 * separate activation stage only for GELU, BLIS, or share = off rows
 * together); W2; residual + the NEXT norm (the next layer's attention norm, or
 * the final norm after the last layer), so no stage is spent on a norm alone. */
static void forward_rows(eval_decode_session *s, int32_t token, int64_t pos, int row0, int n_rows) {
    const model *m = s->model;
    shapes d = shapes_of(m);
    eval_decode_rows *r = &s->rows;
    eval_team *team = &s->team;
    int has_branch_row = row0 + n_rows == 2;
    const int persist = m->arch.recurrent && row0 == 0; /* the primary row appends its persistent pairs */
    float *h = r->h + row0 * d.C, *x = r->x + row0 * d.C;

    EVAL_TEAM_SERIAL(team) {
        for (int row = row0; row < row0 + n_rows; row++) { /* g = emb[x_t] (+ pos_emb[t]) */
            k_embedding_forward_range(r->h + row * d.C, data_of(row == 0 ? m->tok_emb : m->branch_tok_emb), &token, 1,
                                      d.C);
            if (m->pos_emb) k_accumulate_range(r->h + row * d.C, data_of(m->pos_emb) + pos * d.C, d.C);
            if (row == 0 && m->tok_emb2 && m->arch.tok_emb2_layer == 0) /* + tok_emb2[x_t], last as in training */
                k_accumulate_range(r->h, data_of(m->tok_emb2) + (int64_t)token * d.C, d.C);
            if (row == 0 && s->feedback != EVAL_FEEDBACK_STANDARD) { /* u_t = fuse(h_{t-1}, e_t) */
                float *e = s->feedback_scratch + 2 * d.C;
                memcpy(e, r->h, (size_t)d.C * sizeof(float));
                model_feedback_fuse_row(r->h, s->feedback_top, e, m, s->feedback_scratch);
            }
            /* attn_res: s_0 is the embedding, and the first route (one source) is s_0 itself */
            if (m->arch.routed) memcpy(r->history + row * d.C, r->h + row * d.C, (size_t)d.C * sizeof(float));
        }
        norm(s, x, r->mean, r->rstd, h, m->layers[0].attn_norm, m->layers[0].attn_norm_bias, n_rows, d.C);
    }
    count_weight(s, n_rows * d.C + (m->pos_emb ? d.C : 0)); /* the rows' embedding rows, one pos_emb row for both */
    if (row0 == 0 && m->tok_emb2) count_weight(s, d.C);     /* the primary row's tok_emb2 row */
    if (row0 == 0 && s->feedback != EVAL_FEEDBACK_STANDARD) count_weight(s, 2 * d.C * d.C + 2 * d.C); /* the fusion */
    const int64_t n_applied = m->arch.n_loop * d.L; /* SPEC §6.6: the stack n_loop times */
    for (int64_t j = 0; j < n_applied; j++) {
        const int64_t l = j % d.L;
        const int boundary = l + 1 == d.L && j + 1 < n_applied; /* the end of an application k < K */
        const model_layer *layer = &m->layers[l];
        const model_block_weights *p = &layer->primary, *b = &layer->branch;
        const shapes dl = layer_shapes(m, l);

        count_norm(s, layer->attn_norm, layer->attn_norm_bias); /* x = attention norm of h: computed above */
        rows_linear(s, r->q, r->x, row0, n_rows, p->wq, p->wq_bias, b->wq, b->wq_bias, d.C, dl.qdim);
        if (row0 == 0) { /* K, V of the primary row only, straight into the cache */
            queue_linear(s, new_key_row(s, j), r->x, data_of(p->wk), data_of(p->wk_bias), 1, d.C, dl.kvdim);
            queue_linear(s, new_value_row(s, j), r->x, data_of(p->wv), data_of(p->wv_bias), 1, d.C, dl.kvdim);
            if (!m->arch.recurrent) count(s, &s->traffic.kv_write_bytes, 2.0 * (double)dl.kvdim * 4.0);
        }
        flush(s); /* Wq (both rows), Wk, Wv in one stage */
        /* both queries in one pass over the cache */
        attention_rows(s, j, pos, row0, n_rows);
        if (has_branch_row) count_coupling(s, layer); /* the branch row reads the layer's coupling vectors */
        rows_linear(s, r->o, r->y, row0, n_rows, p->wo, p->wo_bias, b->wo, b->wo_bias, dl.qdim, d.C);
        flush(s);
        EVAL_TEAM_SERIAL(team) {
            advance_stream(s, h, r->o, row0, n_rows, 2, r->history, 2 * l, layer->route_ffn_query,
                           layer->route_ffn_norm);
            norm(s, x, r->mean, r->rstd, h, layer->ffn_norm, layer->ffn_norm_bias, n_rows, d.C);
        }
        count_route(s, layer->route_ffn_query, layer->route_ffn_norm);
        count_norm(s, layer->ffn_norm, layer->ffn_norm_bias);
        ffn_rows(s, j, row0, n_rows);
        EVAL_TEAM_SERIAL(team) {
            if (row0 == 0) memcpy(s->m1 + l * d.C, r->m, (size_t)d.C * sizeof(float));
            if (has_branch_row) add_coupling(r->m + d.C, layer->couple_out, s->m1 + l * d.C, d.C);
            advance_stream(s, h, r->m, row0, n_rows, 2, r->history, 2 * l + 1,
                           l + 1 < d.L ? m->layers[l + 1].route_attn_query : m->route_final_query,
                           l + 1 < d.L ? m->layers[l + 1].route_attn_norm : m->route_final_norm);
            if (persist) /* out_t of the primary row (SPEC §6.4), normed by this layer's Norm1 */
                norm(s, s->x_persist, r->mean, r->rstd, h, layer->attn_norm, layer->attn_norm_bias, 1, d.C);
            if (row0 == 0 && m->tok_emb2 &&
                l + 1 == m->arch.tok_emb2_layer) /* block l + 1's input gets tok_emb2[x_t] */
                k_accumulate_range(r->h, data_of(m->tok_emb2) + (int64_t)token * d.C, d.C);
            if (l + 1 < d.L)
                norm(s, x, r->mean, r->rstd, h, m->layers[l + 1].attn_norm, m->layers[l + 1].attn_norm_bias, n_rows,
                     d.C);
            else if (boundary && !m->arch.disco) /* the next application starts on h itself */
                norm(s, x, r->mean, r->rstd, h, m->layers[0].attn_norm, m->layers[0].attn_norm_bias, n_rows, d.C);
            else /* the head's input: the output, or DiscoLoop's logits */
                norm(s, x, r->mean, r->rstd, h, m->final_norm, m->final_norm_bias, n_rows, d.C);
            if (l + 1 == d.L && row0 == 0 && s->feedback_top) /* the top state the next soft step fuses */
                memcpy(s->feedback_top, x, (size_t)d.C * sizeof(float));
        }
        count_route(s, l + 1 < d.L ? m->layers[l + 1].route_attn_query : m->route_final_query,
                    l + 1 < d.L ? m->layers[l + 1].route_attn_norm : m->route_final_norm);
        if (boundary && m->arch.disco) disco_step(s, row0, n_rows);
        if (persist) append_persistent_pair(s, l, pos);
    }
    count_norm(s, m->final_norm, m->final_norm_bias);
    rows_linear(s, s->logits, r->x, row0, n_rows, m->lm_head, NULL, m->lm_head, NULL, d.C, d.V);
    flush(s);
}

/* forward_rows() for rows [row0, row0 + n_rows), then (then_branch) for the
 * branch row alone: the un-grouped step's two passes. */
typedef struct rows_pass {
    eval_decode_session *s;
    int32_t token;
    int64_t pos;
    int row0, n_rows, then_branch;
} rows_pass;

static void rows_pass_body(void *arg) {
    const rows_pass *a = arg;
    forward_rows(a->s, a->token, a->pos, a->row0, a->n_rows);
    if (a->then_branch) forward_rows(a->s, a->token, a->pos, 1, 1);
}

/* Runs the pass on the step team (own matvec) or on the caller (BLIS). */
static void run_rows(eval_decode_session *s, int32_t token, int64_t pos, int row0, int n_rows, int then_branch) {
    rows_pass a = {s, token, pos, row0, n_rows, then_branch};
    if (s->matvec == EVAL_MATVEC_OWN)
        eval_team_run(&s->team, k_get_threads(), rows_pass_body, &a);
    else
        rows_pass_body(&a);
}

/* alpha and 1 - alpha from the primary's logits: the one alpha kernel (kernels/mixture.h). */
static void update_alpha(eval_decode_session *s) {
    const model_config *c = &s->model->config;
    s->alpha = 1.0f;
    s->one_minus_alpha = 0.0;
    if (s->run_branch)
        k_mixture_alpha_range(&s->alpha, &s->one_minus_alpha, s->logits, 1, c->vocab_size, (float)c->mix_alpha_min,
                              (float)c->mix_alpha_max);
}

void eval_decode_mixture(const eval_decode_session *s, float *probs) {
    int64_t V = s->model->config.vocab_size;
    const float *lp = s->logits, *lq = s->logits + V;
    double max_p = lp[0], sum_p = 0.0, max_q = lq[0], sum_q = 0.0;
    for (int64_t v = 1; v < V; v++) {
        if (lp[v] > max_p) max_p = lp[v];
        if (lq[v] > max_q) max_q = lq[v];
    }
    for (int64_t v = 0; v < V; v++)
        sum_p += exp((double)lp[v] - max_p);
    double alpha = s->run_branch ? s->alpha : 1.0,
           beta = s->run_branch ? s->one_minus_alpha : 0.0; /* beta = 1 - alpha */
    if (beta > 0.0)
        for (int64_t v = 0; v < V; v++)
            sum_q += exp((double)lq[v] - max_q);
    for (int64_t v = 0; v < V; v++) {
        double r = alpha * exp((double)lp[v] - max_p) / sum_p;
        if (beta > 0.0) r += beta * exp((double)lq[v] - max_q) / sum_q;
        probs[v] = (float)r;
    }
}

/* ---- prefill ------------------------------------------------------------- */

/* The prefill runs the prompt rows 0..P-1 (primary) and, in grouped mode, the
 * branch row at position P-1 as one extra row P of the same batched products,
 * so a branch model's prefill streams each shared matrix once, like the
 * baseline's: the branch row adds FLOPs, not memory traffic. */

static void prefill_linear(eval_decode_session *s, float *out, const float *in, const dt_tensor *weight,
                           const dt_tensor *bias, int64_t M, int64_t K, int64_t N) {
    linear(s, out, in, data_of(weight), data_of(bias), M, K, N);
}

/* out [P + extra, N] = in [P + extra, K] · W^T: rows < P with the primary's
 * (w0, b0), the extra branch row P (extra = 1) with the branch's (w1, b1); one
 * product over all rows when they share the matrix. */
static void prefill_rows_linear(eval_decode_session *s, float *out, const float *in, int64_t P, int extra,
                                const dt_tensor *w0, const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1,
                                int64_t K, int64_t N) {
    const model_row_exec exec = exec_of(s);
    model_prefill_linear(&exec, out, in, P, extra, w0, b0, w1, b1, K, N);
}

/* The FFN over the prompt rows (+ the branch row P) through its kind: x -> m;
 * keeps the primary's z1 and router logits at P-1. */
static void prefill_ffn(eval_decode_session *s, int64_t l, int64_t P, int extra) {
    const model *m = s->model;
    const model_layer *layer = &m->layers[l];
    const shapes d = shapes_of(m);
    eval_decode_prefill_buffers *b = &s->prefill;
    eval_decode_rows *r = &s->rows;
    const model_row_exec exec = exec_of(s);
    const model_ffn_prefill call = {
        .exec = &exec,
        .arch = &m->arch,
        .layer = &m->arch.layers[l],
        .config = &m->config,
        .w = {layer->primary.ffn, layer->branch.ffn},
        .P = P,
        .extra = extra,
        .x = b->x,
        .m = b->m,
        .hidden_a = b->hidden_a,
        .hidden_b = b->hidden_b,
        .hidden_c = b->hidden_c,
        .hidden_d = b->hidden_d,
        .z = b->z,
        .z1 = s->z1 + l * d.F,
        .couple_hidden = data_of(layer->couple_hidden),
        .router_logits = b->router_logits,
        .router1 = s->router1 + l * d.E,
        .topk_index = b->topk_index,
        .topk_logits = b->topk_logits,
        .topk_gates = b->topk_gates,
        .expert_rows = b->expert_rows,
        .expert_gates = b->expert_gates,
        .expert_in = b->expert_in,
        .expert_out = b->expert_out,
        .row_out = r->expert_out,
        .row_hidden_a = r->hidden_a,
        .row_hidden_b = r->hidden_b,
        .row_z = r->z,
        .row_hidden_c = r->hidden_c,
        .row_hidden_d = r->hidden_d,
    };
    m->arch.layers[l].ffn->prefill(&call);
}

/* DiscoLoop at the end of an application k < K (SPEC §6.6) on the prompt
 * rows' h, DISCO_CHUNK rows at a time (the logits scratch is [DISCO_CHUNK, V]):
 * x = Norm_f(h), logits = x W_out^T, h += a ⊙ RMSNorm_d(p W_out). */
static void prefill_disco(eval_decode_session *s, int64_t P) {
    const model *m = s->model;
    const int64_t C = m->arch.C, V = m->arch.V;
    eval_decode_prefill_buffers *b = &s->prefill;
    for (int64_t i0 = 0; i0 < P; i0 += DISCO_CHUNK) {
        const int64_t n = P - i0 < DISCO_CHUNK ? P - i0 : DISCO_CHUNK;
        norm(s, b->x, b->mean, b->rstd, b->h + i0 * C, m->final_norm, m->final_norm_bias, n, C);
        count_norm(s, m->final_norm, m->final_norm_bias);
        prefill_linear(s, s->disco_logits, b->x, m->lm_head, NULL, n, C, V);
        count_weight(s, model_disco_rows(m, b->h + i0 * C, s->disco_logits, n, &s->disco));
    }
}

static dt_status check_token(const eval_decode_session *s, int32_t token) {
    if (token < 0 || token >= s->model->config.vocab_size)
        return dt_errorf("decode: token %d outside the vocabulary 0..%lld", token,
                         (long long)s->model->config.vocab_size - 1);
    return DT_OK;
}

/* A recurrent model's prefill (SPEC §6.4) is a scan: position t's keys need
 * out_{t-1} of every layer, so each prompt position is one decode step of the
 * primary row; the branch row joins the last, as in eval_decode_step. */
static void prefill_scan(eval_decode_session *s, const int32_t *tokens, int64_t P, float *logits_all) {
    const int64_t V = s->model->arch.V;
    for (int64_t t = 0; t < P; t++) {
        const int last = t == P - 1 && s->run_branch;
        run_rows(s, tokens[t], t, 0, last && s->mode == EVAL_DECODE_GROUPED ? 2 : 1,
                 last && s->mode == EVAL_DECODE_UNGROUPED);
        if (logits_all) memcpy(logits_all + t * V, s->logits, (size_t)V * sizeof(float));
    }
    s->pos = P - 1;
    update_alpha(s);
}

/* tok_emb_tables = 2: rows h [P, C] += tok_emb2[tokens [P]] (the last term of
 * the input, or of block tok_emb2_layer's input, as in training), counted as
 * read; nothing without the table. */
static void add_tok_emb2_rows(eval_decode_session *s, float *h, const int32_t *tokens, int64_t P) {
    const model *m = s->model;
    if (!m->tok_emb2) return;
    const int64_t C = m->arch.C;
    for (int64_t t = 0; t < P; t++)
        k_accumulate_range(h + t * C, data_of(m->tok_emb2) + (int64_t)tokens[t] * C, C);
    count_weight(s, P * C);
}

/* One pass over the prompt: tokens [P] embedded, or (inputs != NULL) the
 * input vectors inputs [P, C] (a feedback pass); all_tops leaves Norm_f of
 * every prompt row in b->x [P, C]. */
static void prefill_pass(eval_decode_session *s, const int32_t *tokens, int64_t P, const float *inputs,
                         float *logits_all, int all_tops) {
    const model *m = s->model;
    shapes d = shapes_of(m);
    eval_decode_prefill_buffers *b = &s->prefill;
    int extra = s->run_branch && s->mode == EVAL_DECODE_GROUPED; /* the branch row rides along as row P */
    int64_t rows = P + extra;

    if (inputs) {
        memcpy(b->h, inputs, (size_t)(P * d.C) * sizeof(float));
    } else {
        k_embedding_forward(b->h, data_of(m->tok_emb), tokens, P, d.C);
        if (m->pos_emb) k_add(b->h, b->h, data_of(m->pos_emb), P * d.C);
        if (m->arch.tok_emb2_layer == 0) add_tok_emb2_rows(s, b->h, tokens, P);
        count_weight(s, P * d.C * (m->pos_emb ? 2 : 1));
    }
    if (extra) { /* g = branch.tok_emb[x_{P-1}] (+ pos_emb[P-1]) */
        memcpy(b->h + P * d.C, data_of(m->branch_tok_emb) + (int64_t)tokens[P - 1] * d.C, (size_t)d.C * sizeof(float));
        if (m->pos_emb) k_accumulate(b->h + P * d.C, data_of(m->pos_emb) + (P - 1) * d.C, d.C);
        count_weight(s, d.C);
    }
    if (m->arch.routed) memcpy(b->history, b->h, (size_t)(rows * d.C) * sizeof(float)); /* s_0 of every row */
    int64_t kv_floats_per_position = 0;
    const int64_t n_applied = m->arch.n_loop * d.L; /* SPEC §6.6: the stack n_loop times, each its own K/V */
    for (int64_t j = 0; j < n_applied; j++) {
        const int64_t l = j % d.L;
        const model_layer *layer = &m->layers[l];
        const model_block_weights *w = &layer->primary, *br = &layer->branch;
        const shapes dl = layer_shapes(m, l);
        /* the prompt's K, V as rows (what the prefill kernels read), then into head blocks */
        float *k_cache = head_blocks(s) ? b->k_rows : cache_of(s, s->k_cache, j);
        float *v_cache = head_blocks(s) ? b->v_rows : cache_of(s, s->v_cache, j);
        kv_floats_per_position += dl.kvdim;

        if (l > 0 && l == m->arch.tok_emb2_layer && !inputs)
            add_tok_emb2_rows(s, b->h, tokens, P); /* (no branch row) */
        norm(s, b->x, b->mean, b->rstd, b->h, layer->attn_norm, layer->attn_norm_bias, rows, d.C);
        count_norm(s, layer->attn_norm, layer->attn_norm_bias);
        prefill_rows_linear(s, b->q, b->x, P, extra, w->wq, w->wq_bias, br->wq, br->wq_bias, d.C, dl.qdim);
        memcpy(s->q1 + l * d.qdim, b->q + (P - 1) * dl.qdim, (size_t)dl.qdim * sizeof(float));
        prefill_linear(s, k_cache, b->x, w->wk, w->wk_bias, P, d.C, dl.kvdim);
        prefill_linear(s, v_cache, b->x, w->wv, w->wv_bias, P, d.C, dl.kvdim);
        if (extra) add_coupling(b->q + P * dl.qdim, layer->couple_q, s->q1 + l * d.qdim, dl.qdim);
        if (extra) count_coupling(s, layer);
        if (m->arch.position->rotary) {
            k_rope_forward(b->q, layer->rope_table, 1, P, 0, dl.H, dl.hd);
            k_rope_forward(k_cache, layer->rope_table, 1, P, 0, dl.Hkv, dl.hd);
            if (extra) k_rope_forward(b->q + P * dl.qdim, layer->rope_table, 1, 1, P - 1, dl.H, dl.hd);
        }
        const float *slopes = m->arch.layers[l].score_slopes; /* [H] ALiBi, or NULL */
        k_attention_forward_biased(b->y, b->lse, b->q, k_cache, v_cache, 1, P, dl.H, dl.Hkv, dl.hd, slopes);
        s->traffic.kv_read_bytes += 2.0 * (double)(P * dl.kvdim) * 4.0;
        if (extra) {
            k_attention_decode_biased(b->y + P * dl.qdim, b->q + P * dl.qdim, k_cache, v_cache, 1, P - 1, dl.H, dl.Hkv,
                                      dl.hd, slopes, s->rows.attn_scratch);
            s->traffic.kv_read_bytes += 2.0 * (double)(P * dl.kvdim) * 4.0;
        }
        if (head_blocks(s)) {
            rows_into_head_blocks(s, cache_of(s, s->k_cache, j), k_cache, 0, P, dl.Hkv, dl.hd, 0, dl.Hkv);
            rows_into_head_blocks(s, cache_of(s, s->v_cache, j), v_cache, 0, P, dl.Hkv, dl.hd, 0, dl.Hkv);
        }
        prefill_rows_linear(s, b->o, b->y, P, extra, w->wo, w->wo_bias, br->wo, br->wo_bias, dl.qdim, d.C);
        advance_stream(s, b->h, b->o, 0, rows, P + 1, b->history, 2 * l, layer->route_ffn_query, layer->route_ffn_norm);
        count_route(s, layer->route_ffn_query, layer->route_ffn_norm);

        norm(s, b->x, b->mean, b->rstd, b->h, layer->ffn_norm, layer->ffn_norm_bias, rows, d.C);
        count_norm(s, layer->ffn_norm, layer->ffn_norm_bias);
        prefill_ffn(s, l, P, extra);
        memcpy(s->m1 + l * d.C, b->m + (P - 1) * d.C, (size_t)d.C * sizeof(float));
        if (extra) add_coupling(b->m + P * d.C, layer->couple_out, s->m1 + l * d.C, d.C);
        advance_stream(s, b->h, b->m, 0, rows, P + 1, b->history, 2 * l + 1,
                       l + 1 < d.L ? m->layers[l + 1].route_attn_query : m->route_final_query,
                       l + 1 < d.L ? m->layers[l + 1].route_attn_norm : m->route_final_norm);
        count_route(s, l + 1 < d.L ? m->layers[l + 1].route_attn_query : m->route_final_query,
                    l + 1 < d.L ? m->layers[l + 1].route_attn_norm : m->route_final_norm);
        if (m->arch.disco && l + 1 == d.L && j + 1 < n_applied) prefill_disco(s, P);
    }
    s->traffic.kv_write_bytes += 2.0 * (double)(P * kv_floats_per_position) * 4.0;
    count_norm(s, m->final_norm, m->final_norm_bias);
    if (logits_all || all_tops) { /* teacher-forced logits (or the top states) of every prompt position */
        norm(s, b->x, b->mean, b->rstd, b->h, m->final_norm, m->final_norm_bias, rows, d.C);
        if (logits_all) {
            prefill_linear(s, logits_all, b->x, m->lm_head, NULL, P, d.C, d.V);
            memcpy(s->logits, logits_all + (P - 1) * d.V, (size_t)d.V * sizeof(float));
        } else {
            linear(s, s->logits, b->x + (P - 1) * d.C, data_of(m->lm_head), NULL, 1, d.C, d.V);
        }
        if (extra) linear(s, s->logits + d.V, b->x + P * d.C, data_of(m->lm_head), NULL, 1, d.C, d.V);
        if (s->feedback_top) memcpy(s->feedback_top, b->x + (P - 1) * d.C, (size_t)d.C * sizeof(float));
    } else { /* generation needs only the last prompt row (and the branch row right after it) */
        norm(s, b->x, b->mean, b->rstd, b->h + (P - 1) * d.C, m->final_norm, m->final_norm_bias, 1 + extra, d.C);
        linear(s, s->logits, b->x, data_of(m->lm_head), NULL, 1 + extra, d.C, d.V);
        if (s->feedback_top) memcpy(s->feedback_top, b->x, (size_t)d.C * sizeof(float));
    }
}

/* Fused mode's feedback pass input from the plain pass's top states b->x
 * [P, C]: u_0 = e_0, u_t = fuse(h_{t-1}, e_t). */
static void feedback_prompt_inputs(eval_decode_session *s, const int32_t *tokens, int64_t P) {
    const model *m = s->model;
    const int64_t C = m->arch.C;
    float *u = s->prefill.feedback_inputs, *e = s->feedback_scratch + 2 * C;
    for (int64_t t = 0; t < P; t++) {
        memcpy(e, data_of(m->tok_emb) + (int64_t)tokens[t] * C, (size_t)C * sizeof(float));
        if (m->pos_emb) k_accumulate(e, data_of(m->pos_emb) + t * C, C);
        if (t == 0)
            memcpy(u, e, (size_t)C * sizeof(float));
        else
            model_feedback_fuse_row(u + t * C, s->prefill.x + (t - 1) * C, e, m, s->feedback_scratch);
    }
    count_weight(s, P * C * (m->pos_emb ? 2 : 1) + 2 * C * C + 2 * C);
}

dt_status eval_decode_prefill(eval_decode_session *s, const int32_t *tokens, int64_t P, float *logits_all) {
    const model *m = s->model;
    if (P < 1 || P > s->max_prompt)
        return dt_errorf("decode: prompt of %lld tokens (this session takes 1..%lld)", (long long)P,
                         (long long)s->max_prompt);
    for (int64_t t = 0; t < P; t++)
        if (check_token(s, tokens[t]) != DT_OK) return dt_error_context("prompt position %lld", (long long)t);
    if (s->feedback != EVAL_FEEDBACK_STANDARD && !m->config.feedback)
        return dt_errorf("decode: feedback decoding '%s' needs a model with feedback = 1 (SPEC §6.5)",
                         eval_feedback_mode_name(s->feedback));
    memset(&s->traffic, 0, sizeof s->traffic);
    if (m->arch.recurrent) { /* a scan (never with feedback: SPEC §6) */
        prefill_scan(s, tokens, P, logits_all);
        return DT_OK;
    }
    const int fused = s->feedback == EVAL_FEEDBACK_FUSED;
    prefill_pass(s, tokens, P, NULL, fused ? NULL : logits_all, fused);
    if (fused) { /* one feedback pass over the prompt rewrites its cache */
        feedback_prompt_inputs(s, tokens, P);
        prefill_pass(s, tokens, P, s->prefill.feedback_inputs, logits_all, 0);
    }
    const int extra = s->run_branch && s->mode == EVAL_DECODE_GROUPED;
    s->pos = P - 1;
    if (s->run_branch && !extra) run_rows(s, tokens[P - 1], P - 1, 1, 1, 0); /* un-grouped: a separate branch pass */
    update_alpha(s);
    return DT_OK;
}

/* ---- step ---------------------------------------------------------------- */

dt_status eval_decode_step(eval_decode_session *s, int32_t token) {
    if (s->pos < 0) return dt_errorf("decode: step before prefill");
    if (s->pos + 1 >= s->n_pos_max)
        return dt_errorf("decode: context full (block_size %lld positions)", (long long)s->n_pos_max);
    if (check_token(s, token) != DT_OK) return DT_ERR;
    int64_t pos = s->pos + 1;
    memset(&s->traffic, 0, sizeof s->traffic);
    if (!s->run_branch)
        run_rows(s, token, pos, 0, 1, 0);
    else if (s->mode == EVAL_DECODE_GROUPED)
        run_rows(s, token, pos, 0, 2, 0);
    else /* un-grouped: the primary pass first (it writes K/V at pos), then the branch pass */
        run_rows(s, token, pos, 0, 1, 1);
    s->pos = pos;
    update_alpha(s);
    return DT_OK;
}
