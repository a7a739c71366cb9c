/* The name tables of HF (GPT2LMHeadModel, LlamaForCausalLM) and GGUF (gpt2,
 * llama), and the walk that applies one in either direction. */
#include "interop/name_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static const interop_map_entry hf_gpt2_globals[] = {
    {"transformer.wte.weight", "tok_emb.weight", MAP_SAME},
    {"transformer.wpe.weight", "pos_emb.weight", MAP_SAME},
    {"transformer.ln_f.weight", "final_norm.weight", MAP_SAME},
    {"transformer.ln_f.bias", "final_norm.bias", MAP_SAME},
    {"lm_head.weight", "lm_head.weight", MAP_SAME},
};
static const interop_map_entry hf_gpt2_layer[] = {
    {"transformer.h.%d.ln_1.weight", "layers.%d.attn_norm.weight", MAP_SAME},
    {"transformer.h.%d.ln_1.bias", "layers.%d.attn_norm.bias", MAP_SAME},
    {"transformer.h.%d.attn.c_attn.weight", "layers.%d.attn.w*.weight", MAP_QKV_T},
    {"transformer.h.%d.attn.c_attn.bias", "layers.%d.attn.w*.bias", MAP_QKV},
    {"transformer.h.%d.attn.c_proj.weight", "layers.%d.attn.wo.weight", MAP_TRANSPOSE},
    {"transformer.h.%d.attn.c_proj.bias", "layers.%d.attn.wo.bias", MAP_SAME},
    {"transformer.h.%d.ln_2.weight", "layers.%d.ffn_norm.weight", MAP_SAME},
    {"transformer.h.%d.ln_2.bias", "layers.%d.ffn_norm.bias", MAP_SAME},
    {"transformer.h.%d.mlp.c_fc.weight", "layers.%d.mlp.fc.weight", MAP_TRANSPOSE},
    {"transformer.h.%d.mlp.c_fc.bias", "layers.%d.mlp.fc.bias", MAP_SAME},
    {"transformer.h.%d.mlp.c_proj.weight", "layers.%d.mlp.proj.weight", MAP_TRANSPOSE},
    {"transformer.h.%d.mlp.c_proj.bias", "layers.%d.mlp.proj.bias", MAP_SAME},
};
static const interop_map_entry hf_llama_globals[] = {
    {"model.embed_tokens.weight", "tok_emb.weight", MAP_SAME},
    {"model.norm.weight", "final_norm.weight", MAP_SAME},
    {"lm_head.weight", "lm_head.weight", MAP_SAME},
};
/* The llama attention half of a block (with its norms), shared by llama and Mixtral. */
static const interop_map_entry hf_llama_attention[] = {
    {"model.layers.%d.input_layernorm.weight", "layers.%d.attn_norm.weight", MAP_SAME},
    {"model.layers.%d.self_attn.q_proj.weight", "layers.%d.attn.wq.weight", MAP_ROPE_Q},
    {"model.layers.%d.self_attn.k_proj.weight", "layers.%d.attn.wk.weight", MAP_ROPE_K},
    {"model.layers.%d.self_attn.v_proj.weight", "layers.%d.attn.wv.weight", MAP_SAME},
    {"model.layers.%d.self_attn.o_proj.weight", "layers.%d.attn.wo.weight", MAP_SAME},
    {"model.layers.%d.post_attention_layernorm.weight", "layers.%d.ffn_norm.weight", MAP_SAME},
};
static const interop_map_entry hf_llama_ffn[] = {
    {"model.layers.%d.mlp.gate_proj.weight", "layers.%d.mlp.w1.weight", MAP_SAME},
    {"model.layers.%d.mlp.up_proj.weight", "layers.%d.mlp.w3.weight", MAP_SAME},
    {"model.layers.%d.mlp.down_proj.weight", "layers.%d.mlp.w2.weight", MAP_SAME},
};
/* Mixtral: a router and E SwiGLU experts, one tensor per expert. */
static const interop_map_entry hf_mixtral_ffn[] = {
    {"model.layers.%d.block_sparse_moe.gate.weight", "layers.%d.moe.router.weight", MAP_SAME},
    {"model.layers.%d.block_sparse_moe.experts.%d.w1.weight", "layers.%d.moe.w1.weight", MAP_EXPERTS},
    {"model.layers.%d.block_sparse_moe.experts.%d.w3.weight", "layers.%d.moe.w3.weight", MAP_EXPERTS},
    {"model.layers.%d.block_sparse_moe.experts.%d.w2.weight", "layers.%d.moe.w2.weight", MAP_EXPERTS},
};
/* GGUF stores a [out, in] weight with ne = {in, out}: the same bytes as ours,
 * so nothing is transposed, and llama.cpp's llama architecture rotates
 * interleaved pairs like SPEC (its converter undoes HF's permutation). */
