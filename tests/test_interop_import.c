/* Import tests: HF export -> import gives back the same model (config key by
 * key, every parameter bit for bit, the same logits) for both families, tied
 * and untied, with and without a decode branch; and every damaged file is a
 * one-line error naming the file and the tensor: a missing or mis-shaped
 * tensor, a truncated body, a header length beyond the file, an unexpected
 * tensor, a config key dbranch cannot honour. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interop/export.h"
#include "interop/import.h"
#include "interop/safetensors.h"
#include "support/scratch.h"
#include "test_interop_util.h"

static char tmp_dir[256];
static void make_tmp_dir(void) { test_scratch_dir(tmp_dir, sizeof tmp_dir, "interop_import"); }
static void remove_tmp_dir(void) { test_remove_dir(tmp_dir); }
TestSuite(import, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name) {
    static char path[2][512];
    static int which;
    which ^= 1;
    snprintf(path[which], sizeof path[which], "%s/%s", tmp_dir, name);
    return path[which];
}

static void assert_same_model(const model *a, const model *b) {
    for (int i = 0; i < model_config_key_count(); i++) {
        char ta[64], tb[64];
        model_config_get(&a->config, model_config_key(i), ta, sizeof ta);
        model_config_get(&b->config, model_config_key(i), tb, sizeof tb);
        cr_assert_str_eq(ta, tb, "config key %s", model_config_key(i));
    }
    cr_assert_eq(a->n_params, b->n_params);
    for (int i = 0; i < a->n_params; i++) {
        cr_assert_str_eq(a->params[i].name, b->params[i].name);
        cr_assert(dt_same_shape(a->params[i].tensor, b->params[i].tensor), "%s shape", a->params[i].name);
        cr_assert_eq(
            memcmp(a->params[i].tensor->data, b->params[i].tensor->data, 4 * (size_t)a->params[i].tensor->size), 0,
            "%s differs after export -> import", a->params[i].name);
    }
}

Test(import, hf_round_trip_is_exact) {
    struct {
        model_family family;
        const char *pairs;
    } cases[] = {
        {FAMILY_NANOGPT, ""},
        {FAMILY_NANOGPT, "tie_embeddings=0 norm_eps=1e-6"},
        {FAMILY_LLAMA, ""},
        {FAMILY_LLAMA, "tie_embeddings=1 rope_theta=500000 n_kv_head=1"},
        {FAMILY_LLAMA, "branch=decode mix_alpha_min=0.3 alpha_detach=1"},
        {FAMILY_NANOGPT, "branch=decode couple=off"},
        {FAMILY_LLAMA, "branch=decode branch_emb=shared detach_primary=1"},
        {FAMILY_MOE, "aux_loss_coef=0.05"},
        {FAMILY_MOE, "branch=decode top_k_branch=1 branch_routing=own tie_embeddings=1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model a, b;
        interop_make_model(&a, cases[i].family, cases[i].pairs, 20 + i);
        char dir[64];
        snprintf(dir, sizeof dir, "case%zu", i);
        cr_assert_eq(interop_export_hf(&a, tmp_path(dir)), DT_OK, "case %zu: %s", i, dt_error_message());
        cr_assert_eq(interop_import_hf(&b, tmp_path(dir)), DT_OK, "case %zu: %s", i, dt_error_message());
        assert_same_model(&a, &b);
        interop_assert_same_logits(&a, &b);
        model_free(&a);
        model_free(&b);
    }
}

/* An exported GPT-2 directory whose model.safetensors the test then damages. */
static const char *exported_gpt2(const char *name) {
    model m;
    interop_make_model(&m, FAMILY_NANOGPT, "", 30);
    cr_assert_eq(interop_export_hf(&m, tmp_path(name)), DT_OK, "%s", dt_error_message());
    model_free(&m);
    return tmp_path(name);
}

static unsigned char *read_weights(const char *dir, size_t *n, char *path, size_t size) {
    snprintf(path, size, "%s/model.safetensors", dir);
    return interop_read_all(path, n);
}

static void write_bytes(const char *path, const unsigned char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* Replaces the first occurrence of `from` in the header by `to` (same length). */
static void edit_header(unsigned char *bytes, size_t n, const char *from, const char *to) {
    cr_assert_eq(strlen(from), strlen(to));
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--)
        header = header << 8 | bytes[i];
    unsigned char *at = memmem(bytes + 8, header, from, strlen(from));
    cr_assert(at, "header has %s", from);
    memcpy(at, to, strlen(to));
}

