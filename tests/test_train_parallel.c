/* The data-parallel step (train/parallel_step.h) against its definition: one
 * tape over the whole batch (model_forward + ag_backward) for the gradients
 * and losses, and the optimizer's pass on that one gradient (one thread, no
 * copies; tests/test_optim_*.c check it against closed forms) for the
 * update. Batches of 5 rows split 2 + 3, so the rows' weights matter. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "models/model.h"
#include "optim/optim.h"
#include "support/optim_flat.h"
#include "train/parallel_step.h"
#include "train/trainer.h"

enum { B = 5, T = 8 };

/* SPEC §6.6 variant of tiny_config: the stack twice with DiscoLoop's learned gate. */
static int looped;
/* Set by the feedback tests: the models get feedback = 1 and every forward
 * (split and whole) runs these passes (SPEC §6.5). */
static int feedback_on;
static model_feedback_run feedback_run;

static model_config tiny_config(model_family family, model_branch branch) {
    model_config c = model_config_default(family);
    if (looped) {
        c.n_loop = 2;
        c.disco = 1;
        c.disco_gate = DISCO_GATE_LEARNED;
        c.disco_top = 5;
    }
    c.vocab_size = 32;
    c.block_size = T;
    c.n_layer = 2;
    c.n_head = 2;
    c.d_model = 16;
    c.branch = branch;
    c.feedback = feedback_on;
    if (family == FAMILY_MOE) {
        c.d_ff = 24;
        c.aux_loss_coef = 1.0; /* a balance term big enough that a per-worker one would show in the objective */
    }
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    return c;
}

