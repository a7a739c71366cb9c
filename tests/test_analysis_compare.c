/* `dbranch compare`'s library (analysis/run_record.h, analysis/compare.h) on
 * synthetic run folders: a provenance.json and a JSON-lines log per run, in
 * train's formats, with final losses chosen as exact binary fractions so the
 * expected differences, standard deviations and p-values are worked out by
 * hand (in the comments) and by the df = 2 closed form of Student's t; and
 * four real runs of `dbranch train`, so the records read are the ones train
 * writes. The CLI's table, JSON and one-line errors are checked on the
 * synthetic folders. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/compare.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "test_analysis_util.h"

static char work_dir[128];
static void setup(void) { test_scratch_dir(work_dir, sizeof work_dir, "compare"); }
static void teardown(void) { test_remove_dir(work_dir); }
TestSuite(analysis_compare, .init = setup, .fini = teardown);

static const char *run_path(const char *name) {
    static char path[16][256];
    static int which;
    which = (which + 1) % 16;
    snprintf(path[which], sizeof path[which], "%s/%s", work_dir, name);
    return path[which];
}

/* A run folder: provenance.json and log.jsonl (provenance line, two steps, an
 * early eval at a decoy loss, the final eval at step final_step of 2). */
static const char *write_run_with(const char *name, const char *family, const char *branch, const char *lr, int seed,
                                  int threads, double loss, int final_step, const char *extra_model_keys,
                                  const char *extra_train_keys) {
    const char *dir = run_path(name);
    cr_assert(mkdir(dir, 0777) == 0, "%s", dir);
    char record[2048];
    snprintf(record, sizeof record,
             "{\"type\":\"provenance\",\"commit\":\"abc\",\"version\":\"0.1.0\",\"resume\":null,\"total_steps\":2,"
             "\"tokens_per_step\":64,\"config\":{\"model\":{\"family\":\"%s\",\"branch\":\"%s\",\"d_model\":8%s},"
             "\"data\":{\"path\":\"d.h5\"},\"train\":{\"lr\":%s,\"seed\":%d,\"threads\":%d,\"out_dir\":\"%s\","
             "\"log_file\":\"log.jsonl\",\"eval_every\":%d%s}}}",
             family, branch, extra_model_keys, lr, seed, threads, dir, seed * 10, extra_train_keys);
    char path[512];
    snprintf(path, sizeof path, "%s/provenance.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "%s\n", record);
    fclose(f);
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "%s\n", record);
    fprintf(f, "{\"type\":\"step\",\"step\":1,\"tokens\":64,\"loss\":5.5}\n");
    fprintf(f, "{\"type\":\"eval\",\"step\":1,\"tokens\":64,\"loss\":9.75,\"windows\":4}\n");
    fprintf(f, "{\"type\":\"step\",\"step\":2,\"tokens\":128,\"loss\":4.5}\n");
    fprintf(f, "{\"type\":\"eval\",\"step\":%d,\"tokens\":128,\"loss\":%.17g,\"windows\":4}\n", final_step, loss);
    fclose(f);
    return dir;
}

static const char *write_run(const char *name, const char *branch, const char *lr, int seed, int threads, double loss,
                             int final_step) {
    return write_run_with(name, "nanogpt", branch, lr, seed, threads, loss, final_step, "", "");
}

/* Baseline (branch none, lr 0.001) seeds 1-4: 3.0, 3.125, 3.25, 3.5.
 * Decode (branch decode) seeds 3, 1, 2: 3.0, 2.875, 3.0625 -> per seed 1, 2, 3
 *   diffs -1/8, -1/16, -1/4 = -12/96, -6/96, -24/96; mean -14/96; deviations
 *   2, 8, -10 (/96): sd = sqrt(168 / 2) / 96; reference mean over seeds 1-3 = 3.125.
 * lr 0.002 seeds 1, 2: 3.5, 3.625 -> diffs +0.5, +0.5 (sd 0: p 0).
 * threads, out_dir and eval_every differ between runs and do not make arms. */
static int write_study(const char **dirs) {
    int n = 0;
    dirs[n++] = write_run("base1", "none", "0.001", 1, 1, 3.0, 2);
    dirs[n++] = write_run("base2", "none", "0.001", 2, 2, 3.125, 2);
    dirs[n++] = write_run("dec3", "decode", "0.001", 3, 2, 3.0, 2);
    dirs[n++] = write_run("base3", "none", "0.001", 3, 2, 3.25, 2);
    dirs[n++] = write_run("dec1", "decode", "0.001", 1, 1, 2.875, 2);
    dirs[n++] = write_run("lr1", "none", "0.002", 1, 2, 3.5, 2);
    dirs[n++] = write_run("base4", "none", "0.001", 4, 2, 3.5, 2);
    dirs[n++] = write_run("dec2", "decode", "0.001", 2, 2, 3.0625, 2);
    dirs[n++] = write_run("lr2", "none", "0.002", 2, 2, 3.625, 2);
    return n;
}

