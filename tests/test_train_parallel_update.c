/* The data-parallel step's update pass (train_parallel_update) on its own,
 * with gradients set by hand in every worker's buffers, against its
 * definition: the workers' gradients summed, optim_scale_grads,
 * optim_clip_grad_norm, optim_step. Covers what the two-worker AdamW test in
 * test_train_parallel.c does not: three workers (two replicas to sum), Muon
 * matrices beside AdamW vectors, an unclipped update, and the vectorised
 * AdamW sweep on parameters whose sizes are not multiples of 16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "models/model.h"
#include "optim/optim.h"
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
    cr_assert_eq(optim_init(&t->opt, kind, t->params, t->m.n_params, &hp), DT_OK, "%s", dt_error_message());
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
            for (int64_t j = 0; j < n; j++) sum[j] += g[j]; /* the update adds workers in this order */
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
    cr_assert_eq(train_parallel_init(&p, &split.m, &split.opt, B, T, n_threads, 1), DT_OK, "%s", dt_error_message());
    cr_assert_eq(p.n_workers, n_threads);
    const double lr = 2e-3, muon_lr = 0.02;
    for (int step = 0; step < 2; step++) {
        set_gradients(&p, &whole, 0.05f, 100 + (uint64_t)step);
        double norm;
        train_parallel_update(&p, lr, muon_lr, grad_scale, max_norm, &norm);

        optim_scale_grads(whole.params, whole.m.n_params, grad_scale);
        const double expected_norm = optim_clip_grad_norm(whole.params, whole.m.n_params, max_norm);
        optim_step(&whole.opt, lr, muon_lr);
        model_zero_grad(&whole.m);
        if (max_norm > 0.0) cr_assert(expected_norm > max_norm, "clipping should act (norm %g)", expected_norm);
        cr_assert(fabs(norm - expected_norm) <= 1e-9 * expected_norm, "step %d: norm %.17g vs %.17g", step, norm,
                  expected_norm);
        cr_assert_eq(split.opt.step, whole.opt.step);
    }
    for (int i = 0; i < split.m.n_params; i++) {
        const dt_tensor *a = split.m.params[i].tensor, *b = whole.m.params[i].tensor;
        for (int64_t j = 0; j < a->size; j++) {
            cr_assert(fabs(dt_f32(a)[j] - dt_f32(b)[j]) <= 1e-6 * (fabs(dt_f32(b)[j]) + 1e-3), "%s[%ld]: %.9g vs %.9g",
                      split.m.params[i].name, (long)j, (double)dt_f32(a)[j], (double)dt_f32(b)[j]);
            for (int w = 0; w < p.n_workers; w++)
                cr_assert_eq(worker_grad(&p, w, i)[j], 0.0f, "%s: worker %d's gradient is zeroed after the update",
                             split.m.params[i].name, w);
        }
        if (whole.opt.m[i]) {
            /* The split gradient is a sum of per-worker partial sums: it rounds
             * on the scale of the tensor's terms, not of each (possibly
             * cancelled) element, so the slack scales with the largest moment. */
            double m_scale = 0.0, v_scale = 0.0;
            for (int64_t j = 0; j < a->size; j++) {
                m_scale = fmax(m_scale, fabs(whole.opt.m[i][j]));
                v_scale = fmax(v_scale, fabs(whole.opt.v[i][j]));
            }
            for (int64_t j = 0; j < a->size; j++) {
                cr_assert(fabs(split.opt.m[i][j] - whole.opt.m[i][j]) <= 1e-6 * (fabs(whole.opt.m[i][j]) + m_scale) + 1e-12,
                          "%s: first moment [%ld]: %.9g vs %.9g", split.m.params[i].name, (long)j,
                          (double)split.opt.m[i][j], (double)whole.opt.m[i][j]);
                cr_assert(fabs(split.opt.v[i][j] - whole.opt.v[i][j]) <= 1e-6 * (fabs(whole.opt.v[i][j]) + v_scale) + 1e-15,
                          "%s: second moment [%ld]: %.9g vs %.9g", split.m.params[i].name, (long)j,
                          (double)split.opt.v[i][j], (double)whole.opt.v[i][j]);
            }
        }
    }
    train_parallel_free(&p);
    trained_free(&split);
    trained_free(&whole);
}

Test(train_parallel_update, three_workers_adamw_clipped) { check_update(OPTIM_ADAMW, 3, 0.5, 0.5f); }
Test(train_parallel_update, two_workers_adamw_unclipped) { check_update(OPTIM_ADAMW, 2, 0.0, 1.0f); }
Test(train_parallel_update, three_workers_muon_clipped) { check_update(OPTIM_MUON, 3, 0.5, 0.5f); }
