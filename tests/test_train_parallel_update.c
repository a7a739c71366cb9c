/* The data-parallel step's update (train_parallel_update) on its own, with
 * gradients set by hand in every worker's flat buffer, against its
 * definition: the workers' gradients summed here, then the optimizer's pass
 * on one thread with no copies (whose rules tests/test_optim_*.c check
 * against closed forms). Covers what the two-worker AdamW test in
 * test_train_parallel.c does not: three workers (two replicas to sum), Muon
 * matrices beside AdamW vectors, an unclipped update, and the vectorised
 * AdamW sweep on parameters whose sizes are not multiples of 16. The float
 * operations are the same ones in the same order, so the results must agree
 * bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "models/model.h"
#include "optim/optim.h"
#include "support/optim_flat.h"
#include "train/parallel_step.h"
#include "train/trainer.h"

enum { B = 6, T = 4 };

typedef struct {
    model m;
    optim_param *params;
    optimizer opt;
} trained;

/* nanoGPT with odd widths (C = 20, F = 4C = 80, V = 37): most tensors end in
 * a partial vector of 16. */
static void trained_init(trained *t, optim_kind kind) {
    model_config c = model_config_default(FAMILY_NANOGPT);
    c.vocab_size = 37;
    c.block_size = T;
    c.n_layer = 2;
    c.n_head = 2;
    c.d_model = 20;
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    cr_assert_eq(model_create(&t->m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 17);
    model_init_weights(&t->m, &rng);
    t->params = calloc((size_t)t->m.n_params, sizeof *t->params);
    cr_assert_not_null(t->params);
    trainer_describe_params(&t->m, t->params);
    optim_hparams hp = optim_hparams_default();
    hp.weight_decay = 0.1;
    cr_assert_eq(
        optim_init(&t->opt, kind, t->params, t->m.n_params, t->m.params_memory, t->m.grads_memory, t->m.n_floats, &hp),
        DT_OK, "%s", dt_error_message());
}

static void trained_free(trained *t) {
    optim_free(&t->opt);
    free(t->params);
    model_free(&t->m);
}

/* Worker w's gradient of parameter i: the model's own buffer for w = 0. */
static float *worker_grad(train_parallel *p, int w, int i) {
    return w == 0 ? p->model->params[i].tensor->grad : p->replicas[w - 1].params[i].tensor->grad;
}

/* Fills every worker's gradients with normal draws of spread `scale` and puts
 * their sum into the reference model's gradients. */
static void set_gradients(train_parallel *p, trained *reference, float scale, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int i = 0; i < reference->m.n_params; i++) {
        float *sum = reference->m.params[i].tensor->grad;
        const int64_t n = reference->m.params[i].tensor->size;
        memset(sum, 0, (size_t)n * sizeof *sum);
        for (int w = 0; w < p->n_workers; w++) {
            float *g = worker_grad(p, w, i);
            dt_rng_fill_normal(&rng, g, n, scale);
            for (int64_t j = 0; j < n; j++)
                sum[j] += g[j]; /* the update adds workers in this order */
        }
    }
}

/* Two updates of the split model against the reference path; max_norm 0
 * leaves the gradients unclipped. */
static void check_update(optim_kind kind, int n_threads, double max_norm, float grad_scale) {
    trained split, whole;
    trained_init(&split, kind);
    trained_init(&whole, kind);
    train_parallel p;
    cr_assert_eq(train_parallel_init(&p, &split.m, &split.opt, NULL, B, T, n_threads, 1), DT_OK, "%s",
                 dt_error_message());
    cr_assert_eq(p.n_workers, n_threads);
    const double lr = 2e-3, muon_lr = 0.02;
    for (int step = 0; step < 2; step++) {
        set_gradients(&p, &whole, 0.05f, 100 + (uint64_t)step);
        double norm, expected_norm;
        cr_assert_eq(train_parallel_update(&p, lr, muon_lr, grad_scale, max_norm, &norm), DT_OK);
        cr_assert_eq(optim_flat_step(&whole.opt, lr, muon_lr, grad_scale, max_norm, &expected_norm), DT_OK);
        if (max_norm > 0.0) cr_assert(expected_norm > max_norm, "clipping should act (norm %g)", expected_norm);
        cr_assert(norm == expected_norm, "step %d: norm %.17g vs %.17g", step, norm, expected_norm);
        cr_assert_eq(split.opt.step, whole.opt.step);
    }
    cr_assert_eq(split.m.n_floats, whole.m.n_floats);
    const size_t bytes = (size_t)split.m.n_floats * sizeof(float);
    cr_assert(memcmp(split.m.params_memory, whole.m.params_memory, bytes) == 0, "weights differ");
    cr_assert(memcmp(split.opt.m, whole.opt.m, (size_t)whole.opt.n_adamw_floats * sizeof(float)) == 0 &&
                  memcmp(split.opt.v, whole.opt.v, (size_t)whole.opt.n_adamw_floats * sizeof(float)) == 0,
              "AdamW moments differ");
    cr_assert(memcmp(split.opt.momentum, whole.opt.momentum, (size_t)whole.opt.n_muon_floats * sizeof(float)) == 0,
              "Muon momentum differs");
    if (kind == OPTIM_MUON) cr_assert_gt(whole.opt.n_muon_floats, 0, "Muon matrices in play");
    for (int w = 0; w < p.n_workers; w++) {
        const float *g = w == 0 ? split.m.grads_memory : p.replicas[w - 1].grads_memory;
        for (int64_t j = 0; j < split.m.n_floats; j++)
            cr_assert_eq(g[j], 0.0f, "worker %d's gradient is zeroed after the update (float %lld)", w, (long long)j);
    }
    train_parallel_free(&p);
    trained_free(&split);
    trained_free(&whole);
}

Test(train_parallel_update, three_workers_adamw_clipped) { check_update(OPTIM_ADAMW, 3, 0.5, 0.5f); }
Test(train_parallel_update, two_workers_adamw_unclipped) { check_update(OPTIM_ADAMW, 2, 0.0, 1.0f); }
Test(train_parallel_update, three_workers_muon_clipped) { check_update(OPTIM_MUON, 3, 0.5, 0.5f); }
