/* `dbranch prepare --synthetic` and `dbranch eval` on the record file it
 * writes, end to end through the binary: the file's records, the accuracy
 * line eval adds, and the one-line errors for bad task options. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokens.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char dir[512];
static void setup(void) { test_scratch_dir(dir, sizeof dir, "cli_synthetic"); }
static void teardown(void) { test_remove_dir(dir); }
TestSuite(cli_synthetic, .init = setup, .fini = teardown);

Test(cli_synthetic, parity_file_trains_and_evaluates_with_accuracy) {
    char line[4096], *out = NULL, *err = NULL;
    snprintf(line, sizeof line,
             "prepare --synthetic prefix-sum --length 8 --modulus 2 --train-records 300 --val-records 20 --seed 3 "
             "--out %s/parity.h5",
             dir);
    cr_assert_eq(test_run_dbranch(NULL, line, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    char path[1024];
    snprintf(path, sizeof path, "%s/parity.h5", dir);
    data_tokens data;
    cr_assert_eq(data_tokens_open(&data, path), DT_OK, "%s", dt_error_message());
    cr_expect_eq(data.record_len, 17);
    cr_expect_eq(data.split_length[SPLIT_TRAIN], 300 * 17);
    cr_expect_eq(data.split_length[SPLIT_VAL], 20 * 17);
    data_tokens_close(&data);

    char config[1024];
    snprintf(config, sizeof config, "%s/tiny.ini", dir);
    FILE *f = fopen(config, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "[model]\nfamily = llama\nvocab_size = 256\nblock_size = 16\nn_layer = 1\nn_head = 2\n"
            "n_kv_head = 2\nd_model = 16\nd_ff = 32\n[data]\npath = %s\n[train]\nbatch_size = 4\n"
            "seq_len = 16\ntokens = 640\neval_every = 5\neval_windows = 4\ncheckpoint_every = 0\n",
            path);
    fclose(f);
    snprintf(line, sizeof line, "train --config %s --out %s/run --threads 1", config, dir);
    cr_assert_eq(test_run_dbranch(NULL, line, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    snprintf(line, sizeof line, "eval --model %s/run/checkpoint.h5 --data %s --json --threads 1", dir, path);
    cr_assert_eq(test_run_dbranch(NULL, line, &out, &err), 0, "%s", err);
    cr_expect_eq(test_json_number(out, "seq_len"), 16);
    cr_expect_eq(test_json_number(out, "windows"), 20);
    cr_expect_eq(test_json_number(out, "answers"), 20 * 8, "eight parities per record");
    double accuracy = test_json_number(out, "accuracy");
    cr_expect(accuracy >= 0 && accuracy <= 1, "accuracy %g", accuracy);
    cr_expect(strstr(out, "\"per_position\": [[1, ") != NULL, "first answer is the target of input 1: %s", out);
    free(out);
    free(err);
}

Test(cli_synthetic, bad_task_options_are_one_line_errors) {
    static const char *const cases[][2] = {
        {"prepare --synthetic sorting --out x.h5", "'sorting' is not a task"},
        {"prepare --synthetic prefix-sum --modulus 1 --out x.h5", "--modulus"},
        {"prepare --synthetic two-hop --entities 1 --out x.h5", "--entities"},
        {"prepare --synthetic two-hop --colour red --out x.h5", "unknown argument '--colour'"},
        {"prepare --synthetic two-hop", "--out PATH is required"},
        {"prepare --synthetic prefix-sum --answers last --out x.h5", "--answers 'last' must be every, final or labels"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        int code = test_run_dbranch(NULL, cases[i][0], NULL, &err);
        cr_expect_eq(code, 1, "%s: exit %d", cases[i][0], code);
        test_assert_one_line_error(err, "dbranch prepare: ", cases[i][1]);
        free(err);
    }
}
