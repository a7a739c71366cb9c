/* The probes of `dbranch analyze` (eval/probe.h) against hand-built cases and
 * direct computations: the attention distance of uniform attention over the
 * t + 1 visible keys is t/2 and of attention on the first key is t; with
 * zero queries a model attends uniformly in every layer, whatever its head
 * count; the input RMS of a model whose sublayers output nothing is the
 * embeddings' (the residual sum), or the embeddings' over n_j (the uniform
 * route over s_0 and j zero sources); the routing weights at SPEC init are
 * the uniform mean 1/n_j (AttnRes's structural check), and with a nonzero
 * final query they are the softmax computed here. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/probe.h"
#include "test_eval_util.h"

enum { N_VAL = 70, N_TRAIN = 50, SEQ = 16 };

static char data_path[256];
static int32_t val[N_VAL];

static void write_dataset(void) {
    snprintf(data_path, sizeof data_path, "/tmp/dbranch_test_eval_probe_%d.h5", (int)getpid());
    data_tokenizer tok;
    cr_assert(data_tokenizer_byte(&tok) == DT_OK);
    int32_t train[N_TRAIN];
    eval_test_tokens(train, N_TRAIN, 256, 1);
    eval_test_tokens(val, N_VAL, 256, 2);
    cr_assert(data_tokens_write(data_path, &tok, train, N_TRAIN, val, N_VAL, "test") == DT_OK, "%s",
              dt_error_message());
    data_tokenizer_free(&tok);
}

static void remove_dataset(void) { unlink(data_path); }

TestSuite(eval_probe, .init = write_dataset, .fini = remove_dataset);

/* Runs the probes over every window of SEQ tokens of the val split. */
static void probe(model *m, eval_probe_result *r) {
    data_tokens data;
    cr_assert(data_tokens_open(&data, data_path) == DT_OK, "%s", dt_error_message());
    eval_probe_options o = eval_probe_default_options();
    o.seq_len = SEQ;
    cr_assert(eval_probe_run(m, &data, &o, r) == DT_OK, "%s", dt_error_message());
    cr_assert_eq(r->n_windows, (N_VAL - 1) / SEQ);
    data_tokens_close(&data);
}

/* Sets every element of the named parameters (a substring of the SPEC name) to value. */
static void fill_params(model *m, const char *name_part, float value) {
    int found = 0;
    for (int i = 0; i < m->n_params; i++) {
        if (!strstr(m->params[i].name, name_part)) continue;
        dt_tensor *t = m->params[i].tensor;
        for (int64_t j = 0; j < t->size; j++)
            dt_f32(t)[j] = value;
        found = 1;
    }
    cr_assert(found, "no parameter named *%s*", name_part);
}

/* Zero every parameter but the embedding and the norm weights: each
 * sublayer's output is then zero (no biases in llama). */
static void silence_sublayers(model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        if (!strcmp(name, "tok_emb.weight") || strstr(name, "norm.weight")) continue;
        dt_tensor *t = m->params[i].tensor;
        memset(t->data, 0, (size_t)t->size * sizeof(float));
    }
}

/* sqrt(mean x^2) of the embedding rows of the windows' input tokens, in double. */
static double embedding_rms(const model *m, int64_t n_windows) {
    const int64_t C = m->config.d_model;
    double sum = 0.0;
    for (int64_t i = 0; i < n_windows * SEQ; i++) {
        const float *row = dt_f32(m->tok_emb) + (int64_t)val[i] * C;
        for (int64_t c = 0; c < C; c++)
            sum += (double)row[c] * (double)row[c];
    }
    return sqrt(sum / (double)(n_windows * SEQ * C));
}

Test(eval_probe, uniform_attention_over_t_plus_1_keys_is_t_over_2) {
    enum { T = 9, H = 2, HD = 4 };
    float q[T * H * HD] = {0}, k[T * HD];
    double scores[T];
    for (int i = 0; i < T * HD; i++)
        k[i] = (float)sin(1.0 + i); /* any keys: a zero query scores them all 0 */
    /* one position alone: t = 5 over keys 0..5 is 5/2 */
    const double five = eval_probe_attention_distance(q, k, 6, H, 1, HD, scores) -
                        eval_probe_attention_distance(q, k, 5, H, 1, HD, scores);
    cr_expect_float_eq(five, H * 2.5, 1e-12, "position 5: %.15g", five / H);
    /* all positions: sum_t t/2 per head */
    const double total = eval_probe_attention_distance(q, k, T, H, 1, HD, scores);
    cr_expect_float_eq(total, H * T * (T - 1) / 4.0, 1e-12, "total %.15g", total);
}

