/* Issue 18 through the binary, as a careless or hostile user meets it:
 *  - two `train` runs on one output directory: the second fails at once with
 *    one line naming the directory and the first run's pid (item 2);
 *  - a full disk while writing the checkpoint is one line naming the file and
 *    "No space left on device", exit 1 (not a segfault in HDF5's exit-time
 *    cleanup), and no .tmp stays (item 3; on a 64 KiB tmpfs, skipped with a
 *    message where mounting is not allowed); a full disk under the log
 *    (/dev/full) is an error too, not a truncated log and exit 0, and so is
 *    standard output on a full device (`dbranch info > /dev/full`);
 *  - a NaN weight in a model file is one line naming the tensor from `eval`,
 *    `generate` and `bench decode` (item 8; they printed "loss nan", NUL bytes);
 *  - `prepare --out` naming one of its --input files (the same path, or the
 *    same inode through a hard link) is refused and the corpus stays (item 4),
 *    and `--out` into a missing directory is refused before any input is read. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/model_io.h"
#include "support/letters.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char work_dir[64];
static char config_path[128];

/* data.h5 (random letters, byte tokenizer) and run.ini (a small model) in a scratch dir. */
static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "cli_reliability");
    char data_path[128];
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    test_write_letters(data_path, 3, 8, 6000, 600);
    snprintf(config_path, sizeof config_path, "%s/run.ini", work_dir);
    FILE *f = fopen(config_path, "w");
    cr_assert(f != NULL);
    /* d_model 64, 2 layers: a checkpoint of ~1.5 MB, far more than the 64 KiB tmpfs. */
    fprintf(f,
            "[model]\nfamily = nanogpt\nvocab_size = 256\nblock_size = 16\nn_layer = 2\nn_head = 2\nd_model = 64\n"
            "[data]\npath = %s\n"
            "[train]\nbatch_size = 2\nseq_len = 16\ntokens = 160\nwarmup_steps = 1\neval_windows = 2\n"
            "out_dir = %s/run\nthreads = 1\n",
            data_path, work_dir);
    cr_assert_eq(fclose(f), 0);
}

static char mounted[160]; /* the tmpfs to unmount in teardown, even after a failed assertion */

static void teardown(void) {
    if (mounted[0]) umount2(mounted, MNT_DETACH);
    mounted[0] = '\0';
    test_remove_dir(work_dir);
}

TestSuite(cli_reliability, .init = setup, .fini = teardown, .timeout = 120);

Test(cli_reliability, second_train_on_one_out_dir_fails_naming_the_holder) {
    const char *binary = test_dbranch_binary();
    pid_t first = fork();
    cr_assert(first >= 0);
    if (first == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(99);
        setenv("DBRANCH_TEST_PAUSE_AFTER_STEP", "1", 1); /* stops itself, holding the directory */
        execl(binary, binary, "train", "--config", config_path, (char *)NULL);
        _exit(98);
    }
    int status = 0;
    cr_assert_eq(waitpid(first, &status, WUNTRACED), first);
    cr_assert(WIFSTOPPED(status), "the first run was to stop itself after step 1 (status %d)", status);

    char args[512], *err = NULL, pid_text[32], run_dir[160];
    snprintf(args, sizeof args, "train --config '%s'", config_path);
    int code = test_run_dbranch(NULL, args, NULL, &err);
    kill(first, SIGKILL);
    cr_assert_eq(waitpid(first, &status, 0), first);
    snprintf(run_dir, sizeof run_dir, "%s/run", work_dir);
    snprintf(pid_text, sizeof pid_text, "pid %ld", (long)first);
    cr_assert_eq(code, 1, "the second run must be refused (exit %d): %s", code, err);
    test_assert_one_line_error(err, "dbranch train: ", run_dir);
    cr_assert(strstr(err, pid_text), "names the holder's %s: %s", pid_text, err);
    free(err);

    /* The lock dies with its holder: a run after the kill goes through. */
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 0, "after the holder died: %s", err);
    free(err);
}

