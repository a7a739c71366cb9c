/* The synthetic record tasks (data/synthetic.h) and record token files
 * (data/tokens.h, data/loader.h): each task's records checked against its
 * definition, recomputed here from the records' own tokens; record files
 * round-trip; the loader and the validation sweep never straddle records;
 * malformed record files are refused with the attribute named. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "support/scratch.h"

static char dir[512];
static void setup(void) { test_scratch_dir(dir, sizeof dir, "synthetic"); }
static void teardown(void) { test_remove_dir(dir); }
TestSuite(synthetic, .init = setup, .fini = teardown);

/* Every record: ">" then digit/answer pairs, answer = running sum mod k as a letter, marks on answers only. */
static void check_prefix_sum_split(const int32_t *tokens, const int32_t *answer, int64_t n, int64_t length, int64_t k) {
    const int64_t R = 2 * length + 1;
    cr_assert_eq(n % R, 0);
    int digits_seen[10] = {0};
    for (int64_t r = 0; r < n / R; r++) {
        const int32_t *rec = tokens + r * R, *marks = answer + r * R;
        cr_assert_eq(rec[0], '>', "record %lld starts with %d", (long long)r, rec[0]);
        cr_assert_eq(marks[0], 0);
        int64_t sum = 0;
        for (int64_t i = 0; i < length; i++) {
            int32_t digit = rec[1 + 2 * i] - '0';
            cr_assert(digit >= 0 && digit < k, "digit %d outside [0, %lld)", digit, (long long)k);
            digits_seen[digit]++;
            sum += digit;
            cr_assert_eq(rec[2 + 2 * i], 'a' + (int32_t)(sum % k), "record %lld answer %lld", (long long)r,
                         (long long)i);
            cr_assert_eq(marks[1 + 2 * i], 0);
            cr_assert_eq(marks[2 + 2 * i], 1);
        }
    }
    for (int64_t d = 0; d < k; d++)
        cr_expect_gt(digits_seen[d], 0, "digit %lld never drawn", (long long)d);
}

Test(synthetic, prefix_sum_records_follow_the_definition) {
    data_prefix_sum_options o = {.length = 12, .modulus = 3, .n_train = 50, .n_val = 7, .seed = 4};
    data_records r;
    cr_assert_eq(data_synthetic_prefix_sum(&o, &r), DT_OK, "%s", dt_error_message());
    cr_expect_eq(r.record_len, 25);
    cr_expect_eq(r.n_train, 50 * 25);
    cr_expect_eq(r.n_val, 7 * 25);
    check_prefix_sum_split(r.train, r.train_answer, r.n_train, 12, 3);
    check_prefix_sum_split(r.val, r.val_answer, r.n_val, 12, 3);
    data_records again, other;
    cr_assert_eq(data_synthetic_prefix_sum(&o, &again), DT_OK);
    o.seed = 5;
    cr_assert_eq(data_synthetic_prefix_sum(&o, &other), DT_OK);
    cr_expect(!memcmp(r.train, again.train, (size_t)r.n_train * sizeof *r.train), "one seed, one data set");
    cr_expect(memcmp(r.train, other.train, (size_t)r.n_train * sizeof *r.train), "another seed, other data");
    data_records_free(&r);
    data_records_free(&again);
    data_records_free(&other);
}

