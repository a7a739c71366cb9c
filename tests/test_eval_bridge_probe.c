/* The bridge-state probe (eval/bridge_probe.h) on a two-hop file written
 * here by hand, with a model whose state is known by construction: every
 * sublayer outputs zero (llama, no biases), so the stream after every
 * application is the input's embedding row, and the relation's row is set
 * to the bridge's (both graph B queries have bridge 6), so the cosine to
 * tok_emb[b] is 1 at r1 and r2 while the other-entity baseline is
 * cos(tok_emb[6], tok_emb[5]), computed here. The head rows are set so that
 * the head cosine is 1, its baseline -1 and the logit lens lands on b; the
 * state's RMS is that row's.
 * Bad input: a model without a loop, and files that are not two-hop record
 * files, are errors naming what is wrong. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/bridge_probe.h"
#include "test_eval_util.h"

/* BOS 0, EOS 1, relation 2; graph A entities 3, 4; graph B entities 5, 6.
 * Edges: 3 -> 4, 4 -> 3 (A); 5 -> 6, 6 -> 6 (B). */
enum { V = 7, C = 16 };
static const int32_t train[] = {0, 3, 2, 4, 1, 0, 4, 2, 3, 1, 0, 5, 2, 6, 1,
                                0, 6, 2, 6, 1, 0, 3, 2, 2, 3, 0, 4, 2, 2, 4}; /* atomic facts, then A's two-hop */
static const int32_t val[] = {0, 5, 2, 2, 6, 0, 6, 2, 2, 6};                  /* B's two-hop: bridges 6 and 6 */

static char path[256];

static void write_file(const char *file, const int32_t *train_tokens, int64_t n_train, const int32_t *val_tokens,
                       int64_t n_val, int64_t record_len) {
    data_tokenizer tok;
    cr_assert(data_tokenizer_external(&tok, V) == DT_OK);
    int32_t train_answer[64] = {0}, val_answer[64] = {0};
    const data_record_layout layout = {record_len, {train_answer, val_answer}, {NULL, NULL}};
    cr_assert(data_tokens_write_records(file, &tok, train_tokens, n_train, val_tokens, n_val, "test two-hop",
                                        &layout) == DT_OK,
              "%s", dt_error_message());
    data_tokenizer_free(&tok);
}

static void setup(void) {
    snprintf(path, sizeof path, "/tmp/dbranch_test_bridge_%d.h5", (int)getpid());
    write_file(path, train, sizeof train / sizeof *train, val, sizeof val / sizeof *val, 5);
}

static void teardown(void) { unlink(path); }

TestSuite(eval_bridge, .init = setup, .fini = teardown);

static double cosine(const float *a, const float *b) {
    double ab = 0, aa = 0, bb = 0;
    for (int c = 0; c < C; c++) {
        ab += (double)a[c] * b[c];
        aa += (double)a[c] * a[c];
        bb += (double)b[c] * b[c];
    }
    return ab / sqrt(aa * bb);
}

/* The model described at the top: n_loop 2, zero sublayers, rows set. */
static void known_model(model *m, const char *extra) {
    char spec[512];
    snprintf(spec, sizeof spec,
             "family=llama vocab_size=7 block_size=4 n_layer=1 n_head=2 n_kv_head=2 d_model=16 d_ff=32 %s", extra);
    eval_test_model(m, spec, 7);
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        dt_tensor *t = m->params[i].tensor;
        if (!strcmp(name, "tok_emb.weight")) continue;
        for (int64_t j = 0; j < t->size; j++)
            dt_f32(t)[j] = strstr(name, "norm.weight") ? 1.0f : 0.0f; /* lm_head too: set below */
    }
    float *emb = dt_f32(m->tok_emb), *head = dt_f32(m->lm_head);
    cr_assert(m->lm_head != m->tok_emb);
    memcpy(emb + 2 * C, emb + 6 * C, C * sizeof *emb); /* the relation's row is the bridge's */
    for (int c = 0; c < C; c++) {
        head[6 * C + c] = 2.0f * emb[6 * C + c];
        head[5 * C + c] = -emb[6 * C + c];
    }
}