static void assert_import_fails(const char *dir, const char *needle1, const char *needle2) {
    model m;
    cr_assert_eq(interop_import_hf(&m, dir), DT_ERR, "the damaged file is refused");
    const char *message = dt_error_message();
    cr_assert(strstr(message, needle1), "message names %s: %s", needle1, message);
    cr_assert(strstr(message, needle2), "message names %s: %s", needle2, message);
    cr_assert_null(strchr(message, '\n'), "one line: %s", message);
}

Test(import, missing_tensor_is_named) {
    const char *dir = exported_gpt2("missing");
    char path[600];
    size_t n;
    unsigned char *bytes = read_weights(dir, &n, path, sizeof path);
    edit_header(bytes, n, "\"transformer.h.1.mlp.c_fc.bias\"", "\"transformer.h.1.mlp.c_fc.bia_\"");
    write_bytes(path, bytes, n);
    free(bytes);
    assert_import_fails(dir, "model.safetensors: missing tensor 'transformer.h.1.mlp.c_fc.bias'", "");
}

Test(import, misshaped_tensor_is_named) {
    const char *dir = exported_gpt2("shape");
    char path[600];
    size_t n;
    unsigned char *bytes = read_weights(dir, &n, path, sizeof path);
    /* c_attn.weight [16,48] -> [48,16]: same bytes, wrong layout (a [out, in] file). */
    edit_header(bytes, n, "\"shape\":[16,48]", "\"shape\":[48,16]");
    write_bytes(path, bytes, n);
    free(bytes);
    assert_import_fails(dir, "model.safetensors", "tensor 'transformer.h.0.attn.c_attn.weight' has shape [48, 16]");
}

Test(import, truncated_body_is_named) {
    const char *dir = exported_gpt2("truncated");
    char path[600];
    size_t n;
    unsigned char *bytes = read_weights(dir, &n, path, sizeof path);
    write_bytes(path, bytes, n - 100);
    free(bytes);
    assert_import_fails(dir, "model.safetensors", "(the file is truncated)");
}

Test(import, header_length_beyond_the_file_is_named) {
    const char *dir = exported_gpt2("header");
    char path[600];
    size_t n;
    unsigned char *bytes = read_weights(dir, &n, path, sizeof path);
    uint64_t huge = (uint64_t)n + 1000;
    memcpy(bytes, &huge, 8);
    write_bytes(path, bytes, n);
    free(bytes);
    assert_import_fails(dir, "model.safetensors", "header length");
}

Test(import, unexpected_tensor_and_foreign_dtype_are_named) {
    const char *dir = exported_gpt2("dtype");
    char path[600];
    size_t n;
    unsigned char *bytes = read_weights(dir, &n, path, sizeof path);
    edit_header(bytes, n, "\"dtype\":\"F32\"", "\"dtype\":\"F64\"");
    write_bytes(path, bytes, n);
    assert_import_fails(dir, "model.safetensors", "dtype F64");
    edit_header(bytes, n, "\"dtype\":\"F64\"", "\"dtype\":\"F32\"");
    edit_header(bytes, n, "\"transformer.wte.weight\"", "\"transformer.wte.weighX\"");
    write_bytes(path, bytes, n);
    free(bytes);
    assert_import_fails(dir, "model.safetensors", "'transformer.wte.weight'"); /* missing comes first */
}