/* Final answers only: ">" x0 .. x(m-1) "=" a "." ..., m in 1..n, a the sum of all m digits, one mark. */
Test(synthetic, prefix_sum_final_answer_records) {
    enum { N = 10, R = N + 3, RECORDS = 400 };
    data_prefix_sum_options o = {
        .length = N, .modulus = 2, .n_train = RECORDS, .n_val = 5, .seed = 8, .answers = DATA_ANSWERS_FINAL};
    data_records r;
    cr_assert_eq(data_synthetic_prefix_sum(&o, &r), DT_OK, "%s", dt_error_message());
    cr_assert_eq(r.record_len, R);
    int lengths_seen[N + 1] = {0};
    for (int64_t k = 0; k < RECORDS; k++) {
        const int32_t *rec = r.train + k * R, *marks = r.train_answer + k * R;
        cr_assert_eq(rec[0], '>');
        int64_t m = 0, sum = 0;
        while (rec[1 + m] == '0' || rec[1 + m] == '1')
            sum += rec[1 + m++] - '0';
        cr_assert(m >= 1 && m <= N, "record %lld holds %lld digits", (long long)k, (long long)m);
        lengths_seen[m] = 1;
        cr_assert_eq(rec[1 + m], '=');
        cr_assert_eq(rec[2 + m], 'a' + (int32_t)(sum % 2), "record %lld", (long long)k);
        int n_marks = 0;
        for (int64_t i = 0; i < R; i++) {
            n_marks += marks[i];
            if (i > 2 + m) cr_assert_eq(rec[i], '.');
        }
        cr_assert(n_marks == 1 && marks[2 + m] == 1, "one mark, on the answer");
    }
    for (int m = 1; m <= N; m++)
        cr_expect(lengths_seen[m], "no record of %d digits in %d", m, RECORDS);
    data_records_free(&r);
}

Test(synthetic, prefix_sum_rejects_bad_options) {
    data_records r;
    data_prefix_sum_options o = {.length = 4, .modulus = 11, .n_train = 1, .n_val = 1, .seed = 1};
    cr_expect_eq(data_synthetic_prefix_sum(&o, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "--modulus") != NULL, "%s", dt_error_message());
    o.modulus = 2;
    o.length = 0;
    cr_expect_eq(data_synthetic_prefix_sum(&o, &r), DT_ERR);
    cr_expect(strstr(dt_error_message(), "--length") != NULL, "%s", dt_error_message());
}

/* Graph facts read back from the atomic training records: tail[(head - first) * Rel + r], -1 unseen. */
Test(synthetic, two_hop_graphs_are_disjoint_and_queries_compose_the_facts) {
    const int64_t N = 15, Rel = 3;
    data_two_hop_options o = {.entities = N, .relations = Rel, .seed = 2};
    data_records r;
    cr_assert_eq(data_synthetic_two_hop(&o, &r), DT_OK, "%s", dt_error_message());
    const int64_t first = DATA_TWO_HOP_FIRST_RELATION + Rel, R = r.record_len;
    cr_assert_eq(R, 5);
    cr_expect_eq(r.vocab_size, first + 2 * N);
    int64_t *tail = malloc((size_t)(2 * N * Rel) * sizeof *tail);
    for (int64_t i = 0; i < 2 * N * Rel; i++)
        tail[i] = -1;
    int64_t n_atomic = 0, n_two_hop = 0;
    for (int64_t k = 0; k < r.n_train / R; k++) { /* pass 1: the atomic facts */
        const int32_t *rec = r.train + k * R, *marks = r.train_answer + k * R;
        cr_assert_eq(rec[0], DATA_TWO_HOP_BOS);
        if (rec[4] != DATA_TWO_HOP_EOS) continue;
        int64_t head = rec[1] - first, rel = rec[2] - DATA_TWO_HOP_FIRST_RELATION, t = rec[3] - first;
        cr_assert(head >= 0 && head < 2 * N && rel >= 0 && rel < Rel && t >= 0 && t < 2 * N);
        cr_expect_eq(head / N, t / N, "an edge leaves its graph");
        cr_expect_eq(tail[head * Rel + rel], -1, "fact (%lld, %lld) stated twice", (long long)head, (long long)rel);
        tail[head * Rel + rel] = t;
        cr_expect(marks[3] == 1 && marks[0] + marks[1] + marks[2] + marks[4] == 0, "atomic answer mark");
        n_atomic++;
    }
    cr_expect_eq(n_atomic, 2 * N * Rel, "every fact of both graphs trains");
    for (int64_t k = 0; k < r.n_train / R; k++) { /* pass 2: graph A's two-hop queries */
        const int32_t *rec = r.train + k * R;
        if (rec[4] == DATA_TWO_HOP_EOS) continue;
        int64_t head = rec[1] - first, r1 = rec[2] - DATA_TWO_HOP_FIRST_RELATION,
                r2 = rec[3] - DATA_TWO_HOP_FIRST_RELATION;
        cr_assert(head < N, "a training two-hop query from graph B (entity %lld)", (long long)head);
        cr_expect_eq(rec[4] - first, tail[tail[head * Rel + r1] * Rel + r2]);
        cr_expect_eq(r.train_answer[k * R + 4], 1);
        n_two_hop++;
    }
    cr_expect_eq(n_two_hop, N * Rel * Rel);
    for (int64_t k = 0; k < r.n_val / R; k++) { /* validation: graph B only, answers from the training facts */
        const int32_t *rec = r.val + k * R;
        int64_t head = rec[1] - first, r1 = rec[2] - DATA_TWO_HOP_FIRST_RELATION,
                r2 = rec[3] - DATA_TWO_HOP_FIRST_RELATION;
        cr_assert(head >= N && head < 2 * N, "validation query from graph A");
        cr_expect_eq(rec[4] - first, tail[tail[head * Rel + r1] * Rel + r2]);
        cr_expect_eq(r.val_answer[k * R + 4], 1);
    }
    cr_expect_eq(r.n_val / R, N * Rel * Rel);
    free(tail);
    data_records_free(&r);
}

