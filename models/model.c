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

#include "kernels/rope.h"

/* Marks for add_param: what the optimizer and the init need to know. */
enum { PLAIN = 0, MATRIX = 1, EMBEDDING = 2 };

/* Upper bound of the parameter count: 6 model-level tensors, and per layer
 * 4 norm tensors, 8 attention tensors, 4 FFN tensors, 3 coupling vectors and
 * 8 branch copies (share = off). */
static int max_params(const model_config *c) { return 8 + 32 * (int)c->n_layer; }

/* Appends a parameter (its header; alloc_flat gives it memory). The name is formatted. */
static dt_tensor *add_param(model *m, int capacity, model_param_group group, int marks, int ndim,
                            const int64_t *shape, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static dt_tensor *add_param(model *m, int capacity, model_param_group group, int marks, int ndim,
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

static dt_tensor *param(builder *b, model_param_group group, int marks, int ndim, const int64_t *shape,
                        const char *prefix, int64_t layer, const char *name) {
    if (b->failed) return NULL;
    dt_tensor *t = layer >= 0 ? add_param(b->m, b->capacity, group, marks, ndim, shape, "%slayers.%lld.%s", prefix,
                                          (long long)layer, name)
                              : add_param(b->m, b->capacity, group, marks, ndim, shape, "%s%s", prefix, name);
    if (!t) b->failed = 1;
    return t;
}

/* attn.wq and attn.wo (+ biases for nanogpt); with_kv adds wk and wv between them (SPEC order). */
static void add_attention(builder *b, model_block_weights *w, model_param_group group, const char *prefix,
                          int64_t l, int with_kv) {
    const model_config *c = &b->m->config;
    const int64_t C = c->d_model, hd = model_head_dim(c), q_width = c->n_head * hd, kv_width = c->n_kv_head * hd;
    const int biases = c->family == FAMILY_NANOGPT;
    w->wq = param(b, group, MATRIX, DT_SHAPE(q_width, C), prefix, l, "attn.wq.weight");
    if (biases) w->wq_bias = param(b, group, PLAIN, DT_SHAPE(q_width), prefix, l, "attn.wq.bias");
    if (with_kv) {
        w->wk = param(b, group, MATRIX, DT_SHAPE(kv_width, C), prefix, l, "attn.wk.weight");
        if (biases) w->wk_bias = param(b, group, PLAIN, DT_SHAPE(kv_width), prefix, l, "attn.wk.bias");
        w->wv = param(b, group, MATRIX, DT_SHAPE(kv_width, C), prefix, l, "attn.wv.weight");
        if (biases) w->wv_bias = param(b, group, PLAIN, DT_SHAPE(kv_width), prefix, l, "attn.wv.bias");
    }
    w->wo = param(b, group, MATRIX, DT_SHAPE(C, q_width), prefix, l, "attn.wo.weight");
    if (biases) w->wo_bias = param(b, group, PLAIN, DT_SHAPE(C), prefix, l, "attn.wo.bias");
}

/* The FFN weights of one layer: mlp.fc/proj (nanogpt), mlp.w1/w3/w2 (llama), moe.router + experts. */
static void add_ffn(builder *b, model_block_weights *w, model_param_group group, const char *prefix, int64_t l) {
    const model_config *c = &b->m->config;
    const int64_t C = c->d_model, F = c->d_ff, E = c->n_expert;
    switch (c->family) {
    case FAMILY_NANOGPT:
        w->fc = param(b, group, MATRIX, DT_SHAPE(F, C), prefix, l, "mlp.fc.weight");
        w->fc_bias = param(b, group, PLAIN, DT_SHAPE(F), prefix, l, "mlp.fc.bias");
        w->proj = param(b, group, MATRIX, DT_SHAPE(C, F), prefix, l, "mlp.proj.weight");
        w->proj_bias = param(b, group, PLAIN, DT_SHAPE(C), prefix, l, "mlp.proj.bias");
        break;
    case FAMILY_LLAMA:
        w->w1 = param(b, group, MATRIX, DT_SHAPE(F, C), prefix, l, "mlp.w1.weight");
        w->w3 = param(b, group, MATRIX, DT_SHAPE(F, C), prefix, l, "mlp.w3.weight");
        w->w2 = param(b, group, MATRIX, DT_SHAPE(C, F), prefix, l, "mlp.w2.weight");
        break;
    case FAMILY_MOE:
        w->router = param(b, group, MATRIX, DT_SHAPE(E, C), prefix, l, "moe.router.weight");
        w->w1 = param(b, group, MATRIX, DT_SHAPE(E, F, C), prefix, l, "moe.w1.weight");
        w->w3 = param(b, group, MATRIX, DT_SHAPE(E, F, C), prefix, l, "moe.w3.weight");
        w->w2 = param(b, group, MATRIX, DT_SHAPE(E, C, F), prefix, l, "moe.w2.weight");
        break;
    }
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

dt_status model_create(model *m, const model_config *config) {
    memset(m, 0, sizeof *m);
    model_config c = *config;
    if (model_config_validate(&c) != DT_OK) return DT_ERR;
    m->config = c;

    const int64_t C = c.d_model, V = c.vocab_size, L = c.n_layer, hd = model_head_dim(&c);
    const int nanogpt = c.family == FAMILY_NANOGPT, has_branch = c.branch == BRANCH_DECODE;
    const int capacity = max_params(&c);
    m->params = calloc((size_t)capacity, sizeof *m->params);
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->params || !m->layers) {
        model_free(m);
        return dt_errorf("model: out of memory for %d parameter records", capacity);
    }
    builder b = {m, capacity, 0};

    /* Primary path, SPEC §3 order. */
    m->tok_emb = param(&b, PARAM_PRIMARY, EMBEDDING, DT_SHAPE(V, C), "", -1, "tok_emb.weight");
    if (nanogpt) m->pos_emb = param(&b, PARAM_PRIMARY, EMBEDDING, DT_SHAPE(c.block_size, C), "", -1, "pos_emb.weight");
    for (int64_t l = 0; l < L; l++) {
        model_layer *layer = &m->layers[l];
        layer->attn_norm = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", l, "attn_norm.weight");
        if (nanogpt) layer->attn_norm_bias = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", l, "attn_norm.bias");
        add_attention(&b, &layer->primary, PARAM_PRIMARY, "", l, 1);
        layer->ffn_norm = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", l, "ffn_norm.weight");
        if (nanogpt) layer->ffn_norm_bias = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", l, "ffn_norm.bias");
        add_ffn(&b, &layer->primary, PARAM_PRIMARY, "", l);
        /* Without a branch, or with share = on, the branch applies the primary's weights. */
        layer->branch = layer->primary;
    }
    m->final_norm = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", -1, "final_norm.weight");
    if (nanogpt) m->final_norm_bias = param(&b, PARAM_PRIMARY, PLAIN, DT_SHAPE(C), "", -1, "final_norm.bias");
    /* Tied: the head IS tok_emb (one tensor, one gradient), not a second parameter. */
    m->lm_head = c.tie_embeddings ? m->tok_emb : param(&b, PARAM_PRIMARY, EMBEDDING, DT_SHAPE(V, C), "", -1, "lm_head.weight");

    /* Decode branch (SPEC §2): its embedding, the coupling vectors, and with share = off its own matrices. */
    if (has_branch) {
        m->branch_tok_emb = c.branch_emb == BRANCH_EMB_SHARED
                                ? m->tok_emb
                                : param(&b, PARAM_BRANCH, EMBEDDING, DT_SHAPE(V, C), "", -1, "branch.tok_emb.weight");
        if (c.couple) {
            for (int64_t l = 0; l < L; l++) {
                model_layer *layer = &m->layers[l];
                layer->couple_q = param(&b, PARAM_BRANCH, PLAIN, DT_SHAPE(c.n_head * hd), "", l, "branch.couple_q");
                if (c.family != FAMILY_MOE)
                    layer->couple_hidden = param(&b, PARAM_BRANCH, PLAIN, DT_SHAPE(c.d_ff), "", l, "branch.couple_hidden");
                layer->couple_out = param(&b, PARAM_BRANCH, PLAIN, DT_SHAPE(C), "", l, "branch.couple_out");
            }
        }
        if (!c.share) {
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

    if (c.family != FAMILY_NANOGPT) {
        size_t floats = (size_t)c.block_size * (size_t)hd; /* [block_size, hd/2, 2] */
        m->rope_table = malloc(floats * sizeof *m->rope_table);
        if (!m->rope_table) {
            model_free(m);
            return dt_errorf("model: out of memory for the RoPE table (%zu floats)", floats);
        }
        k_rope_table(m->rope_table, c.block_size, hd, c.rope_theta);
    }
    return DT_OK;
}

void model_free(model *m) {
    if (!m) return;
    if (m->params)
        for (int i = 0; i < m->n_params; i++) dt_tensor_free(m->params[i].tensor);
    free(m->params);
    free(m->layers);
    free(m->rope_table);
    free(m->params_memory);
    free(m->grads_memory);
    memset(m, 0, sizeof *m);
}

static int ends_with(const char *text, const char *suffix) {
    size_t n = strlen(text), k = strlen(suffix);
    return n >= k && !strcmp(text + n - k, suffix);
}

/* The projections that write into the residual stream: GPT-2 scales their
 * init by 1/sqrt(2 n_layer) so the stream's variance does not grow with depth. */
static int is_residual_projection(const char *name) {
    return ends_with(name, ".attn.wo.weight") || ends_with(name, ".mlp.proj.weight") ||
           ends_with(name, ".mlp.w2.weight") || ends_with(name, ".moe.w2.weight");
}

/* Draws in parameter order, so a seed fixes every value. Branch copies under
 * share = off are independent draws with the primary's distribution (SPEC §2
 * says nothing; like branch.tok_emb, which SPEC §2 does fix as an independent
 * draw), not copies: a copy would start both paths identical and make share =
 * off look like share = on at step 0, which is not the ablation's question. */
void model_init_weights(model *m, dt_rng *rng) {
    const float std = 0.02f;
    const float residual_std = (float)(0.02 / sqrt(2.0 * (double)m->config.n_layer));
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        dt_tensor *t = m->params[i].tensor;
        float *x = dt_f32(t);
        if (ends_with(name, ".bias") || strstr(name, ".branch.couple_")) {
            memset(x, 0, (size_t)t->size * sizeof *x); /* coupling starts off: the branch starts uncoupled */
        } else if (ends_with(name, "norm.weight")) {
            for (int64_t j = 0; j < t->size; j++) x[j] = 1.0f;
        } else {
            dt_rng_fill_normal(rng, x, t->size, is_residual_projection(name) ? residual_std : std);
        }
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
