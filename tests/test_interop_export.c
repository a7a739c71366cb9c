/* Export tests: every written file is read back by readers written here (or
 * in test_interop_util.h), not by the writers' code; every tensor is compared
 * with the model's after undoing the documented transposes and permutations;
 * the RoPE permutation is checked against HF's rotate_half math itself; a
 * llama2.c model.bin rebuilt into a model gives the original logits; and
 * configs a format cannot express are refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "interop/export.h"
#include "support/scratch.h"
#include "test_interop_util.h"

static char tmp_dir[256];
static void make_tmp_dir(void) { test_scratch_dir(tmp_dir, sizeof tmp_dir, "interop_export"); }
static void remove_tmp_dir(void) { test_remove_dir(tmp_dir); }
TestSuite(export, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name) {
    static char path[2][512];
    static int which;
    which ^= 1;
    snprintf(path[which], sizeof path[which], "%s/%s", tmp_dir, name);
    return path[which];
}

static const dt_tensor *param(const model *m, const char *fmt, int layer) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    model_param *p = model_find_param(m, name);
    cr_assert(p, "model has no %s", name);
    return p->tensor;
}

/* The file's tensor equals ours exactly, element by element through index(). */
typedef int64_t (*index_fn)(int64_t i, const int64_t *their_shape, const void *arg);

static int64_t same_index(int64_t i, const int64_t *shape, const void *arg) { return i; }

/* Their [in, out] element i is our [out, in] element at the transposed place. */
static int64_t transposed_index(int64_t i, const int64_t *shape, const void *arg) {
    const int64_t r = i / shape[1], c = i % shape[1];
    return c * shape[0] + r;
}

/* HF's half-split row h*hd + c*hd/2 + j holds our interleaved row h*hd + 2j + c. */
static int64_t half_split_index(int64_t i, const int64_t *shape, const void *arg) {
    const int64_t hd = *(const int64_t *)arg, cols = shape[1];
    const int64_t row = i / cols, col = i % cols, h = row / hd, within = row % hd;
    const int64_t c = within / (hd / 2), j = within % (hd / 2);
    return (h * hd + 2 * j + c) * cols + col;
}

static void assert_tensor(const st_file *f, const char *their, const float *ours, int64_t size, int ndim,
                          const int64_t *shape, index_fn index, const void *arg) {
    int got_ndim;
    int64_t got[4];
    const float *data = st_tensor(f, their, &got_ndim, got);
    cr_assert(data, "the file has no tensor %s", their);
    cr_assert_eq(got_ndim, ndim, "%s: ndim", their);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(got[d], shape[d], "%s: dim %d", their, d);
    for (int64_t i = 0; i < size; i++)
        cr_assert_eq(data[i], ours[index(i, shape, arg)], "%s: element %lld", their, (long long)i);
}

static void assert_same(const st_file *f, const char *their_fmt, int layer, const dt_tensor *t) {
    char name[160];
    snprintf(name, sizeof name, their_fmt, layer);
    assert_tensor(f, name, dt_f32(t), t->size, t->ndim, t->shape, same_index, NULL);
}

static void assert_transposed(const st_file *f, const char *their_fmt, int layer, const dt_tensor *t) {
    char name[160];
    snprintf(name, sizeof name, their_fmt, layer);
    const int64_t shape[2] = {t->shape[1], t->shape[0]};
    assert_tensor(f, name, dt_f32(t), t->size, 2, shape, transposed_index, NULL);
}

static void assert_header_rules(const st_file *f) {
    cr_assert_eq(f->header_length % 8, 0, "header padded to a multiple of 8");
    cr_assert(strstr(f->header, "\"__metadata__\":{\"format\":\"pt\""), "format pt metadata: %.80s", f->header);
    for (uint64_t i = strlen(f->header); i < f->header_length; i++)
        cr_assert_eq(f->header[i], ' ');
}

