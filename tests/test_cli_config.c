/* Config files and arguments as every subcommand reads them (issue 11: one
 * reader; issue 18 items 10-12): the same file is the same model to `info`,
 * `train` and `bench decode`; what is not a config file is refused by all;
 * options that take one value are refused twice; integers beyond 64 bits and
 * thread counts beyond the one limit are refused; `--decode` is not silently
 * ignored by teacher-forced scoring. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/isa.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char dir[64];
static char ini[128];

/* A model file without `family =`: nanogpt (d_ff = 4C = 128, tied head), not
 * llama (d_ff 96, untied), whichever command reads it. */
static void setup(void) {
    test_scratch_dir(dir, sizeof dir, "cli_config");
    snprintf(ini, sizeof ini, "%s/model.ini", dir);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fputs("[model]\nvocab_size = 64\nblock_size = 16\nn_layer = 1\nn_head = 2\nd_model = 32\n"
          "[train]\nbatch_size = 2\n",
          f);
    fclose(f);
}

static void teardown(void) { test_remove_dir(dir); }

static int run(const char *fmt, const char *a, char **out, char **err) {
    char line[1024];
    snprintf(line, sizeof line, fmt, a, a);
    return test_run_dbranch(NULL, line, out, err);
}

/* The "total" parameter count of `dbranch info`. */
static long long info_total(const char *out) {
    const char *at = strstr(out, "\n  total ");
    cr_assert(at, "%s", out);
    long long total = 0;
    cr_assert_eq(sscanf(at + 9, "%lld", &total), 1, "%s", at);
    return total;
}

Test(cli_config, one_file_is_one_model_to_info_train_and_bench, .init = setup, .fini = teardown, .timeout = 60) {
    char *out, *err;
    cr_assert_eq(run("info '%s'", ini, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "family=nanogpt") && strstr(out, "d_ff=128") && strstr(out, "tie_embeddings=1"), "%s", out);
    long long total = info_total(out);
    free(out);
    free(err);

    cr_assert_eq(run("bench decode --config '%s' --prompt-len 2 --tokens 2 --probe-mib 1 --json", ini, &out, &err), 0,
                 "%s", err);
    const char *json = strstr(out, "{\"bench\"");
    cr_assert(json, "%s", out);
    cr_assert(strstr(json, "\"family\": \"nanogpt\""), "bench decode read another model: %s", json);
    cr_assert_eq((long long)test_json_number(json, "d_ff"), 128);
    cr_assert_eq((long long)test_json_number(json, "params"), total, "bench decode and info count other models");
    free(out);
    free(err);

    cr_assert_eq(run("train --config '%s' --set data.path=unused.h5 --tokens 1000 --dry-run", ini, &out, &err), 0, "%s",
                 err);
    cr_assert(strstr(out, "family = nanogpt\n") && strstr(out, "d_ff = 128\n") && strstr(out, "tie_embeddings = 1\n"),
              "%s", out);
    free(out);
    free(err);
}

