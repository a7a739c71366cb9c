/* `dbranch bench decode` as the llama2.c comparison uses it
 * (experiments/llama2c/run.sh): --probe-every 0 (probe passes only before and
 * after decoding) and the mean-over-steps figures in --json, checked for
 * consistency; a bad --probe-every exits 1 with one message line. And the
 * two llama2c_*.ini configs against llama2.c's parameter count, computed here
 * in closed form from its checkpoint layout (token embedding shared with the
 * classifier; per layer two RMSNorm weights, wq, wk, wv, wo, w1, w2, w3; a
 * final RMSNorm weight), through `dbranch info`. Runs the binary in env
 * DBRANCH_BINARY; configs under env DBRANCH_SOURCE_DIR. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/run_dbranch.h"

/* Runs `dbranch ARGS`; returns the exit code, stdout / stderr in *out, *err (caller frees). */
static int run(const char *args, char **out, char **err) { return test_run_dbranch(NULL, args, out, err); }

static const char *source_dir(void) {
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    return root ? root : ".";
}

Test(decode_bench, probe_every_zero_and_mean) {
    char args[1024], *out, *err;
    snprintf(args, sizeof args,
             "bench decode --config %s/experiments/configs/llama2c_15m.ini --set n_layer=1 --set vocab_size=512 "
             "--threads 2 --prompt-len 1 --tokens 6 --probe-every 0 --probe-mib 1 --json",
             source_dir());
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    cr_expect(strstr(out, "\"interleaved\": false") && strstr(out, "\"every\": 0"), "%s", out);
    double mean_ms = test_json_number(out, "decode_ms_mean"), best_ms = test_json_number(out, "decode_ms_best");
    double median_ms = test_json_number(out, "decode_ms_per_token"),
           mean_tps = test_json_number(out, "decode_tokens_per_s_mean");
    /* no step is faster than the fastest; the mean's tok/s is its reciprocal */
    cr_expect(best_ms > 0.0 && mean_ms >= best_ms * 0.999 && median_ms >= best_ms * 0.999, "%s", out);
    cr_expect(mean_tps > 0.0 && fabs(mean_tps * mean_ms - 1000.0) < 2.0, "mean tok/s %g vs mean ms %g", mean_tps,
              mean_ms);
    cr_expect(strstr(err, "mean over all decode steps"), "%s", err);
    free(out);
    free(err);

    snprintf(args, sizeof args, "bench decode --config %s/experiments/configs/llama2c_15m.ini --probe-every -1",
             source_dir());
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strstr(err, "dbranch bench decode: --probe-every -1") && strchr(err, '\n') == err + strlen(err) - 1,
              "stderr: %s", err);
    free(out);
    free(err);
}

/* llama2.c's parameter count for its checkpoint layout (shared classifier). */
static long long llama2c_params(long long dim, long long hidden, long long layers, long long heads, long long kv_heads,
                                long long vocab) {
    long long kv_dim = dim * kv_heads / heads;
    return vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hidden) + dim;
}

static void check_info_total(const char *config, long long want) {
    char args[1024], *out, *err;
    snprintf(args, sizeof args, "info %s/experiments/configs/%s", source_dir(), config);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    const char *line = strstr(out, "\n  total");
    cr_assert(line, "%s", out);
    long long primary = 0, branch = -1, total = 0;
    cr_assert_eq(sscanf(line, " total %lld %lld %lld", &primary, &branch, &total), 3, "%s", line);
    cr_expect_eq(total, want, "%s: dbranch counts %lld parameters, llama2.c's layout %lld", config, total, want);
    cr_expect_eq(branch, 0, "%s: a baseline model", config);
    free(out);
    free(err);
}

Test(decode_bench, llama2c_configs_match_parameter_counts) {
    check_info_total("llama2c_110m.ini", llama2c_params(768, 2048, 12, 12, 12, 32000));
    check_info_total("llama2c_15m.ini", llama2c_params(288, 768, 6, 6, 6, 32000));
}
