/* `dbranch train` as a user runs it: --help, one-line errors with a non-zero
 * exit for bad input, a tiny run that writes its log and checkpoint, --resume
 * with a larger --tokens budget continuing the same log, and SIGTERM ending a
 * run cleanly with a checkpoint and exit status 143 (--time-limit: 75). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "train/checkpoint.h"

static char work_dir[64];
static char config_path[128];

/* A scratch dir holding data.h5 (random letters a..h, byte tokenizer) and run.ini (a one-layer model). */
static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "cli_train");
    enum { N_TRAIN = 6000, N_VAL = 600 };
    int32_t tokens[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 1);
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        tokens[i] = 'a' + (int32_t)dt_rng_below(&rng, 8);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    char data_path[128];
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    cr_assert_eq(data_tokens_write(data_path, &tok, tokens, N_TRAIN, tokens + N_TRAIN, N_VAL, "letters"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);

    snprintf(config_path, sizeof config_path, "%s/run.ini", work_dir);
    FILE *f = fopen(config_path, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "[model]\nfamily = nanogpt\nvocab_size = 256\nblock_size = 16\nn_layer = 1\nn_head = 2\nd_model = 16\n"
            "[data]\npath = %s\n"
            "[train]\nbatch_size = 2\nseq_len = 16\ntokens = 320\nwarmup_steps = 1\neval_windows = 2\n"
            "out_dir = %s/run\nthreads = 1\n",
            data_path, work_dir);
    fclose(f);
}

static void teardown(void) { test_remove_dir(work_dir); }

/* Runs `dbranch train ARGS`; returns the exit status, stdout / stderr in *out, *err (caller frees; NULL: not kept). */
static int run_train(const char *args, char **out, char **err) {
    char line[1024];
    snprintf(line, sizeof line, "train %s", args);
    return test_run_dbranch(NULL, line, out, err);
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

Test(cli_train, help, .init = setup, .fini = teardown) {
    char *out;
    cr_assert_eq(run_train("--help", &out, NULL), 0);
    cr_assert(strstr(out, "--resume") && strstr(out, "--set") && strstr(out, "--tokens") && strstr(out, "143"), "%s",
              out);
    free(out);
}

Test(cli_train, bad_input_is_one_line_error, .init = setup, .fini = teardown) {
    static char args[512];
    char *err;
    cr_assert_neq(run_train("", NULL, &err), 0);
    test_assert_one_line_error(err, "dbranch train: ", "--config");
    free(err);

    cr_assert_eq(run_train("--config /nonexistent/run.ini", NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "/nonexistent/run.ini");
    free(err);

    snprintf(args, sizeof args, "--config '%s' --set train.learning_rate=3", config_path);
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "train.learning_rate");
    free(err);

    snprintf(args, sizeof args, "--config '%s' --set model.d_model=abc", config_path);
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "abc");
    free(err);

    snprintf(args, sizeof args, "--config '%s' --set data.path=/nonexistent/data.h5", config_path);
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "/nonexistent/data.h5");
    free(err);

    snprintf(args, sizeof args, "--config '%s' --bogus", config_path);
    cr_assert_neq(run_train(args, NULL, &err), 0);
    test_assert_one_line_error(err, "dbranch train: ", "--bogus");
    free(err);
}

Test(cli_train, run_then_resume_with_larger_budget, .init = setup, .fini = teardown, .timeout = 120) {
    static char args[512], log_path[160], checkpoint[160];
    char *out, *err;
    snprintf(args, sizeof args, "--config '%s' --threads 1", config_path);
    cr_assert_eq(run_train(args, &out, &err), 0, "stderr: %s", err);
    cr_assert(strstr(out, "[model]") && strstr(out, "tokens = 320"), "the resolved config is printed: %s", out);
    cr_assert(strstr(out, "final: val loss") != NULL, "%s", out);
    free(out);
    free(err);
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 10); /* 320 tokens / (2 * 16) */
    cr_assert_eq(count_lines(log_path, "\"type\":\"eval\""), 1);

    /* Resume without --config (the checkpoint stores it) and with twice the budget. */
    snprintf(args, sizeof args, "--resume '%s' --tokens 640", checkpoint);
    cr_assert_eq(run_train(args, NULL, &err), 0, "stderr: %s", err);
    free(err);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 20);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\",\"step\":20,"), 1);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 20);
    cr_assert_eq(state.tokens_seen, 640);
}

