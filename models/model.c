/* The parameter registry: model_create allocates every parameter of SPEC §3
 * (names, shapes and order exactly as listed there), wires the per-layer
 * pointers the forward pass reads, and model_init_weights draws the initial
 * values. Parameters are views into one flat weight buffer and one flat
 * gradient buffer (alloc_flat), allocated once; nothing here runs on a
 * training step's hot path. */
#include "models/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_bf16.h"
#include "kernels/rope.h"

/* Marks for add_param: what the optimizer needs to know. */
enum { PLAIN = 0, MATRIX = 1, EMBEDDING = 2 };

/* Upper bound of the parameter count: 7 model-level tensors, and per layer
 * 4 norm tensors, 8 attention tensors, MODEL_FFN_SLOTS FFN tensors, 3
 * coupling vectors, 4 attention-residual vectors and the share = off copies
 * (4 attention + FFN); 2 more model-level vectors for attn_res, 3 DiscoLoop
 * tensors, 4 feedback tensors. */
static int max_params(const model_config *c) { return 17 + (23 + 2 * MODEL_FFN_SLOTS) * (int)c->n_layer; }

/* Appends a parameter (its header; alloc_flat gives it memory). The name is formatted. */
static dt_tensor *add_param(model *m, int capacity, model_param_group group, int marks, model_init_kind init, int ndim,
                            const int64_t *shape, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static dt_tensor *add_param(model *m, int capacity, model_param_group group, int marks, model_init_kind init, int ndim,
                            const int64_t *shape, const char *fmt, ...) {
    if (m->n_params >= capacity) {
        dt_errorf("model: more parameters than the %d planned (internal error)", capacity);
        return NULL;
    }
    model_param *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, args);
    va_end(args);
    /* A header only: alloc_flat points it into the flat buffers. */
    p->tensor = calloc(1, sizeof *p->tensor);
    if (!p->tensor) {
        dt_errorf("model: out of memory for parameter '%s'", p->name);
        return NULL;
    }
    if (dt_tensor_init(p->tensor, DT_F32, ndim, shape, NULL) != DT_OK) {
        free(p->tensor);
        p->tensor = NULL;
        dt_error_context("model: parameter '%s'", p->name);
        return NULL;
    }
    p->tensor->requires_grad = 1;
    p->group = group;
    p->is_matrix = (marks & MATRIX) != 0;
    p->is_embedding = (marks & EMBEDDING) != 0;
    p->init = init;
    m->n_params++;
    return p->tensor;
}

/* Builds a model's parameters in SPEC order; `prefix` is "" for the primary
 * and "branch." for the share = off copies. */
typedef struct {
    model *m;
    int capacity;
    int failed;
} builder;

static dt_tensor *param(builder *b, model_param_group group, int marks, model_init_kind init, int ndim,
                        const int64_t *shape, const char *prefix, int64_t layer, const char *name) {
    if (b->failed) return NULL;
    dt_tensor *t = layer >= 0 ? add_param(b->m, b->capacity, group, marks, init, ndim, shape, "%slayers.%lld.%s",
                                          prefix, (long long)layer, name)
                              : add_param(b->m, b->capacity, group, marks, init, ndim, shape, "%s%s", prefix, name);
    if (!t) b->failed = 1;
    return t;
}

/* A norm's weight (init one) and, for kinds with one, its bias. */
static void add_norm(builder *b, dt_tensor **weight, dt_tensor **bias, int64_t l, const char *name) {
    char full[64];
    snprintf(full, sizeof full, "%s.weight", name);
    *weight = param(b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(b->m->config.d_model), "", l, full);
    if (b->m->arch.norm->has_bias) {
        snprintf(full, sizeof full, "%s.bias", name);
        *bias = param(b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(b->m->config.d_model), "", l, full);
    }
}

/* attn.wq and attn.wo (+ biases); with_kv adds wk and wv between them (SPEC order). */
static void add_attention(builder *b, model_block_weights *w, model_param_group group, const char *prefix, int64_t l,
                          int with_kv) {
    const model_layer_arch *la = &b->m->arch.layers[l];
    const int64_t C = b->m->arch.C, q_width = la->q_width, kv_width = la->kv_width;
    const int biases = b->m->arch.linear_bias;
    w->wq = param(b, group, MATRIX, MODEL_INIT_NORMAL, DT_SHAPE(q_width, C), prefix, l, "attn.wq.weight");
    if (biases) w->wq_bias = param(b, group, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(q_width), prefix, l, "attn.wq.bias");
    if (with_kv) {
        w->wk = param(b, group, MATRIX, MODEL_INIT_NORMAL, DT_SHAPE(kv_width, C), prefix, l, "attn.wk.weight");
        if (biases) w->wk_bias = param(b, group, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(kv_width), prefix, l, "attn.wk.bias");
        w->wv = param(b, group, MATRIX, MODEL_INIT_NORMAL, DT_SHAPE(kv_width, C), prefix, l, "attn.wv.weight");
        if (biases) w->wv_bias = param(b, group, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(kv_width), prefix, l, "attn.wv.bias");
    }
    w->wo = param(b, group, MATRIX, MODEL_INIT_RESIDUAL, DT_SHAPE(C, q_width), prefix, l, "attn.wo.weight");
    if (biases) w->wo_bias = param(b, group, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), prefix, l, "attn.wo.bias");
}