static void read_runs(const char **dirs, int n, analysis_run *runs) {
    for (int i = 0; i < n; i++)
        cr_assert_eq(analysis_run_read(dirs[i], &runs[i]), DT_OK, "%s", dt_error_message());
}

Test(analysis_compare, arms_pairs_and_statistics) {
    const char *dirs[16];
    int n = write_study(dirs);
    analysis_run runs[16];
    read_runs(dirs, n, runs);
    cr_assert_eq(runs[0].seed, 1);
    assert_close(runs[3].final_loss, 3.25, 0); /* the final eval, not the decoy at step 1 */
    analysis_comparison c;
    cr_assert_eq(analysis_compare(runs, n, NULL, 0, NULL, &c), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.n_arms, 3);
    cr_assert_eq(c.reference, 0);
    /* Labels: only the keys on which arms differ. */
    cr_assert_str_eq(c.arms[0].label, "model.branch=none train.lr=0.001");
    cr_assert_str_eq(c.arms[1].label, "model.branch=decode train.lr=0.001");
    cr_assert_str_eq(c.arms[2].label, "model.branch=none train.lr=0.002");
    cr_assert_eq(c.arms[0].n_runs, 4);
    assert_close(c.arms[0].mean_loss, (3.0 + 3.125 + 3.25 + 3.5) / 4, 1e-15);

    const analysis_arm *dec = &c.arms[1];
    double mean = -14.0 / 96, sd = sqrt(168.0 / 2) / 96, se = sd / sqrt(3), t = mean / se;
    cr_assert_eq(dec->paired.n, 3);
    assert_close(dec->paired.mean, mean, 1e-15);
    assert_close(dec->paired.sd, sd, 1e-15);
    assert_close(dec->reference_mean, 3.125, 1e-15);
    assert_close(dec->mean_diff_pct, 100 * mean / 3.125, 1e-12);
    assert_close(dec->paired.p, 1 - fabs(t) / sqrt(2 + t * t), 1e-12);
    double t975 = 0.95 / sqrt(2 * 0.975 * 0.025); /* df = 2 quantile in closed form */
    assert_close(dec->paired.low, mean - t975 * se, 1e-10);
    assert_close(dec->paired.high, mean + t975 * se, 1e-10);

    const analysis_arm *lr = &c.arms[2];
    cr_assert_eq(lr->paired.n, 2);
    assert_close(lr->paired.mean, 0.5, 0);
    cr_assert(lr->paired.p == 0 && lr->paired.low == 0.5 && lr->paired.high == 0.5);
    assert_close(lr->reference_mean, (3.0 + 3.125) / 2, 1e-15);
    analysis_comparison_free(&c);

    /* --reference by label or by one of the arm's directories; --arm-key model.branch merges the lr arms. */
    cr_assert_eq(analysis_compare(runs, n, NULL, 0, "model.branch=decode train.lr=0.001", &c), DT_OK);
    cr_assert_eq(c.reference, 1);
    assert_close(c.arms[0].paired.mean, 14.0 / 96, 1e-15);
    analysis_comparison_free(&c);
    cr_assert_eq(analysis_compare(runs, n, NULL, 0, run_path("lr2"), &c), DT_OK);
    cr_assert_eq(c.reference, 2);
    analysis_comparison_free(&c);
    const char *keys[] = {"model.branch"};
    cr_assert_eq(analysis_compare(runs, 5, keys, 1, NULL, &c), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.n_arms, 2);
    cr_assert_str_eq(c.arms[1].label, "model.branch=decode");
    analysis_comparison_free(&c);
    /* ... but then lr1 and base1 are one arm with seed 1 twice. */
    cr_assert_eq(analysis_compare(runs, n, keys, 1, NULL, &c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "lr1") && strstr(dt_error_message(), "train.seed = 1"), "%s",
              dt_error_message());
    cr_assert_eq(analysis_compare(runs, n, NULL, 0, "nope", &c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "'nope'"), "%s", dt_error_message());
    const char *missing[] = {"model.nothing"};
    cr_assert_eq(analysis_compare(runs, n, missing, 1, NULL, &c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "model.nothing"), "%s", dt_error_message());
    for (int i = 0; i < n; i++)
        analysis_run_free(&runs[i]);
}

