/* experiments/run.sh all --quick, end to end, so the study scripts cannot rot:
 * every study runs at toy scale into a temporary directory, and the tables
 * it writes are checked row by row (all rows present, finite losses, the
 * Decode-Branch columns filled for branch rows, the token budgets, the MoE
 * decode-cost table). The table arithmetic (mean over seeds, paired relative
 * difference) is recomputed here from the raw JSON-lines logs. The layout is
 * OUT/<study>/<scale>/..., the scale the token budget as a number (the quick
 * budget of 1536 tokens is "1536"), with a runs manifest OUT/<study>/runs.md
 * naming every run's log, and each run folder holds dbranch train's
 * provenance.json. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/run_dbranch.h"
#include "support/scratch.h"

static char work_dir[64];

/* The scale folder of the quick budget (experiments/lib/common.sh, exp_scale_name). */
#define SCALE "1536"

static void setup(void) { test_scratch_dir(work_dir, sizeof work_dir, "cli_experiments"); }

static void teardown(void) { test_remove_dir(work_dir); }

/* The source tree the studies run from (env DBRANCH_SOURCE_DIR, set by ctest). */
static const char *source_dir(void) {
    const char *source = getenv("DBRANCH_SOURCE_DIR");
    cr_assert(source != NULL, "DBRANCH_SOURCE_DIR is not set (run through ctest)");
    return source;
}

/* Writes an executable script at path: printf's format and arguments give its text. */
__attribute__((format(printf, 2, 3))) static void write_script(const char *path, const char *format, ...) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    va_list args;
    va_start(args, format);
    vfprintf(f, format, args);
    va_end(args);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* Splits a tab-separated line in place; returns the number of fields. */
static int split_tabs(char *line, char **fields, int max_fields) {
    int n = 0;
    line[strcspn(line, "\n")] = '\0';
    for (char *p = line; n < max_fields;) {
        fields[n++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

static int is_finite_number(const char *text, double *value) {
    char *end;
    *value = strtod(text, &end);
    return end != text && *end == '\0' && isfinite(*value);
}

/* One row of OUT/<study>/<scale>/table.tsv (columns: row seeds tokens loss_mean
 * loss_sd primary_mean branch_mean alpha_mean reference rel_diff_mean
 * rel_diff_sd). */
typedef struct {
    char name[64], reference[64];
    int seeds;
    long tokens;
    double loss, loss_sd, primary, branch, alpha, rel_diff;
    int has_branch, has_rel_diff;
} table_row;

static int read_table(const char *study, table_row *rows, int max_rows) {
    char path[256], line[1024];
    snprintf(path, sizeof path, "%s/out/%s/" SCALE "/table.tsv", work_dir, study);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    cr_assert(fgets(line, sizeof line, f) != NULL, "%s is empty", path);
    cr_assert(strncmp(line, "row\tseeds\ttokens\tloss_mean", 26) == 0, "%s: unexpected header %s", path, line);
    int n = 0;
    while (n < max_rows && fgets(line, sizeof line, f)) {
        char *fields[12];
        cr_assert_eq(split_tabs(line, fields, 12), 11, "%s: row %d does not have 11 columns", path, n + 1);
        table_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%.63s", fields[0]);
        snprintf(r->reference, sizeof r->reference, "%.63s", fields[8]);
        r->seeds = atoi(fields[1]);
        r->tokens = atol(fields[2]);
        cr_assert(is_finite_number(fields[3], &r->loss), "%s %s: loss '%s' is not finite", study, r->name, fields[3]);
        cr_assert(is_finite_number(fields[4], &r->loss_sd), "%s %s: loss sd '%s'", study, r->name, fields[4]);
        cr_assert(is_finite_number(fields[5], &r->primary), "%s %s: primary CE '%s'", study, r->name, fields[5]);
        r->has_branch = is_finite_number(fields[6], &r->branch);
        if (r->has_branch) cr_assert(is_finite_number(fields[7], &r->alpha), "%s %s: alpha", study, r->name);
        r->has_rel_diff = is_finite_number(fields[9], &r->rel_diff);
    }
    fclose(f);
    return n;
}

static const table_row *find_row(const table_row *rows, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    cr_assert_fail("row %s missing from the table", name);
    return NULL;
}

/* The "loss" of the last {"type":"eval"} line of a run's log, read directly. */
static double final_log_loss(const char *study, const char *row, int seed) {
    char path[256], line[4096];
    snprintf(path, sizeof path, "%s/out/%s/" SCALE "/%s/seed%d/log.jsonl", work_dir, study, row, seed);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    double loss = NAN;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"eval\"")) continue;
        const char *p = strstr(line, "\"loss\":");
        cr_assert(p != NULL, "%s: eval line without loss", path);
        loss = strtod(p + 7, NULL);
    }
    fclose(f);
    cr_assert(isfinite(loss), "%s: no finite final eval loss", path);
    return loss;
}

/* A loss a few steps into training on bytes: below ln 256 + margin and well above 0. */
static void check_loss_range(const char *study, const table_row *r) {
    cr_assert(r->loss > 1.0 && r->loss < log(256.0) + 0.5, "%s %s: loss %g out of range", study, r->name, r->loss);
    cr_assert_eq(r->seeds, 2, "%s %s: %d seeds, expected 2", study, r->name, r->seeds);
}