/* Labelled: records are the n digits alone; target i = the running sum of digits 0..i mod k, every target marked. */
Test(synthetic, prefix_sum_labelled_records_carry_the_sum_as_targets) {
    enum { N = 9, K = 3, RECORDS = 60 };
    data_prefix_sum_options o = {
        .length = N, .modulus = K, .n_train = RECORDS, .n_val = 4, .seed = 6, .answers = DATA_ANSWERS_LABELS};
    data_records r;
    cr_assert_eq(data_synthetic_prefix_sum(&o, &r), DT_OK, "%s", dt_error_message());
    cr_assert_eq(r.record_len, N);
    cr_assert(r.train_target && r.val_target);
    int sums_seen[K] = {0};
    for (int64_t k = 0; k < RECORDS; k++) {
        int64_t sum = 0;
        for (int64_t i = 0; i < N; i++) {
            const int32_t digit = r.train[k * N + i] - '0';
            cr_assert(digit >= 0 && digit < K, "token %d is not a digit", r.train[k * N + i]);
            sum = (sum + digit) % K;
            sums_seen[sum]++;
            cr_assert_eq(r.train_target[k * N + i], 'a' + sum, "record %lld target %lld", (long long)k, (long long)i);
            cr_assert_eq(r.train_answer[k * N + i], 1);
        }
    }
    for (int s = 0; s < K; s++)
        cr_expect_gt(sums_seen[s], 0, "sum %d never reached", s);
    data_records_free(&r);
    o.length = 1;
    cr_expect_eq(data_synthetic_prefix_sum(&o, &r), DT_ERR, "a labelled record needs two positions");
}

/* A prefix-sum record file on disk, opened. */
static void write_prefix_sum_file_as(const char *path, int64_t length, int64_t n_train, int64_t n_val,
                                     data_answers_format answers, data_records *r) {
    data_prefix_sum_options o = {
        .length = length, .modulus = 2, .n_train = n_train, .n_val = n_val, .seed = 3, .answers = answers};
    cr_assert_eq(data_synthetic_prefix_sum(&o, r), DT_OK);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    const data_record_layout layout = {
        r->record_len, {r->train_answer, r->val_answer}, {r->train_target, r->val_target}};
    cr_assert_eq(data_tokens_write_records(path, &tok, r->train, r->n_train, r->val, r->n_val, r->source, &layout),
                 DT_OK, "%s", dt_error_message());
    data_tokenizer_free(&tok);
}