Test(cli_config, what_is_not_a_config_file_is_refused_by_every_command, .init = setup, .fini = teardown) {
    char empty[160], header[160], outside[160];
    snprintf(empty, sizeof empty, "%s/empty.ini", dir);
    snprintf(header, sizeof header, "%s/header.ini", dir);
    snprintf(outside, sizeof outside, "%s/outside.ini", dir);
    fclose(fopen(empty, "w"));
    FILE *f = fopen(header, "w");
    fputs("[model]\nn_layer = 2\n[train]]\nseed = 3\n", f);
    fclose(f);
    f = fopen(outside, "w");
    fputs("n_layer = 2\n[model]\nd_model = 32\n", f);
    fclose(f);
    const char *cases[][2] = {{dir, "directory"},
                              {empty, "sets no keys"},
                              {"/dev/null", "not a regular file"},
                              {header, "[train]]"},
                              {outside, "outside any section"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        cr_assert_neq(run("info '%s'", cases[i][0], &out, &err), 0, "info accepted %s: %s", cases[i][0], out);
        test_assert_one_line_error(err, "dbranch info: ", cases[i][1]);
        cr_assert_str_empty(out);
        free(out);
        free(err);
        cr_assert_neq(run("train --config '%s' --set data.path=x.h5 --tokens 1000 --dry-run", cases[i][0], &out, &err),
                      0, "train accepted %s", cases[i][0]);
        test_assert_one_line_error(err, "dbranch train: ", cases[i][1]);
        free(out);
        free(err);
        cr_assert_neq(run("bench decode --config '%s' --probe-mib 1", cases[i][0], &out, &err), 0,
                      "bench decode accepted %s", cases[i][0]);
        cr_assert(strstr(err, cases[i][1]), "%s", err);
        free(out);
        free(err);
    }
}

Test(cli_config, options_that_take_one_value_are_refused_twice, .init = setup, .fini = teardown) {
    const char *cases[][2] = {
        {"train --config '%s' --tokens 1000 --tokens 2000 --dry-run", "--tokens"},
        {"train --config '%s' --config '%s' --dry-run", "--config"},
        {"train --resume a.h5 --resume b.h5", "--resume"},
        {"eval --model a.h5 --model b.h5 --data d.h5", "--model"},
        {"generate --model a.h5 --prompt x --seed 1 --seed 2", "--seed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err;
        cr_assert_eq(run(cases[i][0], ini, NULL, &err), 2, "accepted: %s", cases[i][0]);
        cr_assert(strstr(err, cases[i][1]) && strstr(err, "twice"), "%s: %s", cases[i][0], err);
        free(err);
    }
    /* --set is the repeatable one. */
    char *err;
    cr_assert_eq(
        run("train --config '%s' --set data.path=x.h5 --set tokens=1000 --set seed=2 --dry-run", ini, NULL, &err), 0,
        "%s", err);
    free(err);
}

Test(cli_config, numbers_beyond_their_range_are_refused, .init = setup, .fini = teardown) {
    const char *cases[][2] = {
        {"train --config '%s' --set data.path=x.h5 --tokens 1000 --threads 10000 --dry-run", "train.threads"},
        {"train --config '%s' --set data.path=x.h5 --tokens 1000 --threads 2147483648 --dry-run", "train.threads"},
        {"eval --model a.h5 --data d.h5 --threads 10000", "--threads"},
        {"generate --model a.h5 --prompt x --seed 18446744073709551616", "--seed"},
        {"train --config '%s' --set data.path=x.h5 --tokens 1000 --set train.seed=1e-400 --dry-run", "1e-400"},
        {"train --config '%s' --set data.path=x.h5 --tokens 1000 --set batch_size=9223372036854775807 --dry-run",
         "train.batch_size"},
        {"info '%s' --set n_layer=2147483648", "n_layer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        cr_assert_neq(run(cases[i][0], ini, &out, &err), 0, "accepted: %s", cases[i][0]);
        cr_assert(strstr(err, cases[i][1]), "%s: %s", cases[i][0], err);
        free(out);
        free(err);
    }
}

Test(cli_config, decode_mode_is_not_ignored_by_teacher_forcing) {
    char *err;
    cr_assert_eq(
        test_run_dbranch(NULL, "eval --model a.h5 --data d.h5 --prompt-len 4 --method tf --decode grouped", NULL, &err),
        2);
    cr_assert(strstr(err, "--decode") && strstr(err, "--method tf"), "%s", err);
    free(err);
    cr_assert_eq(test_run_dbranch(NULL, "eval --model a.h5 --data d.h5 --decode ungrouped", NULL, &err), 2);
    cr_assert(strstr(err, "--decode"), "%s", err);
    free(err);
}

/* info --cpu: the level the kernels use follows DBRANCH_ISA, and auto
 * precision follows the level (fp32 below AVX-512 on any CPU). */
Test(cli_config, info_cpu_reports_the_kernel_level) {
    char *out;
    cr_assert_eq(test_run_dbranch(NULL, "info --cpu", &out, NULL), 0);
    char line[128];
    snprintf(line, sizeof line, "kernel level       %s (", k_isa_name(k_isa_supported()));
    cr_assert(strstr(out, line), "%s", out);
    cr_assert(strstr(out, "precision = auto   fp32 (") || strstr(out, "precision = auto   bf16 ("), "%s", out);
    cr_assert(strstr(out, "bf16 attention     ") && strstr(out, "compiled for       avx512f "), "%s", out);
    free(out);
    cr_assert_eq(test_run_dbranch("DBRANCH_ISA=scalar", "info --cpu", &out, NULL), 0);
    cr_assert(strstr(out, "kernel level       scalar ("), "%s", out);
    cr_assert(strstr(out, "precision = auto   fp32 (no bf16 units)\n") ||
                  strstr(out, "precision = auto   fp32 (DBRANCH_ISA forces a level below AVX-512)\n"),
              "%s", out);
    free(out);
    char *err;
    cr_assert_eq(test_run_dbranch("DBRANCH_ISA=sse9", "info --cpu", NULL, &err), 2);
    test_assert_one_line_error(err, "dbranch: ", "DBRANCH_ISA");
    free(err);
}

Test(cli_config, info_lists_every_key_with_its_range) {
    char *out;
    cr_assert_eq(test_run_dbranch(NULL, "info --keys", &out, NULL), 0);
    cr_assert(strstr(out, "n_layer") && strstr(out, "[1, 65536]"), "%s", out);
    cr_assert(strstr(out, "disco_gate") && strstr(out, "fixed|learned; default 'fixed'"), "%s", out);
    /* and the run keys, with their section */
    cr_assert(strstr(out, "\n[data] and [train]"), "%s", out);
    cr_assert(strstr(out, "train.precision") && strstr(out, "auto|fp32|bf16; default 'auto'"), "%s", out);
    cr_assert(strstr(out, "train.schedule") && strstr(out, "cosine|linear|wsd|constant; default 'cosine'"), "%s", out);
    cr_assert(strstr(out, "data.path") && strstr(out, "path; default ''"), "%s", out);
    /* integers read as integers: a range bound in e-notation (the seed's once was 9.22e+18) is no help */
    for (const char *line = out; *line;) {
        const size_t length = strcspn(line, "\n");
        char text[512];
        snprintf(text, sizeof text, "%.*s", (int)length, line);
        if (strstr(text, "integer in ")) cr_assert(!strstr(text, "e+"), "%s", text);
        line += length + (line[length] == '\n');
    }
    cr_assert(strstr(out, "train.seed") && strstr(out, "integer in [0, inf); default '1337'"), "%s", out);
    free(out);
}