/* A model with random weights (and, for branch models, non-zero coupling). */
static void make_model(model *m, const model_config *c, uint64_t seed) {
    cr_assert_eq(model_create(m, c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    model_init_weights(m, &rng);
    for (int i = 0; i < m->n_params; i++)
        if (strstr(m->params[i].name, "couple"))
            dt_rng_fill_normal(&rng, dt_f32(m->params[i].tensor), m->params[i].tensor->size, 0.5f);
}

static void make_batch(dt_tensor **inputs, dt_tensor **targets, uint64_t seed) {
    *inputs = dt_tensor_new(DT_I32, DT_SHAPE(B, T));
    *targets = dt_tensor_new(DT_I32, DT_SHAPE(B, T));
    cr_assert(*inputs && *targets);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int i = 0; i < B * T; i++) {
        dt_i32(*inputs)[i] = (int32_t)dt_rng_below(&rng, 32);
        dt_i32(*targets)[i] = (int32_t)dt_rng_below(&rng, 32);
    }
}

typedef struct {
    model m;
    optim_param *params;
    optimizer opt;
} trained;

static void trained_init(trained *t, const model_config *c, uint64_t seed) {
    make_model(&t->m, c, seed);
    t->params = calloc((size_t)t->m.n_params, sizeof *t->params);
    cr_assert_not_null(t->params);
    trainer_describe_params(&t->m, t->params);
    optim_hparams hp = optim_hparams_default();
    cr_assert_eq(optim_init(&t->opt, OPTIM_ADAMW, t->params, t->m.n_params, t->m.params_memory, t->m.grads_memory,
                            t->m.n_floats, &hp),
                 DT_OK, "%s", dt_error_message());
}

static void trained_free(trained *t) {
    optim_free(&t->opt);
    free(t->params);
    model_free(&t->m);
}

/* Largest |gradient| over the model (the tolerance's scale). */
static double max_grad(const model *m) {
    double g = 0.0;
    for (int i = 0; i < m->n_params; i++)
        for (int64_t j = 0; j < m->params[i].tensor->size; j++)
            g = fmax(g, fabs(m->params[i].tensor->grad[j]));
    return g;
}

/* Gradients and losses of the split step equal one tape over the whole batch. */
static void check_gradients(model_family family, model_branch branch) {
    const model_config c = tiny_config(family, branch);
    trained split, whole;
    trained_init(&split, &c, 7);
    trained_init(&whole, &c, 7);
    dt_tensor *inputs, *targets;
    make_batch(&inputs, &targets, 3);

    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &split.m, &split.opt, NULL, B, T, 2, 1), DT_OK, "%s", dt_error_message());
    cr_assert_eq(p.n_workers, 2, "the batch's rows are split over the two threads");
    if (feedback_on) p.feedback = feedback_run;
    train_parallel_losses losses;
    cr_assert_eq(train_parallel_forward_backward(&p, inputs, targets, &losses), DT_OK, "%s", dt_error_message());
    /* the workers' gradients are summed by the update; sum them here the same way, without updating */
    for (int r = 0; r < p.n_workers - 1; r++)
        for (int i = 0; i < split.m.n_params; i++) {
            const dt_tensor *mine = split.m.params[i].tensor, *theirs = p.replicas[r].params[i].tensor;
            cr_assert(theirs->data == mine->data, "a replica shares the weights");
            cr_assert(theirs->grad != mine->grad, "a replica has its own gradient");
            for (int64_t j = 0; j < mine->size; j++)
                mine->grad[j] += theirs->grad[j];
        }

    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    model_outputs out;
    cr_assert_eq(model_forward_feedback(&whole.m, &ctx, inputs, targets, feedback_on ? &feedback_run : NULL, &out),
                 DT_OK, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "%s", dt_error_message());
    cr_assert(fabs(losses.objective - dt_f32(out.loss)[0]) <= 1e-5 * fabs(dt_f32(out.loss)[0]),
              "objective %.9g vs %.9g", losses.objective, (double)dt_f32(out.loss)[0]);
    cr_assert(fabs(losses.loss - dt_f32(out.loss_reported)[0]) <= 1e-5 * fabs(dt_f32(out.loss_reported)[0]));
    if (branch == BRANCH_DECODE) {
        cr_assert(fabs(losses.loss_branch - dt_f32(out.loss_branch)[0]) <= 1e-5 * fabs(dt_f32(out.loss_branch)[0]));
        cr_assert(isfinite(losses.alpha) && losses.alpha >= c.mix_alpha_min && losses.alpha <= c.mix_alpha_max);
    } else {
        cr_assert(isnan(losses.loss_branch), "no branch, no branch loss");
    }
    const double scale = max_grad(&whole.m);
    cr_assert_gt(scale, 1e-4, "a vanishing gradient would make this test vacuous");
    for (int i = 0; i < whole.m.n_params; i++) {
        const dt_tensor *a = split.m.params[i].tensor, *b = whole.m.params[i].tensor;
        for (int64_t j = 0; j < a->size; j++)
            cr_assert(fabs(a->grad[j] - b->grad[j]) <= 1e-5 * scale + 1e-5 * fabs(b->grad[j]),
                      "%s[%ld]: split %.9g, whole batch %.9g", split.m.params[i].name, (long)j, (double)a->grad[j],
                      (double)b->grad[j]);
    }
    ag_ctx_free(&ctx);
    train_parallel_free(&p);
    dt_tensor_free(inputs);
    dt_tensor_free(targets);
    trained_free(&split);
    trained_free(&whole);
}

Test(train_parallel, nanogpt_gradients_equal_one_tape) { check_gradients(FAMILY_NANOGPT, BRANCH_NONE); }
Test(train_parallel, decode_branch_gradients_equal_one_tape) { check_gradients(FAMILY_NANOGPT, BRANCH_DECODE); }
Test(train_parallel, llama_gradients_equal_one_tape) { check_gradients(FAMILY_LLAMA, BRANCH_DECODE); }
/* MoE: the balance term (a product of two batch means) is made the whole
 * batch's between the workers' forward and backward. */
Test(train_parallel, moe_gradients_equal_one_tape) { check_gradients(FAMILY_MOE, BRANCH_NONE); }
Test(train_parallel, moe_decode_branch_gradients_equal_one_tape) { check_gradients(FAMILY_MOE, BRANCH_DECODE); }
/* The replicas use DiscoLoop's tensors too, and the balance term of the
 * batch has one entry per application of each MoE layer (K·L). */
