/* Issue 18 in the library, each case a bug that was there:
 *  - item 5: a model's whole size is checked against memory before anything
 *    is allocated (n_layer = 1000000, vocab_size = 1e8 are one line, not the
 *    OOM killer); the size comes from the config alone and agrees with what
 *    model_create allocates; a checkpoint whose /config says vocab_size = 2^31
 *    is refused before the loader allocates for it;
 *  - item 7: `train --resume` refuses a nonsense training state (negative or
 *    huge step and token counts, flags outside 0/1, a dead RNG, a missing
 *    config checksum, a step beyond the run), naming the attribute;
 *  - item 8: a NaN or Inf weight in a model file is an error naming the
 *    tensor, and a NaN stop after a resume names as last good the checkpoint
 *    that exists (the resumed-from file), not one this run never wrote;
 *  - item 3: "cannot create file" says why. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "models/model_budget.h"
#include "models/model_io.h"
#include "support/letters.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

#define PATH_BUF (TRAIN_PATH_MAX + 64)

static char work_dir[64];
static char data_path[128];

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "train_reliability");
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    test_write_letters(data_path, 7, 12, 4000, 600);
}

static void teardown(void) {
    unsetenv("DBRANCH_MEMORY_LIMIT");
    test_remove_dir(work_dir);
}

TestSuite(train_reliability, .init = setup, .fini = teardown, .timeout = 60);

static train_config tiny_config(const char *out_name) {
    train_config cfg = train_config_default();
    cfg.model = model_config_default(FAMILY_NANOGPT);
    cfg.model.vocab_size = 256;
    cfg.model.block_size = 16;
    cfg.model.n_layer = 1;
    cfg.model.n_head = 2;
    cfg.model.d_model = 16;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data_path);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s/%s", work_dir, out_name);
    cfg.batch_size = 2;
    cfg.seq_len = 16;
    cfg.tokens = 6 * 2 * 16; /* 6 steps */
    cfg.warmup_steps = 1;
    cfg.eval_windows = 2;
    cfg.checkpoint_every = 2;
    cfg.threads = 1;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    return cfg;
}

/* Trains cfg for stop_after steps (with a checkpoint); the checkpoint's path into path. */
static void train_checkpoint(const train_config *cfg, int64_t stop_after, char *path, size_t size) {
    trainer t;
    trainer_options options = {.stop_after_step = stop_after};
    cr_assert_eq(trainer_init(&t, cfg, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
    snprintf(path, size, "%s", t.checkpoint_path);
    trainer_free(&t);
}

/* ---- item 5: the budget ---- */

Test(train_reliability, param_bytes_agree_with_model_create) {
    /* The config-only count must be the floats model_create allocates, for every family and branch form. */
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int f = 0; f < 3; f++)
        for (int branch = 0; branch < 2; branch++)
            for (int share = 0; share < 2; share++) {
                model_config c = model_config_default(families[f]);
                c.vocab_size = 40;
                c.block_size = 8;
                c.n_layer = 3;
                c.n_head = 2;
                c.n_kv_head = families[f] == FAMILY_NANOGPT ? 2 : 1;
                c.d_model = 8;
                c.d_ff = families[f] == FAMILY_NANOGPT ? 32 : 24;
                if (families[f] == FAMILY_MOE) {
                    c.n_expert = 3;
                    c.top_k = 2;
                }
                c.branch = branch ? BRANCH_DECODE : BRANCH_NONE;
                c.share = share;
                c.tie_embeddings = share;
                model m;
                cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
                double floats = 0;
                for (int i = 0; i < m.n_params; i++)
                    floats += (double)m.params[i].tensor->size;
                cr_expect_eq(model_config_param_bytes(&m.config), 4.0 * floats,
                             "family %d branch %d share %d: %.0f bytes from the config, %.0f allocated", f, branch,
                             share, model_config_param_bytes(&m.config), 4.0 * floats);
                model_free(&m);
            }
}

Test(train_reliability, a_model_larger_than_memory_is_refused_before_allocation) {
    train_config cfg = tiny_config("huge");
    cfg.model.n_layer = 1000000; /* ~16 GB of weights alone at d_model = 16; training needs 4x */
    cfg.model.d_model = 64;
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_ERR, "n_layer = 1000000 was accepted");
    const char *message = dt_error_message();
    cr_assert(strstr(message, "too large") && strstr(message, "n_layer = 1000000"), "%s", message);
    cr_assert(strchr(message, '\n') == NULL);

    /* vocab_size = 1e8 under a documented cap (so the test does not depend on this machine's memory). */
    setenv("DBRANCH_MEMORY_LIMIT", "4000000000", 1);
    cfg = tiny_config("wide");
    cfg.model.vocab_size = 100000000;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_ERR, "vocab_size = 1e8 was accepted");
    message = dt_error_message();
    cr_assert(strstr(message, "too large") && strstr(message, "vocab_size = 100000000"), "%s", message);
    cr_assert_eq(model_budget_check(&cfg.model, MODEL_USE_WEIGHTS, 1, 0, 0), DT_ERR);
    unsetenv("DBRANCH_MEMORY_LIMIT");
    cfg.model.vocab_size = 256;
    cr_assert_eq(model_budget_check(&cfg.model, MODEL_USE_TRAIN, 2, 0, 0), DT_OK, "%s", dt_error_message());
    /* bf16 training adds the 2-byte copies of the weights, nothing else */
    const double copies = model_budget_bytes(&cfg.model, MODEL_USE_TRAIN_BF16, 2, 0, 0) -
                          model_budget_bytes(&cfg.model, MODEL_USE_TRAIN, 2, 0, 0);
    cr_assert_float_eq(copies, 2.0 * model_config_param_count(&cfg.model), 1e-6);
}