Test(cli_experiments, quick_run_of_every_study_writes_finite_tables, .init = setup, .fini = teardown, .timeout = 600) {
    const char *source = source_dir();
    test_dbranch_binary(); /* run.sh runs the dbranch in env DBRANCH_BINARY */
    char command[1024];
    snprintf(command, sizeof command,
             "'%s/experiments/run.sh' all --quick --threads 1 --out '%s/out' --data-dir '%s/data' "
             ">'%s/run.txt' 2>&1",
             source, work_dir, work_dir, work_dir);
    int status = system(command);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char tail[512];
        snprintf(tail, sizeof tail, "tail -n 20 '%s/run.txt' >&2", work_dir);
        if (system(tail) != 0) fprintf(stderr, "(no output)\n");
        cr_assert_fail("experiments/run.sh all --quick failed (status %d)", status);
    }

    static const struct {
        const char *study;
        int n_rows;
    } studies[] = {{"matched", 12}, {"control", 4}, {"ablations", 8}, {"moe", 15}};
    table_row rows[32];
    for (size_t s = 0; s < sizeof studies / sizeof studies[0]; s++) {
        const char *study = studies[s].study;
        int n = read_table(study, rows, 32);
        cr_assert_eq(n, studies[s].n_rows, "%s: %d rows, expected %d", study, n, studies[s].n_rows);
        for (int i = 0; i < n; i++) {
            const table_row *r = &rows[i];
            check_loss_range(study, r);
            int is_baseline = strstr(r->name, "base") != NULL;
            if (!is_baseline) {
                cr_assert(r->has_branch, "%s %s: a Decode-Branch row without branch CE", study, r->name);
                cr_assert(r->alpha >= 0.0 && r->alpha <= 1.0, "%s %s: alpha %g", study, r->name, r->alpha);
            } else {
                cr_assert(!r->has_branch, "%s %s: a baseline row with a branch CE", study, r->name);
                /* A baseline's loss is its primary cross-entropy. */
                cr_assert_float_eq(r->loss, r->primary, 1e-6, "%s %s", study, r->name);
            }
            if (strcmp(r->reference, "-") != 0)
                cr_assert(r->has_rel_diff, "%s %s: no relative difference vs %s", study, r->name, r->reference);
        }
        char path[256];
        snprintf(path, sizeof path, "%s/out/%s/" SCALE "/table.md", work_dir, study);
        cr_assert(file_exists(path), "%s is missing", path);
        /* The manifest names every run: its first row's seed-2 log is listed. */
        char manifest[256], wanted[256];
        snprintf(manifest, sizeof manifest, "%s/out/%s/runs.md", work_dir, study);
        FILE *m = fopen(manifest, "r");
        cr_assert(m != NULL, "%s is missing", manifest);
        static char text[1 << 16];
        size_t length = fread(text, 1, sizeof text - 1, m);
        fclose(m);
        text[length] = '\0';
        snprintf(wanted, sizeof wanted, "](" SCALE "/%s/seed2/log.jsonl)", rows[0].name);
        cr_assert(strstr(text, wanted) != NULL, "%s does not list %s", manifest, wanted);
        cr_assert(strstr(text, "`dbranch train --config experiments/configs/") != NULL, "%s: no commands", manifest);
        snprintf(path, sizeof path, "%s/out/%s/" SCALE "/%s/seed1/provenance.json", work_dir, study, rows[0].name);
        cr_assert(file_exists(path), "%s is missing", path);
    }

    /* Budgets: the quick default 1536 tokens, doubled for the control row. */
    int n_control = read_table("control", rows, 32);
    cr_assert_eq(find_row(rows, n_control, "base")->tokens, 1536);
    cr_assert_eq(find_row(rows, n_control, "base-2x-tokens")->tokens, 3072);

    /* Table arithmetic against the raw logs: mean over the two seeds, and the
     * seed-paired relative difference against the reference row. */
    int n = read_table("matched", rows, 32);
    const table_row *twin = find_row(rows, n, "kjv-nanogpt-branch");
    double twin_loss[2], base_loss[2];
    for (int seed = 1; seed <= 2; seed++) {
        twin_loss[seed - 1] = final_log_loss("matched", "kjv-nanogpt-branch", seed);
        base_loss[seed - 1] = final_log_loss("matched", "kjv-nanogpt-base", seed);
    }
    double mean = 0.5 * (twin_loss[0] + twin_loss[1]);
    double sd = fabs(twin_loss[0] - twin_loss[1]) / sqrt(2.0);
    double rel = 50.0 * ((twin_loss[0] - base_loss[0]) / base_loss[0] + (twin_loss[1] - base_loss[1]) / base_loss[1]);
    cr_assert_float_eq(twin->loss, mean, 1e-5, "mean %g vs %g from the logs", twin->loss, mean);
    cr_assert_float_eq(twin->loss_sd, sd, 1e-5, "sd %g vs %g from the logs", twin->loss_sd, sd);
    cr_assert_float_eq(twin->rel_diff, rel, 1e-3, "relative difference %g%% vs %g%% from the logs", twin->rel_diff,
                       rel);

    /* The paired-difference curve ends at that same difference. */
    char path[256], line[1024];
    snprintf(path, sizeof path, "%s/out/matched/" SCALE "/kjv-nanogpt-branch/diff.dat", work_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    double curve_tokens = 0, curve_diff = NAN, tokens_before = -1;
    int n_points = 0;
    while (fgets(line, sizeof line, f)) {
        cr_assert_eq(sscanf(line, "%lf %lf", &curve_tokens, &curve_diff), 2, "%s: bad line '%s'", path, line);
        cr_assert(curve_tokens > tokens_before, "%s: tokens not increasing", path);
        tokens_before = curve_tokens;
        n_points++;
    }
    fclose(f);
    cr_assert(n_points >= 1, "%s is empty", path);
    cr_assert_float_eq(curve_tokens, (double)twin->tokens, 0.5, "%s ends at %g tokens", path, curve_tokens);
    cr_assert_float_eq(curve_diff, rel, 1e-3, "%s ends at %g%%, the logs give %g%%", path, curve_diff, rel);

    /* MoE decode cost: every row has its experts and weight bytes per step
     * (dbranch info) and a measured decode time (bench decode). */
    snprintf(path, sizeof path, "%s/out/moe/" SCALE "/cost.tsv", work_dir);
    f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    cr_assert(fgets(line, sizeof line, f) != NULL);
    int n_cost = 0;
    while (fgets(line, sizeof line, f)) {
        char *fields[8];
        cr_assert_eq(split_tabs(line, fields, 8), 7, "%s: row %d does not have 7 columns", path, n_cost + 1);
        double loss, experts, bytes, ms;
        cr_assert(is_finite_number(fields[1], &loss), "%s %s: loss", path, fields[0]);
        cr_assert(is_finite_number(fields[2], &experts) && experts >= 1, "%s %s: experts '%s'", path, fields[0],
                  fields[2]);
        cr_assert(is_finite_number(fields[3], &bytes) && bytes > 0, "%s %s: weight bytes", path, fields[0]);
        cr_assert(is_finite_number(fields[4], &ms) && ms > 0, "%s %s: decode ms '%s'", path, fields[0], fields[4]);
        n_cost++;
    }
    fclose(f);
    cr_assert_eq(n_cost, 15);

    /* Plots, when gnuplot is installed (the tables do not need it). */
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        static const char *plots[] = {"matched/" SCALE "/loss_kjv-nanogpt.png", "matched/" SCALE "/loss_pycode-moe.png",
                                      "control/" SCALE "/loss_all.png",         "ablations/" SCALE "/loss_all.png",
                                      "moe/" SCALE "/moe_tradeoff.png",         "matched/" SCALE "/diff_all.png",
                                      "control/" SCALE "/diff_all.png",         "ablations/" SCALE "/diff_all.png"};
        for (size_t i = 0; i < sizeof plots / sizeof plots[0]; i++) {
            snprintf(path, sizeof path, "%s/out/%s", work_dir, plots[i]);
            cr_assert(file_exists(path), "%s is missing", path);
        }
    }

    /* Moved results stay finished: the run folders record their old --out,
     * and a rerun into the new place trains nothing (every run is done). */
    snprintf(command, sizeof command,
             "mv '%s/out' '%s/moved' && '%s/experiments/run.sh' control --quick --threads 1 --out '%s/moved' "
             "--data-dir '%s/data' >'%s/rerun.txt' 2>&1",
             work_dir, work_dir, source, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rerun into the moved folder failed");
    snprintf(path, sizeof path, "%s/rerun.txt", work_dir);
    f = fopen(path, "r");
    cr_assert(f != NULL);
    int done_already = 0, trained = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, ": done already"))
            done_already++;
        else if (strstr(line, "   control/" SCALE "/") && !strstr(line, "table:"))
            trained++;
    }
    fclose(f);
    cr_assert_eq(done_already, 8, "%d of the control study's 8 runs were found finished", done_already);
    cr_assert_eq(trained, 0, "%d runs were trained again", trained);
}

/* The last evaluation line of a JSON-lines log into eval[size]; returns the log's line count. */
static int last_eval_line(const char *path, char *eval, size_t size) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        if (strstr(line, "\"type\":\"eval\"")) snprintf(eval, size, "%s", line);
    }
    fclose(f);
    return n;
}

/* A run cut off between checkpoints (EXP_CHECKPOINT_EVERY, experiments/lib/
 * common.sh) is continued from its checkpoint, not started again. The cut is
 * simulated deterministically: a finished run kept with its checkpoint
 * (KEEP_CHECKPOINT=1) loses its `done` mark and its log's last lines, as a
 * sitting killed after its last checkpoint would. The rerun must resume (its
 * message, the `resumed` mark), keep the log's first part, end with the
 * uninterrupted run's final evaluation, and drop the checkpoint. */
Test(cli_experiments, interrupted_run_resumes_from_its_checkpoint, .init = setup, .fini = teardown, .timeout = 300) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], run_dir[256], path[512];
    snprintf(run_dir, sizeof run_dir, "%s/out/recurrent/1536/standard-4L/seed1", work_dir);
    const char *study_args = "recurrent --quick --threads 1 --seeds 1 --rows standard-4L";
    snprintf(command, sizeof command,
             "EXP_CHECKPOINT_EVERY=4 KEEP_CHECKPOINT=1 '%s/experiments/run.sh' %s --out '%s/out' --data-dir '%s/data' "
             ">'%s/first.txt' 2>&1",
             source, study_args, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the first run failed (see %s/first.txt)", work_dir);
    snprintf(path, sizeof path, "%s/checkpoint.h5", run_dir);
    cr_assert(file_exists(path), "KEEP_CHECKPOINT=1 kept no checkpoint at %s", path);

    /* The uninterrupted run's last evaluation line, then the cut: no `done`, the last 3 log lines gone. */
    char final_eval[4096] = "";
    snprintf(path, sizeof path, "%s/log.jsonl", run_dir);
    const int n_lines = last_eval_line(path, final_eval, sizeof final_eval);
    cr_assert(final_eval[0] && n_lines > 4, "no evaluation in %s", path);
    snprintf(command, sizeof command, "cd '%s' && rm done && head -n %d log.jsonl >cut && mv cut log.jsonl", run_dir,
             n_lines - 3);
    cr_assert_eq(system(command), 0);

    snprintf(
        command, sizeof command,
        "EXP_CHECKPOINT_EVERY=4 '%s/experiments/run.sh' %s --out '%s/out' --data-dir '%s/data' >'%s/second.txt' 2>&1",
        source, study_args, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rerun failed (see %s/second.txt)", work_dir);
    snprintf(command, sizeof command, "grep -q 'standard-4L/seed1: resuming from its checkpoint' '%s/second.txt'",
             work_dir);
    cr_assert_eq(system(command), 0, "the rerun did not resume the cut run");
    const char *marks[] = {"done", "resumed"}; /* `done` is empty: access(), not file_exists() */
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", run_dir, marks[i]);
        cr_assert(access(path, F_OK) == 0, "%s is missing after the resumed run", path);
    }
    snprintf(path, sizeof path, "%s/checkpoint.h5", run_dir);
    cr_assert(!file_exists(path), "the finished run's checkpoint was kept");
    char last_eval[4096] = "";
    snprintf(path, sizeof path, "%s/log.jsonl", run_dir);
    const int n_after = last_eval_line(path, last_eval, sizeof last_eval);
    cr_assert_geq(n_after, n_lines - 3, "the log's first part was lost (%d lines, %d before the cut)", n_after,
                  n_lines - 3);
    /* The final evaluation equals the uninterrupted one up to the timing fields. */
    char *cut_a = strstr(final_eval, "\"elapsed\""), *cut_b = strstr(last_eval, "\"elapsed\"");
    if (cut_a) *cut_a = '\0';
    if (cut_b) *cut_b = '\0';
    cr_assert_str_eq(last_eval, final_eval, "the resumed run ends elsewhere");
}

