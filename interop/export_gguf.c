/* GGUF v3 export (fp32) for llama.cpp's `llama` and `gpt2` architectures:
 *   "GGUF", uint32 version 3, uint64 tensor count, uint64 metadata count;
 *   metadata: string key (uint64 length + bytes), uint32 type, value;
 *   tensor infos: name, uint32 n_dims, uint64 ne[n_dims] (innermost first,
 *   so our [out, in] is ne = {in, out}), uint32 ggml type (0 = F32), uint64
 *   offset into the data block (a multiple of general.alignment = 32);
 *   padding to the alignment, then the data block.
 * Names are name_map.c's GGUF tables. The tokenizer, when given, is a
 * byte-level BPE ("gpt2" model): tokens and merges are written through
 * GPT-2's byte-to-unicode table, as llama.cpp's BPE vocabulary expects;
 * without one the model is "no_vocab" (llama.cpp runs it on token ids). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop/export.h"
#include "interop/file_util.h"
#include "interop/name_map.h"

enum { GGUF_ALIGNMENT = 32 };
enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_STRING = 8, GGUF_ARRAY = 9 };

static void put_string(interop_writer *w, const char *s, size_t n) {
    interop_write_u64(w, n);
    interop_write(w, s, n);
}

static void kv_header(interop_writer *w, const char *key, uint32_t type) {
    put_string(w, key, strlen(key));
    interop_write_u32(w, type);
}

static void kv_u32(interop_writer *w, const char *key, uint32_t v) {
    kv_header(w, key, GGUF_U32);
    interop_write_u32(w, v);
}

static void kv_f32(interop_writer *w, const char *key, float v) {
    kv_header(w, key, GGUF_F32);
    interop_write_f32(w, v);
}

static void kv_string(interop_writer *w, const char *key, const char *v) {
    kv_header(w, key, GGUF_STRING);
    put_string(w, v, strlen(v));
}

/* GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for
 * themselves, the other 68 take code points 256, 257, ... in byte order. */
