/* The exported HF files, run the way transformers runs them: an independent
 * forward pass written here from HF's model definitions (GPT2LMHeadModel:
 * Conv1D x @ W with W [in, out], fused c_attn, gelu_new; LlamaForCausalLM:
 * rotate_half RoPE with inv_freq = theta^(-2i/hd), GQA by repeating kv heads,
 * RMSNorm, SwiGLU with gate/up/down; MixtralForCausalLM: the llama attention
 * and a top-k renormalised softmax router over SwiGLU experts), in double precision, reading only
 * model.safetensors (the test reader) and config.json. Its logits must
 * match dbranch's within SPEC's logits tolerance (1e-4 x the largest
 * magnitude), which fails if any name, transpose, permutation or config key
 * is wrong. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop/export.h"
#include "support/scratch.h"
#include "test_interop_util.h"

static char tmp_dir[256];
static void make_tmp_dir(void) { test_scratch_dir(tmp_dir, sizeof tmp_dir, "interop_hf_forward"); }
static void remove_tmp_dir(void) { test_remove_dir(tmp_dir); }
TestSuite(hf_forward, .init = make_tmp_dir, .fini = remove_tmp_dir);

enum { T = 7, MAX_C = 64, MAX_F = 256, MAX_V = 64 };

/* A number of config.json by key (the test's own reading: `"key": value`). */
static double config_number(const char *json, const char *key) {
    char needle[96];
    snprintf(needle, sizeof needle, "\"%s\": ", key);
    const char *at = strstr(json, needle);
    cr_assert(at, "config.json has %s", key);
    if (!strncmp(at + strlen(needle), "true", 4)) return 1;
    if (!strncmp(at + strlen(needle), "false", 5)) return 0;
    return strtod(at + strlen(needle), NULL);
}

static const float *weight(const st_file *f, const char *fmt, int layer, int64_t expected_size) {
    char name[160];
    snprintf(name, sizeof name, fmt, layer);
    int ndim;
    int64_t shape[4];
    const float *w = st_tensor(f, name, &ndim, shape);
    cr_assert(w, "model.safetensors has %s", name);
    int64_t size = 1;
    for (int d = 0; d < ndim; d++)
        size *= shape[d];
    cr_assert_eq(size, expected_size, "%s size", name);
    return w;
}

/* nn.Linear: y[out] = W[out, in] x (+ b). */
static void linear(double *y, const float *w, const float *b, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; i++)
            s += (double)w[o * in + i] * x[i];
        y[o] = s;
    }
}

/* Conv1D: y[out] = x @ W[in, out] + b. */
static void conv1d(double *y, const float *w, const float *b, const double *x, int in, int out) {
    for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++)
            s += x[i] * (double)w[i * out + o];
        y[o] = s;
    }
}

static void layer_norm(double *y, const double *x, const float *w, const float *b, int C, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < C; i++)
        mean += x[i] / C;
    for (int i = 0; i < C; i++)
        var += (x[i] - mean) * (x[i] - mean) / C;
    for (int i = 0; i < C; i++)
        y[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + (b ? b[i] : 0);
}

static void rms_norm(double *y, const double *x, const float *w, int C, double eps) {
    double ms = 0;
    for (int i = 0; i < C; i++)
        ms += x[i] * x[i] / C;
    for (int i = 0; i < C; i++)
        y[i] = x[i] / sqrt(ms + eps) * w[i];
}

/* HF's rotate_half RoPE on one head vector of width hd at position t. */
static void rotate_half(double *v, int hd, int t, double theta) {
    for (int i = 0; i < hd / 2; i++) {
        const double angle = t * pow(theta, -2.0 * i / hd), c = cos(angle), s = sin(angle);
        const double a = v[i], b = v[i + hd / 2];
        v[i] = a * c - b * s;
        v[i + hd / 2] = b * c + a * s;
    }
}