Test(analysis_compare, unfinished_or_malformed_runs_are_refused) {
    analysis_run run;
    const char *dir = write_run("short", "none", "0.001", 1, 1, 3.0, 1);
    cr_assert_eq(analysis_run_read(dir, &run), DT_ERR);
    cr_assert(strstr(dt_error_message(), "log.jsonl") && strstr(dt_error_message(), "did not finish"), "%s",
              dt_error_message());
    analysis_run_free(&run);
    cr_assert_eq(analysis_run_read(run_path("absent"), &run), DT_ERR);
    cr_assert(strstr(dt_error_message(), "absent/provenance.json"), "%s", dt_error_message());
    analysis_run_free(&run);
    dir = write_run("bad", "none", "0.001", 1, 1, 3.0, 2);
    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "a");
    fprintf(f, "{\"type\":\"eval\",\"step\":2,\n");
    fclose(f);
    cr_assert_eq(analysis_run_read(dir, &run), DT_ERR);
    cr_assert(strstr(dt_error_message(), "log.jsonl line 6"), "%s", dt_error_message());
    analysis_run_free(&run);
}

Test(analysis_compare, cli_table_json_and_errors) {
    const char *dirs[16];
    int n = write_study(dirs);
    char args[4096];
    int used = snprintf(args, sizeof args, "compare --json");
    for (int i = 0; i < n; i++)
        used += snprintf(args + used, sizeof args - (size_t)used, " '%s'", dirs[i]);
    char *out = NULL, *err = NULL;
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"arm\":\"model.branch=decode train.lr=0.001\""), "%s", out);
    char want[128];
    snprintf(want, sizeof want, "\"mean_diff\":%.9g", -14.0 / 96);
    cr_assert(strstr(out, want), "%s not in %s", want, out);
    cr_assert(strstr(out, "\"pairs\":2,\"reference_mean\":3.0625,\"mean_diff\":0.5"), "%s", out);
    free(out);
    free(err);
    /* The table: one row per arm. */
    memcpy(args, "compare       ", 14);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "model.branch=decode train.lr=0.001"), "%s", out);
    cr_assert(strstr(out, "-0.145833") && strstr(out, "-4.667%"), "%s", out); /* -14/96, / 3.125 */
    free(out);
    free(err);
    /* --halfwidth 2: the decode arm's sd is sqrt(84) / 96 = 3.055% of 3.125, and with t(0.975; 10, 11) =
     * 2.228, 2.201 (printed tables) 11 pairs give +-2.052%, 12 give +-1.941%; the lr arm's sd is 0: 2 pairs. */
    used = snprintf(args, sizeof args, "compare --halfwidth 2 --json");
    for (int i = 0; i < n; i++)
        used += snprintf(args + used, sizeof args - (size_t)used, " '%s'", dirs[i]);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"halfwidth_pct\":2,\"pairs_for_halfwidth\":12}"), "%s", out);
    cr_assert(strstr(out, "\"halfwidth_pct\":2,\"pairs_for_halfwidth\":2}"), "%s", out);
    free(out);
    free(err);
    memcpy(args, "compare --halfwidth 2       ", 28);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "pairs for +-2%") && strstr(out, "  12\n"), "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "compare --halfwidth -1 '%s'", dirs[0]);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "--halfwidth '-1'");
    free(err);
    snprintf(args, sizeof args, "compare --reference nope '%s' '%s'", dirs[0], dirs[2]);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "'nope'");
    free(err);
    snprintf(args, sizeof args, "compare '%s'", run_path("absent"));
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "provenance.json");
    free(err);
}

/* Extracts "key":number from a JSON line (NaN when absent). */
static double json_value(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(json, pattern);
    return at ? strtod(at + strlen(pattern), NULL) : NAN;
}

/* --differences: numbers in, the paired analysis out. For 0.5, 1.5, 1.0, 2.0:
 * mean 1.25, sd sqrt(1.25 / 3) = 0.645497, t = 1.25 / (sd / 2) = 3.872983;
 * with t(0.975; 3) = 3.182446 (printed tables) the interval is 1.25 +-
 * 1.027140, and p lies between 0.05 (t = 3.182) and 0.02 (t = 4.541). */