static const interop_map_entry gguf_gpt2_globals[] = {
    {"token_embd.weight", "tok_emb.weight", MAP_SAME},     {"position_embd.weight", "pos_emb.weight", MAP_SAME},
    {"output_norm.weight", "final_norm.weight", MAP_SAME}, {"output_norm.bias", "final_norm.bias", MAP_SAME},
    {"output.weight", "lm_head.weight", MAP_SAME},
};
static const interop_map_entry gguf_gpt2_layer[] = {
    {"blk.%d.attn_norm.weight", "layers.%d.attn_norm.weight", MAP_SAME},
    {"blk.%d.attn_norm.bias", "layers.%d.attn_norm.bias", MAP_SAME},
    {"blk.%d.attn_qkv.weight", "layers.%d.attn.w*.weight", MAP_QKV},
    {"blk.%d.attn_qkv.bias", "layers.%d.attn.w*.bias", MAP_QKV},
    {"blk.%d.attn_output.weight", "layers.%d.attn.wo.weight", MAP_SAME},
    {"blk.%d.attn_output.bias", "layers.%d.attn.wo.bias", MAP_SAME},
    {"blk.%d.ffn_norm.weight", "layers.%d.ffn_norm.weight", MAP_SAME},
    {"blk.%d.ffn_norm.bias", "layers.%d.ffn_norm.bias", MAP_SAME},
    {"blk.%d.ffn_up.weight", "layers.%d.mlp.fc.weight", MAP_SAME},
    {"blk.%d.ffn_up.bias", "layers.%d.mlp.fc.bias", MAP_SAME},
    {"blk.%d.ffn_down.weight", "layers.%d.mlp.proj.weight", MAP_SAME},
    {"blk.%d.ffn_down.bias", "layers.%d.mlp.proj.bias", MAP_SAME},
};
static const interop_map_entry gguf_llama_globals[] = {
    {"token_embd.weight", "tok_emb.weight", MAP_SAME},
    {"output_norm.weight", "final_norm.weight", MAP_SAME},
    {"output.weight", "lm_head.weight", MAP_SAME},
};
static const interop_map_entry gguf_llama_attention[] = {
    {"blk.%d.attn_norm.weight", "layers.%d.attn_norm.weight", MAP_SAME},
    {"blk.%d.attn_q.weight", "layers.%d.attn.wq.weight", MAP_SAME},
    {"blk.%d.attn_k.weight", "layers.%d.attn.wk.weight", MAP_SAME},
    {"blk.%d.attn_v.weight", "layers.%d.attn.wv.weight", MAP_SAME},
    {"blk.%d.attn_output.weight", "layers.%d.attn.wo.weight", MAP_SAME},
    {"blk.%d.ffn_norm.weight", "layers.%d.ffn_norm.weight", MAP_SAME},
};
static const interop_map_entry gguf_llama_ffn[] = {
    {"blk.%d.ffn_gate.weight", "layers.%d.mlp.w1.weight", MAP_SAME},
    {"blk.%d.ffn_up.weight", "layers.%d.mlp.w3.weight", MAP_SAME},
    {"blk.%d.ffn_down.weight", "layers.%d.mlp.w2.weight", MAP_SAME},
};
/* llama.cpp's llama architecture with experts: [E, F, C] is ne {C, F, E}, the same bytes. */
static const interop_map_entry gguf_moe_ffn[] = {
    {"blk.%d.ffn_gate_inp.weight", "layers.%d.moe.router.weight", MAP_SAME},
    {"blk.%d.ffn_gate_exps.weight", "layers.%d.moe.w1.weight", MAP_SAME},
    {"blk.%d.ffn_up_exps.weight", "layers.%d.moe.w3.weight", MAP_SAME},
    {"blk.%d.ffn_down_exps.weight", "layers.%d.moe.w2.weight", MAP_SAME},
};

#define TABLE(t) t, COUNT(t)
/* [format][family] in model_family order: nanogpt, llama, moe. */
static const interop_map maps[2][3] = {
    {{"HF GPT2LMHeadModel", TABLE(hf_gpt2_globals), TABLE(hf_gpt2_layer), NULL, 0},
     {"HF LlamaForCausalLM", TABLE(hf_llama_globals), TABLE(hf_llama_attention), TABLE(hf_llama_ffn)},
     {"HF MixtralForCausalLM", TABLE(hf_llama_globals), TABLE(hf_llama_attention), TABLE(hf_mixtral_ffn)}},
    {{"GGUF gpt2", TABLE(gguf_gpt2_globals), TABLE(gguf_gpt2_layer), NULL, 0},
     {"GGUF llama", TABLE(gguf_llama_globals), TABLE(gguf_llama_attention), TABLE(gguf_llama_ffn)},
     {"GGUF llama (experts)", TABLE(gguf_llama_globals), TABLE(gguf_llama_attention), TABLE(gguf_moe_ffn)}},
};
#undef TABLE

