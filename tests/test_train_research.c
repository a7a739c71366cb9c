/* The research-loop run keys end to end on a tiny model (a dataset of a few
 * letters, written here):
 *  - train.schedule = wsd reaches the log with the lr worked out by hand;
 *  - the spike guard (train.spike_zscore) skips exactly the update of a step
 *    whose targets are garbage (the trainer's garbage_batch_step hook): the
 *    count in the log goes 0 -> 1 at that step, the weights and optimizer
 *    step after it equal those before it, and a run stopped before the spike
 *    and resumed logs the same steps, bit for bit, as the uninterrupted one;
 *    two threads with two micro-batches skip the same way, and no gradient
 *    is left behind;
 *  - train.keep_last = N leaves checkpoint.h5 plus the N newest numbered
 *    checkpoints, each the state at its step. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "models/model_io.h"
#include "support/scratch.h"
#include "train/trainer.h"

static char dir[64];
static char data[128];

static void setup(void) {
    test_scratch_dir(dir, sizeof dir, "research");
    snprintf(data, sizeof data, "%s/letters.h5", dir);
    enum { N = 6000, N_VAL = 600 };
    static int32_t stream[N + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 17);
    /* "x" then one of four letters at random, repeated: half predictable, so losses settle fast. */
    for (int i = 0; i < N + N_VAL; i++)
        stream[i] = i % 2 ? 'a' + (int32_t)dt_rng_below(&rng, 4) : 'x';
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data, &tok, stream, N, stream + N, N_VAL, "letters"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);
}
static void teardown(void) { test_remove_dir(dir); }
TestSuite(train_research, .init = setup, .fini = teardown, .timeout = 120);

static train_config config(const char *out, int64_t steps) {
    train_config c = train_config_default();
    c.model = model_config_default(FAMILY_LLAMA);
    c.model.vocab_size = 256;
    c.model.block_size = 8;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_model = 16;
    snprintf(c.data_path, sizeof c.data_path, "%s", data);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", dir, out);
    c.batch_size = 4;
    c.seq_len = 8;
    c.tokens = steps * 4 * 8;
    c.lr = 1e-2;
    c.min_lr = 1e-3;
    c.warmup_steps = 2;
    c.eval_windows = 2;
    c.seed = 3;
    c.threads = 1;
    return c;
}

static void run(train_config c, const trainer_options *options) {
    cr_assert_eq(train_config_validate(&c), DT_OK, "%s", dt_error_message());
    trainer t;
    cr_assert_eq(trainer_init(&t, &c, options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
}

/* The number after "key": in the log's step line for `step`. */
static double step_field(const char *out, int step, const char *key) {
    char path[256], line[2048], want[64], pattern[64];
    snprintf(path, sizeof path, "%s/%s/log.jsonl", dir, out);
    snprintf(want, sizeof want, "{\"type\":\"step\",\"step\":%d,", step);
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    double value = NAN;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, want, strlen(want)) && strstr(line, pattern))
            value = strtod(strstr(line, pattern) + strlen(pattern), NULL);
    fclose(f);
    cr_assert(!isnan(value), "no %s at step %d in %s", key, step, path);
    return value;
}

/* 10 steps, 2 of warm-up, decay over the last ceil(0.3 * 10) = 3: steps 7, 8, 9 (0-based) at
 * lr - (lr - min_lr) * k/3, k = 1, 2, 3. Log step s is 0-based step s - 1. */
Test(train_research, wsd_schedule_in_the_log) {
    train_config c = config("wsd", 10);
    c.schedule = SCHEDULE_WSD;
    c.decay_fraction = 0.3;
    run(c, NULL);
    const double want[11] = {0, 0.005, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01 - 0.009 / 3, 0.01 - 0.018 / 3, 0.001};
    for (int s = 1; s <= 10; s++)
        cr_assert(fabs(step_field("wsd", s, "lr") - want[s]) < 1e-9 * want[s], "step %d: lr %.9g, want %.9g", s,
                  step_field("wsd", s, "lr"), want[s]);
}

