/* Acceptance checks of `dbranch train` the way an issue filer runs them:
 * a checkpoint with flipped bytes inside a weight or an optimizer moment must
 * be refused with a one-line error naming the dataset (it used to resume
 * silently with the damaged values, because HDF5 checks only its metadata),
 * a run killed with SIGKILL and resumed from its last periodic checkpoint
 * must log the same losses, bit for bit, as a run that was never stopped, and
 * config files that are not configs must fail naming the file (a key given
 * twice used to be "last one wins"; a directory, a file with NUL bytes and an
 * empty file used to parse as an empty config and fail later with
 * "data.path is not set", naming no file). */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char work_dir[64];
static char config_path[128];

/* A scratch dir holding data.h5 (random letters a..l, byte tokenizer) and run.ini (a one-layer branch model). */
static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "cli_qa");
    enum { N_TRAIN = 6000, N_VAL = 600 };
    static int32_t tokens[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        tokens[i] = 'a' + (int32_t)dt_rng_below(&rng, 12);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    char data_path[128];
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    cr_assert_eq(data_tokens_write(data_path, &tok, tokens, N_TRAIN, tokens + N_TRAIN, N_VAL, "letters"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);

    /* A Decode-Branch model, so the branch's own parameters and moments are in the file. */
    snprintf(config_path, sizeof config_path, "%s/run.ini", work_dir);
    FILE *f = fopen(config_path, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "[model]\nfamily = nanogpt\nvocab_size = 256\nblock_size = 16\nn_layer = 1\nn_head = 2\nd_model = 16\n"
            "branch = decode\n"
            "[data]\npath = %s\n"
            "[train]\nbatch_size = 2\nseq_len = 16\ntokens = 1280\nwarmup_steps = 2\neval_windows = 2\n"
            "checkpoint_every = 10\nout_dir = %s/run\nthreads = 1\n",
            data_path, work_dir);
    fclose(f);
}

static void teardown(void) { test_remove_dir(work_dir); }

/* Runs `dbranch train ARGS`; returns the exit status, its stderr in *err (caller frees; stdout is not kept). */
static int run_train(const char *args, char **err) {
    char line[1024];
    snprintf(line, sizeof line, "train %s", args);
    return test_run_dbranch(NULL, line, NULL, err);
}

static void copy_file(const char *from, const char *to) {
    char command[512];
    snprintf(command, sizeof command, "cp '%s' '%s'", from, to);
    cr_assert_eq(system(command), 0);
}

/* Inverts 4 bytes in the middle of a contiguous dataset's data, the way a bad
 * disk or a partial copy would, leaving HDF5's metadata intact. */
static void flip_bytes_in_dataset(const char *path, const char *dataset) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert(file >= 0);
    hid_t dset = H5Dopen2(file, dataset, H5P_DEFAULT);
    cr_assert(dset >= 0, "no dataset %s", dataset);
    haddr_t offset = H5Dget_offset(dset);
    hsize_t size = H5Dget_storage_size(dset);
    H5Dclose(dset);
    H5Fclose(file);
    cr_assert(offset != HADDR_UNDEF && size >= 8, "%s is not a contiguous dataset", dataset);
    FILE *f = fopen(path, "r+b");
    cr_assert(f != NULL);
    unsigned char bytes[4];
    cr_assert_eq(fseek(f, (long)(offset + size / 2), SEEK_SET), 0);
    cr_assert_eq(fread(bytes, 1, 4, f), 4u);
    for (int i = 0; i < 4; i++)
        bytes[i] ^= 0xA5;
    cr_assert_eq(fseek(f, (long)(offset + size / 2), SEEK_SET), 0);
    cr_assert_eq(fwrite(bytes, 1, 4, f), 4u);
    fclose(f);
}

Test(cli_qa, corrupted_checkpoint_is_refused, .init = setup, .fini = teardown, .timeout = 120) {
    static char args[512], checkpoint[160], damaged[160];
    char *err;
    snprintf(args, sizeof args, "--config '%s' --tokens 320", config_path);
    cr_assert_eq(run_train(args, &err), 0, "stderr: %s", err);
    free(err);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(damaged, sizeof damaged, "%s/damaged.h5", work_dir);

    /* The undamaged copy resumes (a larger budget, so it trains). */
    copy_file(checkpoint, damaged);
    snprintf(args, sizeof args, "--resume '%s' --tokens 384 --out '%s/ok'", damaged, work_dir);
    cr_assert_eq(run_train(args, &err), 0, "stderr: %s", err);
    free(err);

    const char *datasets[] = {"/params/layers.0.attn.wq.weight", "/params/branch.tok_emb.weight",
                              "/optim/m/layers.0.mlp.fc.weight", "/optim/v/tok_emb.weight"};
    for (size_t i = 0; i < sizeof datasets / sizeof datasets[0]; i++) {
        copy_file(checkpoint, damaged);
        flip_bytes_in_dataset(damaged, datasets[i]);
        snprintf(args, sizeof args, "--resume '%s' --tokens 384 --out '%s/bad'", damaged, work_dir);
        cr_assert_eq(run_train(args, &err), 1, "%s: stderr: %s", datasets[i], err);
        const char *leaf = strchr(datasets[i] + 1, '/') + 1; /* the name without /params/ or /optim/ */
        test_assert_one_line_error(err, "dbranch train: ", leaf);
        test_assert_one_line_error(err, "dbranch train: ", "damaged.h5");
        test_assert_one_line_error(err, "dbranch train: ", "checksum");
        free(err);
    }

    /* A damaged weight is refused by every reader of model files, not only --resume. */
    copy_file(checkpoint, damaged);
    flip_bytes_in_dataset(damaged, "/params/final_norm.weight");
    model m;
    cr_assert_neq(model_load(&m, damaged), DT_OK);
    cr_assert(strstr(dt_error_message(), "final_norm.weight") != NULL, "%s", dt_error_message());
}