Test(eval_probe, attention_on_the_first_key_is_t_and_kv_heads_map_by_group) {
    enum { T = 7, H = 4, HKV = 2, HD = 2 };
    float q[T * H * HD] = {0}, k[T * HKV * HD] = {0};
    double scores[T];
    for (int t = 0; t < T; t++)
        for (int h = 2; h < 4; h++)
            q[t * H * HD + h * HD] = 40.0f; /* heads 2, 3 ask for dimension 0 ... */
    k[0 * HKV * HD + 1 * HD] = 40.0f;       /* ... which only key 0 of kv head 1 (theirs: h / (H/Hkv)) has */
    /* heads 0, 1 (zero queries): uniform, sum t/2 each; heads 2, 3: on key 0, sum t each */
    const double total = eval_probe_attention_distance(q, k, T, H, HKV, HD, scores);
    cr_expect_float_eq(total, 2 * T * (T - 1) / 4.0 + 2 * T * (T - 1) / 2.0, 1e-9, "total %.15g", total);
    /* with one kv head every query head reads kv head 0, whose keys are all zero: uniform */
    float k1[T * HD] = {0};
    const double shared = eval_probe_attention_distance(q, k1, T, H, 1, HD, scores);
    cr_expect_float_eq(shared, H * T * (T - 1) / 4.0, 1e-9, "one kv head %.15g", shared);
}

Test(eval_probe, zero_queries_attend_uniformly_in_every_layer_of_the_forward) {
    model m;
    eval_test_model(&m,
                    "family=llama vocab_size=256 block_size=16 n_layer=3 n_head=4 n_kv_head=4 d_model=16 d_ff=32 "
                    "layer_heads=1,2,4",
                    5);
    fill_params(&m, "attn.wq.weight", 0.0f);
    eval_probe_result r;
    probe(&m, &r);
    const int64_t heads[3] = {1, 2, 4};
    for (int64_t l = 0; l < 3; l++) {
        cr_expect_eq(r.heads[l], heads[l], "layer %lld heads", (long long)l);
        cr_expect_float_eq(r.attn_distance[l], (SEQ - 1) / 4.0, 1e-4, "layer %lld distance %.8f", (long long)l,
                           r.attn_distance[l]);
    }
    cr_expect_eq(r.routed, 0);
    eval_probe_result_free(&r);
    model_free(&m);
}

Test(eval_probe, input_rms_of_silent_sublayers_is_the_embeddings) {
    model m;
    eval_test_model(&m, "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 n_kv_head=2 d_model=16 d_ff=32",
                    3);
    silence_sublayers(&m);
    eval_probe_result r;
    probe(&m, &r);
    const double want = embedding_rms(&m, r.n_windows);
    for (int64_t j = 0; j < 5; j++)
        cr_expect_float_eq(r.input_rms[j], want, 1e-6 * want, "sublayer %lld: %.8f want %.8f", (long long)j,
                           r.input_rms[j], want);
    eval_probe_result_free(&r);
    model_free(&m);
}

Test(eval_probe, the_ffn_input_is_the_stream_between_the_sublayers) {
    model m;
    eval_test_model(&m, "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 n_kv_head=2 d_model=16 d_ff=32",
                    3);
    fill_params(&m, "attn.wo.weight", 0.0f); /* attention adds nothing */
    fill_params(&m, "layers.1.mlp.", 0.0f);  /* nor does layer 1's FFN: only layer 0's FFN writes */
    eval_probe_result r;
    probe(&m, &r);
    const double emb = embedding_rms(&m, r.n_windows);
    cr_expect_float_eq(r.input_rms[0], emb, 1e-6 * emb, "attention 0");
    cr_expect_float_eq(r.input_rms[1], emb, 1e-6 * emb, "FFN 0 sees the stream before its own output");
    cr_expect(fabs(r.input_rms[2] - emb) > 1e-3 * emb, "attention 1 sees FFN 0's output (%.8f)", r.input_rms[2]);
    for (int64_t j = 3; j < 5; j++)
        cr_expect_float_eq(r.input_rms[j], r.input_rms[2], 1e-6 * emb, "sublayer %lld", (long long)j);
    eval_probe_result_free(&r);
    model_free(&m);
}