Test(export, hf_gpt2_names_layouts_and_tied_head_once) {
    model m;
    interop_make_model(&m, FAMILY_NANOGPT, "", 1);
    const char *dir = tmp_path("gpt2");
    cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
    st_file f;
    st_open(&f, tmp_path("gpt2/model.safetensors"));
    assert_header_rules(&f);
    cr_assert_eq(st_count(&f), 4 + 12 * 2, "wte, wpe, ln_f x2, 12 per layer; lm_head tied, not written");
    cr_assert_null(strstr(f.header, "lm_head"));
    assert_same(&f, "transformer.wte.weight", 0, m.tok_emb);
    assert_same(&f, "transformer.wpe.weight", 0, m.pos_emb);
    assert_same(&f, "transformer.ln_f.weight", 0, m.final_norm);
    assert_same(&f, "transformer.ln_f.bias", 0, m.final_norm_bias);
    for (int l = 0; l < 2; l++) {
        assert_same(&f, "transformer.h.%d.ln_1.weight", l, param(&m, "layers.%d.attn_norm.weight", l));
        assert_same(&f, "transformer.h.%d.ln_2.bias", l, param(&m, "layers.%d.ffn_norm.bias", l));
        assert_transposed(&f, "transformer.h.%d.attn.c_proj.weight", l, param(&m, "layers.%d.attn.wo.weight", l));
        assert_same(&f, "transformer.h.%d.attn.c_proj.bias", l, param(&m, "layers.%d.attn.wo.bias", l));
        assert_transposed(&f, "transformer.h.%d.mlp.c_fc.weight", l, param(&m, "layers.%d.mlp.fc.weight", l));
        assert_transposed(&f, "transformer.h.%d.mlp.c_proj.weight", l, param(&m, "layers.%d.mlp.proj.weight", l));
        assert_same(&f, "transformer.h.%d.mlp.c_fc.bias", l, param(&m, "layers.%d.mlp.fc.bias", l));
        /* c_attn [C, 3C]: column block 0 is q, 1 is k, 2 is v, each transposed. */
        char name[96];
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.weight", l);
        int ndim;
        int64_t shape[4];
        const float *qkv = st_tensor(&f, name, &ndim, shape);
        cr_assert(qkv && ndim == 2 && shape[0] == 16 && shape[1] == 48, "%s [16, 48]", name);
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.bias", l);
        const float *qkv_bias = st_tensor(&f, name, &ndim, shape);
        cr_assert(qkv_bias && ndim == 1 && shape[0] == 48);
        const char *parts[3] = {"layers.%d.attn.wq.weight", "layers.%d.attn.wk.weight", "layers.%d.attn.wv.weight"};
        const char *biases[3] = {"layers.%d.attn.wq.bias", "layers.%d.attn.wk.bias", "layers.%d.attn.wv.bias"};
        for (int p = 0; p < 3; p++) {
            const float *w = dt_f32(param(&m, parts[p], l)), *b = dt_f32(param(&m, biases[p], l));
            for (int out = 0; out < 16; out++) {
                cr_assert_eq(qkv_bias[p * 16 + out], b[out]);
                for (int in = 0; in < 16; in++)
                    cr_assert_eq(qkv[in * 48 + p * 16 + out], w[out * 16 + in]);
            }
        }
    }
    st_close(&f);
    size_t n;
    char *config = (char *)interop_read_all(tmp_path("gpt2/config.json"), &n);
    cr_assert(strstr(config, "\"GPT2LMHeadModel\""));
    cr_assert(strstr(config, "\"n_embd\": 16,") && strstr(config, "\"n_positions\": 12,"));
    cr_assert(strstr(config, "\"activation_function\": \"gelu_new\""), "tanh GELU");
    cr_assert(strstr(config, "\"layer_norm_epsilon\": 1e-05,"), "%s", config);
    cr_assert(strstr(config, "\"tie_word_embeddings\": true"));
    free(config);
    struct stat st;
    cr_assert_neq(stat(tmp_path("gpt2/branch.safetensors"), &st), 0, "no side file without a branch");
    model_free(&m);
}

Test(export, hf_llama_names_and_half_split_rows) {
    model m;
    interop_make_model(&m, FAMILY_LLAMA, "rope_theta=500000", 2);
    cr_assert_eq(interop_export_hf(&m, tmp_path("llama")), DT_OK, "%s", dt_error_message());
    st_file f;
    st_open(&f, tmp_path("llama/model.safetensors"));
    assert_header_rules(&f);
    cr_assert_eq(st_count(&f), 3 + 9 * 2, "embed, norm, lm_head (untied), 9 per layer");
    assert_same(&f, "model.embed_tokens.weight", 0, m.tok_emb);
    assert_same(&f, "model.norm.weight", 0, m.final_norm);
    assert_same(&f, "lm_head.weight", 0, m.lm_head);
    const int64_t hd = 4;
    for (int l = 0; l < 2; l++) {
        assert_same(&f, "model.layers.%d.input_layernorm.weight", l, param(&m, "layers.%d.attn_norm.weight", l));
        assert_same(&f, "model.layers.%d.post_attention_layernorm.weight", l,
                    param(&m, "layers.%d.ffn_norm.weight", l));
        assert_same(&f, "model.layers.%d.self_attn.v_proj.weight", l, param(&m, "layers.%d.attn.wv.weight", l));
        assert_same(&f, "model.layers.%d.self_attn.o_proj.weight", l, param(&m, "layers.%d.attn.wo.weight", l));
        assert_same(&f, "model.layers.%d.mlp.gate_proj.weight", l, param(&m, "layers.%d.mlp.w1.weight", l));
        assert_same(&f, "model.layers.%d.mlp.up_proj.weight", l, param(&m, "layers.%d.mlp.w3.weight", l));
        assert_same(&f, "model.layers.%d.mlp.down_proj.weight", l, param(&m, "layers.%d.mlp.w2.weight", l));
        const char *names[2][2] = {{"model.layers.%d.self_attn.q_proj.weight", "layers.%d.attn.wq.weight"},
                                   {"model.layers.%d.self_attn.k_proj.weight", "layers.%d.attn.wk.weight"}};
        for (int p = 0; p < 2; p++) {
            char name[128];
            snprintf(name, sizeof name, names[p][0], l);
            const dt_tensor *t = param(&m, names[p][1], l);
            assert_tensor(&f, name, dt_f32(t), t->size, 2, t->shape, half_split_index, &hd);
        }
    }
    st_close(&f);
    size_t n;
    char *config = (char *)interop_read_all(tmp_path("llama/config.json"), &n);
    cr_assert(strstr(config, "\"LlamaForCausalLM\""));
    cr_assert(strstr(config, "\"num_key_value_heads\": 2,") && strstr(config, "\"intermediate_size\": 24,"));
    cr_assert(strstr(config, "\"rope_theta\": 500000,") && strstr(config, "\"rms_norm_eps\": 1e-05,"), "%s", config);
    cr_assert(strstr(config, "\"tie_word_embeddings\": false"));
    free(config);
    model_free(&m);
}