/* Reads the "loss" and "grad_norm" text of every step line of a JSON-lines
 * log into rows[step] (the last line for a step wins). */
enum { MAX_STEPS = 64 };
static int read_losses(const char *path, char rows[MAX_STEPS][96]) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        int step = 0;
        const char *s = strstr(line, "\"type\":\"step\",\"step\":");
        const char *loss = strstr(line, "\"loss\":");
        const char *norm = strstr(line, "\"grad_norm\":");
        if (!s || !loss || !norm || sscanf(s + 21, "%d", &step) != 1 || step <= 0 || step >= MAX_STEPS) continue;
        char loss_text[40] = "", norm_text[40] = "";
        sscanf(loss + 7, "%39[^,}]", loss_text);
        sscanf(norm + 12, "%39[^,}]", norm_text);
        snprintf(rows[step], sizeof rows[step], "%s %s", loss_text, norm_text);
        n++;
    }
    fclose(f);
    return n;
}

Test(cli_qa, sigkill_then_resume_matches_an_uninterrupted_run, .init = setup, .fini = teardown, .timeout = 240) {
    static char args[512], log_path[160], checkpoint[160];
    char *err;
    static char full[MAX_STEPS][96], resumed[MAX_STEPS][96];
    /* Uninterrupted: 40 steps, checkpoints every 10. */
    snprintf(args, sizeof args, "--config '%s' --out '%s/full'", config_path, work_dir);
    cr_assert_eq(run_train(args, &err), 0, "stderr: %s", err);
    free(err);
    snprintf(log_path, sizeof log_path, "%s/full/log.jsonl", work_dir);
    cr_assert_eq(read_losses(log_path, full), 40);

    /* Killed with SIGKILL after step 25 is logged (no chance to checkpoint):
     * the run stops itself there (a test hook), so the kill cannot land
     * after the run has finished however fast the steps are. */
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    const char *binary = test_dbranch_binary();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(99);
        setenv("DBRANCH_TEST_PAUSE_AFTER_STEP", "25", 1);
        execl(binary, binary, "train", "--config", config_path, (char *)NULL);
        _exit(98);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
    cr_assert(WIFSTOPPED(status), "the run was to stop itself after step 25 (exit status %d)", status);
    static char rows[MAX_STEPS][96];
    cr_assert_eq(read_losses(log_path, rows), 25, "the run logged 25 steps before it was killed");
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    snprintf(args, sizeof args, "--resume '%s'", checkpoint);
    cr_assert_eq(run_train(args, &err), 0, "stderr: %s", err);
    free(err);
    cr_assert(read_losses(log_path, resumed) > 40, "the resumed run appends to the same log");
    for (int step = 1; step <= 40; step++)
        cr_assert_str_eq(resumed[step], full[step], "step %d: resumed '%s' vs uninterrupted '%s'", step, resumed[step],
                         full[step]);
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    fclose(f);
}

Test(cli_qa, config_files_that_are_not_configs, .init = setup, .fini = teardown, .timeout = 60) {
    static char args[512], path[160];
    char *err;

    /* A key set twice: the line of the second one is named. */
    snprintf(path, sizeof path, "%s/twice.ini", work_dir);
    const char twice[] = "[model]\nfamily = nanogpt\nd_model = 16\nd_model = 32\n";
    write_text(path, twice, sizeof twice - 1);
    snprintf(args, sizeof args, "--config '%s'", path);
    cr_assert_eq(run_train(args, &err), 1, "stderr: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", "twice.ini line 4");
    test_assert_one_line_error(err, "dbranch train: ", "model.d_model");
    free(err);

    /* A directory. */
    snprintf(args, sizeof args, "--config '%s'", work_dir);
    cr_assert_eq(run_train(args, &err), 1, "stderr: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", work_dir);
    free(err);

    /* Binary bytes (a NUL hides the rest of its line from the INI reader). */
    snprintf(path, sizeof path, "%s/binary.ini", work_dir);
    const char binary_text[] = "[model]\nfamily = nanogpt\n\0\x01\x02[data]\npath = x.h5\n";
    write_text(path, binary_text, sizeof binary_text - 1);
    snprintf(args, sizeof args, "--config '%s'", path);
    cr_assert_eq(run_train(args, &err), 1, "stderr: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", "binary.ini");
    free(err);

    /* An empty file. */
    snprintf(path, sizeof path, "%s/empty.ini", work_dir);
    write_text(path, "", 0);
    snprintf(args, sizeof args, "--config '%s'", path);
    cr_assert_eq(run_train(args, &err), 1, "stderr: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", "empty.ini");
    free(err);

    /* The good config still runs (the checks reject nothing real). */
    snprintf(args, sizeof args, "--config '%s' --tokens 64", config_path);
    cr_assert_eq(run_train(args, &err), 0, "stderr: %s", err);
    free(err);
}

Test(cli_qa, truncated_token_dataset_is_refused, .init = setup, .fini = teardown, .timeout = 60) {
    static char args[512], data_path[160];
    char *err;
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    struct stat info;
    cr_assert_eq(stat(data_path, &info), 0);
    cr_assert_eq(truncate(data_path, info.st_size / 2), 0); /* `truncate -s half` */
    snprintf(args, sizeof args, "--config '%s'", config_path);
    cr_assert_eq(run_train(args, &err), 1, "stderr: %s", err);
    test_assert_one_line_error(err, "dbranch train: ", data_path);
    free(err);
}