Test(eval_bridge, a_state_equal_to_the_bridge_row_has_cosine_one_and_the_baseline_differs) {
    model m;
    known_model(&m, "n_loop=2");
    data_tokens data;
    cr_assert(data_tokens_open(&data, path) == DT_OK, "%s", dt_error_message());
    eval_bridge_result r;
    cr_assert(eval_bridge_run(&m, &data, SPLIT_VAL, &r) == DT_OK, "%s", dt_error_message());
    cr_expect_eq(r.n_queries, 2);
    cr_expect_eq(r.entities, 2);
    cr_expect_eq(r.relations, 1);
    cr_expect_eq(r.n_loop, 2);
    cr_expect_eq(r.tied, 0);
    const double other = cosine(dt_f32(m.tok_emb) + 6 * C, dt_f32(m.tok_emb) + 5 * C);
    cr_assert(fabs(other - 1.0) > 0.1, "the seed's rows 5 and 6 are too alike for a test: %g", other);
    double rms = 0.0; /* of the state, tok_emb[6] */
    for (int c = 0; c < C; c++)
        rms += (double)dt_f32(m.tok_emb)[6 * C + c] * dt_f32(m.tok_emb)[6 * C + c] / C;
    rms = sqrt(rms);
    for (int s = 0; s < 3; s++) /* after 1, after 2, into 2 */
        for (int p = 0; p < EVAL_BRIDGE_POSITIONS; p++) {
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_EMB), 1.0, 1e-6, "state %d position %d", s, p);
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_EMB_OTHER), other, 1e-6, "state %d", s);
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_HEAD), 1.0, 1e-6, "state %d", s);
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_HEAD_OTHER), -1.0, 1e-6, "state %d", s);
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_LENS), 1.0, 1e-12, "state %d", s);
            cr_expect_float_eq(eval_bridge_value(&r, s, p, EVAL_BRIDGE_RMS), rms, 1e-6, "state %d", s);
        }
    eval_bridge_result_free(&r);
    /* the train split's two-hop queries (graph A, bridges 4 and 3): rows 4 and 3 are not row 2 */
    cr_assert(eval_bridge_run(&m, &data, SPLIT_TRAIN, &r) == DT_OK, "%s", dt_error_message());
    cr_expect_eq(r.n_queries, 2, "the atomic facts are skipped");
    const double expected = (cosine(dt_f32(m.tok_emb) + 2 * C, dt_f32(m.tok_emb) + 4 * C) +
                             cosine(dt_f32(m.tok_emb) + 2 * C, dt_f32(m.tok_emb) + 3 * C)) /
                            2;
    cr_expect_float_eq(eval_bridge_value(&r, 0, 0, EVAL_BRIDGE_EMB), expected, 1e-6);
    eval_bridge_result_free(&r);
    data_tokens_close(&data);
    model_free(&m);
}

static void expect_error(model *m, const char *file, const char *needle) {
    data_tokens data;
    cr_assert(data_tokens_open(&data, file) == DT_OK, "%s", dt_error_message());
    eval_bridge_result r;
    cr_expect_eq(eval_bridge_run(m, &data, SPLIT_VAL, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), needle), "'%s' does not say '%s'", dt_error_message(), needle);
    cr_expect_null(r.value);
    data_tokens_close(&data);
}

Test(eval_bridge, a_model_without_a_loop_and_files_that_are_not_two_hop_are_errors) {
    model m;
    known_model(&m, "n_loop=1");
    expect_error(&m, path, "n_loop = 1");
    model_free(&m);
    known_model(&m, "n_loop=2");
    char other[300];
    snprintf(other, sizeof other, "%s.other.h5", path);
    const int32_t bad_val[] = {0, 5, 2, 2, 5, 0, 6, 2, 2, 6}; /* 5 -> 6 -> 6, not 5 */
    write_file(other, train, 30, bad_val, 10, 5);
    expect_error(&m, other, "/val record 0 is not a query");
    const int32_t no_atomic[] = {0, 3, 2, 2, 3, 0, 4, 2, 2, 4};
    write_file(other, no_atomic, 10, val, 10, 5);
    expect_error(&m, other, "no atomic fact");
    const int32_t pairs[] = {0, 3, 2, 4, 1, 0, 4, 2, 3, 1};
    write_file(other, pairs, 10, pairs, 10, 2);
    expect_error(&m, other, "record_len 2, expected 5");
    unlink(other);
    model_free(&m);
}