/* The sink an FFN kind declares its tensors into (models/ffn.h). */
typedef struct {
    builder *b;
    model_param_group group;
    const char *prefix;
    int64_t layer;
} ffn_sink;

static dt_tensor *ffn_sink_add(void *self, const char *name, int ndim, const int64_t *shape, int is_matrix,
                               model_init_kind init) {
    ffn_sink *s = self;
    return param(s->b, s->group, is_matrix ? MATRIX : PLAIN, init, ndim, shape, s->prefix, s->layer, name);
}

/* The FFN weights of one layer, as its kind declares them. */
static void add_ffn(builder *b, model_block_weights *w, model_param_group group, const char *prefix, int64_t l) {
    if (b->failed) return;
    const model_layer_arch *la = &b->m->arch.layers[l];
    ffn_sink s = {b, group, prefix, l};
    const model_param_sink sink = {&s, ffn_sink_add};
    if (la->ffn->declare(&b->m->arch, la, &sink, w->ffn) != DT_OK) b->failed = 1;
}

/* Floats between consecutive parameters' starts: each parameter begins on a
 * 64-byte line, as a tensor of its own would. */
static int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

/* llm.c's layout: every parameter's weights in one allocation and every
 * gradient in another, in SPEC §3 order at the same offsets, the tensors
 * views into them; the optimizer and an allreduce then see one array each. */
static dt_status alloc_flat(model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += padded(m->params[i].tensor->size);
    const size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    void *data = NULL, *grad = NULL;
    if (posix_memalign(&data, DT_ARENA_ALIGN, bytes) != 0 || posix_memalign(&grad, DT_ARENA_ALIGN, bytes) != 0) {
        free(data);
        return dt_errorf("model: out of memory for %lld parameters and their gradients", (long long)n);
    }
    memset(data, 0, bytes);
    memset(grad, 0, bytes);
    m->params_memory = data;
    m->grads_memory = grad;
    m->n_floats = n;
    int64_t offset = 0;
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        t->data = m->params_memory + offset;
        t->grad = m->grads_memory + offset;
        offset += padded(t->size);
    }
    return DT_OK;
}

dt_status model_enable_bf16(model *m) {
    if (m->bf16_memory) {
        model_refresh_bf16(m);
        return DT_OK;
    }
    void *copy = NULL;
    if (posix_memalign(&copy, DT_ARENA_ALIGN, (size_t)(m->n_floats > 0 ? m->n_floats : 1) * sizeof(uint16_t)) != 0)
        return dt_errorf("model: out of memory for the bf16 copies of %lld weights", (long long)m->n_floats);
    m->bf16_memory = copy;
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        t->bf16 = m->bf16_memory + (dt_f32(t) - m->params_memory);
    }
    model_refresh_bf16(m);
    return DT_OK;
}

void model_refresh_bf16(model *m) {
    if (m->bf16_memory) k_bf16_round(m->bf16_memory, m->params_memory, m->n_floats);
}