Test(train_parallel, looped_disco_gradients_equal_one_tape) {
    looped = 1;
    check_gradients(FAMILY_LLAMA, BRANCH_NONE);
    check_gradients(FAMILY_MOE, BRANCH_NONE);
    /* a replica's DiscoLoop tensors are its own (its gradient buffer), not the model's */
    trained t;
    const model_config c = tiny_config(FAMILY_LLAMA, BRANCH_NONE);
    trained_init(&t, &c, 7);
    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &t.m, &t.opt, NULL, B, T, 2, 1), DT_OK, "%s", dt_error_message());
    const model *replica = &p.replicas[0];
    const dt_tensor *own[3] = {model_find_param(replica, "disco.norm.weight")->tensor,
                               model_find_param(replica, "disco.gate.weight")->tensor,
                               model_find_param(replica, "disco.gate.bias")->tensor};
    cr_expect(replica->disco_norm == own[0] && replica->disco_gate_weight == own[1] &&
                  replica->disco_gate_bias == own[2],
              "the replica's DiscoLoop tensors are the model's");
    train_parallel_free(&p);
    trained_free(&t);
    looped = 0;
}
/* Latent feedback: the workers' rows draw the whole batch's prefix lengths and
 * jitter (keyed by the global row), and MoE's balance term is combined over
 * all K*L applications. */
static void check_feedback_gradients(model_family family) {
    feedback_on = 1;
    feedback_run = model_feedback_plain();
    feedback_run.passes = 3;
    feedback_run.lambda = 0.6;
    feedback_run.jitter = 0.05f;
    feedback_run.prefix_mixin = 1;
    feedback_run.seed = 12345;
    check_gradients(family, BRANCH_NONE);
}
Test(train_parallel, feedback_gradients_equal_one_tape) { check_feedback_gradients(FAMILY_LLAMA); }
Test(train_parallel, moe_feedback_gradients_equal_one_tape) { check_feedback_gradients(FAMILY_MOE); }

/* Two full steps (forward, backward, update) against the optimizer's own path.
 * AdamW's eps is 1 here: with the default 1e-8 an element whose gradient is
 * mostly rounding noise (the key bias's is exactly 0 in exact arithmetic) takes
 * a step of size lr in a direction set by that noise, which differs between
 * the two summation orders; with eps = 1 the update is smooth in the gradient
 * and the comparison checks the plumbing (sum, scale, norm, clip, chunks,
 * decay, zeroing) tightly. */
Test(train_parallel, update_equals_one_tape_and_the_optimizer_pass) {
    const model_config c = tiny_config(FAMILY_NANOGPT, BRANCH_DECODE);
    trained split, whole;
    trained_init(&split, &c, 11);
    trained_init(&whole, &c, 11);
    split.opt.hp.eps = whole.opt.hp.eps = 1.0;
    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &split.m, &split.opt, NULL, B, T, 2, 1), DT_OK, "%s", dt_error_message());
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    const double lr = 3e-3, max_norm = 0.5; /* a norm the gradients exceed: clipping acts */
    for (int step = 0; step < 2; step++) {
        dt_tensor *inputs, *targets;
        make_batch(&inputs, &targets, 20 + (uint64_t)step);
        train_parallel_losses losses;
        /* two micro-batches, averaged */
        for (int micro = 0; micro < 2; micro++)
            cr_assert_eq(train_parallel_forward_backward(&p, inputs, targets, &losses), DT_OK, "%s",
                         dt_error_message());
        double norm;
        cr_assert_eq(train_parallel_update(&p, lr, 0.0, 0.5f, max_norm, &norm), DT_OK);

        for (int micro = 0; micro < 2; micro++) {
            ag_reset(&ctx);
            model_outputs out;
            cr_assert_eq(model_forward(&whole.m, &ctx, inputs, targets, &out), DT_OK);
            cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK);
        }
        double expected_norm;
        cr_assert_eq(optim_flat_step(&whole.opt, lr, 0.0, 0.5f, max_norm, &expected_norm), DT_OK);
        cr_assert(expected_norm > max_norm, "the test wants clipping to act (norm %g)", expected_norm);
        cr_assert(fabs(norm - expected_norm) <= 1e-5 * expected_norm, "step %d: norm %.9g vs %.9g", step, norm,
                  expected_norm);
        cr_assert_eq(split.opt.step, whole.opt.step);
        dt_tensor_free(inputs);
        dt_tensor_free(targets);
    }
    for (int i = 0; i < split.m.n_params; i++) {
        const dt_tensor *a = split.m.params[i].tensor, *b = whole.m.params[i].tensor;
        for (int64_t j = 0; j < a->size; j++) {
            cr_assert(fabs(dt_f32(a)[j] - dt_f32(b)[j]) <= 1e-6 * (fabs(dt_f32(b)[j]) + 1e-2), "%s[%ld]: %.9g vs %.9g",
                      split.m.params[i].name, (long)j, (double)dt_f32(a)[j], (double)dt_f32(b)[j]);
            cr_assert_eq(a->grad[j], 0.0f, "gradients are zeroed after the update");
        }
        for (int r = 0; r < p.n_workers - 1; r++)
            for (int64_t j = 0; j < a->size; j++)
                cr_assert_eq(p.replicas[r].params[i].tensor->grad[j], 0.0f);
    }
    ag_ctx_free(&ctx);
    train_parallel_free(&p);
    trained_free(&split);
    trained_free(&whole);
}