/* Causal attention of query row t over keys/values 0..t: q [H*hd], k, v [T][Hkv*hd]. */
static void attend(double *y, const double *q, double k[][MAX_C], double v[][MAX_C], int t, int H, int Hkv, int hd) {
    for (int h = 0; h < H; h++) {
        const int g = h / (H / Hkv);
        double scores[T], largest = -INFINITY, total = 0;
        for (int s = 0; s <= t; s++) {
            scores[s] = 0;
            for (int i = 0; i < hd; i++)
                scores[s] += q[h * hd + i] * k[s][g * hd + i];
            scores[s] /= sqrt((double)hd);
            largest = fmax(largest, scores[s]);
        }
        for (int s = 0; s <= t; s++)
            total += scores[s] = exp(scores[s] - largest);
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int s = 0; s <= t; s++)
                acc += scores[s] / total * v[s][g * hd + i];
            y[h * hd + i] = acc;
        }
    }
}

/* MixtralSparseMoeBlock: softmax over all router logits, the top-K
 * probabilities renormalised to sum 1, each expert w2(silu(w1 x) * (w3 x)). */
static void mixtral_moe(double *y, const st_file *f, int l, const double *x, int C, int F, int E, int K) {
    double r[16], p[16], total = 0, largest = -INFINITY;
    cr_assert(E <= 16);
    linear(r, weight(f, "model.layers.%d.block_sparse_moe.gate.weight", l, (int64_t)E * C), NULL, x, E, C);
    for (int e = 0; e < E; e++)
        largest = fmax(largest, r[e]);
    for (int e = 0; e < E; e++)
        total += p[e] = exp(r[e] - largest);
    int chosen[16], used[16] = {0};
    double kept = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
        used[best] = 1, chosen[k] = best, kept += p[best] / total;
    }
    for (int i = 0; i < C; i++)
        y[i] = 0;
    for (int k = 0; k < K; k++) {
        char name[3][128];
        const char *which[3] = {"w1", "w3", "w2"};
        for (int w = 0; w < 3; w++)
            snprintf(name[w], sizeof name[w], "model.layers.%%d.block_sparse_moe.experts.%d.%s.weight", chosen[k],
                     which[w]);
        double a[MAX_F], b[MAX_F], o[MAX_C];
        linear(a, weight(f, name[0], l, (int64_t)F * C), NULL, x, F, C);
        linear(b, weight(f, name[1], l, (int64_t)F * C), NULL, x, F, C);
        for (int i = 0; i < F; i++)
            a[i] = a[i] / (1 + exp(-a[i])) * b[i];
        linear(o, weight(f, name[2], l, (int64_t)C * F), NULL, a, C, F);
        const double gate = p[chosen[k]] / total / kept;
        for (int i = 0; i < C; i++)
            y[i] += gate * o[i];
    }
}