Test(cli_reliability, full_disk_under_the_checkpoint_is_one_line_and_no_crash) {
    char small[160];
    snprintf(small, sizeof small, "%s/small", work_dir);
    cr_assert_eq(mkdir(small, 0755), 0);
    if (mount("tmpfs", small, "tmpfs", 0, "size=64k") != 0) {
        /* A skip, not a warning: Criterion 2.4 exits 1 after any cr_log_warn. */
        cr_skip_test("cannot mount a 64 KiB tmpfs on %s (%s; needs root)", small, strerror(errno));
    }
    snprintf(mounted, sizeof mounted, "%s", small);
    char args[512], *err = NULL, checkpoint[200], tmp[208];
    snprintf(args, sizeof args, "train --config '%s' --set train.out_dir=%s/run", config_path, small);
    int code = test_run_dbranch(NULL, args, NULL, &err);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", small);
    snprintf(tmp, sizeof tmp, "%s.tmp", checkpoint);
    int tmp_left = access(tmp, F_OK) == 0;
    cr_assert_eq(code, 1, "exit %d (139 was the segfault in HDF5's exit cleanup): %s", code, err);
    test_assert_one_line_error(err, "dbranch train: ", checkpoint);
    cr_assert(strstr(err, "No space left on device"), "says why: %s", err);
    cr_assert_not(tmp_left, "%s was left behind", tmp);
    free(err);
}

Test(cli_reliability, full_disk_under_the_log_is_an_error) {
    char args[512], *err = NULL;
    snprintf(args, sizeof args, "train --config '%s' --set train.log_file=/dev/full", config_path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1, "a log that cannot be written must fail: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", "/dev/full");
    cr_assert(strstr(err, "No space left on device"), "says why: %s", err);
    free(err);
}

Test(cli_reliability, full_stdout_is_an_error) {
    char command[1024], err_path[160];
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", work_dir);
    snprintf(command, sizeof command, "'%s' info '%s' >/dev/full 2>'%s'", test_dbranch_binary(), config_path, err_path);
    int status = system(command);
    char *err = test_slurp(err_path);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "a report that reached nothing exited %d: %s",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1, err);
    test_assert_one_line_error(err, "dbranch: ", "No space left on device");
    free(err);
}

Test(cli_reliability, prepare_refuses_out_equal_to_an_input) {
    char corpus[160], linked[160], args[512], *err = NULL;
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", work_dir);
    snprintf(linked, sizeof linked, "%s/hardlink.txt", work_dir);
    FILE *f = fopen(corpus, "w");
    cr_assert(f != NULL);
    for (int i = 0; i < 200; i++)
        fprintf(f, "line %d of the user's corpus\n", i);
    cr_assert_eq(fclose(f), 0);
    struct stat before;
    cr_assert_eq(stat(corpus, &before), 0);
    cr_assert_eq(link(corpus, linked), 0);

    snprintf(args, sizeof args, "prepare --input '%s' --out '%s'", corpus, corpus);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1, "%s", err);
    test_assert_one_line_error(err, "dbranch prepare: ", corpus);
    free(err);
    snprintf(args, sizeof args, "prepare --input '%s' --out '%s'", corpus, linked);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1, "the same inode by another name: %s", err);
    test_assert_one_line_error(err, "dbranch prepare: ", linked);
    free(err);
    struct stat after;
    cr_assert_eq(stat(corpus, &after), 0);
    cr_assert_eq(after.st_size, before.st_size, "the corpus was overwritten");
    cr_assert_eq(after.st_ino, before.st_ino, "the corpus was replaced");
}

Test(cli_reliability, prepare_into_a_file_as_directory_fails_before_reading) {
    /* The large preset reads and encodes for a minute before it writes: an
     * --out whose directory cannot exist (a regular file stands in its
     * path) must be named up front, not after the work. Each form of
     * prepare (text, shards, synthetic) checks it. */
    char corpus[160], args[768], *err = NULL;
    snprintf(corpus, sizeof corpus, "%s/small.txt", work_dir);
    FILE *f = fopen(corpus, "w");
    cr_assert(f != NULL);
    fprintf(f, "a line of text\n");
    cr_assert_eq(fclose(f), 0);
    const char *forms[] = {
        "prepare --input '%s' --out '%s/small.txt/x.h5'",
        "prepare --from llmc --train-file '%s' --val-file x.bin --vocab 300 --out '%s/small.txt/sub/x.h5'",
        "prepare --synthetic prefix-sum --out '%s/small.txt/x.h5'",
    };
    const char *named[] = {"small.txt: exists and is not a directory",
                           "small.txt/sub: cannot create directory (Not a directory)",
                           "small.txt: exists and is not a directory"};
    for (int i = 0; i < 3; i++) {
        if (i < 2)
            snprintf(args, sizeof args, forms[i], corpus, work_dir);
        else
            snprintf(args, sizeof args, forms[i], work_dir);
        cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1, "%s: %s", args, err);
        test_assert_one_line_error(err, "dbranch prepare: ", named[i]);
        free(err);
    }
}