Test(analysis_compare, differences_from_a_file) {
    char path[256], args[512];
    snprintf(path, sizeof path, "%s/gaps.txt", work_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "# per-seed gap differences\n0.5\n1.5\n\n  1.0\n2.0\n");
    fclose(f);
    snprintf(args, sizeof args, "compare --differences '%s' --json --halfwidth 0.5", path);
    char *out = NULL, *err = NULL;
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert_eq(json_value(out, "n"), 4, "%s", out);
    cr_assert_float_eq(json_value(out, "mean"), 1.25, 1e-12, "%s", out);
    cr_assert_float_eq(json_value(out, "sd"), sqrt(1.25 / 3), 1e-8, "%s", out);
    cr_assert_float_eq(json_value(out, "t"), 3.872983, 1e-6, "%s", out);
    cr_assert_float_eq(json_value(out, "ci95_low"), 1.25 - 1.027140, 1e-5, "%s", out);
    cr_assert_float_eq(json_value(out, "ci95_high"), 1.25 + 1.027140, 1e-5, "%s", out);
    const double p = json_value(out, "p");
    cr_assert(p > 0.02 && p < 0.05, "p %g", p);
    /* +-0.5 at sd 0.6455: n with t(0.975; n - 1) 0.6455 / sqrt(n) <= 0.5, 9 (2.306 * 0.2152 = 0.496) */
    cr_assert_eq(json_value(out, "pairs_for_halfwidth"), 9, "%s", out);
    free(out);
    free(err);

    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "0.5\n1.5 seeds\n");
    fclose(f);
    snprintf(args, sizeof args, "compare --differences '%s'", path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "line 2: '1.5 seeds' is not a number");
    free(err);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "0.5\n");
    fclose(f);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "at least 2");
    free(err);
    snprintf(args, sizeof args, "compare --differences '%s' '%s'", path, work_dir);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "--differences");
    free(err);
}

/* Real runs: `dbranch train` writes the records compare reads. Two arms
 * (branch none / decode) by two seeds, the seeds given in another order for
 * the second arm; each run's final loss is the last eval line of its log. */
Test(analysis_compare, real_training_runs) {
    char data[300], ini[300], args[2048], *err = NULL;
    snprintf(data, sizeof data, "%s/letters.h5", work_dir);
    static int32_t tokens[3000];
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    for (int i = 0; i < 3000; i++)
        tokens[i] = 'a' + (int32_t)dt_rng_below(&rng, 6);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data, &tok, tokens, 2600, tokens + 2600, 400, "letters"), DT_OK);
    data_tokenizer_free(&tok);
    snprintf(ini, sizeof ini, "%s/run.ini", work_dir);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fprintf(f,
            "[model]\nvocab_size = 256\nblock_size = 8\nn_layer = 1\nn_head = 2\nd_model = 16\n"
            "[data]\npath = %s\n[train]\nbatch_size = 4\neval_windows = 4\nthreads = 1\n",
            data);
    fclose(f);
    const char *runs[4][3] = {{"none", "1", "n1"}, {"none", "2", "n2"}, {"decode", "2", "d2"}, {"decode", "1", "d1"}};
    for (int r = 0; r < 4; r++) {
        snprintf(args, sizeof args,
                 "train --config '%s' --tokens 320 --set model.branch=%s --set train.seed=%s --out '%s'", ini,
                 runs[r][0], runs[r][1], run_path(runs[r][2]));
        cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 0, "%s", err);
        free(err);
    }
    analysis_run read[4];
    for (int r = 0; r < 4; r++)
        cr_assert_eq(analysis_run_read(run_path(runs[r][2]), &read[r]), DT_OK, "%s", dt_error_message());
    cr_assert_eq(read[2].seed, 2);
    cr_assert_str_eq(analysis_run_value(&read[2], "model.branch"), "decode");
    /* The loss is the log's last eval line, read here by hand. */
    char log[512], line[4096], *last = NULL;
    snprintf(log, sizeof log, "%s/log.jsonl", run_path("d2"));
    f = fopen(log, "r");
    cr_assert(f);
    double want = NAN;
    while (fgets(line, sizeof line, f))
        if ((last = strstr(line, "\"type\":\"eval\"")) && (last = strstr(line, "\"loss\":")))
            want = strtod(last + 7, NULL);
    fclose(f);
    cr_assert_eq(read[2].final_loss, want);
    analysis_comparison c;
    cr_assert_eq(analysis_compare(read, 4, NULL, 0, NULL, &c), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.n_arms, 2);
    cr_assert_str_eq(c.arms[1].label, "model.branch=decode");
    cr_assert_eq(c.arms[1].paired.n, 2);
    double d1 = read[3].final_loss - read[0].final_loss, d2 = read[2].final_loss - read[1].final_loss;
    cr_assert(fabs(c.arms[1].paired.mean - (d1 + d2) / 2) < 1e-12);
    analysis_comparison_free(&c);
    for (int r = 0; r < 4; r++)
        analysis_run_free(&read[r]);
}