const interop_map *interop_map_for(interop_map_format format, model_family family) { return &maps[format][family]; }
/* One entry resolved for layer l (-1 for globals): its names and its parameters
 * (three for the q, k, v stacks, else one; NULL when the model lacks it). */
typedef struct {
    char theirs[128];
    char ours[3][128];
    model_param *params[3];
    int n_params;
} resolved_entry;

static void resolve(const model *m, const interop_map_entry *e, int layer, resolved_entry *r) {
    char pattern[128];
    if (e->kind == MAP_EXPERTS) /* formatted per expert by the caller */
        snprintf(r->theirs, sizeof r->theirs, "%s", e->theirs);
    else
        snprintf(r->theirs, sizeof r->theirs, e->theirs, layer);
    snprintf(pattern, sizeof pattern, e->ours, layer);
    r->n_params = e->kind == MAP_QKV || e->kind == MAP_QKV_T ? 3 : 1;
    for (int p = 0; p < r->n_params; p++) {
        snprintf(r->ours[p], sizeof r->ours[p], "%s", pattern);
        char *star = strchr(r->ours[p], '*');
        if (star) *star = "qkv"[p];
        r->params[p] = model_find_param(m, r->ours[p]);
    }
}

/* Applies fn to every entry of the map over the model's layers (layer passed for MAP_EXPERTS names). */
typedef dt_status (*entry_fn)(model *m, const interop_map_entry *e, resolved_entry *r, int layer, void *context);

static dt_status walk(const model *m, const interop_map *map, entry_fn fn, void *context) {
    /* part 0: the globals (layer -1); per layer, part 1 then part 2 (the FFN half, when split). */
    for (int l = -1; l < (int)m->config.n_layer; l++) {
        for (int part = l < 0 ? 0 : 1; part < (l < 0 ? 1 : 3); part++) {
            const interop_map_entry *entries = part == 0 ? map->globals : part == 1 ? map->layer : map->layer_ffn;
            const int n = part == 0 ? map->n_globals : part == 1 ? map->n_layer : map->n_layer_ffn;
            for (int i = 0; i < n; i++) {
                resolved_entry r;
                resolve(m, &entries[i], l, &r);
                if (!r.params[0]) continue; /* the model has no such parameter (lm_head when tied) */
                for (int p = 1; p < r.n_params; p++)
                    if (!r.params[p])
                        return dt_errorf("%s: the model has %s but not %s", map->format, r.ours[0], r.ours[p]);
                if (fn((model *)m, &entries[i], &r, l, context) != DT_OK) return DT_ERR;
            }
        }
    }
    return DT_OK;
}

typedef struct {
    interop_tensors *out;
    char *used; /* [n_params] */
} export_context;

static dt_status export_entry(model *m, const interop_map_entry *e, resolved_entry *r, int layer, void *context) {
    export_context *x = context;
    for (int p = 0; p < r->n_params; p++)
        x->used[r->params[p] - m->params] = 1;
    const dt_tensor *t = r->params[0]->tensor;
    switch (e->kind) {
    case MAP_SAME:
        return interop_add(x->out, r->theirs, t);
    case MAP_TRANSPOSE:
        return interop_add_transposed(x->out, r->theirs, t);
    case MAP_ROPE_Q:
        return interop_add_half_split(x->out, r->theirs, t, m->config.n_head);
    case MAP_ROPE_K:
        return interop_add_half_split(x->out, r->theirs, t, m->config.n_kv_head);
    case MAP_QKV:
    case MAP_QKV_T: {
        const dt_tensor *parts[3] = {r->params[0]->tensor, r->params[1]->tensor, r->params[2]->tensor};
        return interop_add_concat(x->out, r->theirs, parts, 3, e->kind == MAP_QKV_T);
    }
    case MAP_EXPERTS: {
        const int64_t per_expert = t->size / t->shape[0];
        for (int64_t expert = 0; expert < t->shape[0]; expert++) {
            char name[160];
            snprintf(name, sizeof name, e->theirs, layer, (int)expert);
            if (interop_add_view(x->out, name, dt_f32(t) + expert * per_expert, t->ndim - 1, t->shape + 1) != DT_OK)
                return DT_ERR;
        }
        return DT_OK;
    }
    }
    return dt_errorf("unknown map kind");
}

