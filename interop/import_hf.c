/* HF import (see import.h): config.json -> model_config, model.safetensors ->
 * the primary parameters, branch.safetensors -> the branch parameters. */
#include "interop/import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "interop/file_util.h"
#include "interop/json.h"
#include "interop/name_map.h"
#include "interop/safetensors.h"

/* config.json keys: read an integer, a real, a bool or a string, each an error naming the key when mistyped. */
typedef struct {
    const char *path;
    const json_value *root;
} config_reader;

static const json_value *key_value(const config_reader *r, const char *key, int required) {
    const json_value *v = json_get(r->root, key);
    if (v && v->type == JSON_NULL) v = NULL;
    if (!v && required) dt_errorf("%s: missing key '%s'", r->path, key);
    return v;
}

/* Sets dbranch key `ours` from JSON key `theirs` (absent and not required: the fallback text, or left as is). */
static dt_status set_from(const config_reader *r, model_config *c, const char *ours, const char *theirs, int required,
                          const char *fallback) {
    const json_value *v = key_value(r, theirs, required && !fallback);
    char text[64];
    if (!v) {
        if (!fallback) return required ? DT_ERR : DT_OK;
        snprintf(text, sizeof text, "%s", fallback);
    } else if (v->type == JSON_NUMBER && v->number_is_integer) {
        snprintf(text, sizeof text, "%lld", (long long)v->integer);
    } else if (v->type == JSON_NUMBER) {
        snprintf(text, sizeof text, "%.17g", v->number);
    } else if (v->type == JSON_BOOL) {
        snprintf(text, sizeof text, "%d", v->boolean);
    } else {
        return dt_errorf("%s: key '%s' is not a number", r->path, theirs);
    }
    if (model_config_set(c, ours, text) != DT_OK) return dt_error_context("%s: key '%s'", r->path, theirs);
    return DT_OK;
}

static dt_status expect_word(const config_reader *r, const char *key, const char *const *allowed, int n_allowed) {
    const json_value *v = key_value(r, key, 0);
    if (!v) return DT_OK; /* the class default is the one dbranch computes */
    if (v->type == JSON_STRING)
        for (int i = 0; i < n_allowed; i++)
            if (!strcmp(v->string, allowed[i])) return DT_OK;
    return dt_errorf("%s: key '%s' = %s is not what dbranch computes (%s)", r->path, key,
                     v->type == JSON_STRING ? v->string : "(not a string)", allowed[0]);
}

static dt_status expect_false(const config_reader *r, const char *key, const char *why) {
    const json_value *v = key_value(r, key, 0);
    if (v && !(v->type == JSON_BOOL && !v->boolean))
        return dt_errorf("%s: key '%s' must be false (%s)", r->path, key, why);
    return DT_OK;
}

