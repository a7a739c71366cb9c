/* train.reduce and the process count of a checkpoint (issue 15), in the one-
 * process build: the key parses, is refused with one line when it is neither
 * word, travels in checkpoints; /train's `processes` is written, read back,
 * and 1 for a file without it; and a checkpoint of a job of 2 processes is
 * resumed by one process only with train.reduce = ordered (fast sums give
 * other bits at another count), with a one-line error otherwise. The
 * bit-for-bit side of the same rules runs under mpirun (tests/mpi). */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "support/letters.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static char work_dir[64];
static char data_path[128];

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "train_mpi_reduce");
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    test_write_letters(data_path, 5, 12, 4000, 600);
}

static void teardown(void) { test_remove_dir(work_dir); }

TestSuite(train_mpi_reduce, .init = setup, .fini = teardown, .timeout = 60);

/* A one-layer nanoGPT on the letters, 4 steps of 2 windows, one thread, summing as `reduce` says. */
static train_config tiny_config(const char *out_name, dt_comm_reduce reduce) {
    char text[1024];
    snprintf(text, sizeof text,
             "[model]\nvocab_size = 256\nblock_size = 16\nn_layer = 1\nn_head = 2\nd_model = 16\n"
             "[data]\npath = %s\n"
             "[train]\nbatch_size = 2\ntokens = 128\neval_windows = 2\nthreads = 1\nout_dir = %s/%s\nreduce = %s\n",
             data_path, work_dir, out_name, dt_comm_reduce_name(reduce));
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_parse_string(&cfg, text, "tiny"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.reduce, reduce, "reduce = %s read from the file", dt_comm_reduce_name(reduce));
    return cfg;
}

/* Two steps of cfg, saved as if by a job of `processes`; the path into path. */
static void checkpoint_of(const train_config *cfg, int64_t processes, char *path, size_t size) {
    trainer t;
    cr_assert_eq(trainer_init(&t, cfg, NULL), DT_OK, "%s", dt_error_message());
    train_step_record record;
    for (int s = 0; s < 2; s++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    cr_assert_eq(t.state.processes, 1, "a one-process run records 1 process, not %lld", (long long)t.state.processes);
    t.state.processes = processes;
    cr_assert_eq(trainer_save(&t), DT_OK, "%s", dt_error_message());
    snprintf(path, size, "%s", t.checkpoint_path);
    trainer_free(&t);
}

Test(train_mpi_reduce, the_key_parses_and_bad_words_are_one_line_errors) {
    train_config cfg = train_config_default();
    cr_assert_eq(cfg.reduce, DT_COMM_REDUCE_ORDERED, "ordered is the default");
    cr_assert_eq(train_config_set(&cfg, "train.reduce=fast"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.reduce, DT_COMM_REDUCE_FAST);
    cr_assert_eq(train_config_set(&cfg, "reduce=ordered"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.reduce, DT_COMM_REDUCE_ORDERED);
    cr_assert_eq(train_config_set(&cfg, "train.reduce=sum"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "train.reduce = 'sum' must be ordered|fast"), "%s", dt_error_message());
    cr_assert_eq(cfg.reduce, DT_COMM_REDUCE_ORDERED, "a refused value changes nothing");
    cfg.reduce = DT_COMM_REDUCE_FAST;
    char text[8192];
    train_config_format(&cfg, text, sizeof text);
    cr_assert(strstr(text, "reduce = fast\n"), "the resolved config shows it:\n%s", text);
}

Test(train_mpi_reduce, checkpoints_keep_the_mode_and_the_process_count) {
    const train_config cfg = tiny_config("fast3", DT_COMM_REDUCE_FAST);
    char path[TRAIN_PATH_MAX + 32];
    checkpoint_of(&cfg, 3, path, sizeof path);
    train_config stored = train_config_default();
    cr_assert_eq(train_checkpoint_read_config(path, &stored), DT_OK, "%s", dt_error_message());
    cr_assert_eq(stored.reduce, DT_COMM_REDUCE_FAST, "train.reduce comes back from the checkpoint");
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(path, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.processes, 3, "processes = %lld", (long long)state.processes);

    /* A file written before the attribute existed: one process. */
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(file >= 0);
    hid_t group = H5Gopen2(file, "train", H5P_DEFAULT);
    cr_assert(group >= 0 && H5Adelete(group, "processes") >= 0);
    H5Gclose(group);
    H5Fclose(file);
    cr_assert_eq(train_checkpoint_read_state(path, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.processes, 1, "no attribute: 1 process, not %lld", (long long)state.processes);
}

Test(train_mpi_reduce, another_process_count_resumes_only_with_ordered_sums) {
    char path[TRAIN_PATH_MAX + 32];
    const train_config fast = tiny_config("fast2", DT_COMM_REDUCE_FAST);
    checkpoint_of(&fast, 2, path, sizeof path);
    trainer t;
    trainer_options options = {.resume_path = path};
    cr_assert_eq(trainer_init(&t, &fast, &options), DT_ERR, "a fast N = 2 checkpoint resumed by 1 process");
    const char *message = dt_error_message();
    cr_assert(strstr(message, "was trained by 2 processes; resuming with 1 needs train.reduce = ordered"), "%s",
              message);
    cr_assert(strchr(message, '\n') == NULL, "one line: %s", message);

    /* The same file with train.reduce = ordered (an override at resume) continues. */
    train_config ordered = fast;
    ordered.reduce = DT_COMM_REDUCE_ORDERED;
    cr_assert_eq(trainer_init(&t, &ordered, &options), DT_OK, "%s", dt_error_message());
    cr_assert_eq(t.state.step, 2);
    cr_assert_eq(t.state.processes, 1, "the resumed run records its own process count");
    trainer_free(&t);

    /* The same count: fast is fine. */
    const train_config fast1 = tiny_config("fast1", DT_COMM_REDUCE_FAST);
    checkpoint_of(&fast1, 1, path, sizeof path);
    cr_assert_eq(trainer_init(&t, &fast1, &options), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
}