/* --deadline: a run stops with its checkpoint before the deadline (its
 * `dbranch train` gets a --time-limit), is left resumable and is resumed by
 * the next invocation; no run starts with less than two minutes left; a
 * deadline that is past or unreadable is one line and exit 2, but a clock
 * time past today is tomorrow's. The stop is
 * made deterministic by a wrapper binary that shrinks the time limit run.sh
 * passes to 1 ns: the run then stops after its first step. */
Test(cli_experiments, a_deadline_stops_runs_resumably_and_starts_none_near_it, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    const char *binary = test_dbranch_binary();
    char command[4096], wrapper[256], run_dir[256], path[512];
    const char *study = "recurrent --quick --threads 1 --rows standard-4L";
    snprintf(run_dir, sizeof run_dir, "%s/out/recurrent/1536/standard-4L/seed1", work_dir);

    static const char *const bad[] = {"not a time", "1 hour ago"};
    for (int i = 0; i < 2; i++) {
        snprintf(command, sizeof command,
                 "'%s/experiments/run.sh' %s --seeds 1 --deadline '%s' --out '%s/out' >'%s/bad.txt' 2>&1", source,
                 study, bad[i], work_dir, work_dir);
        const int status = system(command);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2, "--deadline '%s' gave status %d", bad[i], status);
        snprintf(path, sizeof path, "%s/bad.txt", work_dir);
        char *err = test_slurp(path);
        test_assert_one_line_error(err, "run.sh: --deadline ", bad[i]);
        free(err);
    }

    /* A bare clock time that has passed today is that time tomorrow (at(1)'s
     * reading): the minute before now is 23 h and some minutes away, whatever
     * the time of day, and --tables-only trains nothing. */
    snprintf(
        command, sizeof command,
        "'%s/experiments/run.sh' %s --tables-only --deadline \"$(date -d '1 minute ago' +%%H:%%M)\" "
        "--out '%s/out' >'%s/clock.txt' 2>&1 && grep -q '^run.sh: deadline .* (in 23 h [0-9]* min)$' '%s/clock.txt'",
        source, study, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "a clock time past today was not taken as tomorrow's (see %s/clock.txt)",
                 work_dir);

    /* A binary from before --time-limit (its train --help does not name it) is refused up front. */
    snprintf(wrapper, sizeof wrapper, "%s/old_dbranch.sh", work_dir);
    write_script(wrapper, "#!/bin/sh\necho 'usage: dbranch train --config FILE [--resume CKPT]'\n");
    snprintf(command, sizeof command,
             "DBRANCH_BINARY='%s' '%s/experiments/run.sh' %s --seeds 1 --deadline 'now + 1 hour' --out '%s/out' "
             ">'%s/bad.txt' 2>&1",
             wrapper, source, study, work_dir, work_dir);
    const int old_status = system(command);
    cr_assert(WIFEXITED(old_status) && WEXITSTATUS(old_status) == 2, "an old binary gave status %d", old_status);
    char *old_err = test_slurp(path);
    test_assert_one_line_error(old_err, "run.sh: --deadline ", "--time-limit");
    free(old_err);

    snprintf(wrapper, sizeof wrapper, "%s/shrink_time_limit.sh", work_dir);
    write_script(
        wrapper,
        "#!/bin/bash\n"
        "# the real binary, with any --time-limit value replaced by 1 ns\n"
        "args=()\n"
        "while [ $# -gt 0 ]; do\n"
        "  if [ \"$1\" = --time-limit ]; then args+=(--time-limit 1e-9s); shift 2; else args+=(\"$1\"); shift; fi\n"
        "done\n"
        "exec '%s' \"${args[@]}\"\n",
        binary);
    snprintf(command, sizeof command,
             "cd '%s' && DBRANCH_BINARY='%s' experiments/run.sh %s --seeds 1 --deadline 'now + 1 hour' --out '%s/out' "
             "--data-dir '%s/data' >'%s/first.txt' 2>&1",
             source, wrapper, study, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the study failed (see %s/first.txt)", work_dir);
    snprintf(command, sizeof command,
             "grep -q 'standard-4L/seed1: stopped before the deadline at step 1/12, resumable' '%s/first.txt'",
             work_dir);
    cr_assert_eq(system(command), 0, "no stop reported (see %s/first.txt)", work_dir);
    snprintf(path, sizeof path, "%s/checkpoint.h5", run_dir);
    cr_assert(file_exists(path), "the stopped run has no checkpoint");
    snprintf(path, sizeof path, "%s/done", run_dir);
    cr_assert(access(path, F_OK) != 0, "the stopped run is marked done");
    /* experiments/status.sh lists it as stopped and resumable. */
    snprintf(command, sizeof command,
             "'%s/experiments/status.sh' '%s/out' >'%s/status.txt' 2>&1 && "
             "grep -q '^stopped .*standard-4L/seed1  stopped at step 1/12 with its checkpoint' '%s/status.txt' && "
             "grep -q '^0 done, 0 training, 1 stopped' '%s/status.txt'",
             source, work_dir, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "status.sh did not list the stopped run (see %s/status.txt)", work_dir);
    /* The runs manifest, committed while other runs train, leaves it out:
     * its log is not committed, and the row would be a dead link. */
    char manifest[256];
    snprintf(manifest, sizeof manifest, "%s/out/recurrent/runs.md", work_dir);
    char *listed = test_slurp(manifest);
    cr_assert(strstr(listed, "## 1536 tokens") != NULL, "%s has no section for the stopped run's scale", manifest);
    cr_assert(strstr(listed, "standard-4L/seed1/") == NULL, "%s lists the stopped run", manifest);
    free(listed);
    /* Its seconds so far are kept for the resumed run's total; an earlier
     * part of 1000 s is written in, so the total shows the sum was made. */
    snprintf(path, sizeof path, "%s/seconds_so_far", run_dir);
    cr_assert(file_exists(path), "the stopped run kept no seconds_so_far");
    FILE *so_far = fopen(path, "w");
    cr_assert_not_null(so_far);
    fprintf(so_far, "1000\n");
    fclose(so_far);

    /* The next invocation (no deadline) resumes and finishes it. */
    snprintf(command, sizeof command,
             "cd '%s' && experiments/run.sh %s --seeds 1 --out '%s/out' --data-dir '%s/data' >'%s/second.txt' 2>&1",
             source, study, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rerun failed (see %s/second.txt)", work_dir);
    snprintf(command, sizeof command, "grep -q 'standard-4L/seed1: resuming from its checkpoint' '%s/second.txt'",
             work_dir);
    cr_assert_eq(system(command), 0, "the rerun did not resume the stopped run (see %s/second.txt)", work_dir);
    cr_assert(access(path, F_OK) != 0, "the finished run still has its seconds_so_far");
    snprintf(path, sizeof path, "%s/seconds", run_dir);
    char *seconds = test_slurp(path);
    cr_assert(atol(seconds) >= 1000 && atol(seconds) < 1000 + 300,
              "the resumed run's seconds %s are not 1000 + its last part", seconds);
    free(seconds);
    snprintf(path, sizeof path, "%s/done", run_dir);
    cr_assert(access(path, F_OK) == 0, "the resumed run is not done");
    snprintf(command, sizeof command,
             "'%s/experiments/status.sh' --all '%s/out' >'%s/status.txt' 2>&1 && "
             "grep -q '^done .*standard-4L/seed1  val loss [0-9.]* after 12 steps' '%s/status.txt' && "
             "grep -q '^1 done, 0 training, 0 stopped' '%s/status.txt'",
             source, work_dir, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "status.sh --all did not list the finished run (see %s/status.txt)", work_dir);
    listed = test_slurp(manifest);
    cr_assert(strstr(listed, "| standard-4L | 1 | [log](1536/standard-4L/seed1/log.jsonl) |") != NULL,
              "%s does not list the finished run", manifest);
    free(listed);

    /* Two minutes before the deadline nothing starts. */
    snprintf(command, sizeof command,
             "cd '%s' && experiments/run.sh %s --seeds 2 --deadline 'now + 100 seconds' --out '%s/out' "
             "--data-dir '%s/data' >'%s/third.txt' 2>&1",
             source, study, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the study failed (see %s/third.txt)", work_dir);
    snprintf(command, sizeof command, "grep -q 'standard-4L/seed2: not started, the deadline is near' '%s/third.txt'",
             work_dir);
    cr_assert_eq(system(command), 0, "the near deadline was not reported (see %s/third.txt)", work_dir);
    snprintf(path, sizeof path, "%s/out/recurrent/1536/standard-4L/seed2/log.jsonl", work_dir);
    cr_assert(!file_exists(path), "a run started two minutes before the deadline");
}

/* A study runs for hours, and editing experiments/run.sh meanwhile must not
 * change what the running invocation executes: bash reads a script as it
 * goes, so an edit used to make the end of a running study fail (a syntax
 * error at a shifted offset, the end-of-study tables not rebuilt). The edit is
 * made deterministically: the study's binary is a wrapper that rewrites the
 * copied run.sh in place (same inode, every offset shifted) before each
 * `dbranch train`, then runs the real binary. */
Test(cli_experiments, editing_run_sh_during_a_study_leaves_it_running, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    const char *binary = test_dbranch_binary();
    char command[4096], wrapper[256];
    snprintf(command, sizeof command, "mkdir -p '%s/tree' && cp -r '%s/experiments' '%s/tree/'", work_dir, source,
             work_dir);
    cr_assert_eq(system(command), 0, "could not copy experiments/");
    snprintf(wrapper, sizeof wrapper, "%s/edit_then_run.sh", work_dir);
    write_script(wrapper,
                 "#!/bin/sh\n"
                 "# before each training run: 40 lines into the running script's second line, in place\n"
                 "if [ \"$1\" = train ]; then\n"
                 "  script='%s/tree/experiments/run.sh'\n"
                 "  { head -n 1 \"$script\"; for i in $(seq 40); do echo '# an edit made while the study runs'; done;\n"
                 "    tail -n +2 \"$script\"; } >\"$script.edited\" && cat \"$script.edited\" >\"$script\"\n"
                 "fi\n"
                 "exec '%s' \"$@\"\n",
                 work_dir, binary);
    snprintf(command, sizeof command,
             "cd '%s' && DBRANCH_BINARY='%s' bash '%s/tree/experiments/run.sh' recurrent --quick --threads 1 --seeds 1 "
             "--rows standard-4L --out '%s/out' --data-dir '%s/data' >'%s/study.txt' 2>&1",
             source, wrapper, work_dir, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the study failed after its script was edited (see %s/study.txt)", work_dir);
    snprintf(command, sizeof command, "grep -q '^== done: ' '%s/study.txt'", work_dir);
    cr_assert_eq(system(command), 0, "the study did not reach its end (see %s/study.txt)", work_dir);
    snprintf(command, sizeof command,
             "grep -c 'an edit made while the study runs' '%s/tree/experiments/run.sh' | grep -qv '^0$'", work_dir);
    cr_assert_eq(system(command), 0, "the wrapper made no edit: the test proves nothing");
}

/* Two invocations with overlapping seeds: a run another invocation is
 * training (its train.lock flocked, as dbranch train holds it) is skipped,
 * not deleted and retrained. The lock is held by flock(1) around a sleep;
 * before the check, exp_train removed such a run's folder when it had no
 * checkpoint yet. */
Test(cli_experiments, a_run_training_elsewhere_is_left_alone, .init = setup, .fini = teardown, .timeout = 300) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], run_dir[256], marker[320];
    snprintf(run_dir, sizeof run_dir, "%s/out/recurrent/1536/standard-4L/seed1", work_dir);
    snprintf(marker, sizeof marker, "%s/log.jsonl", run_dir);
    snprintf(command, sizeof command,
             "mkdir -p '%s' && echo 'a run in progress' >'%s' && : >'%s/train.lock' && "
             "echo 'dbranch train' >'%s/command.txt' && "
             "echo 'step 3/12  loss 5.1  lr 0.001  grad_norm 1.0  2500 tok/s  elapsed 1.0s  ETA 3s' >'%s/train.txt' && "
             "(setsid flock -x '%s/train.lock' sleep 60 & echo $! >'%s/holder.pid') && sleep 1",
             run_dir, marker, run_dir, run_dir, run_dir, run_dir, work_dir);
    cr_assert_eq(system(command), 0, "could not set up the held lock");
    /* experiments/status.sh sees the held lock: the run is training, at its last progress line. */
    snprintf(command, sizeof command,
             "'%s/experiments/status.sh' '%s/out' >'%s/status.txt' 2>&1 && "
             "grep -q '^training .*standard-4L/seed1  step 3/12, 2500 tok/s, ETA 3s' '%s/status.txt'",
             source, work_dir, work_dir, work_dir);
    const int listed = system(command);
    snprintf(command, sizeof command,
             "'%s/experiments/run.sh' recurrent --quick --threads 1 --seeds 1 --rows standard-4L --out '%s/out' "
             "--data-dir '%s/data' >'%s/study.txt' 2>&1",
             source, work_dir, work_dir, work_dir);
    const int status = system(command);
    snprintf(command, sizeof command, "kill -- -$(cat '%s/holder.pid') 2>/dev/null; true", work_dir); /* its group */
    (void)system(command);
    cr_assert_eq(listed, 0, "status.sh did not list the run as training (see %s/status.txt)", work_dir);
    cr_assert_eq(status, 0, "the study failed (see %s/study.txt)", work_dir);
    snprintf(command, sizeof command,
             "grep -q 'standard-4L/seed1: training in another invocation; skipped' '%s/study.txt'", work_dir);
    cr_assert_eq(system(command), 0, "the study did not report the skip (see %s/study.txt)", work_dir);
    char *log = test_slurp(marker);
    cr_assert_str_eq(log, "a run in progress\n", "the run in progress was replaced");
    free(log);
}

/* Ending a study early: SIGTERM (or SIGINT) to a run's `dbranch train`
 * makes it finish its step, write its checkpoint and exit 143 (130). The
 * study then starts no further run, still rebuilds its table, says the run
 * is resumable and exits with that status; the same command resumes it. The
 * signal is made deterministic by a wrapper binary: a real run cut after its
 * first step by --time-limit (exit 75, as the deadline test does), reported
 * as SIGTERM's 143. */
Test(cli_experiments, a_run_stopped_by_a_signal_ends_the_study_with_its_tables, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    const char *binary = test_dbranch_binary();
    char command[4096], wrapper[256], path[512];
    snprintf(wrapper, sizeof wrapper, "%s/sigterm_after_one_step.sh", work_dir);
    write_script(wrapper,
                 "#!/bin/bash\n"
                 "# the real binary; a training run stops after one step and exits as after SIGTERM\n"
                 "[ \"$1\" = train ] && [ \"$2\" != --help ] || exec '%s' \"$@\"\n"
                 "'%s' \"$@\" --time-limit 1e-9s; status=$?\n"
                 "[ $status = 75 ] && exit 143\n"
                 "exit $status\n",
                 binary, binary);
    const char *study = "recurrent --quick --threads 1 --rows standard-4L --seeds '1 2'";
    snprintf(command, sizeof command,
             "cd '%s' && DBRANCH_BINARY='%s' experiments/run.sh %s --out '%s/out' --data-dir '%s/data' "
             ">'%s/first.txt' 2>&1",
             source, wrapper, study, work_dir, work_dir, work_dir);
    const int status = system(command);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 143,
              "the study exited with status %d, not 143 (see %s/first.txt)",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1, work_dir);
    snprintf(command, sizeof command,
             "grep -q 'standard-4L/seed1: stopped by a signal at step 1/12, resumable' '%s/first.txt' && "
             "grep -q 'standard-4L/seed2: not started, an earlier run was stopped by a signal' '%s/first.txt' && "
             "grep -q '^== stopped by a signal' '%s/first.txt'",
             work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the stop was not reported (see %s/first.txt)", work_dir);
    snprintf(path, sizeof path, "%s/out/recurrent/1536/standard-4L/seed2", work_dir);
    cr_assert(!file_exists(path), "a run started after the signal");
    snprintf(path, sizeof path, "%s/out/recurrent/1536/table.md", work_dir);
    cr_assert(file_exists(path), "the table was not rebuilt after the signal");
    snprintf(path, sizeof path, "%s/out/recurrent/1536/standard-4L/seed1/checkpoint.h5", work_dir);
    cr_assert(file_exists(path), "the stopped run has no checkpoint");

    snprintf(command, sizeof command,
             "cd '%s' && experiments/run.sh %s --out '%s/out' --data-dir '%s/data' >'%s/second.txt' 2>&1", source,
             study, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rerun failed (see %s/second.txt)", work_dir);
    snprintf(command, sizeof command,
             "grep -q 'standard-4L/seed1: resuming from its checkpoint' '%s/second.txt' && "
             "test -f '%s/out/recurrent/1536/standard-4L/seed1/done' && "
             "test -f '%s/out/recurrent/1536/standard-4L/seed2/done'",
             work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rerun did not resume and finish both runs (see %s/second.txt)", work_dir);
}

/* A finished run whose command has changed (here a --set added) is results:
 * run.sh stops at it with one line naming the run and the change, and leaves
 * it as it was; a stopped run (a checkpoint, no done) likewise; --replace
 * retrains it with the new command. */
Test(cli_experiments, a_changed_command_does_not_retrain_over_a_run_without_replace, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], study[1024], path[512], run_dir[256];
    snprintf(run_dir, sizeof run_dir, "%s/out/recurrent/1536/standard-4L/seed1", work_dir);
    snprintf(study, sizeof study,
             "'%s/experiments/run.sh' recurrent --quick --threads 1 --seeds 1 --rows standard-4L --out '%s/out' "
             "--data-dir '%s/data'",
             source, work_dir, work_dir);
    snprintf(command, sizeof command, "%s >'%s/first.txt' 2>&1", study, work_dir);
    cr_assert_eq(system(command), 0, "the first study failed (see %s/first.txt)", work_dir);
    snprintf(path, sizeof path, "%s/log.jsonl", run_dir);
    char *first_log = test_slurp(path);

    static const char *const states[] = {"finished", "stopped"};
    for (int i = 0; i < 2; i++) {
        if (i == 1) { /* the same folder as a run stopped with its checkpoint */
            snprintf(command, sizeof command, "rm '%s/done' && echo 'not a real checkpoint' >'%s/checkpoint.h5'",
                     run_dir, run_dir);
            cr_assert_eq(system(command), 0);
        }
        snprintf(command, sizeof command, "%s --set train.eval_every=5 >'%s/changed.txt' 2>&1", study, work_dir);
        const int status = system(command);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "a changed command retrained the %s run", states[i]);
        snprintf(command, sizeof command,
                 "grep -c '^run.sh: .*/recurrent/1536/standard-4L/seed1 holds a %s run of another command "
                 "(it had: -; now: train.eval_every=5); --replace retrains it' '%s/changed.txt' | grep -qx 1",
                 states[i], work_dir);
        cr_assert_eq(system(command), 0, "no one-line refusal for the %s run (see %s/changed.txt)", states[i],
                     work_dir);
        char *log = test_slurp(path);
        cr_assert_str_eq(log, first_log, "the %s run's log was touched", states[i]);
        free(log);
    }

    snprintf(command, sizeof command, "%s --set train.eval_every=5 --replace >'%s/replaced.txt' 2>&1", study, work_dir);
    cr_assert_eq(system(command), 0, "--replace did not retrain (see %s/replaced.txt)", work_dir);
    snprintf(command, sizeof command, "grep -q 'train.eval_every=5' '%s/command.txt' && test -f '%s/done'", run_dir,
             run_dir);
    cr_assert_eq(system(command), 0, "the replaced run does not have the new command or is not done");
    free(first_log);
}

/* rows.tsv is what the tables read, and another invocation of the same study
 * may build its tables at any time: it must never be emptied while an
 * invocation trains (it was, at the start of every invocation, so tables
 * built meanwhile lacked every row not declared yet). A wrapper binary copies
 * the file before each training run of a second invocation; the copy must
 * hold all four rows of the first one. A row no study.sh declares any more
 * leaves the file at the invocation's end. */
Test(cli_experiments, rows_stay_listed_while_a_study_trains, .init = setup, .fini = teardown, .timeout = 300) {
    const char *source = source_dir();
    const char *binary = test_dbranch_binary();
    char command[4096], wrapper[256], rows[256];
    snprintf(rows, sizeof rows, "%s/out/recurrent/1536/rows.tsv", work_dir);
    const char *study = "'%s/experiments/run.sh' recurrent --quick --threads 1 --seeds %d --rows standard-4L --out "
                        "'%s/out' --data-dir '%s/data' >>'%s/study.txt' 2>&1";
    snprintf(command, sizeof command, study, source, 1, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the first invocation failed (see %s/study.txt)", work_dir);
    snprintf(command, sizeof command, "test $(wc -l <'%s') -eq 4", rows);
    cr_assert_eq(system(command), 0, "the study should list 4 rows");
    snprintf(command, sizeof command, "printf 'gone\\t-\\tx.ini\\tkjv1m\\t\\n' >>'%s'", rows);
    cr_assert_eq(system(command), 0);
    snprintf(wrapper, sizeof wrapper, "%s/copy_rows_then_run.sh", work_dir);
    write_script(wrapper, "#!/bin/sh\n[ \"$1\" != train ] || cp '%s' '%s/rows_while_training.tsv'\nexec '%s' \"$@\"\n",
                 rows, work_dir, binary);
    char second[1024];
    snprintf(second, sizeof second, study, source, 2, work_dir, work_dir, work_dir);
    snprintf(command, sizeof command, "DBRANCH_BINARY='%s' %s", wrapper, second);
    cr_assert_eq(system(command), 0, "the second invocation failed (see %s/study.txt)", work_dir);
    char copy[320];
    snprintf(copy, sizeof copy, "%s/rows_while_training.tsv", work_dir);
    char *during = test_slurp(copy);
    for (const char *const *name =
             (const char *const[]){"standard-4L\t", "recurrent-4L\t", "standard-2L\t", "recurrent-2L\t", NULL};
         *name; name++)
        cr_assert(strstr(during, *name), "rows.tsv while seed 2 trained lacks %s:\n%s", *name, during);
    free(during);
    char *after = test_slurp(rows);
    cr_assert_null(strstr(after, "gone\t"), "a row no study declares stayed:\n%s", after);
    cr_assert(strstr(after, "recurrent-2L\t"), "%s", after);
    free(after);
}

/* experiments/run.sh with the arguments study (a study and its options) into
 * the test's out and data folders, its output in study.txt; it must succeed. */
static void run_study_arguments(const char *source, const char *study) {
    char command[4096];
    snprintf(command, sizeof command,
             "'%s/experiments/run.sh' %s --out '%s/out' --data-dir '%s/data' >'%s/study.txt' 2>&1", source, study,
             work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the study failed (see %s/study.txt)", work_dir);
}

/* Two lanes of one study may rebuild its table at the same moment; each
 * rebuild holds a flock on the study folder's tables.lock, so the second waits
 * for the first (unserialised, both appended to final.tsv: every seed twice).
 * The test holds that lock itself for 5 s: a --tables-only rebuild started
 * meanwhile must end after the lock is released (without the lock it ends
 * within a second or two), and its final.tsv lists the one seed once. */
Test(cli_experiments, a_table_rebuild_waits_for_another_holding_the_study_lock, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    char command[4096], path[256];
    const char *study = "recurrent --quick --threads 1 --seeds 1 --rows standard-4L";
    run_study_arguments(source, study);

    snprintf(command, sizeof command,
             "cd '%s' && lock=out/recurrent/" SCALE "/tables.lock && "
             "{ ( flock 8; : >held; sleep 5; date +%%s%%N >released ) 8>>\"$lock\" & } && "
             "while [ ! -e held ]; do sleep 0.05; done && "
             "'%s/experiments/run.sh' %s --tables-only --out '%s/out' >rebuild.txt 2>&1; status=$?; "
             "date +%%s%%N >rebuilt; wait; [ $status = 0 ] && [ \"$(cat rebuilt)\" -gt \"$(cat released)\" ]",
             work_dir, source, study, work_dir);
    cr_assert_eq(system(command), 0, "the rebuild failed or ended while another held the study's lock (see %s)",
                 work_dir);
    snprintf(path, sizeof path, "%s/out/recurrent/" SCALE "/final.tsv", work_dir);
    snprintf(command, sizeof command, "test \"$(grep -c '^standard-4L\t1\t' '%s')\" = 1", path);
    cr_assert_eq(system(command), 0, "final.tsv does not list standard-4L seed 1 once (see %s)", path);
}

/* s/run is only comparable on one CPU: the line under a table names the CPU
 * of its timed runs (from the logs' provenance), and a row with a run timed
 * on another CPU is marked with a dagger and that CPU named. The other CPU is
 * made by renaming the one in seed 2's log ("Zz..." sorts after any real
 * name, so the 1:1 tie keeps the real CPU as the table's). */
Test(cli_experiments, s_run_names_its_cpu_and_marks_a_row_timed_on_another, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    char command[4096], path[256];
    const char *study = "recurrent --quick --threads 1 --seeds \"1 2\" --rows standard-4L";
    run_study_arguments(source, study);

    snprintf(path, sizeof path, "%s/out/recurrent/" SCALE "/standard-4L/seed1/provenance.json", work_dir);
    char *provenance = test_slurp(path);
    const char *at = strstr(provenance, "\"cpu\":\"");
    cr_assert_not_null(at, "%s names no cpu", path);
    at += strlen("\"cpu\":\"");
    char cpu[256];
    snprintf(cpu, sizeof cpu, "%.*s", (int)strcspn(at, "\""), at);
    free(provenance);
    char wanted[512];
    snprintf(wanted, sizeof wanted, "s/run: wall seconds of a run, every sitting, on %s.\n", cpu);
    snprintf(path, sizeof path, "%s/out/recurrent/" SCALE "/table.md", work_dir);
    char *table = test_slurp(path);
    cr_assert_not_null(strstr(table, wanted), "no line '%s' under the table:\n%s", wanted, table);
    cr_assert_null(strstr(table, "†"), "a mark with every run on one CPU:\n%s", table);
    free(table);

    snprintf(command, sizeof command,
             "cd '%s/out/recurrent/" SCALE "/standard-4L/seed2' && "
             "sed -i 's/\"cpu\":\"[^\"]*\"/\"cpu\":\"Zz Test CPU\"/' log.jsonl && grep -q 'Zz Test CPU' log.jsonl && "
             "'%s/experiments/run.sh' %s --tables-only --out '%s/out' >'%s/rebuild.txt' 2>&1",
             work_dir, source, study, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the rebuild failed (see %s/rebuild.txt)", work_dir);
    table = test_slurp(path);
    const char *row = strstr(table, "| standard-4L |");
    cr_assert_not_null(row, "%s", table);
    const char *row_end = strchr(row, '\n');
    const char *mark = " † |"; /* the dagger is 3 bytes of UTF-8 */
    const size_t mark_length = strlen(mark);
    cr_assert((size_t)(row_end - row) > mark_length && !strncmp(row_end - mark_length, mark, mark_length),
              "the row is not marked:\n%s", table);
    snprintf(wanted, sizeof wanted, "on %s (†: some of its runs timed, at least in part, on Zz Test CPU).\n", cpu);
    cr_assert_not_null(strstr(table, wanted), "no '%s' under the table:\n%s", wanted, table);
    free(table);
}

/* The "loss" of the last evaluation line of the log at path. */
static double final_loss_at(const char *path) {
    char eval[4096] = "";
    last_eval_line(path, eval, sizeof eval);
    const char *p = strstr(eval, "\"loss\":");
    cr_assert(p != NULL, "%s: no final evaluation with a loss", path);
    return strtod(p + 7, NULL);
}

/* The markdown report at path has the line item that starts with prefix
 * (dbranch compare --differences' analysis, ending in "mean "), and its mean
 * is expected (computed from the runs' logs). */
static void check_analysis_mean(const char *path, const char *prefix, double expected) {
    char *md = test_slurp(path);
    const char *analysis = strstr(md, prefix);
    cr_assert(analysis != NULL, "%s has no line '%s...':\n%s", path, prefix, md);
    const double mean = strtod(analysis + strlen(prefix), NULL);
    cr_assert_float_eq(mean, expected, 2e-4, "%s: mean %g, the logs give %g", path, mean, expected);
    free(md);
}

/* The bf16 bridge of the data sweep (experiments/dsweep/study.sh,
 * dsweep_bridge_report): a bf16 series against the fp32 series of the same
 * config, per seed finished in both, the arm's gap to its baseline in each
 * precision and bf16 gap - fp32 gap. Both series run at --quick scale, the
 * fp32 one with a third seed the bf16 one lacks (left out of the bridge);
 * every number of bridge.tsv is recomputed here from the runs' logs, and
 * bridge.md's analysis of the twin's differences has their mean. */
Test(cli_experiments, the_bf16_bridge_pairs_each_seeds_gap_across_precisions, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], path[512];
    static const char *series[2][2] = {{"", "1 2 3"}, {"DSWEEP_PRECISION=bf16 ", "1 2"}};
    for (int s = 0; s < 2; s++) {
        snprintf(command, sizeof command,
                 "%s'%s/experiments/run.sh' dsweep --quick --threads 1 --d 10 --rows 'base twin' --seeds '%s' "
                 "--out '%s/out' --data-dir '%s/data' >>'%s/run.txt' 2>&1",
                 series[s][0], source, series[s][1], work_dir, work_dir, work_dir);
        cr_assert_eq(system(command), 0, "the dsweep %s series failed (see %s/run.txt)", s ? "bf16" : "fp32", work_dir);
    }
    snprintf(path, sizeof path, "%s/out/dsweep-bf16/bridge.tsv", work_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    char line[1024];
    int n_base = 0, n_twin = 0;
    double twin_diff_sum = 0, bf16_loss_sum[2] = {0, 0}; /* over the seeds: bf16 base, bf16 twin */
    while (fgets(line, sizeof line, f)) {
        char *fields[11];
        cr_assert_eq(split_tabs(line, fields, 11), 10, "%s: a line without 10 columns", path);
        const int seed = atoi(fields[2]);
        cr_assert(!strcmp(fields[0], "10") && seed >= 1 && seed <= 2, "%s: D %s seed %d (only D 10, seeds 1-2)", path,
                  fields[0], seed);
        const char *arm = fields[1];
        cr_assert(!strcmp(arm, "base") || !strcmp(arm, "twin"), "%s: arm %s", path, arm);
        double loss[2][2]; /* [fp32, bf16][base, arm] from the logs */
        for (int s = 0; s < 2; s++)
            for (int a = 0; a < 2; a++) {
                char log[512];
                snprintf(log, sizeof log, "%s/out/dsweep%s/D10/%s/seed%d/log.jsonl", work_dir, s ? "-bf16" : "",
                         a ? arm : "base", seed);
                loss[s][a] = final_loss_at(log);
            }
        double value[7];
        for (int i = 0; i < 7; i++)
            cr_assert(is_finite_number(fields[3 + i], &value[i]), "%s: column %d '%s'", path, 4 + i, fields[3 + i]);
        const double expected[6] = {loss[0][0], loss[0][1], 100 * (loss[0][1] - loss[0][0]) / loss[0][0],
                                    loss[1][0], loss[1][1], 100 * (loss[1][1] - loss[1][0]) / loss[1][0]};
        for (int i = 0; i < 6; i++)
            cr_assert_float_eq(value[i], expected[i], 2e-4, "%s %s seed %d column %d: %g, the logs give %g", path, arm,
                               seed, 4 + i, value[i], expected[i]);
        const double diff =
            strcmp(arm, "base") ? expected[5] - expected[2] : 100 * (loss[1][0] - loss[0][0]) / loss[0][0];
        cr_assert_float_eq(value[6], diff, 2e-4, "%s %s seed %d: difference %g, the logs give %g", path, arm, seed,
                           value[6], diff);
        if (!strcmp(arm, "base")) {
            n_base++;
        } else {
            n_twin++;
            twin_diff_sum += diff;
            bf16_loss_sum[0] += loss[1][0];
            bf16_loss_sum[1] += loss[1][1];
        }
    }
    fclose(f);
    cr_assert(n_base == 2 && n_twin == 2, "%d base and %d twin lines, expected 2 each (seed 3 is fp32 only)", n_base,
              n_twin);

    snprintf(path, sizeof path, "%s/out/dsweep-bf16/bridge.md", work_dir);
    check_analysis_mean(path, "- twin, bf16 gap - fp32 gap (points): 2 differences: mean ", twin_diff_sum / 2);

    /* gap_both.tsv (the figure of both series): each series' twin line of
     * its own gap.tsv, the arm named with its precision: 3 pairs in fp32, 2
     * in bf16, and the bf16 mean gap is the logs' mean difference over the
     * mean baseline (dbranch compare's "diff %"). */
    snprintf(path, sizeof path, "%s/out/dsweep-bf16/gap_both.tsv", work_dir);
    f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    int seen_fp32 = 0, seen_bf16 = 0;
    while (fgets(line, sizeof line, f)) {
        char *fields[11];
        cr_assert_eq(split_tabs(line, fields, 11), 10, "%s: a line without 10 columns", path);
        cr_assert(!strcmp(fields[0], "10"), "%s: D %s", path, fields[0]);
        if (!strcmp(fields[1], "twin/fp32")) {
            seen_fp32++;
            cr_assert_eq(atoi(fields[2]), 3, "%s: twin/fp32 has %s pairs, not 3", path, fields[2]);
        } else {
            cr_assert_str_eq(fields[1], "twin/bf16", "%s: an arm not named arm/precision", path);
            seen_bf16++;
            cr_assert_eq(atoi(fields[2]), 2, "%s: twin/bf16 has %s pairs, not 2", path, fields[2]);
            const double expected = 100 * (bf16_loss_sum[1] - bf16_loss_sum[0]) / bf16_loss_sum[0];
            double mean_gap;
            cr_assert(is_finite_number(fields[3], &mean_gap), "%s: mean gap '%s'", path, fields[3]);
            cr_assert_float_eq(mean_gap, expected, 2e-3, "%s: twin/bf16 mean gap %g, the logs give %g", path, mean_gap,
                               expected);
        }
    }
    fclose(f);
    cr_assert(seen_fp32 == 1 && seen_bf16 == 1, "%s: %d twin/fp32 and %d twin/bf16 lines, expected 1 each", path,
              seen_fp32, seen_bf16);
}

/* The step and eval records of a log with their timing fields cut, one
 * string (the records are the run's arithmetic; the timings are not). */
static char *log_records_without_timing(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    size_t capacity = 1 << 16, length = 0;
    char *text = calloc(capacity, 1), line[4096];
    cr_assert_not_null(text);
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"step\"") && !strstr(line, "\"type\":\"eval\"")) continue;
        char *cut = strstr(line, ",\"tokens_per_s\"");
        if (!cut) cut = strstr(line, ",\"elapsed\"");
        if (cut) strcpy(cut, "\n");
        const size_t n = strlen(line);
        if (length + n + 1 > capacity) {
            capacity *= 2;
            text = realloc(text, capacity);
            cr_assert_not_null(text);
        }
        memcpy(text + length, line, n + 1);
        length += n;
    }
    fclose(f);
    return text;
}

/* trend.tsv / trend.md of a dsweep series trained at D = 10 and 20 with
 * seeds 1 and 2 (experiments/dsweep/study.sh, dsweep_trend_report): per
 * seed, the twin's gap to its baseline at each D and its change, each
 * recomputed from the runs' logs; trend.md's analysis of the changes has
 * their mean; gap_seeds.tsv has the same gaps. */
static void check_trend_report(const char *out_dir) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/trunks/dsweep/trend.tsv", out_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    int seen[3] = {0, 0, 0};
    double change_sum = 0, gaps[3][2] = {{0}}; /* [seed][D 10, D 20], from the logs */
    while (fgets(line, sizeof line, f)) {
        char *fields[8];
        cr_assert_eq(split_tabs(line, fields, 8), 7, "%s: a line without 7 columns", path);
        const int seed = atoi(fields[3]);
        cr_assert(!strcmp(fields[0], "twin") && !strcmp(fields[1], "10") && !strcmp(fields[2], "20") && seed >= 1 &&
                      seed <= 2,
                  "%s: arm %s, D %s to %s, seed %d (only the twin, D 10 to 20, seeds 1-2)", path, fields[0], fields[1],
                  fields[2], seed);
        seen[seed]++;
        double gap[2];
        for (int d = 0; d < 2; d++) {
            double loss[2];
            for (int a = 0; a < 2; a++) {
                char log[512];
                snprintf(log, sizeof log, "%s/trunks/dsweep/D%s/%s/seed%d/log.jsonl", out_dir, d ? "20" : "10",
                         a ? "twin" : "base", seed);
                loss[a] = final_loss_at(log);
            }
            gap[d] = 100 * (loss[1] - loss[0]) / loss[0];
        }
        const double expected[3] = {gap[0], gap[1], gap[1] - gap[0]};
        for (int i = 0; i < 3; i++) {
            double value;
            cr_assert(is_finite_number(fields[4 + i], &value), "%s: column %d '%s'", path, 5 + i, fields[4 + i]);
            cr_assert_float_eq(value, expected[i], 2e-4, "%s seed %d column %d: %g, the logs give %g", path, seed,
                               5 + i, value, expected[i]);
        }
        change_sum += expected[2];
        gaps[seed][0] = gap[0];
        gaps[seed][1] = gap[1];
    }
    fclose(f);
    cr_assert(seen[1] == 1 && seen[2] == 1, "%s: %d lines of seed 1 and %d of seed 2, expected 1 each", path, seen[1],
              seen[2]);
    snprintf(path, sizeof path, "%s/trunks/dsweep/trend.md", out_dir);
    check_analysis_mean(path, "- twin, change of the gap (points): 2 differences: mean ", change_sum / 2);
    /* gap_seeds.tsv, the figure's data: the same gaps, one line per D and
     * seed, in the order of the figure's lines (seed, then D). */
    snprintf(path, sizeof path, "%s/trunks/dsweep/gap_seeds.tsv", out_dir);
    f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    static const char *expected_keys[4] = {"twin 10 1", "twin 20 1", "twin 10 2", "twin 20 2"};
    int n_lines = 0;
    while (fgets(line, sizeof line, f)) {
        char *fields[5], key[sizeof line + 2];
        cr_assert_eq(split_tabs(line, fields, 5), 4, "%s: a line without 4 columns", path);
        cr_assert_lt(n_lines, 4, "%s: more than 4 lines", path);
        snprintf(key, sizeof key, "%s %s %s", fields[0], fields[1], fields[2]);
        cr_assert_str_eq(key, expected_keys[n_lines], "%s: line %d is %s", path, n_lines + 1, key);
        double value;
        cr_assert(is_finite_number(fields[3], &value), "%s: gap '%s'", path, fields[3]);
        const double expected = gaps[atoi(fields[2])][!strcmp(fields[1], "20")];
        cr_assert_float_eq(value, expected, 2e-4, "%s %s: %g, the logs give %g", path, key, value, expected);
        n_lines++;
    }
    fclose(f);
    cr_assert_eq(n_lines, 4, "%s: %d lines, expected 4", path, n_lines);
}