static void write_prefix_sum_file(const char *path, int64_t length, int64_t n_train, int64_t n_val, data_records *r) {
    write_prefix_sum_file_as(path, length, n_train, n_val, DATA_ANSWERS_EVERY, r);
}

/* A labelled file: windows of T <= R tokens, targets read from /<split>_target, not the next token. */
Test(synthetic, labelled_record_files_give_the_stored_targets) {
    char path[1024];
    snprintf(path, sizeof path, "%s/labelled.h5", dir);
    data_records r;
    enum { R = 12, N_TRAIN = 30, N_VAL = 3 };
    write_prefix_sum_file_as(path, R, N_TRAIN, N_VAL, DATA_ANSWERS_LABELS, &r);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());
    cr_expect(data.has_target[SPLIT_TRAIN] && data.has_target[SPLIT_VAL]);
    cr_expect_eq(data_tokens_target_shift(&data, SPLIT_VAL), 0);
    int32_t inputs[R], targets[R];
    cr_expect_eq(data_split_windows(&data, SPLIT_VAL, R), N_VAL, "T = R fits a labelled record");
    cr_expect_eq(data_split_windows(&data, SPLIT_VAL, R + 1), 0);
    for (int64_t w = 0; w < N_VAL; w++) {
        cr_assert_eq(data_split_window(&data, SPLIT_VAL, w, R, inputs, targets), DT_OK, "%s", dt_error_message());
        cr_expect(!memcmp(inputs, r.val + w * R, sizeof inputs));
        cr_expect(!memcmp(targets, r.val_target + w * R, sizeof targets), "window %lld", (long long)w);
    }
    data_loader loader;
    cr_assert_eq(data_loader_init(&loader, &data, 3, R, 2), DT_OK, "%s", dt_error_message());
    int32_t batch_in[3 * R], batch_target[3 * R];
    for (int step = 0; step < 10; step++) {
        cr_assert_eq(data_loader_next(&loader, batch_in, batch_target), DT_OK, "%s", dt_error_message());
        for (int b = 0; b < 3; b++) {
            int found = -1;
            for (int k = 0; k < N_TRAIN && found < 0; k++)
                if (!memcmp(batch_in + b * R, r.train + k * R, sizeof(int32_t) * R)) found = k;
            cr_assert_geq(found, 0, "row %d of step %d is not a record", b, step);
            cr_expect(!memcmp(batch_target + b * R, r.train_target + found * R, sizeof(int32_t) * R),
                      "row %d's targets are not its record's", b);
        }
    }
    data_loader_free(&loader);
    cr_expect_eq(data_loader_init(&loader, &data, 3, R + 1, 2), DT_ERR);
    data_tokens_close(&data);
    data_records_free(&r);

    /* A target outside the vocabulary, or a target dataset of the wrong length, is refused at open. */
    write_prefix_sum_file_as(path, R, N_TRAIN, N_VAL, DATA_ANSWERS_LABELS, &r);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    H5Ldelete(file, "/val_target", H5P_DEFAULT);
    uint16_t bad[N_VAL * R];
    for (int i = 0; i < N_VAL * R; i++)
        bad[i] = 'a';
    bad[7] = 300;
    hsize_t dims[1] = {N_VAL * R};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dataset = H5Dcreate2(file, "/val_target", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(dataset >= 0);
    cr_assert(H5Dwrite(dataset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad) >= 0);
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(file);
    cr_expect_eq(data_tokens_open(&data, path), DT_ERR);
    cr_expect(strstr(dt_error_message(), "/val_target[7]") != NULL && strstr(dt_error_message(), path) != NULL, "%s",
              dt_error_message());
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    H5Ldelete(file, "/val_target", H5P_DEFAULT);
    dims[0] = N_VAL * R - 1;
    space = H5Screate_simple(1, dims, NULL);
    dataset = H5Dcreate2(file, "/val_target", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(H5Dwrite(dataset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad) >= 0);
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(file);
    cr_expect_eq(data_tokens_open(&data, path), DT_ERR);
    cr_expect(strstr(dt_error_message(), "/val_target") != NULL, "%s", dt_error_message());
    data_records_free(&r);
}

Test(synthetic, record_files_round_trip_and_windows_start_records) {
    char path[1024];
    snprintf(path, sizeof path, "%s/parity.h5", dir);
    data_records r;
    enum { L = 20, R = 2 * L + 1, N_TRAIN = 40, N_VAL = 6 }; /* 2^20 digit strings: the records are distinct */
    write_prefix_sum_file(path, L, N_TRAIN, N_VAL, &r);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());
    cr_expect_eq(data.record_len, R);
    cr_expect(data.has_answer[SPLIT_TRAIN] && data.has_answer[SPLIT_VAL]);
    int32_t *marks = NULL;
    cr_assert_eq(data_tokens_read_answers(&data, SPLIT_VAL, &marks), DT_OK, "%s", dt_error_message());
    cr_expect(!memcmp(marks, r.val_answer, (size_t)r.n_val * sizeof *marks));
    free(marks);

    /* Validation: window i is record i, for any T + 1 <= R. */
    int32_t inputs[R - 1], targets[R - 1];
    for (int64_t T = 4; T <= R - 1; T += R - 5) {
        cr_expect_eq(data_split_windows(&data, SPLIT_VAL, T), N_VAL);
        for (int64_t w = 0; w < N_VAL; w++) {
            cr_assert_eq(data_split_window(&data, SPLIT_VAL, w, T, inputs, targets), DT_OK);
            cr_expect(!memcmp(inputs, r.val + w * R, (size_t)T * sizeof *inputs), "window %lld", (long long)w);
            cr_expect(!memcmp(targets, r.val + w * R + 1, (size_t)T * sizeof *targets));
        }
    }
    cr_expect_eq(data_split_windows(&data, SPLIT_VAL, R), 0, "T + 1 > R: no window");

    /* Training: every row of every batch is a whole record. */
    data_loader loader;
    cr_assert_eq(data_loader_init(&loader, &data, 4, R - 1, 7), DT_OK, "%s", dt_error_message());
    int32_t batch_in[4 * (R - 1)], batch_target[4 * (R - 1)];
    int seen[N_TRAIN] = {0};
    for (int step = 0; step < 50; step++) {
        cr_assert_eq(data_loader_next(&loader, batch_in, batch_target), DT_OK);
        for (int b = 0; b < 4; b++) {
            int found = -1;
            for (int k = 0; k < N_TRAIN && found < 0; k++)
                if (!memcmp(batch_in + b * (R - 1), r.train + k * R, (R - 1) * sizeof(int32_t)) &&
                    batch_target[b * (R - 1) + R - 2] == r.train[k * R + R - 1])
                    found = k;
            cr_assert_geq(found, 0, "row %d of step %d is not a record", b, step);
            seen[found] = 1;
        }
    }
    int distinct = 0;
    for (int k = 0; k < N_TRAIN; k++)
        distinct += seen[k];
    cr_expect_gt(distinct, 35, "200 uniform draws reached only %d of 40 records", distinct);
    data_loader_free(&loader);

    cr_expect_eq(data_loader_init(&loader, &data, 4, R, 7), DT_ERR, "T + 1 > R");
    cr_expect(strstr(dt_error_message(), "record_len") != NULL, "%s", dt_error_message());
    data_tokens_close(&data);
    data_records_free(&r);
}

