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

#include "support/run_dbranch.h"

/* Runs `dbranch bench train ARGS`; returns the exit status, stdout / stderr in *out, *err (caller frees). */
static int run_bench(const char *args, char **out, char **err) {
    char line[1024];
    snprintf(line, sizeof line, "bench train %s", args);
    return test_run_dbranch(NULL, line, out, err);
}

Test(cli_bench_train, help_and_bad_input) {
    char *out, *err;
    cr_assert_eq(run_bench("--help", &out, &err), 0);
    cr_assert(strstr(out, "--compare-branch") && strstr(out, "--preset"), "%s", out);
    free(out);
    free(err);
    const char *bad[][2] = {
        {"--preset huge", "--preset huge"},
        {"--steps 0", "--steps 0"},
        {"--frobnicate", "unknown option --frobnicate"},
        {"--family nanogpt2", "nanogpt2"},
        {"--config /nonexistent/run.ini", "/nonexistent/run.ini"},
        {"--compare-branch --branch decode", "--compare-branch"},
        {"--compare-branch --compare-precision", "--compare-precision"},
        {"--data /nonexistent/tokens.h5 --steps 1", "/nonexistent/tokens.h5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int status = run_bench(bad[i][0], &out, &err);
        cr_assert_neq(status, 0, "'%s' should fail", bad[i][0]);
        test_assert_one_line_error(err, "dbranch bench train: ", bad[i][1]);
        free(out);
        free(err);
    }
}

Test(cli_bench_train, json_figures_are_consistent) {
    char *out, *err;
    int status =
        run_bench("--preset baby --set train.precision=fp32 --steps 2 --warmup 1 --threads 2 --json", &out, &err);
    cr_assert_eq(status, 0, "%s", err);
    const char *run = strstr(out, "\"runs\"");
    cr_assert_not_null(run, "%s", out);
    const double tokens_per_s = test_json_number(run, "tokens_per_s"), step_ms = test_json_number(run, "step_ms");
    const double flops = test_json_number(run, "flops_per_token"), gflops = test_json_number(run, "gflops");
    cr_assert_gt(tokens_per_s, 0.0);
    cr_assert(fabs(tokens_per_s * step_ms / 1e3 - 12 * 64) < 1e-3 * 12 * 64, "tokens/s x step time = B*T");
    cr_assert(fabs(gflops - tokens_per_s * flops * 1e-9) <= 1e-3 * gflops + 1e-3, "GFLOP/s = tokens/s x FLOPs/token");
    /* 6N + 12LCT for baby: N = 826,112 parameters without pos_emb */
    cr_assert(fabs(flops - (6.0 * 826112 + 12.0 * 4 * 128 * 64)) < 1.0, "flops/token %.0f", flops);
    const double gemm = test_json_number(strstr(out, "\"gemm\""), "gflops");
    cr_assert_gt(gemm, 0.0);
    cr_assert(fabs(test_json_number(run, "mfu") - gflops / gemm) < 1e-3 * (gflops / gemm) + 1e-4);
    const double rss = test_json_number(out, "peak_rss_bytes"), closed = test_json_number(out, "closed_form_bytes");
    cr_assert(rss > 0 && closed > 0 && fabs(test_json_number(out, "rss_ratio") - rss / closed) < 1e-3);
    cr_assert(strstr(err, "tokens/s") && strstr(err, "peak RSS"), "the table goes to stderr with --json: %s", err);
    free(out);
    free(err);
}

Test(cli_bench_train, compare_branch_reports_ratios) {
    char *out, *err;
    int status =
        run_bench("--preset baby --steps 1 --warmup 1 --threads 1 --compare-branch --no-gemm-probe", &out, &err);
    cr_assert_eq(status, 0, "%s", err);
    cr_assert(strstr(out, "baseline:") && strstr(out, "decode-branch:"), "%s", out);
    cr_assert(strstr(out, "decode-branch / baseline time: step"), "%s", out);
    free(out);
    free(err);
    status =
        run_bench("--preset baby --steps 1 --warmup 0 --threads 1 --compare-branch --no-gemm-probe --json", &out, &err);
    cr_assert_eq(status, 0, "%s", err);
    const double ratio = test_json_number(strstr(out, "\"ratios\""), "forward_backward");
    cr_assert(ratio > 1.0 && ratio < 10.0, "the branch adds a trajectory: ratio %g", ratio);
    free(out);
    free(err);
}

/* fp32 and bf16 of one model: both runs start from the same weights and
 * batch, so their losses agree to bf16 rounding but not to the bit. The
 * second step's losses are compared: at the first, the rounding's effect
 * on a loss near ln V can fall below the loss's last digit (it did for
 * baby at seed 1 on a Zen 4, oneDNN at one thread), while the second
 * follows an update from bf16 gradients. Each run's MFU is against its own
 * precision's GEMM probe. */
Test(cli_bench_train, compare_precision_runs_both_precisions) {
    char *out, *err;
    int status = run_bench("--preset baby --steps 2 --warmup 0 --threads 1 --compare-precision --json", &out, &err);
    cr_assert_eq(status, 0, "%s", err);
    const char *fp32 = strstr(out, "\"precision\": \"fp32\""), *bf16 = strstr(out, "\"precision\": \"bf16\"");
    cr_assert(fp32 && bf16 && fp32 < bf16, "%s", out);
    const double first32 = test_json_number(fp32, "first_loss"), first16 = test_json_number(bf16, "first_loss");
    cr_assert(fabs(first16 - first32) < 0.01 * first32, "first losses %.9g, %.9g", first32, first16);
    const double loss32 = test_json_number(fp32, "last_loss"), loss16 = test_json_number(bf16, "last_loss");
    cr_assert(loss32 != loss16 && fabs(loss16 - loss32) < 0.01 * loss32, "second losses %.9g, %.9g", loss32, loss16);
    const char *gemm = strstr(out, "\"gemm\"");
    const double rate32 = test_json_number(gemm, "gflops"), rate16 = test_json_number(gemm, "gflops_bf16");
    cr_assert(rate32 > 0 && rate16 > 0, "%s", gemm);
    cr_assert(fabs(test_json_number(bf16, "mfu") - test_json_number(bf16, "gflops") / rate16) < 1e-3);
    cr_assert(fabs(test_json_number(fp32, "mfu") - test_json_number(fp32, "gflops") / rate32) < 1e-3);
    cr_assert(strstr(err, "bf16 products: "), "the table names the engine: %s", err);
    free(out);
    free(err);
}