dt_status model_create(model *m, const model_config *config) {
    memset(m, 0, sizeof *m);
    model_config c = *config;
    if (model_config_validate(&c) != DT_OK) return DT_ERR;
    m->config = c;
    if (model_arch_build(&m->arch, &c) != DT_OK) return DT_ERR;
    const model_arch *a = &m->arch;

    const int64_t C = a->C, V = a->V, L = a->L;
    const int capacity = max_params(&c);
    m->params = calloc((size_t)capacity, sizeof *m->params);
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->params || !m->layers) {
        model_free(m);
        return dt_errorf("model: out of memory for %d parameter records", capacity);
    }
    builder b = {m, capacity, 0};

    /* Primary path, SPEC §3 order. */
    m->tok_emb = param(&b, PARAM_PRIMARY, EMBEDDING, MODEL_INIT_NORMAL, DT_SHAPE(V, C), "", -1, "tok_emb.weight");
    /* The capacity control (tok_emb_tables = 2, not in SPEC §3): a second
     * table summed at the input, starting at zero so the input starts as the
     * baseline's, bit for bit at the same seed (a zero fill draws nothing, so
     * every other tensor starts as the baseline's too; docs/DECISIONS.md). */
    if (a->tok_emb_tables == 2)
        m->tok_emb2 = param(&b, PARAM_PRIMARY, EMBEDDING, MODEL_INIT_ZERO, DT_SHAPE(V, C), "", -1, "tok_emb2.weight");
    if (a->position->learned_table)
        m->pos_emb =
            param(&b, PARAM_PRIMARY, EMBEDDING, MODEL_INIT_NORMAL, DT_SHAPE(a->T_max, C), "", -1, "pos_emb.weight");
    for (int64_t l = 0; l < L; l++) {
        model_layer *layer = &m->layers[l];
        add_norm(&b, &layer->attn_norm, &layer->attn_norm_bias, l, "attn_norm");
        add_attention(&b, &layer->primary, PARAM_PRIMARY, "", l, 1);
        add_norm(&b, &layer->ffn_norm, &layer->ffn_norm_bias, l, "ffn_norm");
        add_ffn(&b, &layer->primary, PARAM_PRIMARY, "", l);
        if (a->routed) { /* SPEC §6.3: queries start at zero (each route the mean of its sources), norms at one */
            layer->route_attn_query =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), "", l, "attn_res.attn_query");
            layer->route_attn_norm =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", l, "attn_res.attn_norm.weight");
            layer->route_ffn_query =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), "", l, "attn_res.ffn_query");
            layer->route_ffn_norm =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", l, "attn_res.ffn_norm.weight");
        }
        /* Without a branch, or with share = on, the branch applies the primary's weights. */
        layer->branch = layer->primary;
    }
    if (a->routed) {
        m->route_final_query =
            param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), "", -1, "attn_res.final_query");
        m->route_final_norm =
            param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", -1, "attn_res.final_norm.weight");
    }
    add_norm(&b, &m->final_norm, &m->final_norm_bias, -1, "final_norm");
    /* Tied: the head IS tok_emb (one tensor, one gradient), not a second parameter. */
    m->lm_head = a->tie_embeddings
                     ? m->tok_emb
                     : param(&b, PARAM_PRIMARY, EMBEDDING, MODEL_INIT_NORMAL, DT_SHAPE(V, C), "", -1, "lm_head.weight");

    /* DiscoLoop (SPEC §6.6): RMSNorm_d's weight, and the learned gate
     * (weight zero; the bias starts at logit(disco_alpha), model_init_weights). */
    if (a->disco) {
        m->disco_norm = param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", -1, "disco.norm.weight");
        if (a->disco_gate_learned) {
            m->disco_gate_weight =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), "", -1, "disco.gate.weight");
            m->disco_gate_bias =
                param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(1), "", -1, "disco.gate.bias");
        }
    }
    /* Latent feedback (SPEC §6.5): the fusion's two matrices and two RMSNorm weights. */
    if (c.feedback) {
        m->feedback_w_u =
            param(&b, PARAM_PRIMARY, MATRIX, MODEL_INIT_NORMAL, DT_SHAPE(C, C), "", -1, "feedback.w_u.weight");
        m->feedback_w_g =
            param(&b, PARAM_PRIMARY, MATRIX, MODEL_INIT_NORMAL, DT_SHAPE(C, C), "", -1, "feedback.w_g.weight");
        m->feedback_norm_tok =
            param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", -1, "feedback.norm_tok.weight");
        m->feedback_norm_in =
            param(&b, PARAM_PRIMARY, PLAIN, MODEL_INIT_ONE, DT_SHAPE(C), "", -1, "feedback.norm_in.weight");
    }

    /* Decode branch (SPEC §2): its embedding, the coupling vectors, and with share = off its own matrices. */
    if (a->has_branch) {
        m->branch_tok_emb = a->branch_own_emb ? param(&b, PARAM_BRANCH, EMBEDDING, MODEL_INIT_NORMAL, DT_SHAPE(V, C),
                                                      "", -1, "branch.tok_emb.weight")
                                              : m->tok_emb;
        for (int64_t l = 0; l < L; l++) {
            model_layer *layer = &m->layers[l];
            const model_layer_arch *la = &a->layers[l];
            /* Coupling starts off: the branch starts uncoupled (SPEC §2). */
            if (la->couple_q)
                layer->couple_q =
                    param(&b, PARAM_BRANCH, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(la->q_width), "", l, "branch.couple_q");
            if (la->couple_hidden)
                layer->couple_hidden =
                    param(&b, PARAM_BRANCH, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(la->d_ff), "", l, "branch.couple_hidden");
            if (la->couple_out)
                layer->couple_out =
                    param(&b, PARAM_BRANCH, PLAIN, MODEL_INIT_ZERO, DT_SHAPE(C), "", l, "branch.couple_out");
        }
        if (a->branch_own_weights) {
            for (int64_t l = 0; l < L; l++) {
                model_layer *layer = &m->layers[l];
                /* The branch never computes K/V (it reads the primary's cache): wk/wv stay the primary's. */
                add_attention(&b, &layer->branch, PARAM_BRANCH, "branch.", l, 0);
                add_ffn(&b, &layer->branch, PARAM_BRANCH, "branch.", l);
            }
        }
    }
    if (b.failed || alloc_flat(m) != DT_OK) {
        model_free(m);
        return DT_ERR;
    }

    if (a->position->rotary) {
        /* One [block_size, hd/2, 2] table per distinct head width, back to back. */
        size_t floats = 0;
        for (int64_t l = 0; l < L; l++) {
            int64_t first = 0;
            while (a->layers[first].head_dim != a->layers[l].head_dim)
                first++;
            if (first == l) floats += (size_t)a->T_max * (size_t)a->layers[l].head_dim;
        }
        m->rope_table = malloc(floats * sizeof *m->rope_table);
        if (!m->rope_table) {
            model_free(m);
            return dt_errorf("model: out of memory for the RoPE tables (%zu floats)", floats);
        }
        float *next = m->rope_table;
        for (int64_t l = 0; l < L; l++) {
            const int64_t hd = a->layers[l].head_dim;
            int64_t first = 0;
            while (a->layers[first].head_dim != hd)
                first++;
            if (first < l) {
                m->layers[l].rope_table = m->layers[first].rope_table;
                continue;
            }
            k_rope_table(next, a->T_max, hd, c.rope_theta);
            m->layers[l].rope_table = next;
            next += a->T_max * hd;
        }
    }
    return DT_OK;
}