/* A non-finite gradient norm updates nothing. */
Test(train_parallel, non_finite_norm_updates_nothing) {
    const model_config c = tiny_config(FAMILY_NANOGPT, BRANCH_NONE);
    trained t;
    trained_init(&t, &c, 5);
    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &t.m, &t.opt, NULL, B, T, 2, 1), DT_OK, "%s", dt_error_message());
    dt_tensor *inputs, *targets;
    make_batch(&inputs, &targets, 4);
    train_parallel_losses losses;
    cr_assert_eq(train_parallel_forward_backward(&p, inputs, targets, &losses), DT_OK);
    t.m.params[3].tensor->grad[0] = NAN;
    float *before = malloc((size_t)t.m.params[0].tensor->size * sizeof(float));
    memcpy(before, dt_f32(t.m.params[0].tensor), (size_t)t.m.params[0].tensor->size * sizeof(float));
    double norm;
    cr_assert_eq(train_parallel_update(&p, 1e-3, 0.0, 1.0f, 1.0, &norm), DT_OK);
    cr_assert(isnan(norm));
    cr_assert_eq(t.opt.step, 0, "no optimizer step was taken");
    cr_assert(memcmp(before, dt_f32(t.m.params[0].tensor), (size_t)t.m.params[0].tensor->size * sizeof(float)) == 0);
    free(before);
    dt_tensor_free(inputs);
    dt_tensor_free(targets);
    train_parallel_free(&p);
    trained_free(&t);
}

Test(train_parallel, worker_counts_and_bad_batches) {
    const model_config c = tiny_config(FAMILY_NANOGPT, BRANCH_NONE);
    trained t;
    trained_init(&t, &c, 5);
    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &t.m, &t.opt, NULL, 2, T, 3, 1), DT_OK);
    cr_assert_eq(p.n_workers, 2, "never more workers than rows");
    train_parallel_free(&p);
    cr_assert_eq(train_parallel_init(&p, &t.m, &t.opt, NULL, B, T, 2, 0), DT_OK);
    cr_assert_eq(p.n_workers, 1, "split_rows = 0: one tape");
    dt_tensor *wrong = dt_tensor_new(DT_I32, DT_SHAPE(B, T - 1));
    train_parallel_losses losses;
    cr_assert_eq(train_parallel_forward_backward(&p, wrong, wrong, &losses), DT_ERR);
    cr_assert(strstr(dt_error_message(), "int32 [5, 8]"), "%s", dt_error_message());
    dt_tensor_free(wrong);
    train_parallel_free(&p);
    cr_assert_eq(train_parallel_init(&p, &t.m, &t.opt, NULL, 0, T, 2, 1), DT_ERR);
    trained_free(&t);
}