Test(synthetic, malformed_record_files_are_refused) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.h5", dir);
    data_records r;
    write_prefix_sum_file(path, 3, 10, 2, &r); /* R = 7 */
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    H5Adelete(file, "record_len");
    cr_assert_eq(h5_write_attr_int(file, "record_len", 6), DT_OK); /* 70 tokens are not whole records of 6 */
    H5Fclose(file);
    data_tokens data;
    cr_expect_eq(data_tokens_open(&data, path), DT_ERR);
    cr_expect(strstr(dt_error_message(), "record_len") != NULL && strstr(dt_error_message(), path) != NULL, "%s",
              dt_error_message());

    data_records_free(&r);
    write_prefix_sum_file(path, 3, 10, 2, &r);
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    H5Ldelete(file, "/val_answer", H5P_DEFAULT);
    int32_t marks[14] = {0};
    marks[5] = 2;
    int64_t shape[1] = {14};
    cr_assert_eq(h5_write_i32(file, "/val_answer", marks, 1, shape), DT_OK);
    H5Fclose(file);
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());
    int32_t *read = NULL;
    cr_expect_eq(data_tokens_read_answers(&data, SPLIT_VAL, &read), DT_ERR);
    cr_expect(strstr(dt_error_message(), "/val_answer[5] = 2") != NULL, "%s", dt_error_message());
    cr_expect_null(read);
    data_tokens_close(&data);
    data_records_free(&r);
}

