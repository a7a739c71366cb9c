/* eval_feedback_passes_run (eval/feedback_passes.h), `dbranch eval
 * --feedback-passes`: the loss at N fused passes against the CE of pass N + 1
 * of the K-pass training forward (model_forward_feedback with targets, all
 * passes in one taped graph), the state change where it is known by
 * construction (fusion blind to h: W_u = 0; positions that have stopped
 * changing: position t is fixed after pass t + 1), the list parser's
 * rejections, and a model without feedback. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/feedback_passes.h"
#include "test_eval_util.h"

enum { N_VAL = 41, N_TRAIN = 20 };

#define FEEDBACK_LLAMA "family=llama vocab_size=256 block_size=8 n_layer=2 n_head=2 n_kv_head=1 d_model=16 d_ff=24 "

/* A byte-level token file of random tokens; val_out [N_VAL]. */
static void write_dataset(char *path, size_t size, int32_t *val_out) {
    snprintf(path, size, "/tmp/dbranch_test_feedback_passes_%d.h5", (int)getpid());
    data_tokenizer tok;
    cr_assert(data_tokenizer_byte(&tok) == DT_OK);
    int32_t train[N_TRAIN];
    eval_test_tokens(train, N_TRAIN, 256, 1);
    eval_test_tokens(val_out, N_VAL, 256, 2);
    cr_assert(data_tokens_write(path, &tok, train, N_TRAIN, val_out, N_VAL, "test") == DT_OK, "%s", dt_error_message());
    data_tokenizer_free(&tok);
}

/* A random model of FEEDBACK_LLAMA + extra and a fresh token file; val [N_VAL] its val tokens. */
typedef struct fixture {
    char path[256];
    int32_t val[N_VAL];
    model m;
    data_tokens data;
} fixture;

static void fixture_open(fixture *f, const char *extra, uint64_t seed) {
    write_dataset(f->path, sizeof f->path, f->val);
    char spec[512];
    snprintf(spec, sizeof spec, "%s%s", FEEDBACK_LLAMA, extra);
    eval_test_model(&f->m, spec, seed);
    cr_assert_eq(data_tokens_open(&f->data, f->path), DT_OK, "%s", dt_error_message());
}

static void fixture_close(fixture *f) {
    data_tokens_close(&f->data);
    model_free(&f->m);
    unlink(f->path);
}

static eval_feedback_passes_result run(model *m, data_tokens *data, int64_t T, const char *list) {
    int64_t fused[EVAL_FEEDBACK_MAX_LIST];
    int n;
    cr_assert_eq(eval_feedback_passes_parse(list, fused, &n), DT_OK, "%s", dt_error_message());
    eval_loss_options o = eval_loss_default_options();
    o.seq_len = T;
    eval_feedback_passes_result r;
    cr_assert_eq(eval_feedback_passes_run(m, data, &o, fused, n, &r), DT_OK, "%s", dt_error_message());
    cr_assert_eq(r.n, n);
    return r;
}

/* The loss at N = 0, 1, 2, 5 equals pass N + 1's CE of the 6-pass training
 * forward (no jitter, no prefix mixin), averaged over the same windows. */
Test(feedback_passes, loss_equals_the_k_pass_forward) {
    fixture f;
    fixture_open(&f, "feedback=1", 5);
    enum { T = 8, K = 6 };
    const int64_t n_windows = (N_VAL - 1) / T;
    double want[K] = {0};
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    for (int64_t w = 0; w < n_windows; w++) {
        ag_reset(&ctx);
        dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T)), *targets = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T));
        memcpy(tokens->data, f.val + w * T, T * sizeof(int32_t));
        memcpy(targets->data, f.val + w * T + 1, T * sizeof(int32_t));
        model_feedback_run passes = model_feedback_plain();
        passes.passes = K;
        model_outputs out;
        cr_assert_eq(model_forward_feedback(&f.m, &ctx, tokens, targets, &passes, &out), DT_OK, "%s",
                     dt_error_message());
        for (int k = 0; k < K; k++)
            want[k] += out.loss_passes[k] / (double)n_windows;
    }
    ag_ctx_free(&ctx);
    eval_feedback_passes_result r = run(&f.m, &f.data, T, "0,1,2,5");
    cr_expect_eq(r.n_windows, n_windows);
    cr_expect_eq(r.n_tokens, n_windows * T);
    cr_expect_eq(r.n_bytes, n_windows * T, "a byte per byte token");
    for (int i = 0; i < r.n; i++) {
        const double expected = want[r.fused[i]];
        cr_expect(fabs(r.loss[i] - expected) <= 1e-5 * fmax(1.0, expected), "N = %lld: loss %.8f, pass %lld's CE %.8f",
                  (long long)r.fused[i], r.loss[i], (long long)r.fused[i] + 1, expected);
        cr_expect(fabs(r.bits_per_byte[i] - r.loss[i] / log(2.0)) <= 1e-9, "bits per byte at N = %lld",
                  (long long)r.fused[i]);
    }
    /* the passes move the loss, else the comparison could not tell them apart */
    cr_expect_gt(fabs(want[1] - want[0]), 1e-3);
    cr_expect_gt(fabs(want[2] - want[1]), 1e-5);
    cr_expect(isnan(r.state_change[0]), "no state change at N = 0");
    cr_expect_gt(r.state_change[1], 1e-3);
    fixture_close(&f);
}