/* The permutation is the right one, not merely self-consistent: HF's
 * rotate_half RoPE on the exported q/k rows gives the attention scores that
 * SPEC's interleaved RoPE gives on ours, for every head and a few positions. */
Test(export, hf_llama_half_split_scores_equal_interleaved_scores) {
    model m;
    interop_make_model(&m, FAMILY_LLAMA, "n_kv_head=4", 3);
    cr_assert_eq(interop_export_hf(&m, tmp_path("rope")), DT_OK, "%s", dt_error_message());
    st_file f;
    st_open(&f, tmp_path("rope/model.safetensors"));
    int ndim;
    int64_t shape[4];
    const float *q_hf = st_tensor(&f, "model.layers.0.self_attn.q_proj.weight", &ndim, shape);
    const float *k_hf = st_tensor(&f, "model.layers.0.self_attn.k_proj.weight", &ndim, shape);
    const float *q_ours = dt_f32(m.layers[0].primary.wq), *k_ours = dt_f32(m.layers[0].primary.wk);
    const int C = 16, H = 4, hd = 4;
    float x[16], y[16];
    for (int i = 0; i < C; i++)
        x[i] = sinf(0.3f * (float)i + 0.1f), y[i] = cosf(0.7f * (float)i);
    const int positions[3][2] = {{5, 2}, {11, 0}, {3, 3}};
    for (int p = 0; p < 3; p++) {
        const int tq = positions[p][0], tk = positions[p][1];
        float q[2][16], k[2][16]; /* [ours, hf][H*hd] */
        for (int r = 0; r < H * hd; r++) {
            q[0][r] = q[1][r] = k[0][r] = k[1][r] = 0;
            for (int c = 0; c < C; c++) {
                q[0][r] += q_ours[r * C + c] * x[c], q[1][r] += q_hf[r * C + c] * x[c];
                k[0][r] += k_ours[r * C + c] * y[c], k[1][r] += k_hf[r * C + c] * y[c];
            }
        }
        for (int h = 0; h < H; h++) {
            double score[2] = {0, 0};
            for (int j = 0; j < hd / 2; j++) {
                const double freq = pow(10000.0, -2.0 * j / hd);
                const double cq = cos(tq * freq), sq = sin(tq * freq), ck = cos(tk * freq), sk = sin(tk * freq);
                /* SPEC: pairs (2j, 2j+1). */
                const float *a = q[0] + h * hd, *b = k[0] + h * hd;
                double qa = a[2 * j] * cq - a[2 * j + 1] * sq, qb = a[2 * j] * sq + a[2 * j + 1] * cq;
                double ka = b[2 * j] * ck - b[2 * j + 1] * sk, kb = b[2 * j] * sk + b[2 * j + 1] * ck;
                score[0] += qa * ka + qb * kb;
                /* HF rotate_half: pairs (j, j + hd/2). */
                a = q[1] + h * hd, b = k[1] + h * hd;
                qa = a[j] * cq - a[j + hd / 2] * sq, qb = a[j + hd / 2] * cq + a[j] * sq;
                ka = b[j] * ck - b[j + hd / 2] * sk, kb = b[j + hd / 2] * ck + b[j] * sk;
                score[1] += qa * ka + qb * kb;
            }
            cr_assert(fabs(score[0] - score[1]) <= 1e-5 * (fabs(score[0]) + 1e-3), "head %d positions %d,%d: %g vs %g",
                      h, tq, tk, score[0], score[1]);
        }
    }
    st_close(&f);
    model_free(&m);
}