/* Logits [T][V] of tokens under HF's LlamaForCausalLM or GPT2LMHeadModel, from the exported directory. */
static void hf_forward(const char *dir, const int32_t *tokens, double logits[][MAX_V]) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n;
    char *json = (char *)interop_read_all(path, &n);
    const int gpt2 = strstr(json, "\"GPT2LMHeadModel\"") != NULL;
    const int mixtral = strstr(json, "\"MixtralForCausalLM\"") != NULL;
    const int E = mixtral ? (int)config_number(json, "num_local_experts") : 0;
    const int K = mixtral ? (int)config_number(json, "num_experts_per_tok") : 0;
    const int V = (int)config_number(json, "vocab_size");
    const int C = (int)config_number(json, gpt2 ? "n_embd" : "hidden_size");
    const int L = (int)config_number(json, gpt2 ? "n_layer" : "num_hidden_layers");
    const int H = (int)config_number(json, gpt2 ? "n_head" : "num_attention_heads");
    const int Hkv = gpt2 ? H : (int)config_number(json, "num_key_value_heads");
    const int F = (int)config_number(json, gpt2 ? "n_inner" : "intermediate_size");
    const double eps = config_number(json, gpt2 ? "layer_norm_epsilon" : "rms_norm_eps");
    const double theta = gpt2 ? 0 : config_number(json, "rope_theta");
    const int tied = (int)config_number(json, "tie_word_embeddings");
    const int positions = (int)config_number(json, gpt2 ? "n_positions" : "max_position_embeddings");
    free(json);
    cr_assert(C <= MAX_C && F <= MAX_F && V <= MAX_V && C % H == 0 && positions >= T);
    const int hd = C / H, kv = Hkv * hd;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file f;
    st_open(&f, path);
    const float *embed = weight(&f, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", 0, (int64_t)V * C);
    double h[T][MAX_C], x[MAX_C], k[L][T][MAX_C], v[L][T][MAX_C];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < C; i++)
            h[t][i] = embed[tokens[t] * C + i];
        if (gpt2) {
            const float *wpe = weight(&f, "transformer.wpe.weight", 0, (int64_t)positions * C);
            for (int i = 0; i < C; i++)
                h[t][i] += wpe[t * C + i];
        }
    }
    /* Token by token, as generation runs it: position t attends to the cache 0..t. */
    for (int t = 0; t < T; t++) {
        double *r = h[t];
        for (int l = 0; l < L; l++) {
            double q[MAX_C], y[MAX_C], o[MAX_C], a[MAX_F], b[MAX_F];
            if (gpt2) {
                layer_norm(x, r, weight(&f, "transformer.h.%d.ln_1.weight", l, C),
                           weight(&f, "transformer.h.%d.ln_1.bias", l, C), C, eps);
                double qkv[3 * MAX_C];
                conv1d(qkv, weight(&f, "transformer.h.%d.attn.c_attn.weight", l, (int64_t)C * 3 * C),
                       weight(&f, "transformer.h.%d.attn.c_attn.bias", l, 3 * C), x, C, 3 * C);
                memcpy(q, qkv, sizeof(double) * C);
                memcpy(k[l][t], qkv + C, sizeof(double) * C);
                memcpy(v[l][t], qkv + 2 * C, sizeof(double) * C);
                attend(y, q, k[l], v[l], t, H, Hkv, hd);
                conv1d(o, weight(&f, "transformer.h.%d.attn.c_proj.weight", l, (int64_t)C * C),
                       weight(&f, "transformer.h.%d.attn.c_proj.bias", l, C), y, C, C);
                for (int i = 0; i < C; i++)
                    r[i] += o[i];
                layer_norm(x, r, weight(&f, "transformer.h.%d.ln_2.weight", l, C),
                           weight(&f, "transformer.h.%d.ln_2.bias", l, C), C, eps);
                conv1d(a, weight(&f, "transformer.h.%d.mlp.c_fc.weight", l, (int64_t)C * F),
                       weight(&f, "transformer.h.%d.mlp.c_fc.bias", l, F), x, C, F);
                for (int i = 0; i < F; i++) /* gelu_new */
                    a[i] = 0.5 * a[i] * (1 + tanh(sqrt(2 / M_PI) * (a[i] + 0.044715 * a[i] * a[i] * a[i])));
                conv1d(o, weight(&f, "transformer.h.%d.mlp.c_proj.weight", l, (int64_t)F * C),
                       weight(&f, "transformer.h.%d.mlp.c_proj.bias", l, C), a, F, C);
            } else {
                rms_norm(x, r, weight(&f, "model.layers.%d.input_layernorm.weight", l, C), C, eps);
                linear(q, weight(&f, "model.layers.%d.self_attn.q_proj.weight", l, (int64_t)C * C), NULL, x, C, C);
                linear(k[l][t], weight(&f, "model.layers.%d.self_attn.k_proj.weight", l, (int64_t)kv * C), NULL, x, kv,
                       C);
                linear(v[l][t], weight(&f, "model.layers.%d.self_attn.v_proj.weight", l, (int64_t)kv * C), NULL, x, kv,
                       C);
                for (int hh = 0; hh < H; hh++)
                    rotate_half(q + hh * hd, hd, t, theta);
                for (int hh = 0; hh < Hkv; hh++)
                    rotate_half(k[l][t] + hh * hd, hd, t, theta);
                attend(y, q, k[l], v[l], t, H, Hkv, hd);
                linear(o, weight(&f, "model.layers.%d.self_attn.o_proj.weight", l, (int64_t)C * C), NULL, y, C, C);
                for (int i = 0; i < C; i++)
                    r[i] += o[i];
                rms_norm(x, r, weight(&f, "model.layers.%d.post_attention_layernorm.weight", l, C), C, eps);
                if (mixtral)
                    mixtral_moe(o, &f, l, x, C, F, E, K);
                else {
                    linear(a, weight(&f, "model.layers.%d.mlp.gate_proj.weight", l, (int64_t)F * C), NULL, x, F, C);
                    linear(b, weight(&f, "model.layers.%d.mlp.up_proj.weight", l, (int64_t)F * C), NULL, x, F, C);
                    for (int i = 0; i < F; i++)
                        a[i] = a[i] / (1 + exp(-a[i])) * b[i];
                    linear(o, weight(&f, "model.layers.%d.mlp.down_proj.weight", l, (int64_t)C * F), NULL, a, C, F);
                }
            }
            for (int i = 0; i < C; i++)
                r[i] += o[i];
        }
        if (gpt2)
            layer_norm(x, r, weight(&f, "transformer.ln_f.weight", 0, C), weight(&f, "transformer.ln_f.bias", 0, C), C,
                       eps);
        else
            rms_norm(x, r, weight(&f, "model.norm.weight", 0, C), C, eps);
        const float *head = tied ? embed : weight(&f, "lm_head.weight", 0, (int64_t)V * C);
        linear(logits[t], head, NULL, x, V, C);
    }
    st_close(&f);
}