Test(import, config_keys_dbranch_cannot_honour_are_named) {
    const char *dir = exported_gpt2("config");
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *bad[][2] = {
        {"{\"architectures\": [\"BertModel\"]}", "BertModel"},
        {"{\"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 40}", "missing key 'n_positions'"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 40, \"max_position_embeddings\": 12, "
         "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
         "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}",
         "rope_scaling"},
        {"{\"architectures\": [\"GPT2LMHeadModel\"], \"activation_function\": \"relu\"}", "activation_function"},
        {"{\"architectures\": [\"GPT2LMHeadModel\"],}", "JSON error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_bytes(path, (const unsigned char *)bad[i][0], strlen(bad[i][0]));
        assert_import_fails(dir, "config.json", bad[i][1]);
    }
}

/* A weight the map does not know (an extra bias, another model's tensor) is
 * refused, not dropped; a tied head written anyway is accepted only when tied. */
Test(import, unexpected_tensor_is_named) {
    for (int tied = 0; tied < 2; tied++) {
        model m;
        interop_make_model(&m, FAMILY_LLAMA, tied ? "tie_embeddings=1" : "tie_embeddings=0", 31);
        const char *dir = tmp_path(tied ? "extra_tied" : "extra");
        cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        /* The test builds its damaged input with the library's reader and writer. */
        interop_safetensors file;
        cr_assert_eq(interop_safetensors_read(path, &file), DT_OK, "%s", dt_error_message());
        dt_tensor *extra = dt_tensor_new(DT_F32, DT_SHAPE(16));
        cr_assert_eq(interop_add(&file.tensors, "model.layers.0.self_attn.q_proj.bias", extra), DT_OK);
        if (tied) cr_assert_eq(interop_add(&file.tensors, "lm_head.weight", m.tok_emb), DT_OK);
        cr_assert_eq(interop_safetensors_write(path, &file.tensors, NULL, 0), DT_OK, "%s", dt_error_message());
        interop_safetensors_free(&file);
        dt_tensor_free(extra);
        assert_import_fails(dir, "model.safetensors: unexpected tensor 'model.layers.0.self_attn.q_proj.bias'", "");
        model_free(&m);
    }
    /* The tied head alone is accepted (transformers writes it for some tied models). */
    model m, back;
    interop_make_model(&m, FAMILY_LLAMA, "tie_embeddings=1", 32);
    const char *dir = tmp_path("tied_head");
    cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    interop_safetensors file;
    cr_assert_eq(interop_safetensors_read(path, &file), DT_OK, "%s", dt_error_message());
    cr_assert_eq(interop_add(&file.tensors, "lm_head.weight", m.tok_emb), DT_OK);
    cr_assert_eq(interop_safetensors_write(path, &file.tensors, NULL, 0), DT_OK);
    interop_safetensors_free(&file);
    cr_assert_eq(interop_import_hf(&back, dir), DT_OK, "%s", dt_error_message());
    model_free(&back);
    model_free(&m);
}

/* The hub's gpt2 files name tensors without "transformer." and carry the
 * causal-mask buffers h.{l}.attn.bias; both import. */
Test(import, gpt2_without_the_transformer_prefix_and_with_mask_buffers) {
    model m, back;
    interop_make_model(&m, FAMILY_NANOGPT, "", 33);
    const char *dir = tmp_path("bare");
    cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    interop_safetensors file;
    cr_assert_eq(interop_safetensors_read(path, &file), DT_OK, "%s", dt_error_message());
    for (int i = 0; i < file.tensors.count; i++) {
        char *name = file.tensors.items[i].name;
        cr_assert_eq(strncmp(name, "transformer.", 12), 0, "%s", name);
        memmove(name, name + 12, strlen(name + 12) + 1);
    }
    dt_tensor *mask = dt_tensor_new(DT_F32, DT_SHAPE(1, 1, 12, 12));
    cr_assert_eq(interop_add(&file.tensors, "h.0.attn.bias", mask), DT_OK);
    cr_assert_eq(interop_add(&file.tensors, "h.1.attn.bias", mask), DT_OK);
    cr_assert_eq(interop_safetensors_write(path, &file.tensors, NULL, 0), DT_OK, "%s", dt_error_message());
    interop_safetensors_free(&file);
    dt_tensor_free(mask);
    cr_assert_eq(interop_import_hf(&back, dir), DT_OK, "%s", dt_error_message());
    assert_same_model(&m, &back);
    model_free(&back);
    model_free(&m);
}

/* A 16-bit float of an exactly representable value (the test's own encoders). */
static uint16_t to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    cr_assert_eq(bits & 0xFFFF, 0, "%g is not a bf16 value", x);
    return (uint16_t)(bits >> 16);
}

static uint16_t to_f16(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    float a = fabsf(x);
    if (a == 0) return sign;
    int e;
    float fraction = frexpf(a, &e); /* a = fraction * 2^e, fraction in [0.5, 1) */
    int exponent = e - 1 + 15;      /* biased, for a = 1.m * 2^(e-1) */
    uint16_t out;
    if (exponent <= 0) { /* subnormal: a = m * 2^-24 */
        float m = ldexpf(a, 24);
        cr_assert_eq(m, floorf(m), "%g is not an f16 subnormal", x);
        out = (uint16_t)m;
    } else {
        float m = (fraction * 2 - 1) * 1024;
        cr_assert(exponent < 31 && m == floorf(m), "%g is not an f16 value", x);
        out = (uint16_t)(exponent << 10 | (int)m);
    }
    return sign | out;
}

