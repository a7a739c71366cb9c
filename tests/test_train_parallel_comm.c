/* The communicator seam behind the data-parallel step (core/comm.h), with a
 * fake second process:
 *  - the model's parameters are views into one flat weight buffer and one
 *    flat gradient buffer (SPEC §3 order), replicas into flat gradient
 *    buffers of their own: what the allreduce sees;
 *  - the update calls allreduce once per step over the whole flat gradient,
 *    and two processes with equal gradients step exactly like one;
 *  - the MoE balance fractions are combined over the processes before the
 *    backward (a training step only; evaluation makes no collective call);
 *  - evaluation splits its windows over the processes and sums them in one
 *    allreduce: ranks 0 and 1 of two together evaluate each window once;
 *    a batch that does not split over the processes is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "models/model.h"
#include "support/scratch.h"
#include "train/parallel_step.h"
#include "train/trainer.h"

enum { B = 4, T = 8 };

/* What the fake's calls saw, and how it plays the other process. */
typedef struct fake_process {
    int f32_calls, f64_calls;
    const void *f32_data;
    int64_t f32_n, f64_n;
    double other;     /* allreduce_f64 adds this to every element (the other rank's values) */
    double *recorded; /* allreduce_f64 copies the buffer here first (when not NULL) */
} fake_process;

/* The other process had exactly this process's gradient. */
static dt_status twin_allreduce_f32(const dt_comm *comm, float *data, int64_t n) {
    fake_process *fake = comm->state;
    fake->f32_calls++;
    fake->f32_data = data;
    fake->f32_n = n;
    for (int64_t i = 0; i < n; i++)
        data[i] += data[i];
    return DT_OK;
}

static dt_status fake_allreduce_f64(const dt_comm *comm, double *data, int64_t n) {
    fake_process *fake = comm->state;
    fake->f64_calls++;
    fake->f64_n = n;
    if (fake->recorded) memcpy(fake->recorded, data, (size_t)n * sizeof *data);
    for (int64_t i = 0; i < n; i++)
        data[i] += fake->other;
    return DT_OK;
}

static dt_status fake_broadcast(const dt_comm *comm, void *data, size_t bytes, int root) { return DT_OK; }
static dt_status fake_barrier(const dt_comm *comm) { return DT_OK; }

static dt_comm fake_comm(fake_process *fake, int rank) {
    return (dt_comm){.rank = rank,
                     .size = 2,
                     .state = fake,
                     .allreduce_f32 = twin_allreduce_f32,
                     .allreduce_f64 = fake_allreduce_f64,
                     .broadcast = fake_broadcast,
                     .barrier = fake_barrier};
}

static model_config tiny_config(model_family family) {
    model_config c = model_config_default(family);
    c.vocab_size = 32;
    c.block_size = T;
    c.n_layer = 2;
    c.n_head = 2;
    c.d_model = 16;
    c.branch = BRANCH_DECODE;
    if (family == FAMILY_MOE) c.d_ff = 24;
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    return c;
}

typedef struct {
    model m;
    optimizer opt;
    train_parallel p;
    dt_tensor *inputs, *targets;
} stepper;