/* A key added to the configuration after some runs were recorded: the older
 * records lack it, and compare reads it as its default (the behaviour before
 * the key), so seed 1's runs (no train.precision) and seed 2's ("fp32") are one
 * arm per branch and pair; an explicit non-default value is its own arm. */
Test(analysis_compare, a_key_absent_from_older_records_reads_as_its_default) {
    analysis_run defaults;
    const char *record = "{\"type\":\"provenance\",\"config\":{\"train\":{\"precision\":\"fp32\",\"lr\":0.001}}}";
    cr_assert_eq(analysis_config_parse(record, strlen(record), "defaults", &defaults), DT_OK, "%s", dt_error_message());
    cr_assert_eq(defaults.n_keys, 2);
    analysis_run old_run;
    cr_assert_eq(analysis_run_read(write_run("old", "none", "0.002", 1, 1, 3.0, 2), &old_run), DT_OK);
    cr_assert_null(analysis_run_value(&old_run, "train.precision"));
    int added = -1;
    cr_assert_eq(analysis_run_fill_defaults(&old_run, &defaults, &added), DT_OK);
    cr_assert_eq(added, 1); /* train.lr was recorded: its value stays */
    cr_assert_str_eq(analysis_run_value(&old_run, "train.precision"), "fp32");
    cr_assert_str_eq(analysis_run_value(&old_run, "train.lr"), "0.002");
    cr_assert_eq(analysis_run_fill_defaults(&old_run, &defaults, &added), DT_OK);
    cr_assert_eq(added, 0);
    analysis_run_free(&old_run);
    analysis_run_free(&defaults);

    const char *dirs[5] = {
        write_run("b1", "none", "0.001", 1, 1, 3.0, 2),
        write_run_with("b2", "nanogpt", "none", "0.001", 2, 1, 3.25, 2, "", ",\"precision\":\"fp32\""),
        write_run("d1", "decode", "0.001", 1, 1, 2.75, 2),
        write_run_with("d2", "nanogpt", "decode", "0.001", 2, 1, 3.25, 2, "", ",\"precision\":\"fp32\""),
        write_run_with("h2", "nanogpt", "none", "0.001", 2, 1, 3.5, 2, "", ",\"precision\":\"bf16\""),
    };
    char args[4096];
    int used = snprintf(args, sizeof args, "compare --json");
    for (int i = 0; i < 5; i++)
        used += snprintf(args + used, sizeof args - (size_t)used, " '%s'", dirs[i]);
    char *out = NULL, *err = NULL;
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    /* Three arms: none/fp32 (b1, b2), decode/fp32 (d1, d2: diffs -0.25, 0), none/bf16 (h2). */
    cr_assert(strstr(out, "\"arm\":\"model.branch=none train.precision=fp32\""), "%s", out);
    cr_assert(strstr(out, "\"arm\":\"model.branch=decode train.precision=fp32\",\"runs\":[{"), "%s", out);
    cr_assert(strstr(out, "\"pairs\":2,\"reference_mean\":3.125,\"mean_diff\":-0.125"), "%s", out);
    cr_assert(strstr(out, "\"arm\":\"model.branch=none train.precision=bf16\""), "%s", out);
    cr_assert_null(strstr(out, "absent"), "%s", out);
    /* One line on stderr names the key, its default and how many records lack it (first, though these
     * synthetic records lack most keys). */
    cr_assert(strstr(err, "train.precision = fp32 (2 of 5 runs, e.g. ") && strstr(err, "/b1"), "%s", err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
    free(out);
    free(err);
    /* A default that depends on the family is the run's family's: llama's tie_embeddings is 0 (nanogpt's 1),
     * so a llama record lacking it pairs with one that says 0. */
    const char *l1 = write_run_with("l1", "llama", "none", "0.001", 1, 1, 3.0, 2, ",\"tie_embeddings\":0", "");
    const char *l2 = write_run_with("l2", "llama", "none", "0.001", 2, 1, 3.5, 2, "", "");
    snprintf(args, sizeof args, "compare --json '%s' '%s'", l1, l2);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"arm\":\"all runs\""), "%s", out);
    cr_assert(strstr(err, "model.tie_embeddings = 0 (1 of 2 runs"), "%s", err);
    free(out);
    free(err);
}