static void assert_hf_logits(model_family family, const char *pairs, uint64_t seed) {
    model m;
    interop_make_model(&m, family, pairs, seed);
    /* Larger weights than init, so the logits are far from flat and a wrong layout shows. */
    for (int i = 0; i < m.n_params; i++)
        if (m.params[i].is_matrix || m.params[i].is_embedding) {
            float *w = dt_f32(m.params[i].tensor);
            for (int64_t j = 0; j < m.params[i].tensor->size; j++)
                w[j] *= 20.0f;
        }
    char dir[400];
    snprintf(dir, sizeof dir, "%s/m%llu", tmp_dir, (unsigned long long)seed);
    cr_assert_eq(interop_export_hf(&m, dir), DT_OK, "%s", dt_error_message());
    const int32_t tokens[T] = {3, 17, 0, 39, 5, 5, 22};
    double expected[T][MAX_V];
    hf_forward(dir, tokens, expected);
    float *ours = interop_logits(&m, tokens, T);
    const int64_t V = m.config.vocab_size;
    double largest = 0;
    for (int64_t i = 0; i < T * V; i++)
        largest = fmax(largest, fabs(ours[i]));
    cr_assert(largest > 1.0, "logits are not flat (%g)", largest);
    for (int t = 0; t < T; t++)
        for (int64_t j = 0; j < V; j++)
            cr_assert(fabs(ours[t * V + j] - expected[t][j]) <= 1e-4 * largest,
                      "%s: position %d logit %lld: %g vs HF %g", pairs, t, (long long)j, ours[t * V + j],
                      expected[t][j]);
    free(ours);
    model_free(&m);
}

Test(hf_forward, gpt2_logits_match_an_independent_hf_forward) {
    assert_hf_logits(FAMILY_NANOGPT, "", 41);
    assert_hf_logits(FAMILY_NANOGPT, "tie_embeddings=0 norm_eps=1e-3", 42);
}

Test(hf_forward, llama_logits_match_an_independent_hf_forward) {
    assert_hf_logits(FAMILY_LLAMA, "", 43);
    assert_hf_logits(FAMILY_LLAMA, "tie_embeddings=1 n_kv_head=1 rope_theta=100 norm_eps=1e-4", 44);
    assert_hf_logits(FAMILY_LLAMA, "branch=decode", 45); /* the primary path of a branch model */
}

Test(hf_forward, mixtral_logits_match_an_independent_hf_forward) {
    assert_hf_logits(FAMILY_MOE, "", 46);
    assert_hf_logits(FAMILY_MOE, "n_expert=4 top_k=1 n_kv_head=1", 47);
}