void model_free(model *m) {
    if (!m) return;
    if (m->params)
        for (int i = 0; i < m->n_params; i++)
            dt_tensor_free(m->params[i].tensor);
    free(m->params);
    free(m->layers);
    free(m->rope_table);
    free(m->params_memory);
    free(m->grads_memory);
    free(m->bf16_memory);
    model_arch_free(&m->arch);
    memset(m, 0, sizeof *m);
}

/* Draws in parameter order, so a seed fixes every value; how each tensor
 * starts was decided where it was declared (model_param.init). Branch copies
 * under share = off are independent draws with the primary's distribution
 * (SPEC §2 says nothing; like branch.tok_emb, which SPEC §2 does fix as an
 * independent draw), not copies: a copy would start both paths identical and
 * make share = off look like share = on at step 0, which is not the
 * ablation's question. Residual projections (MODEL_INIT_RESIDUAL) are scaled
 * by 1/sqrt(2 n_layer) as in GPT-2, so the stream's variance does not grow
 * with depth. */
void model_init_weights(model *m, dt_rng *rng) {
    const float std = 0.02f;
    const float residual_std = (float)(0.02 / sqrt(2.0 * (double)m->config.n_layer));
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        float *x = dt_f32(t);
        switch (m->params[i].init) {
        case MODEL_INIT_ZERO:
            memset(x, 0, (size_t)t->size * sizeof *x);
            break;
        case MODEL_INIT_ONE:
            for (int64_t j = 0; j < t->size; j++)
                x[j] = 1.0f;
            break;
        case MODEL_INIT_RESIDUAL:
            dt_rng_fill_normal(rng, x, t->size, residual_std);
            break;
        case MODEL_INIT_NORMAL:
            dt_rng_fill_normal(rng, x, t->size, std);
            break;
        }
    }
    if (m->disco_gate_bias) { /* SPEC §6.6: the learned gate starts at disco_alpha */
        const double alpha = m->config.disco_alpha;
        dt_f32(m->disco_gate_bias)[0] = (float)log(alpha / (1.0 - alpha));
    }
}

model_param *model_find_param(const model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

void model_zero_grad(model *m) {
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        if (t->grad) memset(t->grad, 0, (size_t)t->size * sizeof *t->grad);
    }
}

int64_t model_param_count(const model *m, int group) {
    int64_t total = 0;
    for (int i = 0; i < m->n_params; i++)
        if (group < 0 || (int)m->params[i].group == group) total += m->params[i].tensor->size;
    return total;
}