Test(export, hf_branch_model_writes_primary_and_side_file) {
    model m;
    interop_make_model(&m, FAMILY_LLAMA, "branch=decode tie_embeddings=1", 4);
    cr_assert_eq(interop_export_hf(&m, tmp_path("branch")), DT_OK, "%s", dt_error_message());
    st_file f;
    st_open(&f, tmp_path("branch/model.safetensors"));
    cr_assert_eq(st_count(&f), 2 + 9 * 2, "the primary path only (tied head)");
    cr_assert_null(strstr(f.header, "branch"));
    st_close(&f);
    st_open(&f, tmp_path("branch/branch.safetensors"));
    assert_header_rules(&f);
    cr_assert_eq(st_count(&f), 1 + 3 * 2, "branch.tok_emb and three coupling vectors per layer");
    assert_same(&f, "branch.tok_emb.weight", 0, m.branch_tok_emb);
    for (int l = 0; l < 2; l++) {
        assert_same(&f, "layers.%d.branch.couple_q", l, m.layers[l].couple_q);
        assert_same(&f, "layers.%d.branch.couple_hidden", l, m.layers[l].couple_hidden);
        assert_same(&f, "layers.%d.branch.couple_out", l, m.layers[l].couple_out);
    }
    cr_assert(strstr(f.header, "\"dbranch.branch\":\"decode\""), "config in the metadata: %s", f.header);
    cr_assert(strstr(f.header, "\"dbranch.mix_alpha_min\":\"0.5\""));
    st_close(&f);
    model_free(&m);
}

/* ------------------------------------------------------------ llama2.c */

/* Reads model.bin in run.c's order into a model created from its header. */
static void read_llama2c(const char *path, model *out) {
    size_t n;
    unsigned char *bytes = interop_read_all(path, &n);
    int32_t h[7];
    memcpy(h, bytes, sizeof h);
    model_config c = model_config_default(FAMILY_LLAMA);
    char pairs[256];
    snprintf(pairs, sizeof pairs, "d_model=%d d_ff=%d n_layer=%d n_head=%d n_kv_head=%d vocab_size=%d block_size=%d",
             h[0], h[1], h[2], h[3], h[4], abs(h[5]), h[6]);
    interop_set_pairs(&c, pairs);
    interop_set_pairs(&c, h[5] > 0 ? "tie_embeddings=1" : "tie_embeddings=0");
    cr_assert_eq(model_create(out, &c), DT_OK, "%s", dt_error_message());
    const float *p = (const float *)(bytes + sizeof h);
    const int64_t L = h[2];
#define TAKE(t)                                                                                                        \
    do {                                                                                                               \
        memcpy(dt_f32(t), p, (size_t)(t)->size * 4);                                                                   \
        p += (t)->size;                                                                                                \
    } while (0)
    TAKE(out->tok_emb);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].attn_norm);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.wq);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.wk);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.wv);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.wo);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].ffn_norm);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.ffn[0] /* swiglu w1 */);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.ffn[2] /* w2 */);
    for (int64_t l = 0; l < L; l++)
        TAKE(out->layers[l].primary.ffn[1] /* w3 */);
    TAKE(out->final_norm);
    const int64_t half = h[0] / h[3] / 2;
    cr_assert_eq(p[0], 1.0f, "cos table row 0");
    cr_assert(fabsf(p[h[6] * half + half + 0] - sinf(1.0f)) < 1e-6f, "sin table: position 1, pair 0");
    p += 2 * h[6] * half;
    if (h[5] < 0) TAKE(out->lm_head);
#undef TAKE
    cr_assert_eq((const unsigned char *)p - bytes, (ptrdiff_t)n, "nothing after the classifier");
    free(bytes);
}

static void assert_same_params(const model *a, const model *b) {
    cr_assert_eq(a->n_params, b->n_params);
    for (int i = 0; i < a->n_params; i++) {
        cr_assert_str_eq(a->params[i].name, b->params[i].name);
        cr_assert(dt_same_shape(a->params[i].tensor, b->params[i].tensor), "%s shape", a->params[i].name);
        cr_assert_eq(
            memcmp(a->params[i].tensor->data, b->params[i].tensor->data, 4 * (size_t)a->params[i].tensor->size), 0,
            "%s differs", a->params[i].name);
    }
}

Test(export, llama2c_model_bin_reads_back_and_gives_the_same_logits) {
    for (int tied = 0; tied < 2; tied++) {
        model m, back;
        interop_make_model(&m, FAMILY_LLAMA, tied ? "tie_embeddings=1" : "tie_embeddings=0", 5 + tied);
        const char *dir = tmp_path(tied ? "l2c_tied" : "l2c");
        cr_assert_eq(interop_export_llama2c(&m, NULL, dir), DT_OK, "%s", dt_error_message());
        char path[600];
        snprintf(path, sizeof path, "%s/model.bin", dir);
        read_llama2c(path, &back);
        assert_same_params(&m, &back);
        interop_assert_same_logits(&m, &back);
        snprintf(path, sizeof path, "%s/tokenizer.bin", dir);
        struct stat st;
        cr_assert_neq(stat(path, &st), 0, "no tokenizer.bin without a tokenizer");
        model_free(&m);
        model_free(&back);
    }
}