Test(eval_probe, input_rms_of_the_uniform_route_over_silent_sources_falls_as_1_over_n) {
    model m;
    eval_test_model(&m,
                    "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 n_kv_head=2 d_model=16 d_ff=32 "
                    "attn_res=full",
                    3);
    silence_sublayers(&m); /* the queries too: every route is the uniform mean */
    eval_probe_result r;
    probe(&m, &r);
    const double emb = embedding_rms(&m, r.n_windows);
    for (int64_t j = 0; j < 5; j++) /* h_j = (s_0 + 0 + ... + 0) / (j + 1) */
        cr_expect_float_eq(r.input_rms[j], emb / (double)(j + 1), 1e-6 * emb, "sublayer %lld: %.8f want %.8f",
                           (long long)j, r.input_rms[j], emb / (double)(j + 1));
    eval_probe_result_free(&r);
    model_free(&m);
}

/* At SPEC init (queries zero) every route of full, MHAR and block attn_res is
 * the uniform mean of its sources. */
static void check_uniform_at_init(const char *options, const int64_t *sources) {
    char spec[512];
    snprintf(spec, sizeof spec,
             "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 n_kv_head=2 d_model=16 d_ff=32 %s", options);
    model_config c = eval_test_config(spec);
    model m;
    cr_assert(model_create(&m, &c) == DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    model_init_weights(&m, &rng);
    eval_probe_result r;
    probe(&m, &r);
    cr_assert_eq(r.routed, 1);
    for (int64_t j = 0; j < 5; j++) {
        cr_expect_eq(r.route_sources[j], sources[j], "%s route %lld: %lld sources", options, (long long)j,
                     (long long)r.route_sources[j]);
        for (int64_t i = 0; i < r.route_sources[j]; i++)
            cr_expect_float_eq(r.route_weight[j * 5 + i], 1.0 / (double)sources[j], 1e-6,
                               "%s route %lld source %lld: %.8f", options, (long long)j, (long long)i,
                               r.route_weight[j * 5 + i]);
    }
    eval_probe_result_free(&r);
    model_free(&m);
}

Test(eval_probe, routing_weights_at_init_are_the_uniform_mean) {
    const int64_t full[5] = {1, 2, 3, 4, 5}, two_blocks[5] = {1, 2, 2, 3, 3};
    check_uniform_at_init("attn_res=full", full);
    check_uniform_at_init("attn_res=full attn_res_heads=4", full);
    check_uniform_at_init("attn_res=block attn_res_blocks=2", two_blocks);
}

Test(eval_probe, routing_weights_with_a_query_are_its_softmax) {
    model m;
    eval_test_model(&m,
                    "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 n_kv_head=2 d_model=16 d_ff=32 "
                    "attn_res=full",
                    3);
    silence_sublayers(&m);
    fill_params(&m, "attn_res.final_norm.weight", 1.0f);
    dt_tensor *w = model_find_param(&m, "attn_res.final_query")->tensor;
    for (int64_t c = 0; c < w->size; c++)
        dt_f32(w)[c] = (float)(0.5 * cos(0.7 * c));
    eval_probe_result r;
    probe(&m, &r);
    /* Final route: sources s_0 and four zeros, whose keys are zero; so
     * alpha_0 = e^z / (e^z + 4) with z = w . RMSNorm(s_0), and 4 alpha_i = 1 - alpha_0. */
    const int64_t C = m.config.d_model;
    double want0 = 0.0;
    for (int64_t t = 0; t < r.n_windows * SEQ; t++) {
        const float *s = dt_f32(m.tok_emb) + (int64_t)val[t] * C;
        double sq = 0.0, z = 0.0;
        for (int64_t c = 0; c < C; c++)
            sq += (double)s[c] * s[c];
        const double rstd = 1.0 / sqrt(sq / (double)C + m.config.norm_eps);
        for (int64_t c = 0; c < C; c++)
            z += (double)dt_f32(w)[c] * s[c] * rstd;
        want0 += exp(z) / (exp(z) + 4.0);
    }
    want0 /= (double)(r.n_windows * SEQ);
    cr_expect(fabs(want0 - 0.2) > 0.01, "the query must move the weight off uniform (%.4f)", want0);
    cr_expect_float_eq(r.route_weight[4 * 5 + 0], want0, 1e-5, "alpha_0 %.8f want %.8f", r.route_weight[20], want0);
    for (int64_t i = 1; i < 5; i++)
        cr_expect_float_eq(r.route_weight[4 * 5 + i], (1.0 - want0) / 4.0, 1e-5, "alpha_%lld", (long long)i);
    for (int64_t i = 0; i < 4; i++) /* the other routes keep their zero queries */
        cr_expect_float_eq(r.route_weight[3 * 5 + i], 0.25, 1e-6, "route 3 source %lld", (long long)i);
    eval_probe_result_free(&r);
    model_free(&m);
}
