/* dbranch analyze (cli/cmd_analyze.c) end to end: a config at init prints a
 * line per layer, the final RMS and, with attn_res, a route line per
 * sublayer whose weights are the uniform mean; refused command lines (and
 * --bridge on a model without a loop or a file that is not two-hop) give
 * one "dbranch analyze: ..." line naming the option and exit non-zero. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/letters.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char dir[256], data[320], config[320];

static void setup(void) {
    test_scratch_dir(dir, sizeof dir, "cli_analyze");
    snprintf(data, sizeof data, "%s/letters.h5", dir);
    snprintf(config, sizeof config, "%s/model.ini", dir);
    test_write_letters(data, 3, 8, 400, 200);
    FILE *f = fopen(config, "w");
    cr_assert(f);
    fprintf(f, "[model]\nfamily = llama\nvocab_size = 256\nblock_size = 32\nn_layer = 2\nn_head = 2\nn_kv_head = 2\n"
               "d_model = 16\nd_ff = 32\n");
    fclose(f);
}

static void teardown(void) { test_remove_dir(dir); }

TestSuite(cli_analyze, .init = setup, .fini = teardown);

static int count_lines(const char *text, const char *prefix) {
    int n = 0;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, prefix, strlen(prefix))) n++;
    return n;
}

Test(cli_analyze, a_config_at_init_prints_layers_and_uniform_routes) {
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "analyze --config '%s' --set model.attn_res=full --data '%s' --windows 2 --seq-len 16",
             config, data);
    cr_assert_eq(test_run_dbranch("OMP_NUM_THREADS=1", args, &out, &err), 0, "%s", err);
    cr_expect_eq(count_lines(out, "layer "), 2, "%s", out);
    cr_expect_eq(count_lines(out, "final "), 1, "%s", out);
    cr_expect_eq(count_lines(out, "route "), 5, "%s", out);
    cr_expect(strstr(out, "route 1 2 0.500000 0.500000\n"), "%s", out);
    cr_expect(strstr(out, "route final 5 0.200000 0.200000 0.200000 0.200000 0.200000\n"), "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "analyze --config '%s' --data '%s' --windows 2 --seq-len 16", config, data);
    cr_assert_eq(test_run_dbranch("OMP_NUM_THREADS=1", args, &out, NULL), 0);
    cr_expect_eq(count_lines(out, "route "), 0, "no attn_res, no routes: %s", out);
    free(out);
}

static void refused(const char *args_format, const char *needle) {
    char args[1024], *err = NULL;
    snprintf(args, sizeof args, args_format, config, data);
    int code = test_run_dbranch(NULL, args, NULL, &err);
    cr_expect_neq(code, 0, "%s exited 0", args);
    test_assert_one_line_error(err, "dbranch analyze: ", needle);
    free(err);
}

Test(cli_analyze, bad_command_lines_are_one_line_errors) {
    refused("analyze --config '%s' --data '%s' --model x.h5", "one of --model or --config");
    refused("analyze --config '%s' --data '%s' --windows 0", "--windows '0'");
    refused("analyze --config '%s' --data '%s' --seq-len 99", "seq_len 99 outside 1..block_size 32");
    refused("analyze --config '%s' --data '%s' --windows 1 --windows 2", "--windows is given twice");
    refused("analyze --config '%s' --data '%s' --set model.attn_res_heads=2", "attn_res_heads");
    refused("analyze --config '%s' --data '%s' --split test", "--split 'test'");
    refused("analyze --config '%s' --data '%s' stray", "unexpected argument 'stray'");
    refused("analyze --bridge --config '%s' --data '%s'", "n_loop = 1; it needs a looped stack");
    refused("analyze --bridge --config '%s' --set model.n_loop=2 --data '%s'",
            "not a two-hop record file (record_len 0, expected 5)");
    refused("analyze --bridge --config '%s' --data '%s' --windows 2", "--windows and --seq-len do not apply");
}