/* SIGTERM mid-run: the step finishes, a checkpoint is written, exit 143. */
Test(cli_train, sigterm_checkpoints_and_exits_143, .init = setup, .fini = teardown, .timeout = 120) {
    static char log_path[160], checkpoint[160], out_path[160];
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", work_dir);
    const char *binary = test_dbranch_binary();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout)) _exit(99);
        execl(binary, binary, "train", "--config", config_path, "--tokens", "1e7", (char *)NULL);
        _exit(98);
    }
    /* Wait until a few steps are logged, then ask it to stop. */
    int steps = 0;
    for (int i = 0; i < 600 && steps < 3; i++) {
        struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
        steps = count_lines(log_path, "\"type\":\"step\"");
    }
    cr_assert(steps >= 3, "the run did not start logging");
    kill(pid, SIGTERM);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "killed by a signal instead of exiting cleanly");
    cr_assert_eq(WEXITSTATUS(status), 143);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert(state.step >= 3);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), (int)state.step,
                 "the checkpoint holds exactly the logged steps");
}

/* --time-limit: a limit below one step stops the run after its first step
 * with a checkpoint and exit status 75, --resume finishes it, and a bad
 * duration is one line naming it. */
Test(cli_train, time_limit_checkpoints_and_exits_75, .init = setup, .fini = teardown, .timeout = 120) {
    static char args[512], log_path[160], checkpoint[160];
    char *out, *err;
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(args, sizeof args, "--config '%s' --time-limit 1e-9s", config_path);
    cr_assert_eq(run_train(args, &out, &err), 75, "stderr: %s", err);
    cr_assert(strstr(out, "stopped at the time limit at step 1/10") != NULL, "%s", out);
    free(out);
    free(err);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 1);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 1);

    snprintf(args, sizeof args, "--resume '%s' --time-limit 1h", checkpoint);
    cr_assert_eq(run_train(args, &out, &err), 0, "stderr: %s", err);
    cr_assert(strstr(out, "final: val loss") != NULL, "%s", out);
    free(out);
    free(err);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 10);

    static const char *const bad[] = {"90min", "0", "-1h", "soon"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "--config '%s' --time-limit '%s'", config_path, bad[i]);
        cr_assert_eq(run_train(args, NULL, &err), 2, "--time-limit %s", bad[i]);
        test_assert_one_line_error(err, "dbranch train: ", bad[i]);
        free(err);
    }
}

/* ---------- the stored run config and resume checks (issue 18 items 9, 12; issue 17) ---------- */

/* Trains the setup's run (320 tokens, 10 steps) with extra arguments; asserts success. */
static void train_ok(const char *extra) {
    static char args[1024];
    char *err;
    snprintf(args, sizeof args, "--config '%s' %s", config_path, extra);
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s: %s", args, err);
    free(err);
}

/* The loss of the first step line of a log. */
static double first_step_loss(const char *log_path) {
    char *text = test_slurp(log_path);
    const char *at = strstr(text, "\"type\":\"step\"");
    cr_assert(at, "%s", text);
    at = strstr(at, "\"loss\":");
    cr_assert(at);
    double loss = strtod(at + 7, NULL);
    free(text);
    return loss;
}

Test(cli_train, resume_refuses_a_budget_below_what_was_trained, .init = setup, .fini = teardown, .timeout = 120) {
    static char args[512];
    char *err;
    train_ok("");
    snprintf(args, sizeof args, "--resume '%s/run/checkpoint.h5' --tokens 160", work_dir);
    cr_assert_eq(run_train(args, NULL, &err), 1, "a budget of 160 tokens resumed after 320");
    test_assert_one_line_error(err, "dbranch train: ", "320");
    free(err);
}

/* train.save_trunk under wsd (10 steps, the last 2 decaying): the run writes
 * trunk.h5 at step 8 and says so; resumed to twice the budget in another
 * directory the trunk trains on silently (it is the longer run's state),
 * while the run's final checkpoint, already decayed, gets one note naming the
 * first step trained on another schedule. Without wsd the key is refused. */
Test(cli_train, a_trunk_resumes_to_a_larger_budget_and_a_decayed_end_says_so, .init = setup, .fini = teardown,
     .timeout = 120) {
    static char args[768], extra[256];
    char *out, *err;
    snprintf(args, sizeof args, "--config '%s' --set train.schedule=wsd --set train.save_trunk=1", config_path);
    cr_assert_eq(run_train(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "trunk: ") && strstr(out, "trunk.h5 at step 8"), "no trunk line: %s", out);
    free(out);
    free(err);
    train_state state;
    snprintf(extra, sizeof extra, "%s/run/trunk.h5", work_dir);
    cr_assert_eq(train_checkpoint_read_state(extra, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 8);

    snprintf(args, sizeof args, "--resume '%s/run/trunk.h5' --tokens 640 --out '%s/longer'", work_dir, work_dir);
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s", err);
    cr_assert(!strstr(err, "note"), "a trunk resumed to a larger budget drew a note: %s", err);
    free(err);
    snprintf(args, sizeof args, "--resume '%s/run/checkpoint.h5' --tokens 640 --out '%s/decayed'", work_dir, work_dir);
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s", err);
    test_assert_one_line_error(err, "dbranch train: note: ", "step 9 on another learning-rate schedule");
    free(err);

    snprintf(args, sizeof args, "--config '%s' --set train.save_trunk=1 --out '%s/cosine'", config_path, work_dir);
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "train.save_trunk = 1 needs train.schedule = wsd");
    free(err);
}