Test(train_reliability, config_larger_than_params_is_refused_before_allocation) {
    train_config cfg = tiny_config("lying");
    char checkpoint[PATH_BUF];
    train_checkpoint(&cfg, 2, checkpoint, sizeof checkpoint);
    hid_t file;
    cr_assert_eq(h5_open(checkpoint, 1, &file), DT_OK, "%s", dt_error_message());
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    cr_assert(config >= 0);
    /* the largest vocab_size the key's range allows: 2^31 - 1 rows of embeddings (128 GiB), not in /params */
    cr_assert_eq(h5_write_attr_int(config, "vocab_size", INT64_C(2147483647)), DT_OK);
    H5Gclose(config);
    cr_assert_eq(h5_close(file, checkpoint), DT_OK);
    model m;
    cr_assert_eq(model_load(&m, checkpoint), DT_ERR, "a /config of vocab_size 2^31 loaded");
    const char *message = dt_error_message();
    cr_assert(strstr(message, checkpoint) && strstr(message, "/params holds only"), "%s", message);
}

Test(train_reliability, huge_block_size_in_a_rope_model_file_is_refused_before_allocation) {
    /* block_size adds no parameter to a llama model, but its RoPE table is [block_size, head_dim] (found by
     * tests/fuzz). */
    model_config c = model_config_default(FAMILY_LLAMA);
    c.vocab_size = 64;
    c.block_size = 16;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_kv_head = 1;
    c.d_model = 16;
    model m;
    cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
    char path[PATH_BUF];
    snprintf(path, sizeof path, "%s/llama.h5", work_dir);
    cr_assert_eq(model_save(&m, path), DT_OK, "%s", dt_error_message());
    model_free(&m);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    /* the largest block_size the key's range allows (2^20): a 32 MiB table, over a 16 MB cap */
    cr_assert_eq(h5_write_attr_int(config, "block_size", INT64_C(1) << 20), DT_OK);
    H5Gclose(config);
    cr_assert_eq(h5_close(file, path), DT_OK);
    setenv("DBRANCH_MEMORY_LIMIT", "16000000", 1);
    cr_assert_eq(model_load(&m, path), DT_ERR, "block_size = 2^20 loaded under a 16 MB cap");
    cr_assert(strstr(dt_error_message(), path) && strstr(dt_error_message(), "too large"), "%s", dt_error_message());
}

/* ---- item 8: finite weights at load, the true last good checkpoint ---- */

Test(train_reliability, non_finite_weights_are_refused_at_load) {
    train_config cfg = tiny_config("nanweights");
    char checkpoint[PATH_BUF];
    train_checkpoint(&cfg, 2, checkpoint, sizeof checkpoint);
    const float poisons[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        model m;
        cr_assert_eq(model_load(&m, checkpoint), DT_OK, "%s", dt_error_message());
        model_param *p = model_find_param(&m, "layers.0.attn.wq.weight");
        cr_assert_not_null(p);
        dt_f32(p->tensor)[5] = poisons[k];
        /* Written as a model file (model_save has no finite check of its own: the load must catch it). */
        char path[PATH_BUF + 16];
        snprintf(path, sizeof path, "%s/poisoned.h5", work_dir);
        cr_assert_eq(model_save(&m, path), DT_OK, "%s", dt_error_message());
        model_free(&m);
        cr_assert_eq(model_load(&m, path), DT_ERR, "a weight %g loaded", (double)poisons[k]);
        const char *message = dt_error_message();
        cr_assert(strstr(message, "/params/layers.0.attn.wq.weight") && strstr(message, "non-finite"), "%s", message);
    }
}

