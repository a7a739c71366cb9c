/* eval_loss_run (eval/eval_loss.h): the teacher-forced figures against a
 * direct double-precision computation from model_forward's logits, the decode
 * path (--prompt-len) against the teacher-forced one on the same positions,
 * bits per byte, and the errors for inconsistent inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/eval_loss.h"
#include "test_eval_util.h"

enum { N_VAL = 70, N_TRAIN = 50 };

/* A token file of random tokens (byte tokenizer, or a BPE one learned on random text). */
static void write_dataset(const char *path, int bpe, int32_t *val_out, int64_t *vocab_out) {
    data_tokenizer tok;
    int64_t V = 256;
    if (bpe) {
        uint8_t text[4000];
        dt_rng rng;
        dt_rng_seed(&rng, 9);
        for (int i = 0; i < 4000; i++)
            text[i] = (uint8_t)("abcab cabba"[dt_rng_below(&rng, 11)]);
        cr_assert(data_tokenizer_train_bpe(&tok, text, sizeof text, 270) == DT_OK, "%s", dt_error_message());
        V = tok.vocab_size;
    } else {
        cr_assert(data_tokenizer_byte(&tok) == DT_OK);
    }
    int32_t train[N_TRAIN];
    eval_test_tokens(train, N_TRAIN, V, 1);
    eval_test_tokens(val_out, N_VAL, V, 2);
    cr_assert(data_tokens_write(path, &tok, train, N_TRAIN, val_out, N_VAL, "test") == DT_OK, "%s", dt_error_message());
    data_tokenizer_free(&tok);
    *vocab_out = V;
}

static void temp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "/tmp/dbranch_test_eval_loss_%d_%s.h5", (int)getpid(), name);
}

/* Expected figures over windows of T tokens of val, scoring positions first..T-1. */
typedef struct expected {
    double loss, primary, branch, alpha, bytes;
    int64_t tokens;
} expected;

static expected direct(model *m, const int32_t *val, int64_t n_windows, int64_t T, int64_t first,
                       const int32_t *token_length) {
    expected e = {0};
    int64_t V = m->config.vocab_size;
    double *p = malloc((size_t)V * sizeof(double)), *q = malloc((size_t)V * sizeof(double));
    for (int64_t w = 0; w < n_windows; w++) {
        eval_test_tf tf;
        eval_test_teacher_forced(m, val + w * T, T, &tf);
        for (int64_t t = first; t < T; t++) {
            int32_t y = val[w * T + t + 1];
            eval_test_softmax(p, tf.logits_primary + t * V, V);
            e.primary += -log(p[y]);
            e.alpha += tf.alpha[t];
            if (tf.has_branch) {
                eval_test_softmax(q, tf.logits_branch + t * V, V);
                e.branch += -log(q[y]);
            }
            e.loss += -log(tf.mixture[t * V + y]);
            e.bytes += token_length ? token_length[y] : 1;
            e.tokens++;
        }
        eval_test_tf_free(&tf);
    }
    e.loss /= (double)e.tokens;
    e.primary /= (double)e.tokens;
    e.branch /= (double)e.tokens;
    e.alpha /= (double)e.tokens;
    free(p);
    free(q);
    return e;
}

static void expect_close(double got, double want, const char *what) {
    cr_expect(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)), "%s: got %.8f want %.8f", what, got, want);
}

static void check_model(const char *spec, int bpe, int64_t T, int64_t prompt_len) {
    char path[256];
    temp_path(path, sizeof path, bpe ? "bpe" : "byte");
    int32_t val[N_VAL];
    int64_t V;
    write_dataset(path, bpe, val, &V);
    char full_spec[512];
    snprintf(full_spec, sizeof full_spec, "%s vocab_size=%lld", spec, (long long)V);
    model m;
    eval_test_model(&m, full_spec, 7);
    data_tokens data;
    cr_assert(data_tokens_open(&data, path) == DT_OK, "%s", dt_error_message());

    int64_t n_windows = (N_VAL - 1) / T;
    expected e =
        direct(&m, val, n_windows, T, prompt_len > 0 ? prompt_len - 1 : 0, bpe ? data.tokenizer.token_length : NULL);
    eval_loss_options o = eval_loss_default_options();
    o.seq_len = T;
    o.prompt_len = prompt_len;
    eval_loss_result tf, dec[3];
    cr_assert(eval_loss_run(&m, &data, &o, &tf) == DT_OK, "%s", dt_error_message());
    cr_expect_eq(tf.n_windows, n_windows);
    cr_expect_eq(tf.n_tokens, e.tokens);
    expect_close(tf.loss, e.loss, "teacher-forced loss");
    expect_close(tf.loss_primary, e.primary, "loss_primary");
    expect_close(tf.loss_branch, e.branch, "loss_branch");
    expect_close(tf.alpha_mean, e.alpha, "alpha");
    cr_expect_eq((double)tf.n_bytes, e.bytes);
    expect_close(tf.bits_per_byte, e.loss * (double)e.tokens / e.bytes / log(2.0), "bits per byte");
    if (m.config.branch != BRANCH_DECODE) expect_close(tf.loss, tf.loss_primary, "no branch: loss == CE");

    if (prompt_len > 0) { /* the decode engine scores the same positions */
        const eval_decode_mode modes[3] = {EVAL_DECODE_GROUPED, EVAL_DECODE_UNGROUPED, EVAL_DECODE_BASELINE};
        for (int i = 0; i < 3; i++) {
            o.method = EVAL_DECODE;
            o.decode_mode = modes[i];
            cr_assert(eval_loss_run(&m, &data, &o, &dec[i]) == DT_OK, "%s", dt_error_message());
            cr_expect_eq(dec[i].n_tokens, e.tokens);
            expect_close(dec[i].loss_primary, e.primary, "decode loss_primary");
            if (modes[i] != EVAL_DECODE_BASELINE) {
                expect_close(dec[i].loss, tf.loss, "decode loss vs teacher-forced");
                expect_close(dec[i].loss_branch, tf.loss_branch, "decode loss_branch");
                expect_close(dec[i].alpha_mean, tf.alpha_mean, "decode alpha");
                expect_close(dec[i].bits_per_byte, tf.bits_per_byte, "decode bits per byte");
            } else { /* the primary alone */
                expect_close(dec[i].loss, e.primary, "baseline decode loss");
            }
        }
    }
    data_tokens_close(&data);
    model_free(&m);
    unlink(path);
}