static void stepper_init_config(stepper *s, const model_config *c, const dt_comm *comm, int n_threads) {
    cr_assert_eq(model_create(&s->m, c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    model_init_weights(&s->m, &rng);
    train_config cfg = train_config_default();
    cfg.optimizer = OPTIM_ADAMW;
    cr_assert_eq(trainer_optimizer_init(&s->opt, &s->m, &cfg), DT_OK, "%s", dt_error_message());
    cr_assert_eq(train_parallel_init(&s->p, &s->m, &s->opt, comm, B, T, n_threads, 1), DT_OK, "%s", dt_error_message());
    s->inputs = dt_tensor_new(DT_I32, DT_SHAPE(B, T));
    s->targets = dt_tensor_new(DT_I32, DT_SHAPE(B, T));
    for (int i = 0; i < B * T; i++) {
        dt_i32(s->inputs)[i] = (int32_t)dt_rng_below(&rng, 32);
        dt_i32(s->targets)[i] = (int32_t)dt_rng_below(&rng, 32);
    }
}

static void stepper_init(stepper *s, model_family family, const dt_comm *comm, int n_threads) {
    const model_config c = tiny_config(family);
    stepper_init_config(s, &c, comm, n_threads);
}

static void stepper_free(stepper *s) {
    dt_tensor_free(s->inputs);
    dt_tensor_free(s->targets);
    train_parallel_free(&s->p);
    optim_free(&s->opt);
    model_free(&s->m);
}

Test(train_parallel_comm, parameters_are_views_of_flat_buffers) {
    model_config c = tiny_config(FAMILY_NANOGPT);
    c.d_model = 20; /* norms and biases of 20 floats: the padding shows */
    c.d_ff = 4 * c.d_model;
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    stepper s;
    stepper_init_config(&s, &c, NULL, 2);
    cr_assert_eq(s.p.n_workers, 2);
    int64_t previous_end = 0;
    for (int i = 0; i < s.m.n_params; i++) {
        const dt_tensor *t = s.m.params[i].tensor;
        const int64_t offset = dt_f32(t) - s.m.params_memory;
        cr_assert(offset >= previous_end, "%s starts before the previous parameter ends (SPEC order)",
                  s.m.params[i].name);
        cr_assert_eq(offset % 16, 0, "%s starts on a 64-byte line", s.m.params[i].name);
        cr_assert_eq(t->grad, s.m.grads_memory + offset, "%s: its gradient at the same offset", s.m.params[i].name);
        const dt_tensor *r = s.p.replicas[0].params[i].tensor;
        cr_assert_eq(r->data, t->data, "the replica shares the weights");
        cr_assert_eq(r->grad, s.p.replicas[0].grads_memory + offset,
                     "the replica's gradient is in its own flat buffer");
        previous_end = offset + t->size;
    }
    cr_assert(previous_end <= s.m.n_floats && s.m.n_floats - previous_end < 16);
    stepper_free(&s);
}

/* Two processes whose gradients are equal take exactly the step of one:
 * sum (x2), then the mean over processes (/2), both exact. */
Test(train_parallel_comm, update_sums_the_whole_flat_gradient_once) {
    fake_process fake = {0};
    const dt_comm comm = fake_comm(&fake, 0);
    stepper one, two;
    stepper_init(&one, FAMILY_NANOGPT, NULL, 2);
    stepper_init(&two, FAMILY_NANOGPT, &comm, 2);
    for (int step = 0; step < 2; step++) {
        stepper *both[2] = {&one, &two};
        double norm[2];
        for (int k = 0; k < 2; k++) {
            train_parallel_losses losses;
            for (int micro = 0; micro < 2; micro++)
                cr_assert_eq(train_parallel_forward_backward(&both[k]->p, both[k]->inputs, both[k]->targets, &losses),
                             DT_OK, "%s", dt_error_message());
            cr_assert_eq(train_parallel_update(&both[k]->p, 1e-2, 0.0, 0.5f, 1.0, &norm[k]), DT_OK);
        }
        cr_assert_eq(fake.f32_calls, step + 1, "one allreduce per step, after both micro-batches");
        cr_assert(fake.f32_data == two.m.grads_memory && fake.f32_n == two.m.n_floats,
                  "over the whole flat gradient buffer");
        cr_assert(norm[0] == norm[1], "step %d: norm %.17g vs %.17g", step, norm[0], norm[1]);
    }
    cr_assert(memcmp(one.m.params_memory, two.m.params_memory, (size_t)one.m.n_floats * sizeof(float)) == 0,
              "two equal processes step like one");
    cr_assert_eq(fake.f64_calls, 0, "nanoGPT has no balance fractions to combine");
    stepper_free(&one);
    stepper_free(&two);
}

/* The other process's f and mean probabilities are all 0.25: every worker's
 * balance term then reads (this process's batch f + 0.25) / 2. */
static void check_fractions(int n_threads) {
    stepper alone, paired;
    stepper_init(&alone, FAMILY_MOE, NULL, n_threads);
    train_parallel_losses losses;
    cr_assert_eq(train_parallel_forward_backward(&alone.p, alone.inputs, alone.targets, &losses), DT_OK, "%s",
                 dt_error_message());
    const int64_t L = alone.m.config.n_layer, E = alone.m.config.n_expert;
    fake_process fake = {.other = 0.25};
    const dt_comm comm = fake_comm(&fake, 0);
    stepper_init(&paired, FAMILY_MOE, &comm, n_threads);
    cr_assert_eq(train_parallel_forward_backward(&paired.p, paired.inputs, paired.targets, &losses), DT_OK, "%s",
                 dt_error_message());
    cr_assert_eq(fake.f64_calls, 1, "one combination per micro-batch");
    cr_assert_eq(fake.f64_n, 2 * L * E, "f and the mean router probabilities of every layer");
    for (int w = 0; w < paired.p.n_workers; w++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t e = 0; e < E; e++) {
                const double mine = alone.p.outputs[0].balance_fractions[l][e];
                const double got = paired.p.outputs[w].balance_fractions[l][e];
                cr_assert(fabs(got - (mine + 0.25) / 2.0) < 1e-6, "worker %d layer %lld expert %lld: f %.9g, want %.9g",
                          w, (long long)l, (long long)e, got, (mine + 0.25) / 2.0);
            }
    cr_assert_eq(train_parallel_evaluate(&paired.p, paired.inputs, paired.targets, B, &losses), DT_OK);
    cr_assert_eq(fake.f64_calls, 1, "evaluation batches make no collective call");
    stepper_free(&alone);
    stepper_free(&paired);
}

Test(train_parallel_comm, moe_fractions_combined_over_processes) { check_fractions(2); }
Test(train_parallel_comm, moe_fractions_combined_over_processes_one_thread) { check_fractions(1); }

Test(train_parallel_comm, evaluation_windows_split_over_processes, .timeout = 60) {
    char dir[64], data[128];
    test_scratch_dir(dir, sizeof dir, "comm");
    snprintf(data, sizeof data, "%s/tokens.h5", dir);
    enum { N_TRAIN = 2000, N_VAL = 7 * T + 1 }; /* 7 windows: batches of 4 + 3 */
    int32_t stream[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 8);
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        stream[i] = (int32_t)dt_rng_below(&rng, 256);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data, &tok, stream, N_TRAIN, stream + N_TRAIN, N_VAL, "random"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);

    train_config cfg = train_config_default();
    cfg.model = tiny_config(FAMILY_NANOGPT);
    cfg.model.vocab_size = 256;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s/run", dir);
    cfg.batch_size = B;
    cfg.seq_len = T;
    cfg.tokens = B * T;
    cfg.threads = 1;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());

    train_eval_record alone, shares[2];
    double sums[2][4];
    trainer t;
    cr_assert_eq(trainer_init(&t, &cfg, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(trainer_evaluate(&t, &alone), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
    cr_assert_eq(alone.windows, 7);
    for (int rank = 0; rank < 2; rank++) {
        fake_process fake = {.recorded = sums[rank]};
        const dt_comm comm = fake_comm(&fake, rank);
        const trainer_options options = {.comm = &comm};
        cr_assert_eq(trainer_init(&t, &cfg, &options), DT_OK, "%s", dt_error_message());
        cr_assert_eq(trainer_evaluate(&t, &shares[rank]), DT_OK, "%s", dt_error_message());
        cr_assert_eq(fake.f64_calls, 1, "one allreduce of the sums");
        cr_assert_eq(fake.f64_n, 4);
        trainer_free(&t);
    }
    /* Each rank evaluates batches of B / 2 = 2 rows, rank 0 windows 0-1 and
     * 4-5, rank 1 windows 2-3 and 6: their sums add up to the whole sweep's
     * (up to the float rounding of batch means over 2 rows instead of 4). */
    const double whole[4] = {alone.loss, alone.loss_primary, alone.loss_branch, alone.alpha};
    for (int k = 0; k < 4; k++) {
        const double joined = (sums[0][k] + sums[1][k]) / 7.0;
        cr_assert(fabs(joined - whole[k]) <= 1e-6 * fabs(whole[k]), "sum %d: %.17g over the ranks, %.17g alone", k,
                  joined, whole[k]);
        cr_assert(fabs(sums[0][k] - sums[1][k]) > 1e-9, "the ranks evaluated different windows");
    }
    /* A batch that does not split over the processes is refused, naming the key. */
    cfg.batch_size = 3;
    fake_process fake = {0};
    const dt_comm comm = fake_comm(&fake, 0);
    const trainer_options options = {.comm = &comm};
    cr_assert_eq(trainer_init(&t, &cfg, &options), DT_ERR);
    cr_assert(strstr(dt_error_message(), "train.batch_size = 3"), "%s", dt_error_message());
    test_remove_dir(dir);
}
