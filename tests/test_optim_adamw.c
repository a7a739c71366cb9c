/* AdamW, through the production update pass (optim_update) on flat buffers,
 * against its closed form computed here in double from the textbook formula:
 * one and two steps, with and without decoupled weight decay, decay never
 * touching parameters whose decay flag is off (norms, biases, coupling
 * vectors, embeddings), a tensor large enough for the vector path and
 * several threads, and the zeroed gradient afterwards. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "optim/optim.h"
#include "support/optim_flat.h"

enum { N = 37 };

static void fill(dt_rng *rng, float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(scale * dt_rng_normal(rng));
}

/* Textbook AdamW in double: returns the new weights; m, v updated in place. */
static void adamw_reference(double *p, const float *g, double *m, double *v, int64_t n, int t, double lr, double b1,
                            double b2, double eps, double wd) {
    for (int64_t i = 0; i < n; i++) {
        p[i] -= lr * wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double m_hat = m[i] / (1 - pow(b1, t));
        double v_hat = v[i] / (1 - pow(b2, t));
        p[i] -= lr * m_hat / (sqrt(v_hat) + eps);
    }
}

static void assert_close(const float *got, const double *want, int64_t n, double rel) {
    for (int64_t i = 0; i < n; i++) {
        double tol = rel * fmax(1.0, fabs(want[i]));
        cr_assert(fabs(got[i] - want[i]) <= tol, "element %lld: got %.9g want %.9g", (long long)i, got[i], want[i]);
    }
}

static void assert_zero(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(x[i], 0.0f, "gradient %lld not zeroed", (long long)i);
}

static void run_two_steps(double wd) {
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    optim_flat f;
    optim_flat_init(&f, N);
    cr_assert_not_null(optim_flat_add(&f, "layers.0.attn.wq.weight", DT_SHAPE(N), 1, 0));
    float *p = optim_flat_data(&f, 0), *g = optim_flat_grad(&f, 0), g_copy[N];
    double p_ref[N], m_ref[N] = {0}, v_ref[N] = {0};
    fill(&rng, p, N, 1.0f);
    for (int i = 0; i < N; i++)
        p_ref[i] = p[i];
    optim_hparams hp = optim_hparams_default();
    hp.beta1 = 0.9, hp.beta2 = 0.95, hp.eps = 1e-8, hp.weight_decay = wd;
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_ADAMW, &hp), DT_OK, "%s", dt_error_message());
    const double lr = 0.01;
    for (int t = 1; t <= 2; t++) {
        fill(&rng, g, N, 0.5f);
        memcpy(g_copy, g, sizeof g_copy);
        double norm;
        cr_assert_eq(optim_flat_step(&opt, lr, 0.0, 1.0f, 0.0, &norm), DT_OK);
        cr_assert_eq(opt.step, t);
        adamw_reference(p_ref, g_copy, m_ref, v_ref, N, t, lr, hp.beta1, hp.beta2, hp.eps, wd);
        assert_close(p, p_ref, N, 2e-6);
        assert_close(optim_adamw_m(&opt, 0), m_ref, N, 1e-6);
        assert_close(optim_adamw_v(&opt, 0), v_ref, N, 1e-6);
        assert_zero(g, N);
    }
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_adamw, two_steps_without_decay) { run_two_steps(0.0); }

Test(optim_adamw, two_steps_with_decay) { run_two_steps(0.1); }

/* First step from zero moments: the bias correction makes the update
 * lr * g / (|g| + eps), i.e. about lr * sign(g): a closed form that needs no
 * reference loop at all. */
Test(optim_adamw, first_step_is_sign_step) {
    optim_flat f;
    optim_flat_init(&f, 4);
    cr_assert_not_null(optim_flat_add(&f, "final_norm.weight", DT_SHAPE(4), 0, 0));
    const float p0[4] = {1, -2, 3, 0.5f}, g0[4] = {0.3f, -4.0f, 1e-3f, -0.02f};
    memcpy(f.data, p0, sizeof p0);
    memcpy(f.grad, g0, sizeof g0);
    optim_hparams hp = optim_hparams_default();
    hp.beta2 = 0.999, hp.eps = 1e-12;
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_ADAMW, &hp), DT_OK, "%s", dt_error_message());
    double norm;
    cr_assert_eq(optim_flat_step(&opt, 0.1, 0.0, 1.0f, 0.0, &norm), DT_OK);
    const double want[4] = {0.9, -1.9, 2.9, 0.6};
    assert_close(f.data, want, 4, 1e-6);
    optim_free(&opt);
    optim_flat_free(&f);
}

