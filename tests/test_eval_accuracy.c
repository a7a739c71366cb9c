/* Answer accuracy on record files (eval/accuracy.h) against a direct
 * computation from model_forward's logits (tests/test_eval_util.h: the
 * mixture in double), primary-only and Decode-Branch; and `dbranch eval` on
 * record and id-only token files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/accuracy.h"
#include "eval/eval_loss.h"
#include "support/scratch.h"
#include "test_eval_util.h"

static char dir[512];
static void setup(void) { test_scratch_dir(dir, sizeof dir, "accuracy"); }
static void teardown(void) { test_remove_dir(dir); }
TestSuite(accuracy, .init = setup, .fini = teardown);

/* Index of the largest of x[n] (lowest on ties). */
static int64_t argmax(const double *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* A random model scores chance on real answers, which cannot tell a right
 * prediction rule from a wrong one. So the answers are rewritten: record w's
 * answer becomes the model's own prediction (argmax of the double-precision
 * mixture, tests/test_eval_util.h) when w is even and the token after it when
 * w is odd. Expected: exactly the even records right. With a branch, the
 * primary's argmax must differ somewhere, or the check proves nothing. */
static void check_accuracy(const char *spec) {
    char path[1024];
    snprintf(path, sizeof path, "%s/two_hop.h5", dir);
    data_records r;
    data_two_hop_options options = {.entities = 6, .relations = 2, .seed = 5};
    cr_assert_eq(data_synthetic_two_hop(&options, &r), DT_OK, "%s", dt_error_message());
    char full[512];
    snprintf(full, sizeof full, "%s vocab_size=%lld", spec, (long long)r.vocab_size);
    model m;
    eval_test_model(&m, full, 11);

    const int64_t R = r.record_len, T = R - 1, V = r.vocab_size, n_records = r.n_val / R;
    double *primary = malloc((size_t)V * sizeof *primary);
    int64_t primary_differs = 0;
    for (int64_t w = 0; w < n_records; w++) {
        eval_test_tf tf;
        eval_test_teacher_forced(&m, r.val + w * R, T, &tf);
        const int64_t t = T - 1; /* the answer is the record's last token, target of the last input */
        cr_assert(r.val_answer[w * R + t + 1]);
        int64_t guess = argmax(tf.mixture + t * V, V);
        eval_test_softmax(primary, tf.logits_primary + t * V, V);
        primary_differs += argmax(primary, V) != guess;
        r.val[w * R + t + 1] = (int32_t)(w % 2 == 0 ? guess : (guess + 1) % V);
        eval_test_tf_free(&tf);
    }
    free(primary);
    if (m.config.branch == BRANCH_DECODE)
        cr_assert_gt(primary_differs, 0, "the primary's argmax equals the mixture's everywhere: a weak test model");
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_external(&tok, r.vocab_size), DT_OK);
    const data_record_layout layout = {R, {r.train_answer, r.val_answer}, {NULL, NULL}};
    cr_assert_eq(data_tokens_write_records(path, &tok, r.train, r.n_train, r.val, r.n_val, r.source, &layout), DT_OK,
                 "%s", dt_error_message());
    data_tokenizer_free(&tok);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());

    eval_accuracy_result a;
    cr_assert_eq(eval_accuracy_run(&m, &data, SPLIT_VAL, 0, 0, &a), DT_OK, "%s", dt_error_message());
    cr_expect_eq(a.seq_len, T);
    cr_expect_eq(a.n_windows, n_records);
    cr_expect_eq(a.n_answers, n_records, "one answer per two-hop query");
    cr_expect_eq(a.n_correct, (n_records + 1) / 2, "the even records right, the odd ones wrong");
    for (int64_t t = 0; t < T; t++) {
        cr_expect_eq(a.per_position_answers[t], t == T - 1 ? n_records : 0, "position %lld", (long long)t);
        cr_expect_eq(a.per_position_correct[t], t == T - 1 ? (n_records + 1) / 2 : 0, "position %lld", (long long)t);
    }
    eval_accuracy_result_free(&a);

    /* The loss sweep over the same file: windows are records, and ids-only tokens count no bytes. */
    eval_loss_options o = eval_loss_default_options();
    eval_loss_result loss;
    cr_assert_eq(eval_loss_run(&m, &data, &o, &loss), DT_OK, "%s", dt_error_message());
    cr_expect_eq(loss.seq_len, T, "seq_len defaults to record_len - 1 when block_size is longer");
    cr_expect_eq(loss.n_windows, n_records);
    cr_expect_eq(loss.n_bytes, 0);
    data_tokens_close(&data);
    model_free(&m);
    data_records_free(&r);
}

Test(accuracy, primary_argmax_on_marked_answers) {
    check_accuracy("family=llama block_size=8 n_layer=1 n_head=2 n_kv_head=2 d_model=16 d_ff=24");
}