Test(train_reliability, nan_stop_after_resume_names_the_checkpoint_that_exists) {
    train_config first = tiny_config("first");
    char checkpoint[PATH_BUF];
    train_checkpoint(&first, 2, checkpoint, sizeof checkpoint);
    /* Resumed into another out_dir, poisoned before this run writes anything. */
    train_config second = tiny_config("second");
    trainer t;
    trainer_options options = {.resume_path = checkpoint, .poison_step = 3};
    cr_assert_eq(trainer_init(&t, &second, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_ERR);
    const char *message = dt_error_message();
    char never_written[PATH_BUF];
    snprintf(never_written, sizeof never_written, "%s", t.checkpoint_path);
    trainer_free(&t);
    cr_assert(access(never_written, F_OK) != 0, "%s was written", never_written);
    cr_assert(strstr(message, "last good checkpoint") && strstr(message, checkpoint), "%s", message);
    cr_assert(strstr(message, never_written) == NULL, "names a checkpoint never written: %s", message);
}

/* ---- item 7: the saved training state is validated ---- */

typedef enum { SET_INT, SET_DOUBLE, DELETE_ATTR, ZERO_RNG } doctor_kind;

/* Applies one doctoring to /train of a copy of checkpoint; returns the copy's path in out. */
static void doctored_state(const char *checkpoint, doctor_kind kind, const char *name, double value, char *out,
                           size_t size) {
    static int serial = 0;
    snprintf(out, size, "%s/doctored_%d.h5", work_dir, serial++);
    char command[4 * PATH_BUF];
    snprintf(command, sizeof command, "cp '%s' '%s'", checkpoint, out);
    cr_assert_eq(system(command), 0);
    hid_t file;
    cr_assert_eq(h5_open(out, 1, &file), DT_OK, "%s", dt_error_message());
    hid_t group = H5Gopen2(file, "train", H5P_DEFAULT);
    cr_assert(group >= 0);
    if (kind == SET_INT) cr_assert_eq(h5_write_attr_int(group, name, (int64_t)value), DT_OK);
    if (kind == SET_DOUBLE) cr_assert_eq(h5_write_attr_double(group, name, value), DT_OK);
    if (kind == DELETE_ATTR) cr_assert(H5Adelete(group, name) >= 0);
    if (kind == ZERO_RNG) {
        const uint64_t zeros[4] = {0, 0, 0, 0};
        cr_assert_eq(h5_write_u64(group, name, zeros, 1, (const int64_t[]){4}), DT_OK);
        cr_assert_eq(model_h5_attach_checksum(group, name, zeros, sizeof zeros), DT_OK);
    }
    H5Gclose(group);
    cr_assert_eq(h5_close(file, out), DT_OK);
}

Test(train_reliability, nonsense_training_state_is_refused_on_resume) {
    train_config cfg = tiny_config("state");
    char checkpoint[PATH_BUF];
    train_checkpoint(&cfg, 2, checkpoint, sizeof checkpoint);
    const struct {
        doctor_kind kind;
        const char *name;
        double value;
    } cases[] = {
        {SET_INT, "step", -5},
        {SET_INT, "step", 4e18},
        {SET_INT, "tokens_seen", -1},
        {SET_INT, "tokens_seen", 1},
        {SET_INT, "tokens_seen", 4e18},
        {SET_INT, "windows_drawn", -3},
        {SET_INT, "loader_has_spare", 7},
        {SET_INT, "trainer_has_spare", -1},
        {SET_DOUBLE, "elapsed_seconds", NAN},
        {SET_DOUBLE, "trainer_spare", INFINITY},
        {DELETE_ATTR, "config_checksum", 0},
        {ZERO_RNG, "loader_rng", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[PATH_BUF + 32];
        doctored_state(checkpoint, cases[i].kind, cases[i].name, cases[i].value, path, sizeof path);
        train_config resumed = tiny_config("resumed");
        trainer t;
        trainer_options options = {.resume_path = path};
        cr_expect_eq(trainer_init(&t, &resumed, &options), DT_ERR, "resume accepted %s = %g", cases[i].name,
                     cases[i].value);
        const char *message = dt_error_message();
        cr_expect(strstr(message, cases[i].name) && strstr(message, path), "case %s = %g: %s", cases[i].name,
                  cases[i].value, message);
        cr_expect(strchr(message, '\n') == NULL);
    }
    /* A step beyond this run's budget "finished" at once before. */
    train_config shorter = tiny_config("shorter");
    shorter.tokens = 1 * 2 * 16;
    trainer t;
    trainer_options options = {.resume_path = checkpoint};
    cr_assert_eq(trainer_init(&t, &shorter, &options), DT_ERR, "a checkpoint at step 2 resumed into a 1-step run");
    cr_assert(strstr(dt_error_message(), "'step' = 2"), "%s", dt_error_message());
}

/* ---- item 3: create errors say why ---- */

Test(train_reliability, cannot_create_says_why) {
    hid_t file;
    cr_assert_eq(h5_create("/nonexistent-dir/x.h5", &file), DT_ERR);
    cr_assert(strstr(dt_error_message(), "No such file or directory"), "%s", dt_error_message());
    model_config c = tiny_config("unused").model;
    model m;
    cr_assert_eq(model_create(&m, &c), DT_OK);
    cr_assert_eq(model_save(&m, "/nonexistent-dir/model.h5"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "/nonexistent-dir/model.h5") &&
                  strstr(dt_error_message(), "No such file or directory"),
              "%s", dt_error_message());
    model_free(&m);
}