/* out's checkpoint after `step` (numbered), or its latest (step < 0); a few calls' worth of buffers. */
static const char *checkpoint_at(const char *out, int step) {
    static char paths[4][256];
    static int which;
    which = (which + 1) % 4;
    if (step < 0)
        snprintf(paths[which], sizeof paths[which], "%s/%s/checkpoint.h5", dir, out);
    else
        snprintf(paths[which], sizeof paths[which], "%s/%s/checkpoint-%08d.h5", dir, out, step);
    return paths[which];
}

static void assert_same_params(const char *a_path, const char *b_path, int want_same) {
    model a, b;
    cr_assert_eq(model_load(&a, a_path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(model_load(&b, b_path), DT_OK, "%s", dt_error_message());
    int same = 1;
    for (int i = 0; i < a.n_params; i++)
        same &= !memcmp(a.params[i].tensor->data, b.params[i].tensor->data,
                        (size_t)a.params[i].tensor->size * sizeof(float));
    cr_assert_eq(same, want_same, "%s vs %s: weights %s", a_path, b_path, same ? "equal" : "differ");
    model_free(&a);
    model_free(&b);
}

static int64_t optim_step_of(const char *path) {
    hid_t file;
    cr_assert_eq(h5_open(path, 0, &file), DT_OK);
    hid_t group = H5Gopen2(file, "optim", H5P_DEFAULT);
    int64_t step = -1;
    cr_assert_eq(h5_read_attr_int(group, "step", &step), DT_OK);
    H5Gclose(group);
    H5Fclose(file);
    return step;
}

/* The spike at step 12, after a window of 6 accepted steps; checkpoints every step, all kept. */
Test(train_research, spike_guard_skips_exactly_the_garbage_step) {
    train_config c = config("spike", 16);
    c.spike_zscore = 4;
    c.spike_window = 6;
    c.checkpoint_every = 1;
    c.keep_last = 100;
    trainer_options options = {.garbage_batch_step = 12};
    run(c, &options);
    for (int s = 1; s <= 16; s++)
        cr_assert_eq(step_field("spike", s, "skipped_updates"), s < 12 ? 0 : 1, "step %d", s);
    assert_same_params(checkpoint_at("spike", 11), checkpoint_at("spike", 12), 1);
    assert_same_params(checkpoint_at("spike", 12), checkpoint_at("spike", 13), 0);
    cr_assert_eq(optim_step_of(checkpoint_at("spike", 11)), 11);
    cr_assert_eq(optim_step_of(checkpoint_at("spike", 12)), 11); /* AdamW's bias correction did not advance */
    cr_assert_eq(optim_step_of(checkpoint_at("spike", 13)), 12);

    /* The same on two threads (the update pass split over them) with two micro-batches per step. */
    c = config("spike2", 16);
    c.spike_zscore = 4;
    c.spike_window = 6;
    c.checkpoint_every = 1;
    c.keep_last = 100;
    c.threads = 2;
    c.grad_accum = 2;
    c.tokens *= 2;
    run(c, &options);
    for (int s = 1; s <= 16; s++)
        cr_assert_eq(step_field("spike2", s, "skipped_updates"), s < 12 ? 0 : 1, "step %d", s);
    assert_same_params(checkpoint_at("spike2", 11), checkpoint_at("spike2", 12), 1);
    assert_same_params(checkpoint_at("spike2", 12), checkpoint_at("spike2", 13), 0);

    /* Without the guard the same garbage step is taken (so the test could fail). */
    c = config("unguarded", 13);
    c.checkpoint_every = 1;
    c.keep_last = 100;
    run(c, &options);
    assert_same_params(checkpoint_at("unguarded", 11), checkpoint_at("unguarded", 12), 0);
    cr_assert_eq(step_field("unguarded", 13, "skipped_updates"), 0);
}

/* Stopped at step 9 (window full, before the spike) and resumed: the same log, bit for bit. */
Test(train_research, spike_guard_resume_is_bit_exact) {
    train_config c = config("whole", 16);
    c.spike_zscore = 4;
    c.spike_window = 6;
    trainer_options options = {.garbage_batch_step = 12};
    run(c, &options);
    c = config("parts", 16);
    c.spike_zscore = 4;
    c.spike_window = 6;
    trainer_options first = {.garbage_batch_step = 12, .stop_after_step = 9};
    run(c, &first);
    trainer_options second = {.garbage_batch_step = 12, .resume_path = checkpoint_at("parts", -1)};
    run(c, &second);
    for (int s = 1; s <= 16; s++) {
        cr_assert_eq(step_field("whole", s, "loss"), step_field("parts", s, "loss"), "step %d", s);
        cr_assert_eq(step_field("whole", s, "grad_norm"), step_field("parts", s, "grad_norm"), "step %d", s);
        cr_assert_eq(step_field("whole", s, "skipped_updates"), step_field("parts", s, "skipped_updates"), "step %d",
                     s);
    }
    cr_assert_eq(step_field("parts", 16, "skipped_updates"), 1);
    assert_same_params(checkpoint_at("whole", -1), checkpoint_at("parts", -1), 1);
}

/* keep_last 2, checkpoints every 2 of 9 steps (2, 4, 6, 8 and the final 9): 8 and 9 stay. */
Test(train_research, keep_last_rotates_numbered_checkpoints) {
    train_config c = config("rotate", 9);
    c.checkpoint_every = 2;
    c.keep_last = 2;
    run(c, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/rotate", dir);
    DIR *d = opendir(path);
    cr_assert(d);
    char names[16][256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "checkpoint", 10) && n < 16) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    cr_assert_eq(n, 3, "%d checkpoint files", n);
    cr_assert_str_eq(names[0], "checkpoint-00000008.h5");
    cr_assert_str_eq(names[1], "checkpoint-00000009.h5");
    cr_assert_str_eq(names[2], "checkpoint.h5");
    assert_same_params(checkpoint_at("rotate", -1), checkpoint_at("rotate", 9), 1);
    assert_same_params(checkpoint_at("rotate", -1), checkpoint_at("rotate", 8), 0);
    cr_assert_eq(optim_step_of(checkpoint_at("rotate", 8)), 8);

    /* keep_last 0 (the default): checkpoint.h5 alone. */
    c = config("single", 4);
    c.checkpoint_every = 2;
    run(c, NULL);
    snprintf(path, sizeof path, "%s/single", dir);
    d = opendir(path);
    n = 0;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, "checkpoint", 10);
    closedir(d);
    cr_assert_eq(n, 1);
}

/* Step by step: after the skipped step every gradient buffer is zero again (the next step starts clean). */
Test(train_research, skipped_update_leaves_no_gradient) {
    train_config c = config("steps", 16);
    c.spike_zscore = 4;
    c.spike_window = 6;
    c.threads = 2;
    cr_assert_eq(train_config_validate(&c), DT_OK, "%s", dt_error_message());
    trainer t;
    trainer_options options = {.garbage_batch_step = 12};
    cr_assert_eq(trainer_init(&t, &c, &options), DT_OK, "%s", dt_error_message());
    train_step_record record;
    for (int s = 1; s <= 12; s++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    cr_assert_eq(record.skipped_updates, 1);
    for (int i = 0; i < t.model.n_params; i++) {
        const dt_tensor *p = t.model.params[i].tensor;
        for (int64_t j = 0; j < p->size; j++)
            cr_assert(p->grad[j] == 0.0f, "%s grad[%lld] = %g after the skipped step", t.model.params[i].name,
                      (long long)j, p->grad[j]);
    }
    trainer_free(&t);
}