dt_status interop_map_export(const model *m, const interop_map *map, interop_tensors *out) {
    export_context x = {out, calloc((size_t)m->n_params, 1)};
    if (!x.used) return dt_errorf("out of memory");
    dt_status status = walk(m, map, export_entry, &x);
    for (int i = 0; i < m->n_params && status == DT_OK; i++)
        if (m->params[i].group == PARAM_PRIMARY && !x.used[i])
            status = dt_errorf("%s has no tensor for parameter '%s'", map->format, m->params[i].name);
    free(x.used);
    return status;
}

static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

typedef struct {
    interop_fetch_fn fetch;
    void *context;
} import_context;

/* Their tensor must have exactly this shape. */
static dt_status check_shape(const interop_tensor *src, int ndim, const int64_t *expected, const char *ours) {
    int same = src->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = src->shape[d] == expected[d];
    if (same) return DT_OK;
    char got[96], want[96];
    return dt_errorf("tensor '%s' has shape %s, expected %s (for %s)", src->name,
                     shape_text(src->ndim, src->shape, got, sizeof got), shape_text(ndim, expected, want, sizeof want),
                     ours);
}

static dt_status import_experts(const interop_map_entry *e, resolved_entry *r, int layer, import_context *x) {
    const dt_tensor *t = r->params[0]->tensor;
    const int64_t per_expert = t->size / t->shape[0];
    for (int64_t expert = 0; expert < t->shape[0]; expert++) {
        char name[160];
        snprintf(name, sizeof name, e->theirs, layer, (int)expert);
        const interop_tensor *src = x->fetch(x->context, name);
        if (!src || check_shape(src, t->ndim - 1, t->shape + 1, r->ours[0]) != DT_OK) return DT_ERR;
        memcpy(dt_f32(t) + expert * per_expert, src->data, (size_t)per_expert * sizeof(float));
    }
    return DT_OK;
}

static dt_status import_entry(model *m, const interop_map_entry *e, resolved_entry *r, int layer, void *context) {
    import_context *x = context;
    if (e->kind == MAP_EXPERTS) return import_experts(e, r, layer, x);
    const interop_tensor *src = x->fetch(x->context, r->theirs);
    if (!src) return DT_ERR;
    /* The shape the format's tensor must have. */
    const dt_tensor *t = r->params[0]->tensor;
    int64_t expected[DT_MAX_DIMS];
    int ndim = t->ndim;
    memcpy(expected, t->shape, sizeof expected);
    int64_t stacked = 0;
    for (int p = 0; p < r->n_params; p++)
        stacked += r->params[p]->tensor->shape[0];
    if (e->kind == MAP_QKV) expected[0] = stacked;
    if (e->kind == MAP_TRANSPOSE) expected[0] = t->shape[1], expected[1] = t->shape[0];
    if (e->kind == MAP_QKV_T) expected[0] = t->shape[1], expected[1] = stacked;
    if (check_shape(src, ndim, expected, r->ours[0]) != DT_OK) return DT_ERR;
    float *dst = dt_f32(t);
    switch (e->kind) {
    case MAP_SAME:
        memcpy(dst, src->data, (size_t)t->size * sizeof(float));
        break;
    case MAP_ROPE_Q:
    case MAP_ROPE_K:
        memcpy(dst, src->data, (size_t)t->size * sizeof(float));
        return interop_interleave_rows(dst, t->shape[0], t->shape[1],
                                       e->kind == MAP_ROPE_Q ? m->config.n_head : m->config.n_kv_head);
    case MAP_TRANSPOSE: { /* src [cols, rows] */
        const int64_t rows = t->shape[0], cols = t->shape[1];
        for (int64_t c = 0; c < cols; c++)
            for (int64_t rr = 0; rr < rows; rr++)
                dst[rr * cols + c] = src->data[c * rows + rr];
        break;
    }
    case MAP_EXPERTS:
        break; /* import_experts */
    case MAP_QKV:
    case MAP_QKV_T: {
        int64_t row0 = 0;
        for (int p = 0; p < r->n_params; p++) {
            const dt_tensor *part = r->params[p]->tensor;
            const int64_t rows = part->shape[0], inner = part->size / rows;
            float *out = dt_f32(part);
            if (e->kind == MAP_QKV)
                memcpy(out, src->data + row0 * inner, (size_t)part->size * sizeof(float));
            else /* src [inner, stacked] */
                for (int64_t rr = 0; rr < rows; rr++)
                    for (int64_t c = 0; c < inner; c++)
                        out[rr * inner + c] = src->data[c * stacked + row0 + rr];
            row0 += rows;
        }
        break;
    }
    }
    return DT_OK;
}

dt_status interop_map_import(model *m, const interop_map *map, interop_fetch_fn fetch, void *context) {
    import_context x = {fetch, context};
    return walk(m, map, import_entry, &x);
}