/* Rewrites dir/model.safetensors with every tensor stored in dtype (16-bit). */
static void write_16bit(const char *dir, int bf16) {
    char path[600], entry[400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    interop_safetensors file;
    cr_assert_eq(interop_safetensors_read(path, &file), DT_OK, "%s", dt_error_message());
    char *header = calloc(1, 1 << 16);
    strcat(header, "{");
    uint64_t offset = 0;
    for (int i = 0; i < file.tensors.count; i++) {
        const interop_tensor *t = &file.tensors.items[i];
        char shape[64] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), d ? ",%lld" : "%lld", (long long)t->shape[d]);
        snprintf(entry, sizeof entry, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
                 i ? "," : "", t->name, bf16 ? "BF16" : "F16", shape, (unsigned long long)offset,
                 (unsigned long long)(offset + 2 * (uint64_t)t->size));
        strcat(header, entry);
        offset += 2 * (uint64_t)t->size;
    }
    strcat(header, "}");
    uint64_t length = strlen(header);
    FILE *f = fopen(path, "wb");
    fwrite(&length, 8, 1, f);
    fwrite(header, 1, length, f);
    for (int i = 0; i < file.tensors.count; i++)
        for (int64_t j = 0; j < file.tensors.items[i].size; j++) {
            uint16_t h = bf16 ? to_bf16(file.tensors.items[i].data[j]) : to_f16(file.tensors.items[i].data[j]);
            fwrite(&h, 2, 1, f);
        }
    fclose(f);
    free(header);
    interop_safetensors_free(&file);
}

Test(import, bf16_and_f16_files_widen_exactly) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        model m, back;
        interop_make_model(&m, FAMILY_LLAMA, "", 34 + bf16);
        /* Values the 16-bit type holds exactly: bf16 keeps the top 16 bits of
         * float32; f16 gets multiples of 2^-8 in (-2, 2), a subnormal and a negative zero. */
        for (int i = 0; i < m.n_params; i++) {
            float *w = dt_f32(m.params[i].tensor);
            for (int64_t j = 0; j < m.params[i].tensor->size; j++) {
                if (bf16) {
                    uint32_t bits;
                    memcpy(&bits, &w[j], 4);
                    bits &= 0xFFFF0000u;
                    memcpy(&w[j], &bits, 4);
                } else {
                    w[j] = (float)((j * 37 + i * 11) % 511 - 255) / 256.0f;
                }
            }
        }
        if (!bf16) dt_f32(m.tok_emb)[0] = ldexpf(3.0f, -20), dt_f32(m.tok_emb)[1] = -0.0f;
        char name[32];
        snprintf(name, sizeof name, "half%d", bf16);
        const char *dir = tmp_path(name);
        cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
        write_16bit(dir, bf16);
        cr_assert_eq(interop_import_hf(&back, dir), DT_OK, "%s", dt_error_message());
        assert_same_model(&m, &back);
        model_free(&back);
        model_free(&m);
    }
}

Test(import, sharded_checkpoint_is_named) {
    const char *dir = exported_gpt2("sharded");
    char from[600], to[600];
    snprintf(from, sizeof from, "%s/model.safetensors", dir);
    snprintf(to, sizeof to, "%s/model.safetensors.index.json", dir);
    cr_assert_eq(rename(from, to), 0);
    assert_import_fails(dir, "model.safetensors.index.json: sharded checkpoints are not supported", "");
}

/* Exporting a plain model over the directory of a branch model's export
 * removes the old branch.safetensors, so import does not graft that branch on. */
Test(import, reexport_without_a_branch_removes_the_stale_side_file) {
    model a, b, back;
    interop_make_model(&a, FAMILY_LLAMA, "branch=decode", 36);
    interop_make_model(&b, FAMILY_LLAMA, "", 37);
    const char *dir = tmp_path("reexport");
    cr_assert_eq(interop_export_hf(&a, dir), DT_OK, "%s", dt_error_message());
    cr_assert_eq(interop_export_hf(&b, dir), DT_OK, "%s", dt_error_message());
    cr_assert_eq(interop_import_hf(&back, dir), DT_OK, "%s", dt_error_message());
    assert_same_model(&b, &back);
    model_free(&a);
    model_free(&b);
    model_free(&back);
}
