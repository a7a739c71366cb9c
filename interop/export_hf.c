/* HuggingFace export: model.safetensors with the GPT2LMHeadModel,
 * LlamaForCausalLM or MixtralForCausalLM names (name_map.c), and the
 * config.json transformers builds that class from. */
#include <stdio.h>
#include <string.h>

#include "interop/export.h"
#include "interop/file_util.h"
#include "interop/name_map.h"
#include "interop/safetensors.h"

/* A real key as JSON text, in the shortest form that round-trips (model_config_get's). */
static void put_real(interop_buffer *b, const model_config *c, const char *json_key, const char *key) {
    char text[64];
    model_config_get(c, key, text, sizeof text);
    interop_buffer_printf(b, "  \"%s\": %s,\n", json_key, text);
}

static dt_status write_config_json(const model *m, const char *path) {
    const model_config *c = &m->config;
    interop_buffer b = {0};
    const long long V = c->vocab_size, T = c->block_size, L = c->n_layer, H = c->n_head, C = c->d_model;
    interop_buffer_printf(&b, "{\n");
    if (c->family == FAMILY_NANOGPT) {
        interop_buffer_printf(&b, "  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n");
        interop_buffer_printf(&b, "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n", V, T, T);
        interop_buffer_printf(&b, "  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n", C, L, H);
        interop_buffer_printf(&b, "  \"n_inner\": %lld,\n", (long long)m->arch.layers[0].d_ff);
        interop_buffer_printf(&b, "  \"activation_function\": \"gelu_new\",\n");
        put_real(&b, c, "layer_norm_epsilon", "norm_eps");
        interop_buffer_printf(&b, "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n");
        interop_buffer_printf(&b, "  \"scale_attn_weights\": true,\n");
    } else {
        const int moe = c->family == FAMILY_MOE;
        interop_buffer_printf(&b, "  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
                              moe ? "MixtralForCausalLM" : "LlamaForCausalLM", moe ? "mixtral" : "llama");
        if (moe) {
            interop_buffer_printf(&b, "  \"num_local_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n",
                                  (long long)c->n_expert, (long long)c->top_k);
            put_real(&b, c, "router_aux_loss_coef", "aux_loss_coef");
            interop_buffer_printf(&b, "  \"sliding_window\": null,\n");
        }
        interop_buffer_printf(&b, "  \"vocab_size\": %lld,\n  \"max_position_embeddings\": %lld,\n", V, T);
        interop_buffer_printf(&b, "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n", C, (long long)c->d_ff);
        interop_buffer_printf(&b, "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n", L, H);
        interop_buffer_printf(&b, "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n", (long long)c->n_kv_head,
                              (long long)model_head_dim(c));
        put_real(&b, c, "rms_norm_eps", "norm_eps");
        put_real(&b, c, "rope_theta", "rope_theta");
        interop_buffer_printf(&b,
                              "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n");
    }
    interop_buffer_printf(&b, "  \"tie_word_embeddings\": %s,\n", c->tie_embeddings ? "true" : "false");
    interop_buffer_printf(&b, "  \"torch_dtype\": \"float32\"\n}\n");
    if (b.failed) {
        interop_buffer_free(&b);
        return dt_errorf("%s: out of memory", path);
    }
    interop_writer w;
    dt_status status = interop_writer_open(&w, path);
    if (status == DT_OK) {
        interop_write(&w, b.data, b.length);
        status = interop_writer_close(&w);
    }
    interop_buffer_free(&b);
    return status;
}

dt_status interop_export_hf(const model *m, const char *out_dir) {
    if (interop_check_exportable(&m->config, EXPORT_HF) != DT_OK) return DT_ERR;
    if (interop_make_dir(out_dir) != DT_OK) return DT_ERR;
    char path[4200];
    interop_tensors list = {0};
    dt_status status = interop_map_export(m, interop_map_for(MAP_HF, m->config.family), &list);
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (status == DT_OK) status = interop_safetensors_write(path, &list, NULL, 0);
    interop_tensors_free(&list);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (status == DT_OK) status = write_config_json(m, path);
    interop_branch_path(EXPORT_HF, out_dir, path, sizeof path);
    if (status == DT_OK) status = interop_write_branch_file(m, path);
    return status;
}
