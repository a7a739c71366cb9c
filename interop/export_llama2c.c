/* llama2.c export: model.bin in run.c's legacy (version 0) layout and
 * tokenizer.bin. The order below is the one run.c's memory_map_weights reads
 * (each kind of tensor for all layers before the next kind):
 *   7 int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
 *            (negated when the classifier is not the token embedding), seq_len;
 *   token embedding [V, dim]; attention RMSNorm [L, dim]; wq [L, dim, dim];
 *   wk [L, kv_dim, dim]; wv [L, kv_dim, dim]; wo [L, dim, dim];
 *   FFN RMSNorm [L, dim]; w1 [L, hidden, dim]; w2 [L, dim, hidden];
 *   w3 [L, hidden, dim]; final RMSNorm [dim];
 *   two RoPE tables (cos, sin) [seq_len, head_size/2] that run.c skips;
 *   the classifier [V, dim] when untied.
 * run.c rotates interleaved pairs like SPEC, so q and k go as they are. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "interop/export.h"
#include "interop/file_util.h"

/* Writes one tensor kind for every layer (offsetof the tensor pointer in the layer). */
static void write_layers(interop_writer *w, const model *m, size_t layer_offset) {
    for (int64_t l = 0; l < m->config.n_layer; l++) {
        const dt_tensor *t = *(dt_tensor *const *)((const char *)&m->layers[l] + layer_offset);
        interop_write_f32s(w, dt_f32(t), t->size);
    }
}

#define LAYER_FIELD(field) offsetof(model_layer, field)

static dt_status write_model_bin(const model *m, const char *path) {
    const model_config *c = &m->config;
    const int64_t hd = model_head_dim(c);
    interop_writer w;
    if (interop_writer_open(&w, path) != DT_OK) return DT_ERR;
    const int64_t header[7] = {c->d_model,   c->d_ff,      c->n_layer,
                               c->n_head,    c->n_kv_head, c->tie_embeddings ? c->vocab_size : -c->vocab_size,
                               c->block_size};
    for (int i = 0; i < 7; i++)
        interop_write_i32(&w, (int32_t)header[i]);
    interop_write_f32s(&w, dt_f32(m->tok_emb), m->tok_emb->size);
    write_layers(&w, m, LAYER_FIELD(attn_norm));
    write_layers(&w, m, LAYER_FIELD(primary.wq));
    write_layers(&w, m, LAYER_FIELD(primary.wk));
    write_layers(&w, m, LAYER_FIELD(primary.wv));
    write_layers(&w, m, LAYER_FIELD(primary.wo));
    write_layers(&w, m, LAYER_FIELD(ffn_norm));
    /* the swiglu FFN kind's slots (models/ffn_swiglu.c): w1, w3, w2 */
    write_layers(&w, m, LAYER_FIELD(primary.ffn[0]));
    write_layers(&w, m, LAYER_FIELD(primary.ffn[2]));
    write_layers(&w, m, LAYER_FIELD(primary.ffn[1]));
    interop_write_f32s(&w, dt_f32(m->final_norm), m->final_norm->size);
    /* The RoPE tables llama2.c's export writes (cos, then sin), for readers that use them. */
    for (int table = 0; table < 2; table++)
        for (int64_t t = 0; t < c->block_size; t++)
            for (int64_t j = 0; j < hd / 2; j++) {
                double angle = (double)t * pow(c->rope_theta, -2.0 * (double)j / (double)hd);
                interop_write_f32(&w, (float)(table ? sin(angle) : cos(angle)));
            }
    if (!c->tie_embeddings) interop_write_f32s(&w, dt_f32(m->lm_head), m->lm_head->size);
    return interop_writer_close(&w);
}

/* tokenizer.bin: max_token_length, then per token its score, length and
 * bytes. llama2.c's encoder merges the pair whose joined string has the
 * highest score, so merge i (token 256 + i) scores -i: earlier merges first,
 * as dbranch's encoder applies them. Byte tokens score 0 (never a merge's
 * result). Ids the model has beyond the tokenizer get a placeholder piece. */
static dt_status write_tokenizer_bin(const data_tokenizer *tok, int64_t vocab_size, const char *path) {
    if (tok->vocab_size > vocab_size)
        return dt_errorf("%s: the tokenizer has %lld tokens, the model only %lld", path, (long long)tok->vocab_size,
                         (long long)vocab_size);
    interop_writer w;
    if (interop_writer_open(&w, path) != DT_OK) return DT_ERR;
    int32_t max_length = 16; /* covers the placeholders */
    for (int64_t i = 0; i < tok->vocab_size; i++)
        if (tok->token_length[i] > max_length) max_length = tok->token_length[i];
    interop_write_i32(&w, max_length);
    for (int64_t i = 0; i < vocab_size; i++) {
        char placeholder[32];
        const void *bytes = placeholder;
        int32_t length;
        if (i < tok->vocab_size) {
            bytes = tok->token_bytes[i];
            length = tok->token_length[i];
        } else {
            length = snprintf(placeholder, sizeof placeholder, "<unused%lld>", (long long)i);
        }
        interop_write_f32(&w, i < 256 ? 0.0f : -(float)(i - 256));
        interop_write_i32(&w, length);
        interop_write(&w, bytes, (size_t)length);
    }
    return interop_writer_close(&w);
}

dt_status interop_export_llama2c(const model *m, const data_tokenizer *tok, const char *out_dir) {
    if (interop_check_exportable(&m->config, EXPORT_LLAMA2C) != DT_OK) return DT_ERR;
    const int64_t limit = 2147483647;
    if (m->tok_emb->size > limit || m->config.d_ff * m->config.d_model > limit)
        return dt_errorf("the model is too large for llama2.c's int32 header");
    if (interop_make_dir(out_dir) != DT_OK) return DT_ERR;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.bin", out_dir);
    dt_status status = write_model_bin(m, path);
    snprintf(path, sizeof path, "%s/tokenizer.bin", out_dir);
    if (status == DT_OK && tok) status = write_tokenizer_bin(tok, m->config.vocab_size, path);
    interop_branch_path(EXPORT_LLAMA2C, out_dir, path, sizeof path);
    if (status == DT_OK) status = interop_write_branch_file(m, path);
    return status;
}
