/* `bench decode --table llama` (bench/llama_table.h): the mean ± sd of
 * per-repetition tokens/s against numbers worked out by hand, the table's
 * lines character for character against llama-bench's markdown layout
 * (every line the same display width), and the CLI: one pp and one tg row
 * per decode mode, a build line with the commit, and refused combinations. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/llama_table.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

/* 2 tokens in 0.1, 0.05, 0.025 s: 20, 40, 80 tokens/s; mean 140/3; deviations -80/3, -20/3, 100/3,
 * sd = sqrt((6400 + 400 + 10000) / 9 / 2). */
Test(llama_table, rate_mean_and_sd) {
    const double seconds[3] = {0.1, 0.05, 0.025};
    double mean, sd;
    bench_llama_rate(seconds, 3, 2, &mean, &sd);
    cr_assert(fabs(mean - 140.0 / 3) < 1e-12, "mean %.15g", mean);
    cr_assert(fabs(sd - sqrt(16800.0 / 18)) < 1e-12, "sd %.15g", sd);
    bench_llama_rate(seconds, 1, 2, &mean, &sd);
    cr_assert(mean == 20 && sd == 0);
}

/* Display columns of a UTF-8 line (continuation bytes do not count). */
static int columns(const char *s, size_t n) {
    int count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

Test(llama_table, layout) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    bench_llama_header h = {.model = "llama 4.19M F32 branch",
                            .size_bytes = 16.0 * 1024 * 1024,
                            .params = 4190000,
                            .threads = 2,
                            .commit = "abc1234",
                            .version = "0.1.0",
                            .cpu = "Some CPU",
                            .blis_version = "0.9.0"};
    bench_llama_row rows[2] = {{.mode = "grouped", .test = "pp64", .mean = 20, .sd = 10},
                               {.mode = "baseline", .test = "tg128", .mean = 1234.567, .sd = 0.004}};
    bench_llama_table_print(out, &h, rows, 2);
    fclose(out);
    const char *want =
        "| model                          |       size |     params | backend    | threads | mode       |"
        "          test |                  t/s |\n"
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: | ---------- |"
        " ------------: | -------------------: |\n"
        "| llama 4.19M F32 branch         |  16.00 MiB |     4.19 M | CPU        |       2 | grouped    |"
        "          pp64 |        20.00 ± 10.00 |\n"
        "| llama 4.19M F32 branch         |  16.00 MiB |     4.19 M | CPU        |       2 | baseline   |"
        "         tg128 |       1234.57 ± 0.00 |\n"
        "\nbuild: abc1234 (0.1.0)\ncpu: Some CPU, BLIS 0.9.0\n";
    cr_assert_str_eq(text, want);
    int width = -1;
    for (const char *line = text; *line == '|';) {
        const char *end = strchr(line, '\n');
        int w = columns(line, (size_t)(end - line));
        if (width < 0) width = w;
        cr_assert_eq(w, width, "%.*s", (int)(end - line), line);
        line = end + 1;
    }
    free(text);
}

static char dir[256];
static void setup(void) { test_scratch_dir(dir, sizeof dir, "llama_table"); }
static void teardown(void) { test_remove_dir(dir); }

Test(llama_table, cli_rows_per_mode, .init = setup, .fini = teardown, .timeout = 120) {
    char ini[300], args[1024], *out, *err;
    snprintf(ini, sizeof ini, "%s/tiny.ini", dir);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fputs("[model]\nfamily = llama\nvocab_size = 64\nblock_size = 32\nn_layer = 1\nn_head = 2\nd_model = 16\n"
          "branch = decode\n",
          f);
    fclose(f);
    snprintf(args, sizeof args,
             "bench decode --config '%s' --table llama --repetitions 3 --prompt-len 8 --tokens 4 --probe-mib 4", ini);
    cr_assert_eq(test_run_dbranch("OMP_NUM_THREADS=1", args, &out, &err), 0, "%s", err);
    const char *want[6][2] = {{"baseline", "pp8"}, {"grouped", "pp8"}, {"ungrouped", "pp8"},
                              {"baseline", "tg4"}, {"grouped", "tg4"}, {"ungrouped", "tg4"}};
    const char *line = strchr(strchr(out, '\n') + 1, '\n') + 1; /* past the header and separator */
    for (int r = 0; r < 6; r++) {
        char model[64], mode[32], test[32];
        double mean, sd;
        int threads;
        cr_assert_eq(sscanf(line, "| %63[^|] | %*s MiB | %*s M | CPU | %d | %31s | %31s | %lf ± %lf |", model, &threads,
                            mode, test, &mean, &sd),
                     6, "row %d: %s", r, line);
        cr_assert_str_eq(mode, want[r][0]);
        cr_assert_str_eq(test, want[r][1]);
        cr_assert(strstr(model, "llama") && strstr(model, "branch"), "%s", model);
        cr_assert(threads == 1 && mean > 0 && sd >= 0, "%s", line);
        line = strchr(line, '\n') + 1;
    }
    cr_assert(!strncmp(line, "\nbuild: ", 8), "%s", line);
    cr_assert(strstr(line, "cpu: "), "%s", line);
    cr_assert(strstr(err, "decode bench:"), "the usual table goes to stderr: %s", err);
    free(out);
    free(err);

    snprintf(args, sizeof args, "bench decode --config '%s' --table llama --json", ini);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch bench decode: ", "--json");
    free(err);
    snprintf(args, sizeof args, "bench decode --config '%s' --table csv", ini);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch bench decode: ", "--table csv");
    free(err);
    snprintf(args, sizeof args, "bench decode --config '%s' --repetitions 3", ini);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch bench decode: ", "--repetitions");
    free(err);
}
