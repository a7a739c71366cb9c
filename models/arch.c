/* Builds the model description (arch.h) from a validated configuration: the
 * family's preset of choices, then every layer's shape and its coupling
 * points. Everything downstream (parameters, training forward, prefill,
 * decode step, costs) reads this record, so a choice is made here once. */
#include "models/arch.h"

#include <stdlib.h>
#include <string.h>

#include "models/ffn.h"
#include "models/norm_kinds.h"
#include "models/position_kinds.h"

/* SPEC §1's table, one row per family. */
static const model_family_preset presets[] = {
    [FAMILY_NANOGPT] = {"layernorm", "learned", "gelu_mlp", 1, 1},
    [FAMILY_LLAMA] = {"rmsnorm", "rope", "swiglu", 0, 0},
    [FAMILY_MOE] = {"rmsnorm", "rope", "moe", 0, 0},
};

const model_family_preset *model_family_preset_of(model_family family) {
    if ((int)family < 0 || (size_t)family >= sizeof presets / sizeof presets[0]) return NULL;
    return &presets[family];
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

dt_status model_arch_build(model_arch *arch, const model_config *c) {
    memset(arch, 0, sizeof *arch);
    const model_family_preset *preset = model_family_preset_of(c->family);
    if (!preset) return dt_errorf("family = %d has no preset", (int)c->family);
    arch->norm = model_norm_kind_find(preset->norm);
    arch->position = model_position_kind_find(c->alibi ? "alibi" : preset->position); /* SPEC §6.4 replaces it */
    const model_ffn_kind *ffn = model_ffn_kind_find(preset->ffn);
    if (!arch->norm || !arch->position || !ffn)
        return dt_errorf("family %s: a kind of its preset is missing from the tables", model_family_name(c->family));
    if (c->n_layer < 1 || c->n_head < 1 || c->n_kv_head < 1 || c->d_model % c->n_head)
        return dt_errorf("model description: config is not validated (n_layer %lld, n_head %lld)",
                         (long long)c->n_layer, (long long)c->n_head);

    arch->C = c->d_model;
    arch->V = c->vocab_size;
    arch->L = c->n_layer;
    arch->T_max = c->block_size;
    arch->linear_bias = preset->linear_bias;
    arch->tie_embeddings = c->tie_embeddings;
    arch->norm_eps = (float)c->norm_eps;
    arch->rope_theta = c->rope_theta;
    arch->has_branch = c->branch == BRANCH_DECODE;
    arch->branch_own_emb = arch->has_branch && c->branch_emb == BRANCH_EMB_OWN;
    arch->tok_emb_tables = (int)c->tok_emb_tables;
    arch->tok_emb2_layer = c->tok_emb2_layer;
    arch->branch_own_weights = arch->has_branch && !c->share;
    if (ffn->is_moe) {
        arch->n_expert = c->n_expert;
        arch->top_k = c->top_k;
        arch->top_k_branch = c->top_k_branch;
    }

    /* The ffn key: the family's kind (default); a product FFN of SPEC §6.1,
     * which replaces every dense FFN (the "product" kind) and every MoE
     * expert (the "moe" kind with product experts); or any other word names
     * an FFN kind of the table (models/ffn_kinds.c) for dense layers. */
    int product_degree = 0;
    if (c->ffn != FFN_DEFAULT) {
        char word[32];
        if (model_config_get(c, "ffn", word, sizeof word) != DT_OK) return DT_ERR;
        static const struct {
            const char *word;
            int degree;
        } products[] = {{"triplu", 3}, {"prod2", 2}, {"prod4", 4}};
        for (size_t i = 0; i < sizeof products / sizeof products[0]; i++)
            if (!strcmp(word, products[i].word)) product_degree = products[i].degree;
        if (!product_degree && ffn->is_moe)
            return dt_errorf("ffn = %s: MoE experts are SwiGLU or products (SPEC §6.1)", word);
        if (!ffn->is_moe) ffn = model_ffn_kind_find(product_degree ? "product" : word);
        if (!ffn) return dt_errorf("ffn = %s: no such FFN kind in the table (models/ffn_kinds.c)", word);
    }

    if (c->attn_res != ATTN_RES_OFF) { /* full = one block per sublayer */
        arch->routed = 1;
        arch->route_heads = c->attn_res_heads;
        arch->route_blocks = c->attn_res == ATTN_RES_FULL ? 2 * c->n_layer : c->attn_res_blocks;
        arch->route_per_block = 2 * c->n_layer / arch->route_blocks;
    }

    arch->n_loop = c->n_loop;
    arch->disco = c->disco;
    if (c->disco) { /* disco_top = 0, or above V, keeps every entry */
        arch->disco_gate_learned = c->disco_gate == DISCO_GATE_LEARNED;
        arch->disco_top = c->disco_top == 0 || c->disco_top > c->vocab_size ? c->vocab_size : c->disco_top;
        arch->disco_tau = c->disco_tau;
        arch->disco_alpha = c->disco_alpha;
    }
    arch->recurrent = c->recurrent;

    arch->layers = calloc((size_t)arch->L, sizeof *arch->layers);
    if (!arch->layers) return dt_errorf("model description: out of memory for %lld layers", (long long)arch->L);
    const int coupled = arch->has_branch && c->couple;
    const char *layer_heads = c->layer_heads; /* SPEC §6.2: "h0,h1,..." (validated), or "" */
    for (int64_t l = 0; l < arch->L; l++) {
        model_layer_arch *layer = &arch->layers[l];
        layer->n_head = c->n_head;
        if (layer_heads[0]) {
            char *end = NULL;
            layer->n_head = strtoll(layer_heads, &end, 10);
            layer_heads = end + (*end == ',');
        }
        /* the GQA ratio n_head / n_kv_head is kept in every layer */
        layer->n_kv_head = layer->n_head * c->n_kv_head / c->n_head;
        layer->head_dim = c->d_model / layer->n_head;
        layer->product_degree = product_degree;
        layer->prod_norm = c->ffn_prod_norm;
        layer->q_width = layer->n_head * layer->head_dim;
        layer->kv_width = layer->n_kv_head * layer->head_dim;
        layer->d_ff = c->d_ff;
        layer->ffn = ffn;
        layer->couple_q = coupled;
        layer->couple_hidden = coupled && ffn->has_hidden;
        layer->couple_out = coupled;
        arch->max_q_width = max64(arch->max_q_width, layer->q_width);
        arch->max_kv_width = max64(arch->max_kv_width, layer->kv_width);
        arch->max_d_ff = max64(arch->max_d_ff, layer->d_ff);
        arch->max_head_dim = max64(arch->max_head_dim, layer->head_dim);
        arch->max_n_head = max64(arch->max_n_head, layer->n_head);
        arch->max_n_kv_head = max64(arch->max_n_kv_head, layer->n_kv_head);
    }
    if (arch->position->head_slopes) { /* one slope per query head of each layer (H_l: SPEC §6.2) */
        int64_t n = 0;
        for (int64_t l = 0; l < arch->L; l++)
            n += arch->layers[l].n_head;
        arch->slopes_memory = malloc((size_t)n * sizeof *arch->slopes_memory);
        if (!arch->slopes_memory) {
            model_arch_free(arch);
            return dt_errorf("model description: out of memory for %lld slopes", (long long)n);
        }
        float *next = arch->slopes_memory;
        for (int64_t l = 0; l < arch->L; l++) {
            arch->position->head_slopes(next, arch->layers[l].n_head);
            arch->layers[l].score_slopes = next;
            next += arch->layers[l].n_head;
        }
    }
    return DT_OK;
}

void model_arch_free(model_arch *arch) {
    if (!arch) return;
    free(arch->layers);
    free(arch->slopes_memory);
    memset(arch, 0, sizeof *arch);
}
