/* The training loop end to end on a tiny model and a tiny synthetic dataset
 * (written here with data_tokens_write):
 *  - a stopped and resumed run gives bit-for-bit the per-step losses, gradient
 *    norms and final weights of the uninterrupted run (AdamW and Muon, with and
 *    without a decode branch, with gradient accumulation), also when its time
 *    limit stopped it;
 *  - the checkpoint round trip restores parameters, optimizer state, loader
 *    and trainer RNG state exactly;
 *  - a NaN loss stops the run with an error and keeps the last good checkpoint;
 *  - a steady-state step does not grow the arena or the tape;
 *  - the loss goes down. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm_bf16.h"
#include "models/model_io.h"
#include "support/onednn_bf16.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train/trunk.h"

/* Room for any out_dir plus a file name. */
#define PATH_BUF (TRAIN_PATH_MAX + 64)

static char work_dir[64];
static char data_path[128];

/* Byte text from a small vocabulary of words: learnable, cheap. */
static void write_dataset(void) {
    static const char *const words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran ", "far. "};
    enum { N_TRAIN = 12000, N_VAL = 1200 };
    int32_t *stream = malloc((N_TRAIN + N_VAL) * sizeof *stream);
    dt_rng rng;
    dt_rng_seed(&rng, 99);
    int64_t n = 0;
    while (n < N_TRAIN + N_VAL) {
        const char *w = words[dt_rng_below(&rng, 10)];
        for (; *w && n < N_TRAIN + N_VAL; w++)
            stream[n++] = (unsigned char)*w;
    }
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data_path, &tok, stream, N_TRAIN, stream + N_TRAIN, N_VAL, "test words"), DT_OK,
                 "%s", dt_error_message());
    data_tokenizer_free(&tok);
    free(stream);
}

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "train");
    snprintf(data_path, sizeof data_path, "%s/words.h5", work_dir);
    write_dataset();
}

static void teardown(void) { test_remove_dir(work_dir); }

/* Set by the feedback resume test: tiny_config then makes a latent-feedback
 * model (SPEC §6.5) trained with a pass mix, jitter and prefix mixin. */
static int feedback_model;
/* Set by the bf16 tests: tiny_config then trains with train.precision = bf16. */
static int bf16_model;
/* Set by the bf16 attention tests: one head of width 32 (a width the AMX
 * kernels serve; two heads of 16 are not), with this train.bf16_attention. */
static int amx_heads;
static train_bf16_attention amx_heads_attention;

static train_config tiny_config(const char *out_name, int branch, optim_kind optimizer) {
    train_config cfg = train_config_default();
    cfg.model = model_config_default(FAMILY_NANOGPT);
    cfg.model.vocab_size = 256;
    cfg.model.block_size = 16;
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.d_model = 32;
    cfg.model.branch = branch ? BRANCH_DECODE : BRANCH_NONE;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data_path);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s/%s", work_dir, out_name);
    cfg.batch_size = 4;
    cfg.seq_len = 16;
    cfg.tokens = 8 * 4 * 16; /* 8 steps */
    cfg.lr = 3e-3;
    cfg.min_lr = 3e-4;
    cfg.warmup_steps = 2;
    cfg.optimizer = optimizer;
    cfg.eval_every = 3;
    cfg.eval_windows = 4;
    cfg.checkpoint_every = 2;
    cfg.seed = 5;
    /* One thread: OpenMP barriers on a model this small cost more than they
     * save, badly so on a loaded machine (one resume test runs on two). */
    cfg.threads = 1;
    if (feedback_model) {
        cfg.model.feedback = 1;
        cfg.feedback_passes = (train_pass_mix){.n = 3, .passes = {1, 2, 3}, .weight = {0.3, 0.4, 0.3}};
        cfg.feedback_start = 0.25;
        cfg.feedback_jitter = 0.1;
        cfg.feedback_prefix_mixin = 1;
        cfg.feedback_lambda = 0.7;
    }
    /* pinned both ways: auto, the default, would follow the CPU */
    cfg.precision = bf16_model ? TRAIN_PRECISION_BF16 : TRAIN_PRECISION_FP32;
    if (amx_heads) {
        cfg.model.n_head = 1;
        cfg.bf16_attention = amx_heads_attention;
    }
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    return cfg;
}