Test(export, llama2c_tokenizer_bin_holds_every_token) {
    const char *text = "the cat sat on the mat; the cat ate the rat. the end, the end.";
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 270), DT_OK);
    model m;
    interop_make_model(&m, FAMILY_LLAMA, "vocab_size=280", 7);
    cr_assert_eq(interop_export_llama2c(&m, &tok, tmp_path("l2c_tok")), DT_OK, "%s", dt_error_message());
    size_t n;
    unsigned char *bytes = interop_read_all(tmp_path("l2c_tok/tokenizer.bin"), &n);
    const unsigned char *p = bytes;
    int32_t max_length;
    memcpy(&max_length, p, 4), p += 4;
    float previous_score = 1;
    for (int64_t i = 0; i < 280; i++) {
        float score;
        int32_t length;
        memcpy(&score, p, 4), p += 4;
        memcpy(&length, p, 4), p += 4;
        cr_assert(length > 0 && length <= max_length, "token %lld length %d", (long long)i, length);
        if (i < tok.vocab_size) {
            cr_assert_eq(length, tok.token_length[i], "token %lld", (long long)i);
            cr_assert_eq(memcmp(p, tok.token_bytes[i], (size_t)length), 0, "token %lld bytes", (long long)i);
        }
        if (i >= 256 && i < tok.vocab_size) cr_assert(score < previous_score, "later merges score lower");
        if (i >= 256) previous_score = score;
        p += length;
    }
    cr_assert_eq((size_t)(p - bytes), n);
    free(bytes);
    data_tokenizer_free(&tok);
    model_free(&m);
}

/* ---------------------------------------------------------------- GGUF */

typedef struct {
    unsigned char *bytes;
    size_t n, at;
} gguf_cursor;

static uint64_t take(gguf_cursor *c, int width) {
    cr_assert(c->at + (size_t)width <= c->n, "GGUF read past the end");
    uint64_t v = 0;
    memcpy(&v, c->bytes + c->at, (size_t)width);
    c->at += (size_t)width;
    return v;
}

static void take_string(gguf_cursor *c, char *out, size_t size) {
    uint64_t n = take(c, 8);
    cr_assert(c->at + n <= c->n);
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(out, c->bytes + c->at, k);
    out[k] = 0;
    c->at += n;
}

/* One GGUF file read: the scalar keys as text, array lengths, the tensors. */
typedef struct {
    char keys[64][96], values[64][96];
    int n_keys;
    uint64_t n_tensors;
    char names[64][96];
    int64_t ne[64][4];
    int ndim[64];
    uint64_t offsets[64];
    const unsigned char *data;
    unsigned char *bytes;
    char first_token[96], first_merge[96];
} gguf_view;

static void skip_or_print(gguf_cursor *c, uint32_t type, char *out, gguf_view *g, const char *key) {
    switch (type) {
    case 4:
        snprintf(out, 96, "%u", (unsigned)take(c, 4));
        break;
    case 5:
        snprintf(out, 96, "%d", (int32_t)take(c, 4));
        break;
    case 6: {
        uint32_t bits = (uint32_t)take(c, 4);
        float f;
        memcpy(&f, &bits, 4);
        snprintf(out, 96, "%g", f);
        break;
    }
    case 8:
        take_string(c, out, 96);
        break;
    case 9: {
        uint32_t inner = (uint32_t)take(c, 4);
        uint64_t n = take(c, 8);
        snprintf(out, 96, "array %u x %llu", inner, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            char item[96];
            skip_or_print(c, inner, item, g, key);
            if (i == 0 && !strcmp(key, "tokenizer.ggml.tokens")) snprintf(g->first_token, 96, "%s", item);
            if (i == 0 && !strcmp(key, "tokenizer.ggml.merges")) snprintf(g->first_merge, 96, "%s", item);
        }
        break;
    }
    default:
        cr_assert_fail("unexpected GGUF type %u", type);
    }
}

static void gguf_read(const char *path, gguf_view *g) {
    memset(g, 0, sizeof *g);
    gguf_cursor c = {0};
    c.bytes = interop_read_all(path, &c.n);
    g->bytes = c.bytes;
    cr_assert_eq(memcmp(c.bytes, "GGUF", 4), 0);
    c.at = 4;
    cr_assert_eq(take(&c, 4), 3, "version 3");
    g->n_tensors = take(&c, 8);
    uint64_t n_kv = take(&c, 8);
    cr_assert(n_kv <= 64 && g->n_tensors <= 64);
    for (uint64_t i = 0; i < n_kv; i++) {
        take_string(&c, g->keys[i], 96);
        uint32_t type = (uint32_t)take(&c, 4);
        skip_or_print(&c, type, g->values[i], g, g->keys[i]);
    }
    g->n_keys = (int)n_kv;
    for (uint64_t t = 0; t < g->n_tensors; t++) {
        take_string(&c, g->names[t], 96);
        g->ndim[t] = (int)take(&c, 4);
        for (int d = 0; d < g->ndim[t]; d++)
            g->ne[t][d] = (int64_t)take(&c, 8);
        cr_assert_eq(take(&c, 4), 0, "F32");
        g->offsets[t] = take(&c, 8);
        cr_assert_eq(g->offsets[t] % 32, 0, "%s aligned", g->names[t]);
    }
    size_t data_start = (c.at + 31) / 32 * 32;
    for (size_t i = c.at; i < data_start; i++)
        cr_assert_eq(c.bytes[i], 0, "zero padding");
    g->data = c.bytes + data_start;
    for (uint64_t t = 0; t < g->n_tensors; t++) {
        int64_t size = 1;
        for (int d = 0; d < g->ndim[t]; d++)
            size *= g->ne[t][d];
        cr_assert(data_start + g->offsets[t] + (size_t)size * 4 <= c.n, "%s inside the file", g->names[t]);
    }
}