Test(accuracy, mixture_argmax_with_the_decode_branch) {
    /* alpha <= 0.2: the branch dominates, so the mixture's argmax is not the primary's */
    check_accuracy(
        "family=nanogpt block_size=8 n_layer=2 n_head=2 d_model=16 branch=decode mix_alpha_min=0.05 mix_alpha_max=0.2");
}

/* A labelled record file (data/tokens.h) scores each position's stored
 * target, not the next token. The targets are rewritten as in check_accuracy:
 * the model's own argmax where w + t is even, the token after it where odd,
 * and only positions t = 0, 1 mod 3 are marked. Expected: exactly the marked
 * even (w, t) right, at the marked positions (a mark read one off would
 * score other positions), and the loss sweep's mean CE equals the CE of the
 * stored targets computed here from model_forward's logits. */
Test(accuracy, labelled_targets_are_scored_at_their_own_position) {
    char path[1024];
    snprintf(path, sizeof path, "%s/labelled.h5", dir);
    data_records r;
    data_prefix_sum_options options = {
        .length = 6, .modulus = 2, .n_train = 4, .n_val = 5, .seed = 2, .answers = DATA_ANSWERS_LABELS};
    cr_assert_eq(data_synthetic_prefix_sum(&options, &r), DT_OK, "%s", dt_error_message());
    model m;
    eval_test_model(&m, "family=llama block_size=8 n_layer=1 n_head=2 n_kv_head=2 d_model=16 d_ff=24 vocab_size=256",
                    4);
    const int64_t R = r.record_len, T = R, V = r.vocab_size, n_records = r.n_val / R;
    cr_assert_eq(R, 6);
    double *p = malloc((size_t)V * sizeof *p), ce_sum = 0;
    int64_t expected_correct = 0;
    for (int64_t w = 0; w < n_records; w++) {
        eval_test_tf tf;
        eval_test_teacher_forced(&m, r.val + w * R, T, &tf);
        for (int64_t t = 0; t < T; t++) {
            eval_test_softmax(p, tf.logits_primary + t * V, V);
            int64_t guess = argmax(p, V);
            int32_t target = (int32_t)((w + t) % 2 == 0 ? guess : (guess + 1) % V);
            r.val_target[w * R + t] = target;
            r.val_answer[w * R + t] = t % 3 != 2;
            expected_correct += (w + t) % 2 == 0 && t % 3 != 2;
            ce_sum -= log(p[target]);
        }
        eval_test_tf_free(&tf);
    }
    free(p);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    const data_record_layout layout = {R, {r.train_answer, r.val_answer}, {r.train_target, r.val_target}};
    cr_assert_eq(data_tokens_write_records(path, &tok, r.train, r.n_train, r.val, r.n_val, r.source, &layout), DT_OK,
                 "%s", dt_error_message());
    data_tokenizer_free(&tok);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());
    cr_assert(data.has_target[SPLIT_VAL]);

    eval_accuracy_result a;
    cr_assert_eq(eval_accuracy_run(&m, &data, SPLIT_VAL, 0, 0, &a), DT_OK, "%s", dt_error_message());
    cr_expect_eq(a.seq_len, R, "a labelled record's every position has a target");
    cr_expect_eq(a.n_answers, n_records * R * 2 / 3);
    cr_expect_eq(a.n_correct, expected_correct);
    for (int64_t t = 0; t < T; t++)
        cr_expect_eq(a.per_position_answers[t], t % 3 != 2 ? n_records : 0, "position %lld", (long long)t);
    eval_accuracy_result_free(&a);

    eval_loss_options o = eval_loss_default_options();
    eval_loss_result loss;
    cr_assert_eq(eval_loss_run(&m, &data, &o, &loss), DT_OK, "%s", dt_error_message());
    cr_expect_eq(loss.seq_len, R);
    cr_expect_eq(loss.n_tokens, n_records * R);
    cr_expect(fabs(loss.loss - ce_sum / (double)(n_records * R)) < 1e-4, "loss %.6f, CE of the targets %.6f", loss.loss,
              ce_sum / (double)(n_records * R));
    data_tokens_close(&data);
    model_free(&m);
    data_records_free(&r);
}

Test(accuracy, stream_files_are_refused) {
    char path[1024];
    snprintf(path, sizeof path, "%s/stream.h5", dir);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    int32_t tokens[40];
    eval_test_tokens(tokens, 40, 256, 3);
    cr_assert_eq(data_tokens_write(path, &tok, tokens, 40, tokens, 40, "test"), DT_OK);
    data_tokenizer_free(&tok);
    model m;
    eval_test_model(&m, "family=llama block_size=8 n_layer=1 n_head=2 n_kv_head=2 d_model=16 d_ff=24 vocab_size=256",
                    1);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK);
    eval_accuracy_result a;
    cr_expect_eq(eval_accuracy_run(&m, &data, SPLIT_VAL, 0, 0, &a), DT_ERR);
    cr_expect(strstr(dt_error_message(), "record_len") != NULL, "%s", dt_error_message());
    data_tokens_close(&data);
    model_free(&m);
}