/* The stored config is data: a path holding " ;" (an INI comment) resumes into the same directory. */
Test(cli_train, resume_keeps_a_path_with_an_ini_comment, .init = setup, .fini = teardown, .timeout = 120) {
    static char extra[256], args[512], log_path[256];
    snprintf(extra, sizeof extra, "--out '%s/run ;x'", work_dir);
    train_ok(extra);
    snprintf(args, sizeof args, "--resume '%s/run ;x/checkpoint.h5' --tokens 640", work_dir);
    char *err;
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(log_path, sizeof log_path, "%s/run ;x/log.jsonl", work_dir);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 20, "the resumed run went on in another directory");
}

Test(cli_train, resume_on_another_dataset_says_so, .init = setup, .fini = teardown, .timeout = 120) {
    static char args[768];
    train_ok("");
    snprintf(args, sizeof args, "cp '%s/data.h5' '%s/moved.h5'", work_dir, work_dir);
    cr_assert_eq(system(args), 0);
    snprintf(args, sizeof args, "--resume '%s/run/checkpoint.h5' --tokens 640 --set data.path='%s/moved.h5'", work_dir,
             work_dir);
    char *err;
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s", err);
    cr_assert(strstr(err, "data.path") && strstr(err, "moved.h5") && strstr(err, "data.h5"), "no word: '%s'", err);
    free(err);
}

/* Checkpoints written before /train/run_config existed (f7d5a46) resume from their INI text;
 * a run_config that does not match its checksum is refused. */
Test(cli_train, old_checkpoints_resume_and_corrupted_run_configs_do_not, .init = setup, .fini = teardown,
     .timeout = 120) {
    static char checkpoint[160], copy[160], args[512];
    train_ok("");
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(copy, sizeof copy, "%s/tampered.h5", work_dir);
    snprintf(args, sizeof args, "cp '%s' '%s'", checkpoint, copy);
    cr_assert_eq(system(args), 0);

    hid_t file = H5Fopen(copy, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(file >= 0);
    hid_t group = H5Gopen2(file, "/train/run_config", H5P_DEFAULT);
    cr_assert(group >= 0, "the run config is stored as data");
    cr_assert_eq(h5_write_attr_int(group, "train.seed", 99), DT_OK);
    H5Gclose(group);
    H5Fclose(file);
    char *err;
    snprintf(args, sizeof args, "--resume '%s' --tokens 640", copy);
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "checksum");
    free(err);

    file = H5Fopen(checkpoint, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(file >= 0);
    cr_assert(H5Ldelete(file, "/train/run_config", H5P_DEFAULT) >= 0);
    H5Fclose(file);
    snprintf(args, sizeof args, "--resume '%s' --tokens 640", checkpoint);
    cr_assert_eq(run_train(args, NULL, &err), 0, "%s", err);
    free(err);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 20);
}

/* train.init_from: the weights of a checkpoint, a fresh optimizer and data state; the model must match. */
Test(cli_train, init_from_starts_a_new_run_from_weights, .init = setup, .fini = teardown, .timeout = 120) {
    static char extra[512], log_a[160], log_b[160], checkpoint_b[160];
    train_ok("");
    snprintf(extra, sizeof extra, "--set train.init_from='%s/run/checkpoint.h5' --out '%s/second'", work_dir, work_dir);
    train_ok(extra);
    snprintf(log_a, sizeof log_a, "%s/run/log.jsonl", work_dir);
    snprintf(log_b, sizeof log_b, "%s/second/log.jsonl", work_dir);
    snprintf(checkpoint_b, sizeof checkpoint_b, "%s/second/checkpoint.h5", work_dir);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint_b, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 10, "a new run of 10 steps, not a resumed one");
    cr_assert_eq(state.tokens_seen, 320);
    cr_assert_eq(count_lines(log_b, "\"type\":\"step\""), 10);
    double first_a = first_step_loss(log_a), first_b = first_step_loss(log_b);
    cr_assert(first_b < first_a - 0.05, "the second run starts from trained weights (%g vs %g)", first_b, first_a);

    static char args[768];
    snprintf(args, sizeof args,
             "--config '%s' --set train.init_from='%s/run/checkpoint.h5' --set model.n_layer=2 --out '%s/third'",
             config_path, work_dir, work_dir);
    char *err;
    cr_assert_eq(run_train(args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch train: ", "model.n_layer");
    free(err);
}