/* W_u = 0: every fused input is RMSNorm(0) = 0 whatever h is, so passes 2, 3,
 * ... compute the same function and the state change is exactly 0 from N = 2
 * on (N = 1 compares a fused pass with the plain one: not 0). */
Test(feedback_passes, state_change_is_zero_when_fusion_ignores_h) {
    fixture f;
    fixture_open(&f, "feedback=1", 6);
    memset(f.m.feedback_w_u->data, 0, (size_t)f.m.feedback_w_u->size * sizeof(float));
    eval_feedback_passes_result r = run(&f.m, &f.data, 8, "1,2,5");
    cr_expect_gt(r.state_change[0], 1e-3, "N = 1: the fused pass differs from the plain one");
    cr_expect_eq(r.state_change[1], 0.0, "N = 2: %g", r.state_change[1]);
    cr_expect_eq(r.state_change[2], 0.0, "N = 5: %g", r.state_change[2]);
    cr_expect_eq(r.loss[1], r.loss[2], "N = 2 and 5: the same pass");
    fixture_close(&f);
}

/* Windows of T = 4: position t is fixed after pass t + 1, so every position
 * is fixed from N = 3 on: the state change is exactly 0 at N = 4 and 6 and
 * the loss stops moving; at N = 3 position 3 still changes. */
Test(feedback_passes, states_stop_changing_after_seq_len_passes) {
    fixture f;
    fixture_open(&f, "feedback=1", 7);
    eval_feedback_passes_result r = run(&f.m, &f.data, 4, "1,3,4,6");
    cr_expect_gt(r.state_change[0], 1e-3);
    cr_expect_gt(r.state_change[1], 1e-6, "N = 3: position 3 still changes");
    cr_expect_eq(r.state_change[2], 0.0, "N = 4: %g", r.state_change[2]);
    cr_expect_eq(r.state_change[3], 0.0, "N = 6: %g", r.state_change[3]);
    cr_expect_eq(r.loss[1], r.loss[2]);
    cr_expect_eq(r.loss[2], r.loss[3]);
    cr_expect_neq(r.loss[0], r.loss[1]);
    fixture_close(&f);
}

Test(feedback_passes, list_values) {
    int64_t fused[EVAL_FEEDBACK_MAX_LIST];
    int n;
    cr_assert_eq(eval_feedback_passes_parse("0,1,2,5,10,30", fused, &n), DT_OK, "%s", dt_error_message());
    cr_assert_eq(n, 6);
    const int64_t want[] = {0, 1, 2, 5, 10, 30};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(fused[i], want[i]);
    cr_assert_eq(eval_feedback_passes_parse("1000", fused, &n), DT_OK);
    const char *bad[] = {"",
                         "x",
                         "-1",
                         "+1",
                         " 1",
                         "1,,2",
                         "0,1,",
                         "2,1",
                         "1,1",
                         "1001",
                         "1.5",
                         "1;2",
                         "3e1",
                         ",1",
                         "0x10",
                         "99999999999999999999",
                         "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect_eq(eval_feedback_passes_parse(bad[i], fused, &n), DT_ERR, "'%s' accepted", bad[i]);
        cr_expect(strstr(dt_error_message(), "--feedback-passes") != NULL, "'%s': %s", bad[i], dt_error_message());
    }
}

Test(feedback_passes, needs_a_feedback_model) {
    fixture f;
    fixture_open(&f, "feedback=0", 8);
    const int64_t fused[] = {0, 1};
    eval_loss_options o = eval_loss_default_options();
    eval_feedback_passes_result r;
    cr_expect_eq(eval_feedback_passes_run(&f.m, &f.data, &o, fused, 2, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "feedback = 1") != NULL, "%s", dt_error_message());
    fixture_close(&f);
}