static dt_status config_from_json(const config_reader *r, model_config *c) {
    const json_value *arch = key_value(r, "architectures", 0), *type = key_value(r, "model_type", 0);
    const char *name = arch && arch->type == JSON_ARRAY && arch->length == 1 && arch->items[0].type == JSON_STRING
                           ? arch->items[0].string
                           : NULL;
    const char *model_type = type && type->type == JSON_STRING ? type->string : NULL;
    int gpt2 = (name && !strcmp(name, "GPT2LMHeadModel")) || (!name && model_type && !strcmp(model_type, "gpt2"));
    int llama = (name && !strcmp(name, "LlamaForCausalLM")) || (!name && model_type && !strcmp(model_type, "llama"));
    int moe = (name && !strcmp(name, "MixtralForCausalLM")) || (!name && model_type && !strcmp(model_type, "mixtral"));
    if (!gpt2 && !llama && !moe)
        return dt_errorf("%s: architectures = %s is not GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM",
                         r->path,
                         name         ? name
                         : model_type ? model_type
                                      : "(absent)");
    *c = model_config_default(gpt2 ? FAMILY_NANOGPT : llama ? FAMILY_LLAMA : FAMILY_MOE);
    if (gpt2) {
        static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh"};
        if (expect_word(r, "activation_function", gelu, 2) != DT_OK ||
            set_from(r, c, "vocab_size", "vocab_size", 1, NULL) != DT_OK ||
            set_from(r, c, "block_size", "n_positions", 1, NULL) != DT_OK ||
            set_from(r, c, "d_model", "n_embd", 1, NULL) != DT_OK ||
            set_from(r, c, "n_layer", "n_layer", 1, NULL) != DT_OK ||
            set_from(r, c, "n_head", "n_head", 1, NULL) != DT_OK ||
            set_from(r, c, "d_ff", "n_inner", 0, NULL) != DT_OK ||
            set_from(r, c, "norm_eps", "layer_norm_epsilon", 0, "1e-5") != DT_OK ||
            set_from(r, c, "tie_embeddings", "tie_word_embeddings", 0, "1") != DT_OK)
            return DT_ERR;
        if (c->d_ff && c->d_ff != 4 * c->d_model)
            return dt_errorf("%s: n_inner = %lld: the nanogpt family's MLP is 4 * n_embd = %lld wide", r->path,
                             (long long)c->d_ff, (long long)(4 * c->d_model));
    } else {
        static const char *const silu[] = {"silu"};
        if (expect_word(r, "hidden_act", silu, 1) != DT_OK ||
            expect_false(r, "attention_bias", "the llama family has no attention biases") != DT_OK ||
            expect_false(r, "mlp_bias", "the llama family has no MLP biases") != DT_OK ||
            (moe && (set_from(r, c, "n_expert", "num_local_experts", 1, NULL) != DT_OK ||
                     set_from(r, c, "top_k", "num_experts_per_tok", 1, NULL) != DT_OK ||
                     set_from(r, c, "aux_loss_coef", "router_aux_loss_coef", 0, NULL) != DT_OK)) ||
            set_from(r, c, "vocab_size", "vocab_size", 1, NULL) != DT_OK ||
            set_from(r, c, "block_size", "max_position_embeddings", 1, NULL) != DT_OK ||
            set_from(r, c, "d_model", "hidden_size", 1, NULL) != DT_OK ||
            set_from(r, c, "d_ff", "intermediate_size", 1, NULL) != DT_OK ||
            set_from(r, c, "n_layer", "num_hidden_layers", 1, NULL) != DT_OK ||
            set_from(r, c, "n_head", "num_attention_heads", 1, NULL) != DT_OK ||
            set_from(r, c, "n_kv_head", "num_key_value_heads", 0, NULL) != DT_OK ||
            set_from(r, c, "norm_eps", "rms_norm_eps", 0, "1e-6") != DT_OK ||
            set_from(r, c, "rope_theta", "rope_theta", 0, "10000") != DT_OK ||
            set_from(r, c, "tie_embeddings", "tie_word_embeddings", 0, "0") != DT_OK)
            return DT_ERR;
        if (moe && key_value(r, "sliding_window", 0))
            return dt_errorf("%s: key 'sliding_window' is set (dbranch's attention is full causal)", r->path);
        if (key_value(r, "rope_scaling", 0))
            return dt_errorf("%s: key 'rope_scaling' is set (dbranch's RoPE has no scaling)", r->path);
        const json_value *hd = key_value(r, "head_dim", 0);
        if (hd && !(hd->type == JSON_NUMBER && hd->number_is_integer && c->n_head > 0 &&
                    hd->integer * c->n_head == c->d_model))
            return dt_errorf("%s: key 'head_dim' must be hidden_size / num_attention_heads", r->path);
    }
    if (model_config_validate(c) != DT_OK) return dt_error_context("%s", r->path);
    return DT_OK;
}

dt_status interop_hf_read_config(const char *path, model_config *config) {
    unsigned char *bytes = NULL;
    size_t n = 0;
    if (interop_read_file(path, &bytes, &n) != DT_OK) return DT_ERR;
    json_value root;
    dt_status status = json_parse((const char *)bytes, n, &root);
    free(bytes);
    if (status != DT_OK) return dt_error_context("%s", path);
    config_reader r = {path, &root};
    status = root.type == JSON_OBJECT ? config_from_json(&r, config) : dt_errorf("%s: not a JSON object", path);
    json_free(&root);
    return status;
}

/* The tensors of one safetensors file, each to be used exactly once. */
typedef struct {
    const char *path;
    interop_safetensors file;
    char *used; /* [file.tensors.count] */
} tensor_source;

static const interop_tensor *fetch(void *context, const char *name) {
    tensor_source *s = context;
    /* transformers saves GPT-2 from its base model too, without the "transformer." prefix (the hub's gpt2 files). */
    const char *bare = !strncmp(name, "transformer.", 12) ? name + 12 : NULL;
    for (int pass = 0; pass < (bare ? 2 : 1); pass++)
        for (int i = 0; i < s->file.tensors.count; i++)
            if (!strcmp(s->file.tensors.items[i].name, pass ? bare : name)) {
                s->used[i] = 1;
                return &s->file.tensors.items[i];
            }
    dt_errorf("%s: missing tensor '%s'", s->path, name);
    return NULL;
}

/* A tensor the walk did not use: GPT-2 files from transformers carry the
 * causal-mask buffers (attn.bias, attn.masked_bias), and some tied files the
 * head; everything else is an error (a weight dbranch would silently drop). */
