/* `dbranch bench train` as a user runs it: --help, one-line errors with a
 * non-zero exit for bad input, and short runs whose JSON carries every
 * figure the benchmark promises (tokens/s, FLOPs per token, GEMM rate, MFU,
 * peak RSS beside the closed form, the branch/baseline ratios) with values
 * that are consistent with each other. Timings are not asserted (shared
 * machine); their relations are. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *binary(void) {
    const char *path = getenv("DBRANCH_BINARY");
    cr_assert(path != NULL, "DBRANCH_BINARY is not set (run through ctest)");
    return path;
}

/* Runs `dbranch bench train ARGS`; stdout into out, stderr into err; returns the exit status. */
static int run_bench(const char *args, char *out, size_t out_size, char *err, size_t err_size) {
    char dir[] = "/tmp/dbranch_bench_train_XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char command[1024], out_path[128], err_path[128];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
    snprintf(command, sizeof command, "'%s' bench train %s >'%s' 2>'%s'", binary(), args, out_path, err_path);
    int status = system(command);
    const char *paths[2] = {out_path, err_path};
    char *buffers[2] = {out, err};
    size_t sizes[2] = {out_size, err_size};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "r");
        size_t n = f ? fread(buffers[i], 1, sizes[i] - 1, f) : 0;
        buffers[i][n] = '\0';
        if (f) fclose(f);
        remove(paths[i]);
    }
    remove(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The number after "key": in a JSON text (first occurrence after from). */
static double json_number(const char *text, const char *key) {
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(text, pattern);
    cr_assert_not_null(at, "no \"%s\" in: %s", key, text);
    return strtod(at + strlen(pattern), NULL);
}

static char out[1 << 16], err[1 << 16];

Test(cli_bench_train, help_and_bad_input) {
    cr_assert_eq(run_bench("--help", out, sizeof out, err, sizeof err), 0);
    cr_assert(strstr(out, "--compare-branch") && strstr(out, "--preset"), "%s", out);
    const char *bad[][2] = {
        {"--preset huge", "--preset huge"},
        {"--steps 0", "--steps 0"},
        {"--frobnicate", "unknown option --frobnicate"},
        {"--family nanogpt2", "nanogpt2"},
        {"--config /nonexistent/run.ini", "/nonexistent/run.ini"},
        {"--compare-branch --branch decode", "--compare-branch"},
        {"--data /nonexistent/tokens.h5 --steps 1", "/nonexistent/tokens.h5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int status = run_bench(bad[i][0], out, sizeof out, err, sizeof err);
        cr_assert_neq(status, 0, "'%s' should fail", bad[i][0]);
        cr_assert(strncmp(err, "dbranch bench train: ", 21) == 0, "'%s': %s", bad[i][0], err);
        cr_assert(strstr(err, bad[i][1]), "'%s': the message should name '%s': %s", bad[i][0], bad[i][1], err);
        cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "'%s': one line: %s", bad[i][0], err);
    }
}

Test(cli_bench_train, json_figures_are_consistent) {
    int status = run_bench("--preset baby --steps 2 --warmup 1 --threads 2 --json", out, sizeof out, err, sizeof err);
    cr_assert_eq(status, 0, "%s", err);
    const char *run = strstr(out, "\"runs\"");
    cr_assert_not_null(run, "%s", out);
    const double tokens_per_s = json_number(run, "tokens_per_s"), step_ms = json_number(run, "step_ms");
    const double flops = json_number(run, "flops_per_token"), gflops = json_number(run, "gflops");
    cr_assert_gt(tokens_per_s, 0.0);
    cr_assert(fabs(tokens_per_s * step_ms / 1e3 - 12 * 64) < 1e-3 * 12 * 64, "tokens/s x step time = B*T");
    cr_assert(fabs(gflops - tokens_per_s * flops * 1e-9) <= 1e-3 * gflops + 1e-3, "GFLOP/s = tokens/s x FLOPs/token");
    /* 6N + 12LCT for baby: N = 826,112 parameters without pos_emb */
    cr_assert(fabs(flops - (6.0 * 826112 + 12.0 * 4 * 128 * 64)) < 1.0, "flops/token %.0f", flops);
    const double gemm = json_number(strstr(out, "\"gemm\""), "gflops");
    cr_assert_gt(gemm, 0.0);
    cr_assert(fabs(json_number(run, "mfu") - gflops / gemm) < 1e-3 * (gflops / gemm) + 1e-4);
    const double rss = json_number(out, "peak_rss_bytes"), closed = json_number(out, "closed_form_bytes");
    cr_assert(rss > 0 && closed > 0 && fabs(json_number(out, "rss_ratio") - rss / closed) < 1e-3);
    cr_assert(strstr(err, "tokens/s") && strstr(err, "peak RSS"), "the table goes to stderr with --json: %s", err);
}

Test(cli_bench_train, compare_branch_reports_ratios) {
    int status = run_bench("--preset baby --steps 1 --warmup 1 --threads 1 --compare-branch --no-gemm-probe", out,
                           sizeof out, err, sizeof err);
    cr_assert_eq(status, 0, "%s", err);
    cr_assert(strstr(out, "baseline:") && strstr(out, "decode-branch:"), "%s", out);
    cr_assert(strstr(out, "decode-branch / baseline time: step"), "%s", out);
    status = run_bench("--preset baby --steps 1 --warmup 0 --threads 1 --compare-branch --no-gemm-probe --json", out,
                       sizeof out, err, sizeof err);
    cr_assert_eq(status, 0, "%s", err);
    const double ratio = json_number(strstr(out, "\"ratios\""), "forward_backward");
    cr_assert(ratio > 1.0 && ratio < 10.0, "the branch adds a trajectory: ratio %g", ratio);
}