static trainer_result run(const train_config *cfg, const char *resume, int64_t stop_after, dt_status expect) {
    trainer t;
    trainer_options options = {.resume_path = resume, .stop_after_step = stop_after};
    cr_assert_eq(trainer_init(&t, cfg, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    dt_status status = trainer_run(&t, &result);
    cr_assert_eq(status, expect, "%s", status == DT_OK ? "run succeeded" : dt_error_message());
    trainer_free(&t);
    return result;
}

/* The step lines of a log with the timing fields cut off: everything else
 * (step, tokens, lr, losses, alpha, grad_norm) must match exactly. */
static int read_step_lines(const char *path, char lines[][1024], int capacity) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "no log %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"step\"")) continue;
        char *timing = strstr(line, ",\"tokens_per_s\"");
        cr_assert(timing != NULL);
        *timing = '\0';
        cr_assert(n < capacity);
        snprintf(lines[n++], 1024, "%s", line);
    }
    fclose(f);
    return n;
}

static void assert_same_weights(const char *path_a, const char *path_b) {
    model a, b;
    cr_assert_eq(model_load(&a, path_a), DT_OK, "%s", dt_error_message());
    cr_assert_eq(model_load(&b, path_b), DT_OK, "%s", dt_error_message());
    cr_assert_eq(a.n_params, b.n_params);
    for (int i = 0; i < a.n_params; i++) {
        const dt_tensor *x = a.params[i].tensor, *y = b.params[i].tensor;
        cr_assert_eq(x->size, y->size);
        cr_assert(memcmp(x->data, y->data, (size_t)x->size * sizeof(float)) == 0, "%s differs", a.params[i].name);
    }
    model_free(&a);
    model_free(&b);
}

static void check_resume_is_exact(int branch, optim_kind optimizer, int64_t grad_accum, int64_t threads) {
    train_config straight = tiny_config("straight", branch, optimizer);
    train_config split = tiny_config("split", branch, optimizer);
    straight.grad_accum = split.grad_accum = grad_accum;
    straight.threads = split.threads = threads;
    straight.tokens = split.tokens = 8 * 4 * 16 * grad_accum;

    trainer_result full = run(&straight, NULL, 0, DT_OK);
    cr_assert_eq(full.steps, 8);
    cr_assert(!full.stopped && full.evaluated);

    trainer_result first = run(&split, NULL, 3, DT_OK); /* stops after step 3 (odd: not a checkpoint_every step) */
    cr_assert(first.stopped);
    cr_assert_eq(first.steps, 3);
    char checkpoint[PATH_BUF];
    snprintf(checkpoint, sizeof checkpoint, "%s/checkpoint.h5", split.out_dir);
    trainer_result second = run(&split, checkpoint, 0, DT_OK);
    cr_assert_eq(second.steps, 8);
    cr_assert(!second.stopped && second.evaluated);

    static char lines_full[16][1024], lines_split[16][1024];
    char log_full[PATH_BUF], log_split[PATH_BUF];
    snprintf(log_full, sizeof log_full, "%s/log.jsonl", straight.out_dir);
    snprintf(log_split, sizeof log_split, "%s/log.jsonl", split.out_dir);
    int n_full = read_step_lines(log_full, lines_full, 16);
    int n_split = read_step_lines(log_split, lines_split, 16);
    cr_assert_eq(n_full, 8);
    cr_assert_eq(n_split, 8, "the resumed run appends to the log");
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(lines_split[i], lines_full[i], "step %d differs", i + 1);
    cr_assert_eq(second.final_eval.loss, full.final_eval.loss);

    char checkpoint_full[PATH_BUF];
    snprintf(checkpoint_full, sizeof checkpoint_full, "%s/checkpoint.h5", straight.out_dir);
    assert_same_weights(checkpoint_full, checkpoint);
}

Test(train_loop, resume_is_bit_exact_adamw_two_threads, .init = setup, .fini = teardown, .timeout = 120) {
    check_resume_is_exact(0, OPTIM_ADAMW, 1, 2);
}

Test(train_loop, resume_is_bit_exact_branch_muon_accum, .init = setup, .fini = teardown, .timeout = 120) {
    check_resume_is_exact(1, OPTIM_MUON, 2, 1);
}

/* A run stopped by its time limit is resumable like a signalled one. The
 * first step of an invocation always runs and the limit (1 ns) is below any
 * step, so the first leg stops after exactly one step, with its checkpoint;
 * the second leg, without a limit, ends where the uninterrupted run ends. A
 * limit far above the run's length does not stop it. */