static const char *gguf_value(const gguf_view *g, const char *key) {
    for (int i = 0; i < g->n_keys; i++)
        if (!strcmp(g->keys[i], key)) return g->values[i];
    cr_assert_fail("GGUF has no key %s", key);
    return NULL;
}

/* The tensor equals ours (ne is innermost first: ne = {in, out} for our [out, in]). */
static void gguf_assert(const gguf_view *g, const char *fmt, int layer, const float *ours, int ndim,
                        const int64_t *our_shape) {
    char name[96];
    snprintf(name, sizeof name, fmt, layer);
    for (uint64_t t = 0; t < g->n_tensors; t++) {
        if (strcmp(g->names[t], name)) continue;
        cr_assert_eq(g->ndim[t], ndim, "%s ndim", name);
        int64_t size = 1;
        for (int d = 0; d < ndim; d++) {
            cr_assert_eq(g->ne[t][d], our_shape[ndim - 1 - d], "%s ne[%d]", name, d);
            size *= our_shape[d];
        }
        cr_assert_eq(memcmp(g->data + g->offsets[t], ours, (size_t)size * 4), 0, "%s data", name);
        return;
    }
    cr_assert_fail("GGUF has no tensor %s", name);
}

static void gguf_assert_param(const gguf_view *g, const char *fmt, int layer, const dt_tensor *t) {
    gguf_assert(g, fmt, layer, dt_f32(t), t->ndim, t->shape);
}

Test(export, gguf_llama_keys_tensors_and_tokenizer) {
    const char *text = "low lower lowest; new newer newest.";
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 262), DT_OK);
    model m;
    interop_make_model(&m, FAMILY_LLAMA, "vocab_size=264 tie_embeddings=1", 8);
    cr_assert_eq(interop_export_gguf(&m, &tok, tmp_path("m.gguf")), DT_OK, "%s", dt_error_message());
    gguf_view g;
    gguf_read(tmp_path("m.gguf"), &g);
    cr_assert_str_eq(gguf_value(&g, "general.architecture"), "llama");
    cr_assert_str_eq(gguf_value(&g, "general.alignment"), "32");
    cr_assert_str_eq(gguf_value(&g, "llama.block_count"), "2");
    cr_assert_str_eq(gguf_value(&g, "llama.context_length"), "12");
    cr_assert_str_eq(gguf_value(&g, "llama.embedding_length"), "16");
    cr_assert_str_eq(gguf_value(&g, "llama.feed_forward_length"), "24");
    cr_assert_str_eq(gguf_value(&g, "llama.attention.head_count"), "4");
    cr_assert_str_eq(gguf_value(&g, "llama.attention.head_count_kv"), "2");
    cr_assert_str_eq(gguf_value(&g, "llama.rope.dimension_count"), "4");
    cr_assert_str_eq(gguf_value(&g, "llama.rope.freq_base"), "10000");
    cr_assert_str_eq(gguf_value(&g, "llama.attention.layer_norm_rms_epsilon"), "1e-05");
    cr_assert_str_eq(gguf_value(&g, "tokenizer.ggml.model"), "gpt2");
    cr_assert_str_eq(gguf_value(&g, "tokenizer.ggml.tokens"), "array 8 x 264");
    cr_assert_str_eq(gguf_value(&g, "tokenizer.ggml.token_type"), "array 5 x 264");
    char merges[64];
    snprintf(merges, sizeof merges, "array 8 x %lld", (long long)(tok.vocab_size - 256));
    cr_assert_str_eq(gguf_value(&g, "tokenizer.ggml.merges"), merges);
    cr_assert_str_eq(g.first_token, "\xc4\x80", "byte 0 is U+0100 in GPT-2's table");
    /* The first merge joins two byte tokens; a space byte (0x20) would be U+0120 "Ġ". */
    char expected[16] = "";
    for (int side = 0; side < 2; side++) {
        unsigned b = tok.token_bytes[tok.merges[0][side]][0];
        char piece[4] = {(char)b, 0};
        if (b == ' ') snprintf(piece, sizeof piece, "\xc4\xa0");
        strcat(expected, piece);
        if (!side) strcat(expected, " ");
    }
    cr_assert_str_eq(g.first_merge, expected);
    cr_assert_eq(g.n_tensors, 2 + 9 * 2, "tied: no output.weight");
    gguf_assert_param(&g, "token_embd.weight", 0, m.tok_emb);
    gguf_assert_param(&g, "output_norm.weight", 0, m.final_norm);
    for (int l = 0; l < 2; l++) {
        gguf_assert_param(&g, "blk.%d.attn_q.weight", l, m.layers[l].primary.wq); /* interleaved, as llama.cpp */
        gguf_assert_param(&g, "blk.%d.attn_k.weight", l, m.layers[l].primary.wk);
        gguf_assert_param(&g, "blk.%d.attn_v.weight", l, m.layers[l].primary.wv);
        gguf_assert_param(&g, "blk.%d.attn_output.weight", l, m.layers[l].primary.wo);
        gguf_assert_param(&g, "blk.%d.attn_norm.weight", l, m.layers[l].attn_norm);
        gguf_assert_param(&g, "blk.%d.ffn_norm.weight", l, m.layers[l].ffn_norm);
        gguf_assert_param(&g, "blk.%d.ffn_gate.weight", l, m.layers[l].primary.ffn[0]);
        gguf_assert_param(&g, "blk.%d.ffn_up.weight", l, m.layers[l].primary.ffn[1]);
        gguf_assert_param(&g, "blk.%d.ffn_down.weight", l, m.layers[l].primary.ffn[2]);
    }
    free(g.bytes);
    data_tokenizer_free(&tok);
    model_free(&m);
}

