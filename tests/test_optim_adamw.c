/* AdamW against its closed form, computed here in double from the textbook
 * formula: one and two steps, with and without decoupled weight decay, and
 * decay never touching parameters whose decay flag is off (norms, biases,
 * coupling vectors, embeddings). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "optim/optim.h"

enum { N = 37 };

static void fill(dt_rng *rng, float *x, int n, float scale) {
    for (int i = 0; i < n; i++)
        x[i] = (float)(scale * dt_rng_normal(rng));
}

/* Textbook AdamW in double: returns the new weights; m, v updated in place. */
static void adamw_reference(double *p, const float *g, double *m, double *v, int n, int t, double lr, double b1,
                            double b2, double eps, double wd) {
    for (int i = 0; i < n; i++) {
        p[i] -= lr * wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double m_hat = m[i] / (1 - pow(b1, t));
        double v_hat = v[i] / (1 - pow(b2, t));
        p[i] -= lr * m_hat / (sqrt(v_hat) + eps);
    }
}

static void assert_close(const float *got, const double *want, int n, double rel) {
    for (int i = 0; i < n; i++) {
        double tol = rel * fmax(1.0, fabs(want[i]));
        cr_assert(fabs(got[i] - want[i]) <= tol, "element %d: got %.9g want %.9g", i, got[i], want[i]);
    }
}

static void run_two_steps(double wd) {
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    float p[N], g[N], m[N] = {0}, v[N] = {0};
    double p_ref[N], m_ref[N] = {0}, v_ref[N] = {0};
    fill(&rng, p, N, 1.0f);
    for (int i = 0; i < N; i++)
        p_ref[i] = p[i];
    const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    for (int t = 1; t <= 2; t++) {
        fill(&rng, g, N, 0.5f);
        optim_adamw_update(p, g, m, v, N, t, lr, b1, b2, eps, wd);
        adamw_reference(p_ref, g, m_ref, v_ref, N, t, lr, b1, b2, eps, wd);
        assert_close(p, p_ref, N, 2e-6);
        assert_close(m, m_ref, N, 1e-6);
        assert_close(v, v_ref, N, 1e-6);
    }
}

Test(optim_adamw, two_steps_without_decay) { run_two_steps(0.0); }

Test(optim_adamw, two_steps_with_decay) { run_two_steps(0.1); }

/* First step from zero moments: the bias correction makes the update
 * lr * g / (|g| + eps), i.e. about lr * sign(g): a closed form that needs no
 * reference loop at all. */
Test(optim_adamw, first_step_is_sign_step) {
    float p[4] = {1, -2, 3, 0.5f}, g[4] = {0.3f, -4.0f, 1e-3f, -0.02f}, m[4] = {0}, v[4] = {0};
    optim_adamw_update(p, g, m, v, 4, 1, 0.1, 0.9, 0.999, 1e-12, 0.0);
    const double want[4] = {0.9, -1.9, 2.9, 0.6};
    assert_close(p, want, 4, 1e-6);
}

/* Through optim_init/optim_step: the decay flag decides, and only it. */
Test(optim_adamw, decay_only_where_flagged) {
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    float w[N], w_grad[N], norm[N], norm_grad[N];
    fill(&rng, w, N, 1.0f);
    fill(&rng, norm, N, 1.0f);
    fill(&rng, w_grad, N, 0.1f);
    fill(&rng, norm_grad, N, 0.1f);
    double w_ref[N], norm_ref[N], m0[N] = {0}, v0[N] = {0}, m1[N] = {0}, v1[N] = {0};
    double w_start[N];
    for (int i = 0; i < N; i++) {
        w_start[i] = w[i];
        w_ref[i] = w[i];
        norm_ref[i] = norm[i];
    }
    optim_param params[2] = {
        {.name = "layers.0.attn.wq.weight", .data = w, .grad = w_grad, .ndim = 1, .shape = {N}, .size = N, .decay = 1},
        {.name = "layers.0.attn_norm.weight",
         .data = norm,
         .grad = norm_grad,
         .ndim = 1,
         .shape = {N},
         .size = N,
         .decay = 0},
    };
    optim_hparams hp = optim_hparams_default();
    hp.weight_decay = 0.5;
    optimizer opt;
    cr_assert_eq(optim_init(&opt, OPTIM_ADAMW, params, 2, &hp), DT_OK, "%s", dt_error_message());
    optim_step(&opt, 0.05, 0.0);
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
}

/* A large tensor takes the OpenMP path; it must give the same numbers. */
Test(optim_adamw, large_tensor_matches_reference) {
    enum { BIG = 100003 };
    float *p = malloc(BIG * sizeof *p), *g = malloc(BIG * sizeof *g), *m = calloc(BIG, sizeof *m),
          *v = calloc(BIG, sizeof *v);
    double *p_ref = malloc(BIG * sizeof *p_ref), *m_ref = calloc(BIG, sizeof *m_ref),
           *v_ref = calloc(BIG, sizeof *v_ref);
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    fill(&rng, p, BIG, 1.0f);
    fill(&rng, g, BIG, 1.0f);
    for (int i = 0; i < BIG; i++)
        p_ref[i] = p[i];
    optim_adamw_update(p, g, m, v, BIG, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1);
    adamw_reference(p_ref, g, m_ref, v_ref, BIG, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1);
    assert_close(p, p_ref, BIG, 2e-6);
    free(p), free(g), free(m), free(v), free(p_ref), free(m_ref), free(v_ref);
}

Test(optim_adamw, rejects_parameter_without_gradient) {
    float w[4] = {0};
    optim_param param = {.name = "lm_head.weight", .data = w, .grad = NULL, .ndim = 1, .shape = {4}, .size = 4};
    optimizer opt;
    cr_assert_eq(optim_init(&opt, OPTIM_ADAMW, &param, 1, NULL), DT_ERR);
    cr_assert(strstr(dt_error_message(), "lm_head.weight") != NULL, "%s", dt_error_message());
}