Test(cli_reliability, prepare_makes_the_missing_directories_of_out) {
    /* As train --out does: `prepare --out data/new/x.h5` on a fresh tree. */
    char args[768], path[256], *err = NULL;
    snprintf(path, sizeof path, "%s/made/for/prepare/x.h5", work_dir);
    snprintf(args, sizeof args, "prepare --synthetic prefix-sum --out '%s'", path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 0, "%s: %s", args, err);
    free(err);
    struct stat info;
    cr_assert_eq(stat(path, &info), 0, "%s was not written", path);
    cr_assert(S_ISREG(info.st_mode));
}

Test(cli_reliability, nan_weights_are_refused_by_eval_generate_and_bench) {
    char args[1024], *err = NULL, checkpoint[160], poisoned[160], data[160];
    snprintf(args, sizeof args, "train --config '%s'", config_path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(poisoned, sizeof poisoned, "%s/poisoned.h5", work_dir);
    snprintf(data, sizeof data, "%s/data.h5", work_dir);
    model m;
    cr_assert_eq(model_load(&m, checkpoint), DT_OK, "%s", dt_error_message());
    dt_f32(m.final_norm)[1] = NAN; /* written with a valid checksum: only the finite check can catch it */
    cr_assert_eq(model_save(&m, poisoned), DT_OK, "%s", dt_error_message());
    model_free(&m);
    const char *const commands[][2] = {
        {"eval", "eval --model '%s' --data '%s'"},
        {"generate", "generate --model '%s' --data '%s' --prompt ab --tokens 4"},
        {"bench", "bench decode --model '%s' --tokens 4"},
    };
    for (int i = 0; i < 3; i++) {
        char command[512], prefix[64];
        snprintf(command, sizeof command, commands[i][1], poisoned, data);
        snprintf(prefix, sizeof prefix, "dbranch %s", commands[i][0]);
        int code = test_run_dbranch(NULL, command, NULL, &err);
        cr_assert_neq(code, 0, "%s accepted a NaN weight: %s", commands[i][0], err);
        cr_assert(strstr(err, prefix) && strstr(err, "/params/final_norm.weight") && strstr(err, "non-finite"),
                  "%s: %s", command, err);
        cr_assert(strchr(err, '\n') == strrchr(err, '\n'), "one line: %s", err);
        free(err);
    }
}

/* ---- item 10: a FIFO or a device as an input is refused, not waited on ---- */

Test(cli_reliability, fifo_and_device_inputs_are_refused_at_once) {
    char fifo[192];
    snprintf(fifo, sizeof fifo, "%s/input.fifo", work_dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo %s", fifo);
    /* before the fix each of these blocked on open() (FIFO) or read forever (/dev/zero) */
    const struct {
        const char *command, *args, *needle;
    } cases[] = {
        {"train", "train --config '%s'", "FIFO"},
        {"info", "info '%s'", "FIFO"},
        {"eval", "eval --model '%s' --data '%s'", "FIFO"},
        {"check-reference", "check-reference '%s'", "FIFO"},
        {"prepare", "prepare --input '%s' --out '%s.h5'", "FIFO"},
        {"prepare", "prepare --input /dev/zero --out '%s.h5'", "character device"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[600], *err = NULL, prefix[64];
        snprintf(args, sizeof args, cases[i].args, strstr(cases[i].args, "/dev/zero") ? work_dir : fifo, fifo);
        cr_assert_neq(test_run_dbranch(NULL, args, NULL, &err), 0, "%s: %s", args, err);
        snprintf(prefix, sizeof prefix, "dbranch %s: ", cases[i].command);
        test_assert_one_line_error(err, prefix, cases[i].needle);
        free(err);
    }
    unlink(fifo);
}