/* scaling.txt / fit.md of the series trained at D = 10, 20 and 40, base and
 * twin, seeds 1 and 2 (experiments/dsweep/study.sh, dsweep_fit_report):
 * scaling.txt has each run's final loss from its log as "arm seed D loss"
 * for the arms trained at 3 D (not base-2x, run here at D = 10 only), and fit.md holds
 * `dbranch compare --scaling` of it: the per-seed fits and the twin's
 * asymptote against the baseline's over the 2 seeds. */
static void check_fit_report(const char *out_dir) {
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/trunks/dsweep/scaling.txt", out_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s is missing", path);
    int n_lines = 0;
    while (fgets(line, sizeof line, f)) {
        char arm[32];
        int seed, d;
        double loss;
        cr_assert_eq(sscanf(line, "%31s %d %d %lf", arm, &seed, &d, &loss), 4, "%s: '%s'", path, line);
        cr_assert((!strcmp(arm, "base") || !strcmp(arm, "twin")) && (seed == 1 || seed == 2) &&
                      (d == 10 || d == 20 || d == 40),
                  "%s: '%s' (base and twin, seeds 1-2, D 10-40 only)", path, line);
        char log[512];
        snprintf(log, sizeof log, "%s/trunks/dsweep/D%d/%s/seed%d/log.jsonl", out_dir, d, arm, seed);
        cr_assert_float_eq(loss, final_loss_at(log), 1e-6, "%s: '%s', the log gives %g", path, line,
                           final_loss_at(log));
        n_lines++;
    }
    fclose(f);
    cr_assert_eq(n_lines, 12, "%s: %d lines, expected 12 (2 arms, 2 seeds, 3 D)", path, n_lines);
    snprintf(path, sizeof path, "%s/trunks/dsweep/fit.md", out_dir);
    char *md = test_slurp(path);
    cr_assert(strstr(md, "fitted to scaling.txt (12 points)") && strstr(md, "asymptote E, arm - reference (base)") &&
                  strstr(md, "own: 2 pairs") && strstr(md, "shared: 2 pairs"),
              "%s lacks the fits or the paired asymptotes:\n%s", path, md);
    free(md);
}