/* Two parameters side by side in the flat buffers: the decay flag decides, and only it. */
Test(optim_adamw, decay_only_where_flagged) {
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    optim_flat f;
    optim_flat_init(&f, 2 * N);
    cr_assert_not_null(optim_flat_add(&f, "layers.0.attn.wq.weight", DT_SHAPE(N), 1, 0));
    cr_assert_not_null(optim_flat_add(&f, "layers.0.attn_norm.weight", DT_SHAPE(N), 0, 0));
    float *w = optim_flat_data(&f, 0), *norm = optim_flat_data(&f, 1);
    fill(&rng, f.data, 2 * N, 1.0f);
    fill(&rng, f.grad, 2 * N, 0.1f);
    float w_grad[N], norm_grad[N];
    memcpy(w_grad, optim_flat_grad(&f, 0), sizeof w_grad);
    memcpy(norm_grad, optim_flat_grad(&f, 1), sizeof norm_grad);
    double w_ref[N], norm_ref[N], m0[N] = {0}, v0[N] = {0}, m1[N] = {0}, v1[N] = {0}, w_start[N];
    for (int i = 0; i < N; i++) {
        w_start[i] = w_ref[i] = w[i];
        norm_ref[i] = norm[i];
    }
    optim_hparams hp = optim_hparams_default();
    hp.weight_decay = 0.5;
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_ADAMW, &hp), DT_OK, "%s", dt_error_message());
    double grad_norm;
    cr_assert_eq(optim_flat_step(&opt, 0.05, 0.0, 1.0f, 0.0, &grad_norm), DT_OK);
    cr_assert_eq(opt.step, 1);
    adamw_reference(w_ref, w_grad, m0, v0, N, 1, 0.05, hp.beta1, hp.beta2, hp.eps, 0.5);
    adamw_reference(norm_ref, norm_grad, m1, v1, N, 1, 0.05, hp.beta1, hp.beta2, hp.eps, 0.0);
    assert_close(w, w_ref, N, 2e-6);
    assert_close(norm, norm_ref, N, 2e-6);
    /* And the decay really did something on the flagged one. */
    double no_decay[N], m2[N] = {0}, v2[N] = {0};
    for (int i = 0; i < N; i++)
        no_decay[i] = w_start[i];
    adamw_reference(no_decay, w_grad, m2, v2, N, 1, 0.05, hp.beta1, hp.beta2, hp.eps, 0.0);
    double max_diff = 0;
    for (int i = 0; i < N; i++)
        max_diff = fmax(max_diff, fabs(no_decay[i] - w[i]));
    cr_assert(max_diff > 1e-3, "weight decay had no visible effect (%g)", max_diff);
    optim_free(&opt);
    optim_flat_free(&f);
}

/* A tensor of several chunks (and not a multiple of 16 floats), updated by
 * two threads: the same numbers as the reference. */
Test(optim_adamw, large_tensor_two_threads_matches_reference) {
    enum { BIG = 3 * OPTIM_CHUNK + 5 };
    optim_flat f;
    optim_flat_init(&f, BIG);
    cr_assert_not_null(optim_flat_add(&f, "lm_head.weight", DT_SHAPE(BIG), 1, 0));
    double *p_ref = malloc(BIG * sizeof *p_ref), *m_ref = calloc(BIG, sizeof *m_ref),
           *v_ref = calloc(BIG, sizeof *v_ref);
    float *g = malloc(BIG * sizeof *g);
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    fill(&rng, f.data, BIG, 1.0f);
    fill(&rng, f.grad, BIG, 1.0f);
    memcpy(g, f.grad, BIG * sizeof *g);
    for (int i = 0; i < BIG; i++)
        p_ref[i] = f.data[i];
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_ADAMW, NULL), DT_OK, "%s", dt_error_message());
    cr_assert_eq(optim_reserve_threads(&opt, 2), DT_OK);
    const optim_update_args args = {.lr = 1e-3, .grad_scale = 1.0f, .n_threads = 2};
    double norm;
    cr_assert_eq(optim_update(&opt, &args, &norm), DT_OK);
    adamw_reference(p_ref, g, m_ref, v_ref, BIG, 1, 1e-3, opt.hp.beta1, opt.hp.beta2, opt.hp.eps, opt.hp.weight_decay);
    assert_close(f.data, p_ref, BIG, 2e-6);
    assert_zero(f.grad, BIG);
    optim_free(&opt);
    free(p_ref), free(m_ref), free(v_ref), free(g);
    optim_flat_free(&f);
}

Test(optim_adamw, rejects_parameter_outside_the_buffers) {
    optim_flat f;
    optim_flat_init(&f, 8);
    cr_assert_not_null(optim_flat_add(&f, "lm_head.weight", DT_SHAPE(4), 0, 0));
    f.params[0].offset = 6; /* [4] from 6 runs past 8 floats */
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_ADAMW, NULL), DT_ERR);
    cr_assert(strstr(dt_error_message(), "lm_head.weight") != NULL, "%s", dt_error_message());
    optim_flat_free(&f);
}