Test(train_loop, time_limit_stops_with_a_resumable_checkpoint, .init = setup, .fini = teardown, .timeout = 120) {
    train_config straight = tiny_config("straight", 1, OPTIM_MUON);
    train_config split = tiny_config("split", 1, OPTIM_MUON);
    trainer t;
    trainer_options unlimited = {.time_limit_seconds = 1e6};
    cr_assert_eq(trainer_init(&t, &straight, &unlimited), DT_OK, "%s", dt_error_message());
    trainer_result full;
    cr_assert_eq(trainer_run(&t, &full), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
    cr_assert(!full.stopped && full.evaluated && full.steps == 8, "a limit of 1e6 s stopped the run");
    cr_assert_eq(full.stop_reason, TRAIN_STOP_NONE);

    trainer_options tight = {.time_limit_seconds = 1e-9};
    cr_assert_eq(trainer_init(&t, &split, &tight), DT_OK, "%s", dt_error_message());
    trainer_result first;
    cr_assert_eq(trainer_run(&t, &first), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
    cr_assert(first.stopped && !first.evaluated);
    cr_assert_eq(first.stop_reason, TRAIN_STOP_TIME_LIMIT);
    cr_assert_eq(first.steps, 1, "stopped after %lld steps, expected 1", (long long)first.steps);
    char checkpoint[PATH_BUF];
    snprintf(checkpoint, sizeof checkpoint, "%s/checkpoint.h5", split.out_dir);
    trainer_result second = run(&split, checkpoint, 0, DT_OK);
    cr_assert(!second.stopped && second.evaluated && second.steps == 8);
    cr_assert_eq(second.final_eval.loss, full.final_eval.loss);
    char checkpoint_full[PATH_BUF];
    snprintf(checkpoint_full, sizeof checkpoint_full, "%s/checkpoint.h5", straight.out_dir);
    assert_same_weights(checkpoint_full, checkpoint);
}

/* train.save_trunk (train/trunk.h): a wsd run of 8 steps (decay_fraction
 * 0.5: steps 4-7 decay) writes trunk.h5 at step 4; continued to 12 steps it
 * is, step for step and in its final weights, the run of 12 steps trained
 * from scratch, which writes its own trunk at step 6. The run's final
 * checkpoint (step 8, into its decay) is not a state of the longer run, and
 * the schedule check says from which step; a trunk needs wsd. Branch model,
 * Muon (two learning-rate groups). */
Test(train_loop, a_trunk_continued_to_a_larger_budget_is_the_longer_run, .init = setup, .fini = teardown,
     .timeout = 120) {
    train_config shorter = tiny_config("shorter", 1, OPTIM_MUON), longer = tiny_config("longer", 1, OPTIM_MUON),
                 continued = tiny_config("continued", 1, OPTIM_MUON);
    train_config *all[] = {&shorter, &longer, &continued};
    for (int i = 0; i < 3; i++) {
        all[i]->schedule = SCHEDULE_WSD;
        all[i]->decay_fraction = 0.5;
        all[i]->save_trunk = 1;
    }
    longer.tokens = continued.tokens = 12 * 4 * 16;
    cr_assert_eq(train_trunk_step(&shorter), 4);
    cr_assert_eq(train_trunk_step(&longer), 6);

    trainer_result short_run = run(&shorter, NULL, 0, DT_OK);
    cr_assert_eq(short_run.steps, 8);
    char trunk[PATH_BUF], final_short[PATH_BUF];
    snprintf(trunk, sizeof trunk, "%s/trunk.h5", shorter.out_dir);
    snprintf(final_short, sizeof final_short, "%s/checkpoint.h5", shorter.out_dir);
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(trunk, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 4, "the trunk holds step %lld, expected 4", (long long)state.step);
    cr_assert_eq(train_schedule_first_difference(&shorter, &longer, 4), -1);
    cr_assert_eq(train_schedule_first_difference(&shorter, &longer, 8), 4, "the shorter run decays from step 4");

    trainer_result long_run = run(&longer, NULL, 0, DT_OK);
    trainer_result continued_run = run(&continued, trunk, 0, DT_OK);
    cr_assert(long_run.steps == 12 && continued_run.steps == 12 && continued_run.evaluated);
    cr_assert_eq(continued_run.final_eval.loss, long_run.final_eval.loss);
    char final_long[PATH_BUF], final_continued[PATH_BUF], log_long[PATH_BUF], log_continued[PATH_BUF];
    snprintf(final_long, sizeof final_long, "%s/checkpoint.h5", longer.out_dir);
    snprintf(final_continued, sizeof final_continued, "%s/checkpoint.h5", continued.out_dir);
    assert_same_weights(final_long, final_continued);
    static char lines_long[16][1024], lines_continued[16][1024];
    snprintf(log_long, sizeof log_long, "%s/log.jsonl", longer.out_dir);
    snprintf(log_continued, sizeof log_continued, "%s/log.jsonl", continued.out_dir);
    cr_assert_eq(read_step_lines(log_long, lines_long, 16), 12);
    cr_assert_eq(read_step_lines(log_continued, lines_continued, 16), 8, "the continuation logs steps 5-12");
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(lines_continued[i], lines_long[4 + i], "step %d differs", 5 + i);
    /* The continuation writes the longer run's trunk (step 6) as a fresh run would. */
    snprintf(trunk, sizeof trunk, "%s/trunk.h5", continued.out_dir);
    cr_assert_eq(train_checkpoint_read_state(trunk, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 6);
    /* Resuming the shorter run's decayed end does not give the longer run. */
    trainer_result from_end = run(&continued, final_short, 0, DT_OK);
    cr_assert_neq(from_end.final_eval.loss, long_run.final_eval.loss);

    train_config cosine = tiny_config("cosine", 0, OPTIM_ADAMW);
    cosine.save_trunk = 1;
    cr_assert_eq(train_config_validate(&cosine), DT_ERR);
    cr_assert(strstr(dt_error_message(), "train.save_trunk") && strstr(dt_error_message(), "wsd"), "%s",
              dt_error_message());
}

/* Weights, optimizer moments, loader and trainer RNG come back exactly. */
/* The pass draws, jitter and prefix lengths come from the checkpointed
 * trainer stream: a resumed feedback run is the straight run, bit for bit
 * (two threads, so rows split over workers; two micro-batches). */
Test(train_loop, resume_is_bit_exact_feedback, .init = setup, .fini = teardown, .timeout = 120) {
    feedback_model = 1;
    check_resume_is_exact(0, OPTIM_ADAMW, 2, 2);
}

/* Each step line of a feedback run names the passes K it trained: K = 1
 * for the first feedback_start of the steps, then the mix's draw (here a mix
 * of K = 2 only, so every later step says 2); a model without feedback
 * writes no such field. */
Test(train_loop, step_lines_name_the_feedback_passes, .init = setup, .fini = teardown, .timeout = 60) {
    feedback_model = 1;
    train_config cfg = tiny_config("passes", 0, OPTIM_ADAMW);
    cfg.feedback_passes = (train_pass_mix){.n = 1, .passes = {2}, .weight = {1.0}};
    cfg.feedback_start = 0.5;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    run(&cfg, NULL, 0, DT_OK);
    feedback_model = 0;
    train_config plain = tiny_config("plain", 0, OPTIM_ADAMW);
    run(&plain, NULL, 0, DT_OK);
    char path[1200], lines[16][1024];
    snprintf(path, sizeof path, "%s/log.jsonl", cfg.out_dir);
    int n = read_step_lines(path, lines, 16);
    cr_assert_eq(n, 8);
    for (int s = 0; s < n; s++) {
        char want[64];
        snprintf(want, sizeof want, ",\"feedback_passes\":%d", s < 4 ? 1 : 2);
        cr_assert(strstr(lines[s], want), "step %d: %s not in %s", s + 1, want, lines[s]);
    }
    snprintf(path, sizeof path, "%s/log.jsonl", plain.out_dir);
    n = read_step_lines(path, lines, 16);
    cr_assert_eq(n, 8);
    for (int s = 0; s < n; s++)
        cr_assert_null(strstr(lines[s], "feedback_passes"), "%s", lines[s]);
}

Test(train_loop, checkpoint_round_trip, .init = setup, .fini = teardown, .timeout = 60) {
    train_config cfg = tiny_config("round", 1, OPTIM_MUON);
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_OK, "%s", dt_error_message());
    train_step_record record;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    dt_rng_next(&t.state.trainer_rng);   /* make it differ from its seed state */
    dt_rng_normal(&t.state.trainer_rng); /* and leave a cached spare normal */
    cr_assert_eq(trainer_save(&t), DT_OK, "%s", dt_error_message());

    model loaded;
    cr_assert_eq(model_load(&loaded, t.checkpoint_path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(loaded.n_params, t.model.n_params);
    optim_param *views = calloc((size_t)loaded.n_params, sizeof *views);
    trainer_describe_params(&loaded, views);
    optimizer opt;
    cr_assert_eq(optim_init(&opt, OPTIM_MUON, views, loaded.n_params, loaded.params_memory, loaded.grads_memory,
                            loaded.n_floats, &t.opt.hp),
                 DT_OK);
    cr_assert_eq(train_checkpoint_read_optim(t.checkpoint_path, &opt), DT_OK, "%s", dt_error_message());
    cr_assert_eq(opt.step, 3);
    int n_muon = 0, n_adamw = 0;
    for (int i = 0; i < loaded.n_params; i++) {
        const dt_tensor *a = t.model.params[i].tensor, *b = loaded.params[i].tensor;
        size_t bytes = (size_t)a->size * sizeof(float);
        cr_assert_str_eq(loaded.params[i].name, t.model.params[i].name);
        cr_assert(memcmp(a->data, b->data, bytes) == 0, "%s", loaded.params[i].name);
        cr_assert_eq(optim_is_muon(&opt, i), optim_is_muon(&t.opt, i));
        if (optim_is_muon(&opt, i)) {
            n_muon++;
            cr_assert(memcmp(optim_muon_momentum(&opt, i), optim_muon_momentum(&t.opt, i), bytes) == 0, "%s",
                      loaded.params[i].name);
        } else {
            n_adamw++;
            cr_assert(memcmp(optim_adamw_m(&opt, i), optim_adamw_m(&t.opt, i), bytes) == 0 &&
                          memcmp(optim_adamw_v(&opt, i), optim_adamw_v(&t.opt, i), bytes) == 0,
                      "%s", loaded.params[i].name);
        }
    }
    cr_assert(n_muon > 0 && n_adamw > 0, "both optimizers in play (%d muon, %d adamw)", n_muon, n_adamw);

    train_state state;
    char *text = NULL;
    cr_assert_eq(train_checkpoint_read_state(t.checkpoint_path, &state, &text), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 3);
    cr_assert_eq(state.tokens_seen, 3 * 4 * 16);
    cr_assert_eq(state.windows_drawn, t.loader.windows_drawn);
    cr_assert_eq(state.windows_drawn, 3 * 4);
    cr_assert(memcmp(state.loader_rng.s, t.loader.rng.s, sizeof state.loader_rng.s) == 0);
    cr_assert(memcmp(state.trainer_rng.s, t.state.trainer_rng.s, sizeof state.trainer_rng.s) == 0);
    cr_assert_eq(state.trainer_rng.has_spare, 1);
    cr_assert_eq(state.trainer_rng.spare, t.state.trainer_rng.spare);
    cr_assert_str_eq(text, t.config_text);
    free(text);
    optim_free(&opt);
    free(views);
    model_free(&loaded);
    trainer_free(&t);
}

/* A NaN weight before step 5: the run fails naming the loss, and the
 * checkpoint of step 4 stays (finite weights, no leftover .tmp). */
Test(train_loop, nan_stops_and_keeps_last_checkpoint, .init = setup, .fini = teardown, .timeout = 60) {
    train_config cfg = tiny_config("nan", 0, OPTIM_ADAMW);
    trainer t;
    trainer_options options = {.poison_step = 5};
    cr_assert_eq(trainer_init(&t, &cfg, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_ERR);
    const char *message = dt_error_message();
    cr_assert(strstr(message, "step 5") && strstr(message, "nan"), "%s", message);
    cr_assert(strstr(message, "last good checkpoint") != NULL, "%s", message);
    cr_assert(strchr(message, '\n') == NULL);
    char checkpoint[PATH_BUF], tmp[PATH_BUF + 8];
    snprintf(checkpoint, sizeof checkpoint, "%s", t.checkpoint_path);
    trainer_free(&t);

    train_state state;
    cr_assert_eq(train_checkpoint_read_state(checkpoint, &state, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(state.step, 4);
    model m;
    cr_assert_eq(model_load(&m, checkpoint), DT_OK, "%s", dt_error_message());
    cr_assert(train_model_is_finite(&m, NULL));
    model_free(&m);
    snprintf(tmp, sizeof tmp, "%s.tmp", checkpoint);
    cr_assert(access(tmp, F_OK) != 0, "a .tmp file was left behind");
}

/* Diverged weights are never written: a direct save of a NaN model fails and leaves the old file. */
Test(train_loop, checkpoint_refuses_non_finite_weights, .init = setup, .fini = teardown, .timeout = 60) {
    train_config cfg = tiny_config("refuse", 0, OPTIM_ADAMW);
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(trainer_save(&t), DT_OK, "%s", dt_error_message());
    struct stat before;
    cr_assert_eq(stat(t.checkpoint_path, &before), 0);
    float *w = dt_f32(t.model.params[3].tensor);
    w[0] = INFINITY;
    cr_assert_eq(trainer_save(&t), DT_ERR);
    cr_assert(strstr(dt_error_message(), t.model.params[3].name) != NULL, "%s", dt_error_message());
    train_state state;
    cr_assert_eq(train_checkpoint_read_state(t.checkpoint_path, &state, NULL), DT_OK, "the old checkpoint is intact");
    trainer_free(&t);
}

/* After the first step the arena has its size and the tape its capacity. */
Test(train_loop, steady_state_step_allocates_nothing, .init = setup, .fini = teardown, .timeout = 60) {
    train_config cfg = tiny_config("steady", 1, OPTIM_ADAMW);
    cfg.threads = 2; /* two workers: the replica's buffers are checked too */
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_OK, "%s", dt_error_message());
    train_step_record record;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    /* Every worker's tape and arena (one per thread that takes batch rows). */
    enum { MAX_WORKERS = 8 };
    cr_assert_leq(t.parallel.n_workers, MAX_WORKERS);
    long mallocs[MAX_WORKERS];
    int cap_nodes[MAX_WORKERS];
    size_t capacity[MAX_WORKERS];
    for (int w = 0; w < t.parallel.n_workers; w++) {
        mallocs[w] = dt_arena_mallocs(&t.parallel.contexts[w].arena);
        cap_nodes[w] = t.parallel.contexts[w].cap_nodes;
        capacity[w] = dt_arena_capacity(&t.parallel.contexts[w].arena);
    }
    for (int i = 0; i < 4; i++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    train_eval_record eval;
    cr_assert_eq(trainer_evaluate(&t, &eval), DT_OK, "%s", dt_error_message());
    cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    for (int w = 0; w < t.parallel.n_workers; w++) {
        cr_assert_eq(dt_arena_mallocs(&t.parallel.contexts[w].arena), mallocs[w], "worker %d", w);
        cr_assert_eq(t.parallel.contexts[w].cap_nodes, cap_nodes[w], "worker %d", w);
        cr_assert_eq(dt_arena_capacity(&t.parallel.contexts[w].arena), capacity[w], "worker %d", w);
    }
    trainer_free(&t);
}

/* 40 steps at a learning rate that learns the word stream, evaluated at the end. */
static train_config learning_config(const char *out_name, int branch) {
    train_config cfg = tiny_config(out_name, branch, OPTIM_ADAMW);
    cfg.tokens = 40 * 4 * 16;
    cfg.eval_every = 0;
    cfg.checkpoint_every = 0;
    cfg.warmup_steps = 4;
    cfg.lr = 1e-2;
    cfg.min_lr = 1e-3;
    return cfg;
}

/* 40 steps on the word stream: the validation loss falls well below the
 * uniform ln(256) = 5.55 and the first steps' loss. */
Test(train_loop, loss_goes_down, .init = setup, .fini = teardown, .timeout = 120) {
    train_config cfg = learning_config("learn", 0);
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_OK, "%s", dt_error_message());
    train_eval_record before;
    cr_assert_eq(trainer_evaluate(&t, &before), DT_OK, "%s", dt_error_message());
    cr_assert(fabs(before.loss - log(256.0)) < 0.5, "initial val loss %g", before.loss);
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
    cr_assert(result.evaluated);
    cr_assert(result.final_eval.loss < 3.0, "val loss after 40 steps: %g (from %g)", result.final_eval.loss,
              before.loss);
    trainer_free(&t);
}

/* bf16 products: the masters, moments, loader and RNGs come back exactly, and
 * the bf16 copies are rebuilt from the masters, so a resumed run is the
 * straight run bit for bit, on either engine (two threads: the replicas share
 * the copies; Muon with two micro-batches on oneDNN). */
Test(train_loop, resume_is_bit_exact_bf16_widen, .init = setup, .fini = teardown, .timeout = 120) {
    bf16_model = 1;
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_WIDEN), DT_OK);
    check_resume_is_exact(1, OPTIM_ADAMW, 1, 2);
}

Test(train_loop, resume_is_bit_exact_bf16_onednn, .init = setup, .fini = teardown, .timeout = 120) {
    bf16_model = 1;
    test_require_onednn_bf16();
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_ONEDNN), DT_OK, "%s", dt_error_message());
    check_resume_is_exact(0, OPTIM_MUON, 2, 1);
}

/* The same 40 steps in float32 and in bf16 (the branch model: every linear
 * op and the mixture): bf16 learns (the copies follow the updates; frozen
 * copies would leave the forward at its initial loss) to within 2% of the
 * float32 loss, and is not the float32 run (the products were rounded). */
static double final_loss_of(int bf16, char *first_step, size_t size) {
    bf16_model = bf16;
    train_config cfg = learning_config(bf16 ? "learn_bf16" : "learn_fp32", 1);
    trainer_result result = run(&cfg, NULL, 0, DT_OK);
    cr_assert(result.evaluated);
    static char lines[48][1024];
    char log[PATH_BUF];
    snprintf(log, sizeof log, "%s/log.jsonl", cfg.out_dir);
    cr_assert_eq(read_step_lines(log, lines, 48), 40);
    snprintf(first_step, size, "%s", lines[0]);
    return result.final_eval.loss;
}

Test(train_loop, bf16_trains_like_fp32, .init = setup, .fini = teardown, .timeout = 120) {
    char first_fp32[1024], first_bf16[1024];
    const double fp32 = final_loss_of(0, first_fp32, sizeof first_fp32);
    const double bf16 = final_loss_of(1, first_bf16, sizeof first_bf16);
    cr_assert(fp32 < 3.0, "float32 val loss after 40 steps: %g", fp32);
    cr_assert(fabs(bf16 - fp32) < 0.02 * fp32, "bf16 val loss %g vs float32 %g", bf16, fp32);
    cr_assert(strcmp(first_fp32, first_bf16) != 0, "the bf16 run's first step is the float32 one");
}

/* train.bf16_attention: amx, avx512_bf16 and fp32 are different arithmetic
 * (the first step's loss differs) that all learn alike, auto is the CPU's
 * default engine, and a run with bf16 attention resumes bit for bit. An
 * engine the CPU lacks is one clear error at the start. */
static trainer_result bf16_attention_run(train_bf16_attention choice, const char *name, char *first_step, size_t size) {
    bf16_model = 1;
    amx_heads = 1;
    amx_heads_attention = choice;
    train_config cfg = learning_config(name, 1);
    trainer_result result = run(&cfg, NULL, 0, DT_OK);
    static char lines[48][1024];
    char log[PATH_BUF];
    snprintf(log, sizeof log, "%s/log.jsonl", cfg.out_dir);
    cr_assert_eq(read_step_lines(log, lines, 48), 40);
    snprintf(first_step, size, "%s", lines[0]);
    return result;
}

Test(train_loop, bf16_attention_key_selects_the_kernels, .init = setup, .fini = teardown, .timeout = 180) {
    char first_fp32[1024], first_auto[1024], first_engine[1024];
    const trainer_result fp32 = bf16_attention_run(TRAIN_BF16_ATTENTION_FP32, "attn_fp32", first_fp32, 1024);
    const trainer_result automatic = bf16_attention_run(TRAIN_BF16_ATTENTION_AUTO, "attn_auto", first_auto, 1024);
    if (k_bf16_attention_default() == K_BF16_ATTENTION_FP32)
        cr_assert_str_eq(first_auto, first_fp32, "auto runs float32 attention without a bf16 engine");
    const struct {
        train_bf16_attention key;
        k_bf16_attention_engine engine;
        const char *name;
    } engines[] = {{TRAIN_BF16_ATTENTION_AMX, K_BF16_ATTENTION_AMX, "amx"},
                   {TRAIN_BF16_ATTENTION_AVX512_BF16, K_BF16_ATTENTION_AVX512_BF16, "avx512_bf16"}};
    for (size_t e = 0; e < sizeof engines / sizeof engines[0]; e++) {
        char dir[64], expected[96];
        snprintf(dir, sizeof dir, "attn_%s", engines[e].name);
        if (!k_bf16_attention_available(engines[e].engine)) {
            amx_heads_attention = engines[e].key;
            train_config cfg = learning_config(dir, 1);
            trainer t;
            trainer_options options = {0};
            cr_assert_eq(trainer_init(&t, &cfg, &options), DT_ERR, "%s accepted on a CPU without it", engines[e].name);
            snprintf(expected, sizeof expected, "train.bf16_attention = %s", engines[e].name);
            cr_assert(strstr(dt_error_message(), expected), "%s", dt_error_message());
            continue;
        }
        const trainer_result pinned = bf16_attention_run(engines[e].key, dir, first_engine, 1024);
        if (k_bf16_attention_default() == engines[e].engine) {
            cr_assert_str_eq(first_auto, first_engine, "auto is %s on this CPU", engines[e].name);
            cr_assert_eq(automatic.final_eval.loss, pinned.final_eval.loss);
        }
        cr_assert(strcmp(first_engine, first_fp32) != 0, "%s attention gave float32 attention's first step",
                  engines[e].name);
        cr_assert(fabs(pinned.final_eval.loss - fp32.final_eval.loss) < 0.02 * fp32.final_eval.loss,
                  "val loss with %s attention %g vs float32 attention %g", engines[e].name, pinned.final_eval.loss,
                  fp32.final_eval.loss);
    }
}

Test(train_loop, resume_is_bit_exact_bf16_amx_attention, .init = setup, .fini = teardown, .timeout = 120) {
    if (k_bf16_attention_default() == K_BF16_ATTENTION_FP32)
        cr_skip_test("this CPU has neither AMX-BF16 tiles nor AVX512_BF16");
    bf16_model = 1;
    amx_heads = 1;
    amx_heads_attention = TRAIN_BF16_ATTENTION_AUTO; /* the CPU's bf16 engine */
    check_resume_is_exact(1, OPTIM_ADAMW, 1, 2);
}

/* Not a terminal: plain progress lines (no \r), the eval line with the branch
 * numbers; the JSON log has null for what does not apply and numbers otherwise. */
Test(train_loop, progress_and_json_lines, .init = setup, .fini = teardown, .timeout = 60) {
    FILE *progress = tmpfile();
    cr_assert(progress != NULL);
    const int branch[2] = {0, 1};
    for (int b = 0; b < 2; b++) {
        train_config cfg = tiny_config(branch[b] ? "json_branch" : "json_base", branch[b], OPTIM_ADAMW);
        cfg.print_every = 4;
        trainer t;
        trainer_options options = {.progress = progress};
        cr_assert_eq(trainer_init(&t, &cfg, &options), DT_OK, "%s", dt_error_message());
        trainer_result result;
        cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
        static char lines[16][1024];
        int n = read_step_lines(t.log_path, lines, 16);
        cr_assert_eq(n, 8);
        for (int i = 0; i < n; i++) {
            char step[32];
            snprintf(step, sizeof step, "\"step\":%d,", i + 1);
            cr_assert(strstr(lines[i], step) != NULL, "%s", lines[i]);
            if (branch[b])
                cr_assert(!strstr(lines[i], "null") && strstr(lines[i], "\"alpha\":0."), "%s", lines[i]);
            else
                cr_assert(strstr(lines[i], "\"loss_branch\":null") && strstr(lines[i], "\"alpha\":null"), "%s",
                          lines[i]);
        }
        trainer_free(&t);
    }
    rewind(progress);
    static char text[16384];
    size_t length = fread(text, 1, sizeof text - 1, progress);
    text[length] = '\0';
    fclose(progress);
    cr_assert(strchr(text, '\r') == NULL, "no carriage returns off a terminal");
    cr_assert(strstr(text, "step 1/8") && strstr(text, "step 4/8") && strstr(text, "step 8/8"), "%s", text);
    cr_assert(strstr(text, "step 2/8") == NULL, "print_every = 4: %s", text);
    cr_assert(strstr(text, "eval step 8: val loss") != NULL, "%s", text);
    cr_assert(strstr(text, "branch") != NULL && strstr(text, "alpha") != NULL, "%s", text);
}

/* Which parameters decay and which Muon takes, by SPEC name: decay and Muon
 * for the hidden matrices (experts included), decay without Muon for the
 * router, neither for embeddings, the head, norms, biases and coupling vectors. */
Test(train_loop, optimizer_roles_by_parameter) {
    const model_family families[2] = {FAMILY_NANOGPT, FAMILY_MOE};
    for (int f = 0; f < 2; f++) {
        model_config c = model_config_default(families[f]);
        c.vocab_size = 64;
        c.block_size = 8;
        c.n_layer = 1;
        c.n_head = 2;
        c.d_model = 16;
        c.branch = BRANCH_DECODE;
        c.tie_embeddings = 0;
        model m;
        cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
        optim_param *views = calloc((size_t)m.n_params, sizeof *views);
        trainer_describe_params(&m, views);
        int seen_matrix = 0, seen_expert = 0, seen_router = 0;
        for (int i = 0; i < m.n_params; i++) {
            const char *name = views[i].name;
            int is_weight_matrix = strstr(name, "attn.w") || strstr(name, "mlp.") || strstr(name, "moe.w");
            is_weight_matrix = is_weight_matrix && strstr(name, ".weight") && views[i].ndim >= 2;
            int is_router = strstr(name, "moe.router") != NULL;
            int want_decay = is_weight_matrix || is_router;
            int want_muon = is_weight_matrix;
            cr_assert_eq(views[i].decay, want_decay, "%s: decay %d", name, views[i].decay);
            cr_assert_eq(views[i].muon, want_muon, "%s: muon %d", name, views[i].muon);
            cr_assert_eq(m.params_memory + views[i].offset, dt_f32(m.params[i].tensor));
            cr_assert_eq(m.grads_memory + views[i].offset, m.params[i].tensor->grad);
            seen_matrix += want_muon;
            seen_expert += want_muon && views[i].ndim == 3;
            seen_router += is_router;
        }
        cr_assert(seen_matrix >= 4);
        if (families[f] == FAMILY_MOE) cr_assert(seen_expert == 3 && seen_router == 1);
        free(views);
        model_free(&m);
    }
}