Test(export, gguf_gpt2_keys_and_tensors) {
    model m;
    interop_make_model(&m, FAMILY_NANOGPT, "tie_embeddings=0", 9);
    cr_assert_eq(interop_export_gguf(&m, NULL, tmp_path("g.gguf")), DT_OK, "%s", dt_error_message());
    gguf_view g;
    gguf_read(tmp_path("g.gguf"), &g);
    cr_assert_str_eq(gguf_value(&g, "general.architecture"), "gpt2");
    cr_assert_str_eq(gguf_value(&g, "gpt2.feed_forward_length"), "64");
    cr_assert_str_eq(gguf_value(&g, "gpt2.attention.layer_norm_epsilon"), "1e-05");
    cr_assert_str_eq(gguf_value(&g, "tokenizer.ggml.model"), "no_vocab", "llama.cpp requires the key");
    cr_assert_eq(g.n_tensors, 5 + 12 * 2);
    gguf_assert_param(&g, "token_embd.weight", 0, m.tok_emb);
    gguf_assert_param(&g, "position_embd.weight", 0, m.pos_emb);
    gguf_assert_param(&g, "output.weight", 0, m.lm_head);
    gguf_assert_param(&g, "output_norm.bias", 0, m.final_norm_bias);
    for (int l = 0; l < 2; l++) {
        /* attn_qkv [3C, C]: q, k, v rows stacked, untransposed. */
        float qkv[48 * 16], bias[48];
        const model_block_weights *w = &m.layers[l].primary;
        memcpy(qkv, w->wq->data, 256 * 4), memcpy(qkv + 256, w->wk->data, 256 * 4),
            memcpy(qkv + 512, w->wv->data, 256 * 4);
        memcpy(bias, w->wq_bias->data, 64), memcpy(bias + 16, w->wk_bias->data, 64),
            memcpy(bias + 32, w->wv_bias->data, 64);
        gguf_assert(&g, "blk.%d.attn_qkv.weight", l, qkv, 2, (const int64_t[]){48, 16});
        gguf_assert(&g, "blk.%d.attn_qkv.bias", l, bias, 1, (const int64_t[]){48});
        gguf_assert_param(&g, "blk.%d.attn_output.weight", l, w->wo);
        gguf_assert_param(&g, "blk.%d.ffn_up.weight", l, w->ffn[0]);
        gguf_assert_param(&g, "blk.%d.ffn_down.bias", l, w->ffn[3]);
        gguf_assert_param(&g, "blk.%d.attn_norm.bias", l, m.layers[l].attn_norm_bias);
    }
    free(g.bytes);
    model_free(&m);
}

/* -------------------------------------------------------------- refusals */

