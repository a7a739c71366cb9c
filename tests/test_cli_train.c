/* `dbranch train` as a user runs it: --help, one-line errors with a non-zero
 * exit for bad input, a tiny run that writes its log and checkpoint, --resume
 * with a larger --tokens budget continuing the same log, and SIGTERM ending a
 * run cleanly with a checkpoint and exit status 143. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "train/checkpoint.h"

static char work_dir[64];
static char config_path[128];

static const char *binary(void) {
    const char *path = getenv("DBRANCH_BINARY");
    cr_assert(path != NULL, "DBRANCH_BINARY is not set (run through ctest)");
    return path;
}

static void setup(void) {
    snprintf(work_dir, sizeof work_dir, "/tmp/dbranch_cli_train_XXXXXX");
    cr_assert(mkdtemp(work_dir) != NULL);
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

static void teardown(void) {
    char command[160];
    snprintf(command, sizeof command, "rm -rf '%s'", work_dir);
    if (work_dir[0] && system(command) != 0) fprintf(stderr, "could not remove %s\n", work_dir);
}

/* Runs `dbranch train ARGS` with stdout and stderr captured; returns the exit status. */
static int run_train(const char *args, char *out, size_t out_size, char *err, size_t err_size) {
    char command[1024], out_path[128], err_path[128];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", work_dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", work_dir);
    snprintf(command, sizeof command, "'%s' train %s >'%s' 2>'%s'", binary(), args, out_path, err_path);
    int status = system(command);
    const char *paths[2] = {out_path, err_path};
    char *buffers[2] = {out, err};
    size_t sizes[2] = {out_size, err_size};
    for (int i = 0; i < 2; i++) {
        if (!buffers[i]) continue;
        FILE *f = fopen(paths[i], "r");
        size_t n = f ? fread(buffers[i], 1, sizes[i] - 1, f) : 0;
        buffers[i][n] = '\0';
        if (f) fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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

static void assert_one_line_error(const char *err, const char *needle) {
    cr_assert(strncmp(err, "dbranch train: ", 15) == 0, "stderr: %s", err);
    cr_assert(strstr(err, needle) != NULL, "'%s' not in stderr: %s", needle, err);
    const char *newline = strchr(err, '\n');
    cr_assert(newline && newline[1] == '\0', "more than one line: %s", err);
}

Test(cli_train, help, .init = setup, .fini = teardown) {
    static char out[8192];
    cr_assert_eq(run_train("--help", out, sizeof out, NULL, 0), 0);
    cr_assert(strstr(out, "--resume") && strstr(out, "--set") && strstr(out, "--tokens") && strstr(out, "143"), "%s",
              out);
}

Test(cli_train, bad_input_is_one_line_error, .init = setup, .fini = teardown) {
    static char out[8192], err[4096], args[512];
    cr_assert_neq(run_train("", out, sizeof out, err, sizeof err), 0);
    assert_one_line_error(err, "--config");

    cr_assert_eq(run_train("--config /nonexistent/run.ini", out, sizeof out, err, sizeof err), 1);
    assert_one_line_error(err, "/nonexistent/run.ini");

    snprintf(args, sizeof args, "--config '%s' --set train.learning_rate=3", config_path);
    cr_assert_eq(run_train(args, out, sizeof out, err, sizeof err), 1);
    assert_one_line_error(err, "train.learning_rate");

    snprintf(args, sizeof args, "--config '%s' --set model.d_model=abc", config_path);
    cr_assert_eq(run_train(args, out, sizeof out, err, sizeof err), 1);
    assert_one_line_error(err, "abc");

    snprintf(args, sizeof args, "--config '%s' --set data.path=/nonexistent/data.h5", config_path);
    cr_assert_eq(run_train(args, out, sizeof out, err, sizeof err), 1);
    assert_one_line_error(err, "/nonexistent/data.h5");

    snprintf(args, sizeof args, "--config '%s' --bogus", config_path);
    cr_assert_neq(run_train(args, out, sizeof out, err, sizeof err), 0);
    assert_one_line_error(err, "--bogus");
}

Test(cli_train, run_then_resume_with_larger_budget, .init = setup, .fini = teardown, .timeout = 120) {
    static char out[65536], err[4096], args[512], log_path[160], checkpoint[160];
    snprintf(args, sizeof args, "--config '%s' --threads 1", config_path);
    cr_assert_eq(run_train(args, out, sizeof out, err, sizeof err), 0, "stderr: %s", err);
    cr_assert(strstr(out, "[model]") && strstr(out, "tokens = 320"), "the resolved config is printed: %s", out);
    cr_assert(strstr(out, "final: val loss") != NULL, "%s", out);
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    cr_assert_eq(count_lines(log_path, "\"type\":\"step\""), 10); /* 320 tokens / (2 * 16) */
    cr_assert_eq(count_lines(log_path, "\"type\":\"eval\""), 1);

    /* Resume without --config (the checkpoint stores it) and with twice the budget. */
    snprintf(args, sizeof args, "--resume '%s' --tokens 640", checkpoint);
    cr_assert_eq(run_train(args, out, sizeof out, err, sizeof err), 0, "stderr: %s", err);
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
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout)) _exit(99);
        execl(binary(), binary(), "train", "--config", config_path, "--tokens", "1e7", (char *)NULL);
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