/* Two-hop, labelled (--answers labels): the same records as the plain file;
 * every target is the next token (EOS after the last) except a query's r1
 * position, whose target is the bridge (the atomic fact's tail for the same
 * "BOS e r1"), and the marks sit on the answers' targets (atomic: 2, query: 3). */
Test(synthetic, two_hop_labelled_targets_the_bridge_at_r1) {
    const int64_t N = 12, Rel = 3;
    data_two_hop_options o = {.entities = N, .relations = Rel, .seed = 4}, l = o;
    l.bridge_labels = 1;
    data_records plain, r;
    cr_assert_eq(data_synthetic_two_hop(&o, &plain), DT_OK, "%s", dt_error_message());
    cr_assert_eq(data_synthetic_two_hop(&l, &r), DT_OK, "%s", dt_error_message());
    cr_expect_null(plain.train_target);
    cr_assert(r.train_target && r.val_target);
    cr_assert_eq(r.n_train, plain.n_train);
    cr_expect_arr_eq(r.train, plain.train, (size_t)r.n_train * sizeof *r.train, "the same records");
    const int64_t first = DATA_TWO_HOP_FIRST_RELATION + Rel, R = 5;
    int64_t *tail = malloc((size_t)(2 * N * Rel) * sizeof *tail);
    for (int64_t k = 0; k < r.n_train / R; k++) {
        const int32_t *rec = r.train + k * R;
        if (rec[4] == DATA_TWO_HOP_EOS) tail[(rec[1] - first) * Rel + rec[2] - DATA_TWO_HOP_FIRST_RELATION] = rec[3];
    }
    for (int split = 0; split < 2; split++) {
        const int32_t *tokens = split ? r.val : r.train, *target = split ? r.val_target : r.train_target,
                      *marks = split ? r.val_answer : r.train_answer;
        for (int64_t k = 0; k < (split ? r.n_val : r.n_train) / R; k++) {
            const int32_t *rec = tokens + k * R, *t = target + k * R, *m = marks + k * R;
            const int atomic = rec[4] == DATA_TWO_HOP_EOS;
            for (int i = 0; i < 4; i++)
                if (atomic || i != 2) cr_expect_eq(t[i], rec[i + 1], "record %lld target %d", (long long)k, i);
            cr_expect_eq(t[4], DATA_TWO_HOP_EOS);
            if (!atomic)
                cr_expect_eq(t[2], tail[(rec[1] - first) * Rel + rec[2] - DATA_TWO_HOP_FIRST_RELATION],
                             "the query's r1 target is its bridge");
            for (int i = 0; i < R; i++)
                cr_expect_eq(m[i], i == (atomic ? 2 : 3), "record %lld mark %d", (long long)k, i);
        }
    }
    free(tail);
    data_records_free(&plain);
    data_records_free(&r);
}