static unsigned byte_code_point(unsigned byte) {
    if ((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174) return byte;
    unsigned n = 0;
    for (unsigned b = 0; b < byte; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) n++;
    return 256 + n;
}

/* The token's bytes through the table, UTF-8 encoded, into out (4 bytes per input at most). */
static size_t mapped_token(const uint8_t *bytes, int32_t n, char *out) {
    size_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        unsigned cp = byte_code_point(bytes[i]);
        if (cp < 0x80) {
            out[len++] = (char)cp;
        } else { /* < 0x800 */
            out[len++] = (char)(0xC0 | cp >> 6);
            out[len++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return len;
}

/* tokenizer.ggml.*: 5 keys. */
static dt_status write_tokenizer(interop_writer *w, const data_tokenizer *tok, int64_t vocab_size) {
    int32_t longest = 0;
    for (int64_t i = 0; i < tok->vocab_size; i++)
        if (tok->token_length[i] > longest) longest = tok->token_length[i];
    char *text = malloc((size_t)(4 * (2 * longest + 2) + 32));
    if (!text) return dt_errorf("out of memory");
    kv_string(w, "tokenizer.ggml.model", "gpt2");
    kv_string(w, "tokenizer.ggml.pre", "gpt-2");
    kv_header(w, "tokenizer.ggml.tokens", GGUF_ARRAY);
    interop_write_u32(w, GGUF_STRING);
    interop_write_u64(w, (uint64_t)vocab_size);
    for (int64_t i = 0; i < vocab_size; i++) {
        size_t n = i < tok->vocab_size ? mapped_token(tok->token_bytes[i], tok->token_length[i], text)
                                       : (size_t)snprintf(text, 32, "<unused%lld>", (long long)i);
        put_string(w, text, n);
    }
    kv_header(w, "tokenizer.ggml.token_type", GGUF_ARRAY);
    interop_write_u32(w, GGUF_I32);
    interop_write_u64(w, (uint64_t)vocab_size);
    for (int64_t i = 0; i < vocab_size; i++)
        interop_write_i32(w, i < tok->vocab_size ? 1 : 5); /* normal, unused */
    kv_header(w, "tokenizer.ggml.merges", GGUF_ARRAY);
    interop_write_u32(w, GGUF_STRING);
    const int64_t n_merges = tok->kind == TOKENIZER_BPE ? tok->vocab_size - 256 : 0;
    interop_write_u64(w, (uint64_t)n_merges);
    for (int64_t i = 0; i < n_merges; i++) {
        const int32_t a = tok->merges[i][0], b = tok->merges[i][1];
        size_t n = mapped_token(tok->token_bytes[a], tok->token_length[a], text);
        text[n++] = ' ';
        n += mapped_token(tok->token_bytes[b], tok->token_length[b], text + n);
        put_string(w, text, n);
    }
    free(text);
    return DT_OK;
}

static uint64_t aligned(uint64_t n) { return (n + GGUF_ALIGNMENT - 1) / GGUF_ALIGNMENT * GGUF_ALIGNMENT; }

dt_status interop_export_gguf(const model *m, const data_tokenizer *tok, const char *out_path) {
    const model_config *c = &m->config;
    if (interop_check_exportable(c, EXPORT_GGUF) != DT_OK) return DT_ERR;
    if (tok && tok->vocab_size > c->vocab_size)
        return dt_errorf("the tokenizer has %lld tokens, the model only %lld", (long long)tok->vocab_size,
                         (long long)c->vocab_size);
    interop_tensors list = {0};
    if (interop_map_export(m, interop_map_for(MAP_GGUF, c->family), &list) != DT_OK) return DT_ERR;
    const int llama = c->family != FAMILY_NANOGPT, moe = c->family == FAMILY_MOE; /* moe: llama with experts */
    const char *arch = llama ? "llama" : "gpt2";
    interop_writer w;
    if (interop_writer_open(&w, out_path) != DT_OK) {
        interop_tensors_free(&list);
        return DT_ERR;
    }
    const uint64_t n_kv = (llama ? 14 : 11) + (moe ? 2 : 0) + (tok ? 5 : 1);
    interop_write(&w, "GGUF", 4);
    interop_write_u32(&w, 3);
    interop_write_u64(&w, (uint64_t)list.count);
    interop_write_u64(&w, n_kv);
    char key[96];
#define ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    kv_string(&w, "general.architecture", arch);
    kv_string(&w, "general.name", "dbranch");
    kv_u32(&w, "general.file_type", 0); /* all F32 */
    kv_u32(&w, "general.alignment", GGUF_ALIGNMENT);
    kv_u32(&w, ARCH_KEY("context_length"), (uint32_t)c->block_size);
    kv_u32(&w, ARCH_KEY("embedding_length"), (uint32_t)c->d_model);
    kv_u32(&w, ARCH_KEY("block_count"), (uint32_t)c->n_layer);
    kv_u32(&w, ARCH_KEY("feed_forward_length"), (uint32_t)(llama ? c->d_ff : m->arch.layers[0].d_ff));
    kv_u32(&w, ARCH_KEY("attention.head_count"), (uint32_t)c->n_head);
    if (llama) {
        kv_u32(&w, ARCH_KEY("attention.head_count_kv"), (uint32_t)c->n_kv_head);
        kv_u32(&w, ARCH_KEY("rope.dimension_count"), (uint32_t)model_head_dim(c));
        kv_f32(&w, ARCH_KEY("rope.freq_base"), (float)c->rope_theta);
        kv_f32(&w, ARCH_KEY("attention.layer_norm_rms_epsilon"), (float)c->norm_eps);
        kv_u32(&w, ARCH_KEY("vocab_size"), (uint32_t)c->vocab_size);
        if (moe) {
            kv_u32(&w, ARCH_KEY("expert_count"), (uint32_t)c->n_expert);
            kv_u32(&w, ARCH_KEY("expert_used_count"), (uint32_t)c->top_k);
        }
    } else {
        kv_f32(&w, ARCH_KEY("attention.layer_norm_epsilon"), (float)c->norm_eps);
        kv_u32(&w, ARCH_KEY("vocab_size"), (uint32_t)c->vocab_size);
    }
#undef ARCH_KEY
    /* llama.cpp requires tokenizer.ggml.model; "no_vocab" loads a model that runs on token ids. */
    dt_status status = DT_OK;
    if (tok)
        status = write_tokenizer(&w, tok, c->vocab_size);
    else
        kv_string(&w, "tokenizer.ggml.model", "no_vocab");

    uint64_t offset = 0;
    for (int i = 0; i < list.count; i++) {
        const interop_tensor *t = &list.items[i];
        put_string(&w, t->name, strlen(t->name));
        interop_write_u32(&w, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--)
            interop_write_u64(&w, (uint64_t)t->shape[d]);
        interop_write_u32(&w, 0); /* GGML_TYPE_F32 */
        interop_write_u64(&w, offset);
        offset = aligned(offset + (uint64_t)t->size * sizeof(float));
    }
    interop_write_zeros(&w, (size_t)(aligned(w.offset) - w.offset));
    const uint64_t data_start = w.offset;
    for (int i = 0; i < list.count; i++) {
        interop_write_f32s(&w, list.items[i].data, list.items[i].size);
        interop_write_zeros(&w, (size_t)(aligned(w.offset - data_start) - (w.offset - data_start)));
    }
    interop_tensors_free(&list);
    if (status != DT_OK) { /* nothing under the real name */
        fclose(w.f);
        remove(w.tmp);
        return DT_ERR;
    }
    if (interop_writer_close(&w) != DT_OK) return DT_ERR;
    char path[4200];
    interop_branch_path(EXPORT_GGUF, out_path, path, sizeof path);
    return interop_write_branch_file(m, path);
}