#define LLAMA_BRANCH "family=llama block_size=16 n_layer=2 n_head=4 n_kv_head=2 d_model=32 d_ff=48 branch=decode "

Test(eval_loss, llama_branch_teacher_forced) { check_model(LLAMA_BRANCH "mix_alpha_min=0.01", 0, 16, 0); }
Test(eval_loss, llama_branch_decode_matches_teacher_forced) {
    check_model(LLAMA_BRANCH "mix_alpha_min=0.01", 0, 16, 5);
}
Test(eval_loss, short_windows_and_prompt_of_one) { check_model(LLAMA_BRANCH, 0, 9, 1); }
Test(eval_loss, nanogpt_baseline) {
    check_model("family=nanogpt block_size=12 n_layer=2 n_head=2 d_model=16 branch=none", 0, 12, 4);
}
Test(eval_loss, moe_replay_decode) {
    check_model("family=moe block_size=12 n_layer=2 n_head=2 d_model=16 d_ff=24 n_expert=4 top_k=2 top_k_branch=1 "
                "branch=decode mix_alpha_min=0.05",
                0, 12, 3);
}
Test(eval_loss, bpe_bits_per_byte) { check_model(LLAMA_BRANCH, 1, 16, 0); }

/* ---- errors -------------------------------------------------------------- */

Test(eval_loss_errors, inconsistent_inputs) {
    char path[256];
    temp_path(path, sizeof path, "errors");
    int32_t val[N_VAL];
    int64_t V;
    write_dataset(path, 0, val, &V);
    data_tokens data;
    cr_assert(data_tokens_open(&data, path) == DT_OK);
    eval_loss_result r;
    eval_loss_options o = eval_loss_default_options();

    model small_vocab;
    eval_test_model(&small_vocab, LLAMA_BRANCH "vocab_size=128", 1);
    cr_expect_eq(eval_loss_run(&small_vocab, &data, &o, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "vocab_size 128") && strstr(dt_error_message(), "256"), "%s",
              dt_error_message());
    model_free(&small_vocab);

    model m;
    eval_test_model(&m, LLAMA_BRANCH "vocab_size=256", 1);
    o.seq_len = 17; /* > block_size */
    cr_expect_eq(eval_loss_run(&m, &data, &o, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "block_size") != NULL, "%s", dt_error_message());
    o.seq_len = 8;
    o.prompt_len = 9;
    cr_expect_eq(eval_loss_run(&m, &data, &o, &r), DT_ERR);
    o.prompt_len = 0;
    o.method = EVAL_DECODE;
    cr_expect_eq(eval_loss_run(&m, &data, &o, &r), DT_ERR, "decode needs a prompt");
    o.method = EVAL_TEACHER_FORCED;
    o.split = SPLIT_TRAIN;
    o.seq_len = 16;
    o.n_windows = 1000; /* more than the split holds: all of them */
    cr_assert(eval_loss_run(&m, &data, &o, &r) == DT_OK, "%s", dt_error_message());
    cr_expect_eq(r.n_windows, (N_TRAIN - 1) / 16);
    model_free(&m);

    /* a split shorter than one window */
    model long_context;
    eval_test_model(&long_context, "family=llama block_size=80 n_layer=1 n_head=2 d_model=16 vocab_size=256", 1);
    o = eval_loss_default_options();
    cr_expect_eq(eval_loss_run(&long_context, &data, &o, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "fewer than") != NULL, "%s", dt_error_message());
    model_free(&long_context);
    data_tokens_close(&data);
    unlink(path);
}