/* Trunks in the data sweep (train/trunk.h): a D = 20 run starts from the
 * D = 10 run of its arm and seed (its trunk.h5, kept because every dsweep
 * run saves one) and ends with the same log, record for record, as the
 * D = 20 run trained from step 0 without trunks (EXP_SAVE_TRUNK=0). The
 * series with trunks has seeds 1 and 2 at both D, so its trend report (how
 * the gap moves with D) is checked here too. */
/* A setting after the budget in every command, as the bf16 series' precision
 * settings are (it changes no number): the compute control's command then
 * gives --tokens elsewhere than its baseline's. */
#define EXTRA_SET "--set train.print_every=1000"

Test(cli_experiments, a_dsweep_run_from_a_smaller_ds_trunk_is_the_run_from_scratch, .init = setup, .fini = teardown,
     .timeout = 300) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], path[512];
    static const char *invocations[2][4] = {{"", "10 20", "1 2", "trunks"},
                                            {"EXP_SAVE_TRUNK=0 ", "20", "1", "scratch"}};
    for (int i = 0; i < 2; i++) {
        snprintf(command, sizeof command,
                 "%s'%s/experiments/run.sh' dsweep --quick --threads 1 --d '%s' --rows 'base twin' --seeds '%s' "
                 "--out '%s/%s' --data-dir '%s/data' " EXTRA_SET " >>'%s/run.txt' 2>&1",
                 invocations[i][0], source, invocations[i][1], invocations[i][2], work_dir, invocations[i][3], work_dir,
                 work_dir);
        cr_assert_eq(system(command), 0, "the %s invocation failed (see %s/run.txt)", invocations[i][3], work_dir);
    }
    static const char *arms[] = {"base", "twin"};
    for (int a = 0; a < 2; a++) {
        snprintf(path, sizeof path, "%s/trunks/dsweep/D20/%s/seed1/trunk_from", work_dir, arms[a]);
        char *from = test_slurp(path);
        cr_assert(strstr(from, "D10/") && strstr(from, arms[a]), "%s: %s", path, from);
        free(from);
        snprintf(path, sizeof path, "%s/scratch/dsweep/D20/%s/seed1/trunk_from", work_dir, arms[a]);
        cr_assert(access(path, F_OK) != 0, "the run without trunks names one");
        char with[512], without[512];
        snprintf(with, sizeof with, "%s/trunks/dsweep/D20/%s/seed1/log.jsonl", work_dir, arms[a]);
        snprintf(without, sizeof without, "%s/scratch/dsweep/D20/%s/seed1/log.jsonl", work_dir, arms[a]);
        char *records_with = log_records_without_timing(with), *records_without = log_records_without_timing(without);
        cr_assert(strstr(records_without, "\"step\":1,") != NULL, "%s has no first step", without);
        cr_assert_str_eq(records_with, records_without, "%s: the run from the trunk differs from the run from scratch",
                         arms[a]);
        free(records_with);
        free(records_without);
    }
    /* experiments/status.sh --all says which finished runs started from a trunk, and whose. */
    snprintf(command, sizeof command,
             "'%s/experiments/status.sh' --all '%s/trunks' >'%s/status.txt' 2>&1 && "
             "grep -q '^done .*D20/twin/seed1  .*(from the trunk of .*D10/twin/seed1)$' '%s/status.txt' && "
             "! grep -q 'D10/twin/seed1  .*from the trunk' '%s/status.txt'",
             source, work_dir, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "status.sh did not name the trunk (see %s/status.txt)", work_dir);
    check_trend_report(work_dir);
    /* The compute control at D = 10 (the baseline at twice the tokens) is
     * D = 20's baseline of its seed: taken over, not trained again. */
    snprintf(command, sizeof command,
             "'%s/experiments/run.sh' dsweep --quick --threads 1 --d 10 --rows base-2x --seeds 1 --out '%s/trunks' "
             "--data-dir '%s/data' " EXTRA_SET " >>'%s/run.txt' 2>&1",
             source, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the base-2x invocation failed (see %s/run.txt)", work_dir);
    snprintf(path, sizeof path, "%s/trunks/dsweep/D10/base-2x/seed1/reused_from", work_dir);
    char *reused = test_slurp(path);
    cr_assert(strstr(reused, "dsweep/D20/base/seed1"), "%s: %s", path, reused);
    free(reused);
    char control[512], baseline[512];
    snprintf(control, sizeof control, "%s/trunks/dsweep/D10/base-2x/seed1/log.jsonl", work_dir);
    snprintf(baseline, sizeof baseline, "%s/trunks/dsweep/D20/base/seed1/log.jsonl", work_dir);
    char *records_control = log_records_without_timing(control),
         *records_baseline = log_records_without_timing(baseline);
    cr_assert_str_eq(records_control, records_baseline, "base-2x at D = 10 is not D = 20's baseline");
    free(records_control);
    free(records_baseline);
    /* A third D: the fitted asymptotes (dsweep_fit_report). */
    snprintf(command, sizeof command,
             "'%s/experiments/run.sh' dsweep --quick --threads 1 --d 40 --rows 'base twin' --seeds '1 2' --out "
             "'%s/trunks' --data-dir '%s/data' " EXTRA_SET " >>'%s/run.txt' 2>&1",
             source, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the D = 40 invocation failed (see %s/run.txt)", work_dir);
    check_fit_report(work_dir);
}

/* The nanogpt family's tuned series has its own folder, named as the llama
 * one's is (dsweep-bf16-tuned): dsweep-nanogpt-bf16-tuned, not
 * dsweep-nanogpt-bf16-nanogpt_tuned; its runs train nanoGPT on the tuned
 * config's rates. */
Test(cli_experiments, the_nanogpt_tuned_series_has_its_own_folder, .init = setup, .fini = teardown, .timeout = 120) {
    const char *source = source_dir();
    test_dbranch_binary();
    char command[2048], path[512];
    snprintf(command, sizeof command,
             "DSWEEP_FAMILY=nanogpt DSWEEP_CONFIG=study_dsweep_nanogpt_tuned.ini DSWEEP_PRECISION=bf16 "
             "'%s/experiments/run.sh' dsweep --quick --threads 1 --d 10 --rows base --seeds 1 --out '%s/out' "
             "--data-dir '%s/data' >>'%s/run.txt' 2>&1",
             source, work_dir, work_dir, work_dir);
    cr_assert_eq(system(command), 0, "the nanogpt series failed (see %s/run.txt)", work_dir);
    snprintf(path, sizeof path, "%s/out/dsweep-nanogpt-bf16-tuned/D10/base/seed1/provenance.json", work_dir);
    char *provenance = test_slurp(path);
    cr_assert(strstr(provenance, "\"family\":\"nanogpt\"") && strstr(provenance, "\"muon_lr\":0.0125") &&
                  strstr(provenance, "\"precision\":\"bf16\""),
              "%s: %.300s", path, provenance);
    free(provenance);
}