static dt_status check_all_used(const tensor_source *s, const model *m) {
    for (int i = 0; i < s->file.tensors.count; i++) {
        if (s->used[i]) continue;
        const char *name = s->file.tensors.items[i].name;
        size_t n = strlen(name);
        int mask =
            n > 10 && (!strcmp(name + n - 10, ".attn.bias") || (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias")));
        if (m->config.family == FAMILY_NANOGPT && mask) continue;
        if (m->config.tie_embeddings && !strcmp(name, "lm_head.weight")) continue;
        return dt_errorf("%s: unexpected tensor '%s' (not a parameter of this model's config)", s->path, name);
    }
    return DT_OK;
}

static dt_status open_source(tensor_source *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    if (interop_safetensors_read(path, &s->file) != DT_OK) return DT_ERR;
    s->used = calloc((size_t)s->file.tensors.count + 1, 1);
    if (!s->used) {
        interop_safetensors_free(&s->file);
        return dt_errorf("%s: out of memory", path);
    }
    return DT_OK;
}

static void close_source(tensor_source *s) {
    interop_safetensors_free(&s->file);
    free(s->used);
}

/* The branch file's config: every "dbranch.<key>" of its metadata over *c. */
static dt_status config_from_branch(const tensor_source *s, model_config *c) {
    for (int i = 0; i < model_config_key_count(); i++) {
        char key[96];
        snprintf(key, sizeof key, "dbranch.%s", model_config_key(i));
        const char *value = interop_safetensors_metadata(&s->file, key);
        if (!value) return dt_errorf("%s: __metadata__ has no '%s'", s->path, key);
        if (model_config_set(c, model_config_key(i), value) != DT_OK) return dt_error_context("%s: %s", s->path, key);
    }
    if (model_config_validate(c) != DT_OK) return dt_error_context("%s", s->path);
    return DT_OK;
}

dt_status interop_import_hf(model *m, const char *in_dir) {
    memset(m, 0, sizeof *m);
    char config_path[4200], weights_path[4200], branch_path[4200];
    snprintf(config_path, sizeof config_path, "%s/config.json", in_dir);
    snprintf(weights_path, sizeof weights_path, "%s/model.safetensors", in_dir);
    snprintf(branch_path, sizeof branch_path, "%s/branch.safetensors", in_dir);
    model_config config;
    if (interop_hf_read_config(config_path, &config) != DT_OK) return DT_ERR;
    struct stat st;
    const int has_branch = stat(branch_path, &st) == 0;
    tensor_source branch = {0};
    if (has_branch) {
        model_config hf = config;
        if (open_source(&branch, branch_path) != DT_OK) return DT_ERR;
        if (config_from_branch(&branch, &config) != DT_OK) {
            close_source(&branch);
            return DT_ERR;
        }
        /* The side file belongs to this model: the shapes config.json gives must agree. */
        if (config.family != hf.family || config.vocab_size != hf.vocab_size || config.d_model != hf.d_model ||
            config.n_layer != hf.n_layer || config.n_head != hf.n_head || config.n_kv_head != hf.n_kv_head ||
            config.d_ff != hf.d_ff || config.block_size != hf.block_size ||
            config.tie_embeddings != hf.tie_embeddings) {
            close_source(&branch);
            return dt_errorf("%s: its dbranch config does not match %s", branch_path, config_path);
        }
    }
    dt_status status = model_create(m, &config);
    if (status != DT_OK) dt_error_context("%s", config_path);
    tensor_source weights = {0};
    int weights_open = 0;
    char index_path[4300];
    snprintf(index_path, sizeof index_path, "%s.index.json", weights_path);
    if (status == DT_OK && stat(weights_path, &st) != 0 && stat(index_path, &st) == 0)
        status = dt_errorf("%s: sharded checkpoints are not supported (merge the shards into one %s)", index_path,
                           weights_path);
    if (status == DT_OK) status = open_source(&weights, weights_path), weights_open = status == DT_OK;
    if (status == DT_OK) status = interop_map_import(m, interop_map_for(MAP_HF, config.family), fetch, &weights);
    if (status != DT_OK && weights_open && strncmp(dt_error_message(), weights_path, strlen(weights_path)))
        dt_error_context("%s", weights_path); /* a shape error names the tensor, not yet the file */
    if (status == DT_OK) status = check_all_used(&weights, m);
    /* Branch tensors under their SPEC names. */
    for (int i = 0; has_branch && status == DT_OK && i < m->n_params; i++) {
        if (m->params[i].group != PARAM_BRANCH) continue;
        const interop_tensor *t = fetch(&branch, m->params[i].name);
        const dt_tensor *p = m->params[i].tensor;
        if (!t) {
            status = DT_ERR;
            break;
        }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = t->shape[d] == p->shape[d];
        if (!same)
            status = dt_errorf("%s: tensor '%s' does not have the shape the config gives", branch_path, t->name);
        else
            memcpy(p->data, t->data, (size_t)p->size * sizeof(float));
    }
    if (has_branch && status == DT_OK) status = check_all_used(&branch, m);
    if (weights_open) close_source(&weights);
    if (has_branch) close_source(&branch);
    if (status != DT_OK && m->params) model_free(m);
    return status;
}