Test(export, configs_a_format_cannot_express_are_refused_with_the_reason) {
    struct {
        model_family family;
        const char *pairs;
        interop_format format;
        const char *needle;
    } cases[] = {
        {FAMILY_MOE, "", EXPORT_LLAMA2C, "family moe"},
        {FAMILY_MOE, "branch=decode share=off", EXPORT_HF, "share = off"},
        {FAMILY_LLAMA, "branch=decode share=off", EXPORT_HF, "share = off"},
        {FAMILY_NANOGPT, "branch=decode share=off", EXPORT_GGUF, "share = off"},
        {FAMILY_NANOGPT, "", EXPORT_LLAMA2C, "family nanogpt"},
        {FAMILY_LLAMA, "rope_theta=500000", EXPORT_LLAMA2C, "rope_theta"},
        {FAMILY_LLAMA, "norm_eps=1e-6", EXPORT_LLAMA2C, "norm_eps"},
        {FAMILY_LLAMA, "n_loop=2", EXPORT_HF, "n_loop"},
        {FAMILY_NANOGPT, "n_loop=3 disco=1", EXPORT_GGUF, "n_loop"},
        {FAMILY_LLAMA, "alibi=1", EXPORT_HF, "alibi = 1"}, /* SPEC §6.4: would load as a RoPE model */
        {FAMILY_NANOGPT, "alibi=1", EXPORT_GGUF, "alibi = 1"},
        {FAMILY_LLAMA, "alibi=1", EXPORT_LLAMA2C, "alibi = 1"},
        {FAMILY_LLAMA, "tok_emb_tables=2", EXPORT_HF, "tok_emb_tables = 2"}, /* one embedding table in each format */
        {FAMILY_NANOGPT, "tok_emb_tables=2", EXPORT_GGUF, "tok_emb_tables = 2"},
        {FAMILY_LLAMA, "tok_emb_tables=2", EXPORT_LLAMA2C, "tok_emb_tables = 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model m;
        interop_make_model(&m, cases[i].family, cases[i].pairs, 10);
        const char *out = tmp_path("refused");
        dt_status status = cases[i].format == EXPORT_HF        ? interop_export_hf(&m, out)
                           : cases[i].format == EXPORT_LLAMA2C ? interop_export_llama2c(&m, NULL, out)
                                                               : interop_export_gguf(&m, NULL, out);
        cr_assert_eq(status, DT_ERR, "case %zu is refused", i);
        cr_assert(strstr(dt_error_message(), cases[i].needle), "case %zu: %s", i, dt_error_message());
        struct stat st;
        cr_assert_neq(stat(out, &st), 0, "case %zu: nothing written", i);
        model_free(&m);
    }
}

/* ------------------------------------------------------------------ moe */

Test(export, hf_mixtral_splits_experts_and_names_the_router) {
    model m;
    interop_make_model(&m, FAMILY_MOE, "", 11);
    cr_assert_eq(interop_export_hf(&m, tmp_path("mixtral")), DT_OK, "%s", dt_error_message());
    st_file f;
    st_open(&f, tmp_path("mixtral/model.safetensors"));
    assert_header_rules(&f);
    cr_assert_eq(st_count(&f), 3 + (7 + 3 * 3) * 2, "embed, norm, head; per layer 7 + 3 tensors per expert");
    const int64_t hd = 4;
    for (int l = 0; l < 2; l++) {
        const model_block_weights *w = &m.layers[l].primary;
        assert_same(&f, "model.layers.%d.block_sparse_moe.gate.weight", l, w->ffn[0]);
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", l);
        assert_tensor(&f, name, dt_f32(w->wq), w->wq->size, 2, w->wq->shape, half_split_index, &hd);
        for (int e = 0; e < 3; e++) {
            const dt_tensor *parts[3] = {w->ffn[1], w->ffn[2], w->ffn[3]};
            const char *names[3] = {"w1", "w3", "w2"};
            for (int p = 0; p < 3; p++) {
                const dt_tensor *t = parts[p];
                const int64_t per = t->size / 3;
                snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, names[p]);
                assert_tensor(&f, name, dt_f32(t) + e * per, per, 2, t->shape + 1, same_index, NULL);
            }
        }
    }
    st_close(&f);
    size_t n;
    char *config = (char *)interop_read_all(tmp_path("mixtral/config.json"), &n);
    cr_assert(strstr(config, "\"MixtralForCausalLM\"") && strstr(config, "\"num_local_experts\": 3,") &&
                  strstr(config, "\"num_experts_per_tok\": 2,") && strstr(config, "\"router_aux_loss_coef\": 0.01,"),
              "%s", config);
    free(config);
    model_free(&m);
}

Test(export, gguf_moe_is_llama_with_experts) {
    model m;
    interop_make_model(&m, FAMILY_MOE, "branch=decode", 12);
    cr_assert_eq(interop_export_gguf(&m, NULL, tmp_path("moe.gguf")), DT_OK, "%s", dt_error_message());
    gguf_view g;
    gguf_read(tmp_path("moe.gguf"), &g);
    cr_assert_str_eq(gguf_value(&g, "general.architecture"), "llama");
    cr_assert_str_eq(gguf_value(&g, "llama.expert_count"), "3");
    cr_assert_str_eq(gguf_value(&g, "llama.expert_used_count"), "2");
    cr_assert_str_eq(gguf_value(&g, "llama.feed_forward_length"), "24", "the expert width");
    cr_assert_eq(g.n_tensors, 3 + 10 * 2);
    for (int l = 0; l < 2; l++) {
        const model_block_weights *w = &m.layers[l].primary;
        gguf_assert_param(&g, "blk.%d.ffn_gate_inp.weight", l, w->ffn[0]);
        gguf_assert_param(&g, "blk.%d.ffn_gate_exps.weight", l, w->ffn[1]); /* ne {C, F, E} */
        gguf_assert_param(&g, "blk.%d.ffn_up_exps.weight", l, w->ffn[2]);
        gguf_assert_param(&g, "blk.%d.ffn_down_exps.weight", l, w->ffn[3]); /* ne {F, C, E} */
        gguf_assert_param(&g, "blk.%d.attn_q.weight", l, w->wq);
    }
    free(g.bytes);
    st_file f;
    st_open(&f, tmp_path("moe.branch.safetensors"));
    cr_assert_eq(st_count(&f), 1 + 2 * 2,
                 "branch.tok_emb, couple_q and couple_out per layer (no couple_hidden in moe)");
    cr_assert(strstr(f.header, "\"dbranch.family\":\"moe\""));
    st_close(&f);
    model_free(&m);
}
