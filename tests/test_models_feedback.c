/* Latent feedback (SPEC §6.5, models/feedback.h): finite-difference checks
 * of the fusion unit's gradient (the shifted gate alone, and the whole fusion
 * into every one of its inputs and parameters), the row form against the
 * taped form, the training draws (prefix mixin, jitter) being a function
 * of the global row, not of how the batch is split (the decode modes:
 * tests/test_eval_feedback.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "models/feedback.h"
#include "models/model.h"

enum { B = 2, T = 4, C = 8 };

static model_config feedback_config(model_family family) {
    model_config c = model_config_default(family);
    c.vocab_size = 11;
    c.block_size = 8;
    c.n_layer = 1;
    c.d_model = C;
    c.n_head = 2;
    c.n_kv_head = family == FAMILY_NANOGPT ? 2 : 1;
    c.feedback = 1;
    return c;
}

static void fill(float *x, int64_t n, dt_rng *rng, float center, float spread) {
    for (int64_t i = 0; i < n; i++)
        x[i] = center + spread * (float)dt_rng_normal(rng);
}

/* A feedback model with initialised weights, and rng seeded for the test's own draws. */
static void new_model(model *m, model_family family, uint64_t seed, dt_rng *rng) {
    model_config c = feedback_config(family);
    cr_assert_eq(model_create(m, &c), DT_OK, "%s", dt_error_message());
    dt_rng_seed(rng, seed);
    model_init_weights(m, rng);
}

/* The scalar checked: S = sum(out ⊙ r), r a fixed random weighting. */
typedef struct {
    model m;
    float top[B * T * C], e[B * T * C], r[B * T * C];
    model_feedback_run run;
    int gate_only; /* check model_feedback_shift_gate(top, e) instead of the whole fusion */
} fixture;

/* S, and with grad the backward into top_grad, e_grad and the parameters. */
static double objective(fixture *f, int grad, float *top_grad, float *e_grad) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    ag_set_grad_enabled(&ctx, grad);
    dt_tensor *top = ag_tensor(&ctx, DT_F32, DT_SHAPE(B, T, C)), *e = ag_tensor(&ctx, DT_F32, DT_SHAPE(B, T, C));
    dt_tensor *r = ag_tensor(&ctx, DT_F32, DT_SHAPE(B, T, C));
    memcpy(top->data, f->top, sizeof f->top);
    memcpy(e->data, f->e, sizeof f->e);
    memcpy(r->data, f->r, sizeof f->r);
    top->requires_grad = e->requires_grad = 1;
    dt_tensor *u =
        f->gate_only ? model_feedback_shift_gate(&ctx, top, e) : model_feedback_fuse(&ctx, &f->m, top, e, &f->run, 2);
    dt_tensor *s = ag_sum(&ctx, ag_mul(&ctx, u, r));
    cr_assert_not_null(s, "%s", dt_error_message());
    if (grad) {
        model_zero_grad(&f->m);
        cr_assert_eq(ag_backward(&ctx, s), DT_OK, "%s", dt_error_message());
        memcpy(top_grad, ag_grad(&ctx, top), sizeof f->top);
        memcpy(e_grad, ag_grad(&ctx, e), sizeof f->e);
    }
    const double value = dt_f32(s)[0];
    ag_ctx_free(&ctx);
    return value;
}

/* Central difference of S in x[j] against the analytic gradient. */
static void check_entry(fixture *f, float *x, int64_t j, float analytic, const char *what) {
    const float eps = 1e-2f, old = x[j];
    x[j] = old + eps;
    const double up = objective(f, 0, NULL, NULL);
    x[j] = old - eps;
    const double down = objective(f, 0, NULL, NULL);
    x[j] = old;
    const double numeric = (up - down) / (2.0 * eps);
    cr_expect(fabs(numeric - analytic) <= 2e-2 * fmax(fabs(numeric), 1e-1), "%s[%lld]: numeric %g, analytic %g", what,
              (long long)j, numeric, analytic);
}

static void check_fusion(model_family family, int gate_only) {
    static fixture f;
    memset(&f, 0, sizeof f);
    model_config c = feedback_config(family);
    cr_assert_eq(model_create(&f.m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 17);
    fill(f.top, B * T * C, &rng, 0.0f, 1.0f);
    fill(f.e, B * T * C, &rng, 0.0f, 1.0f);
    fill(f.r, B * T * C, &rng, 0.0f, 1.0f);
    fill(dt_f32(f.m.feedback_w_u), C * C, &rng, 0.0f, 0.5f);
    fill(dt_f32(f.m.feedback_w_g), C * C, &rng, 0.0f, 0.5f);
    fill(dt_f32(f.m.feedback_norm_tok), C, &rng, 1.0f, 0.2f);
    fill(dt_f32(f.m.feedback_norm_in), C, &rng, 1.0f, 0.2f);
    f.run = model_feedback_plain();
    f.gate_only = gate_only;
    static float top_grad[B * T * C], e_grad[B * T * C];
    objective(&f, 1, top_grad, e_grad);
    /* every entry of the inputs: the shift (row t reads t-1) and u_0 = e_0 show there */
    for (int64_t j = 0; j < B * T * C; j++) {
        check_entry(&f, f.top, j, top_grad[j], "d top");
        check_entry(&f, f.e, j, e_grad[j], "d e");
    }
    /* the top state of the last position never feeds the next pass */
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < C; ch++)
            cr_expect_eq(top_grad[(b * T + T - 1) * C + ch], 0.0f);
    if (!gate_only) {
        dt_tensor *params[] = {f.m.feedback_w_u, f.m.feedback_w_g, f.m.feedback_norm_tok, f.m.feedback_norm_in};
        const char *names[] = {"d w_u", "d w_g", "d norm_tok", "d norm_in"};
        for (int p = 0; p < 4; p++) {
            float *analytic = malloc((size_t)params[p]->size * sizeof *analytic);
            memcpy(analytic, params[p]->grad, (size_t)params[p]->size * sizeof *analytic);
            for (int64_t j = 0; j < params[p]->size; j++)
                check_entry(&f, dt_f32(params[p]), j, analytic[j], names[p]);
            free(analytic);
        }
    }
    model_free(&f.m);
}

Test(feedback, shift_gate_gradient_matches_finite_differences) { check_fusion(FAMILY_LLAMA, 1); }
Test(feedback, fusion_gradient_matches_finite_differences_llama) { check_fusion(FAMILY_LLAMA, 0); }
Test(feedback, fusion_gradient_matches_finite_differences_nanogpt) { check_fusion(FAMILY_NANOGPT, 0); }

/* The row form (decode) computes the taped form's u_t at t >= 1. */
Test(feedback, row_form_equals_taped_form) {
    model m;
    dt_rng rng;
    new_model(&m, FAMILY_LLAMA, 3, &rng);
    fill(dt_f32(m.feedback_w_u), C * C, &rng, 0.0f, 0.5f);
    fill(dt_f32(m.feedback_norm_in), C, &rng, 1.0f, 0.2f);
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *top = ag_tensor(&ctx, DT_F32, DT_SHAPE(B, T, C)), *e = ag_tensor(&ctx, DT_F32, DT_SHAPE(B, T, C));
    fill(dt_f32(top), B * T * C, &rng, 0.0f, 1.0f);
    fill(dt_f32(e), B * T * C, &rng, 0.0f, 1.0f);
    const model_feedback_run run = model_feedback_plain();
    dt_tensor *u = model_feedback_fuse(&ctx, &m, top, e, &run, 2);
    cr_assert_not_null(u);
    for (int64_t b = 0; b < B; b++) {
        cr_expect(memcmp(dt_f32(u) + b * T * C, dt_f32(e) + b * T * C, C * sizeof(float)) == 0, "u_0 = e_0");
        for (int64_t t = 1; t < T; t++) {
            float row[C], scratch[2 * C];
            model_feedback_fuse_row(row, dt_f32(top) + (b * T + t - 1) * C, dt_f32(e) + (b * T + t) * C, &m, scratch);
            for (int64_t ch = 0; ch < C; ch++)
                cr_expect_float_eq(row[ch], dt_f32(u)[(b * T + t) * C + ch], 1e-5f, "b %lld t %lld", (long long)b,
                                   (long long)t);
        }
    }
    ag_ctx_free(&ctx);
    model_free(&m);
}

/* Prefix mixin and jitter draw per global row: rows 2..3 of a batch fused in
 * one call equal the same rows fused alone with first_row = 2; and the mixin
 * keeps u_t = e_t on a prefix that varies between rows. */
Test(feedback, training_draws_follow_the_global_row) {
    model m;
    dt_rng rng;
    new_model(&m, FAMILY_LLAMA, 5, &rng);
    enum { ROWS = 6, LONG = 8 };
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *top = ag_tensor(&ctx, DT_F32, DT_SHAPE(ROWS, LONG, C)),
              *e = ag_tensor(&ctx, DT_F32, DT_SHAPE(ROWS, LONG, C));
    fill(dt_f32(top), ROWS * LONG * C, &rng, 0.0f, 1.0f);
    fill(dt_f32(e), ROWS * LONG * C, &rng, 0.0f, 1.0f);
    model_feedback_run run = model_feedback_plain();
    run.jitter = 0.5f;
    run.prefix_mixin = 1;
    run.seed = 99;
    dt_tensor *whole = model_feedback_fuse(&ctx, &m, top, e, &run, 2);
    dt_tensor top_part, e_part;
    cr_assert_eq(dt_tensor_init(&top_part, DT_F32, DT_SHAPE(2, LONG, C), dt_f32(top) + 2 * LONG * C), DT_OK);
    cr_assert_eq(dt_tensor_init(&e_part, DT_F32, DT_SHAPE(2, LONG, C), dt_f32(e) + 2 * LONG * C), DT_OK);
    run.first_row = 2;
    dt_tensor *part = model_feedback_fuse(&ctx, &m, &top_part, &e_part, &run, 2);
    cr_assert(whole && part);
    cr_expect(memcmp(dt_f32(whole) + 2 * LONG * C, dt_f32(part), 2 * LONG * C * sizeof(float)) == 0,
              "the same rows draw the same prefix and jitter");
    /* kept prefix lengths: u_t == e_t exactly for t <= p */
    int lengths_differ = 0, first_length = -1;
    for (int64_t b = 0; b < ROWS; b++) {
        int kept = 0;
        while (kept < LONG &&
               !memcmp(dt_f32(whole) + (b * LONG + kept) * C, dt_f32(e) + (b * LONG + kept) * C, C * sizeof(float)))
            kept++;
        cr_expect_geq(kept, 1, "u_0 = e_0 always");
        if (first_length < 0) first_length = kept;
        lengths_differ |= kept != first_length;
    }
    cr_expect(lengths_differ, "p is drawn per row");
    /* another pass draws differently */
    run.first_row = 0;
    dt_tensor *pass3 = model_feedback_fuse(&ctx, &m, top, e, &run, 3);
    cr_expect(memcmp(dt_f32(pass3), dt_f32(whole), ROWS * LONG * C * sizeof(float)) != 0);
    ag_ctx_free(&ctx);
    model_free(&m);
}

/* K passes without feedback = 1 are refused; with feedback the objective is
 * CE(1) + lambda/(K-1) sum CE(k) of the passes it reports. */
Test(feedback, objective_weights_the_passes) {
    model m;
    dt_rng rng;
    new_model(&m, FAMILY_NANOGPT, 8, &rng);
    fill(dt_f32(m.feedback_w_u), C * C, &rng, 0.0f, 0.5f);
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T)), *targets = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T));
    for (int i = 0; i < B * T; i++) {
        dt_i32(tokens)[i] = (int32_t)dt_rng_below(&rng, 11);
        dt_i32(targets)[i] = (int32_t)dt_rng_below(&rng, 11);
    }
    model_feedback_run run = model_feedback_plain();
    run.passes = 3;
    run.lambda = 0.3;
    model_outputs out;
    cr_assert_eq(model_forward_feedback(&m, &ctx, tokens, targets, &run, &out), DT_OK, "%s", dt_error_message());
    cr_assert_eq(out.passes, 3);
    const double expected = out.loss_passes[0] + 0.3 / 2.0 * (out.loss_passes[1] + out.loss_passes[2]);
    cr_expect_float_eq(dt_f32(out.loss)[0], expected, 1e-5);
    cr_expect_eq(dt_f32(out.loss_primary)[0], out.loss_passes[2], "loss_primary is pass K's");
    cr_expect_neq(out.loss_passes[1], out.loss_passes[0], "a feedback pass differs from the plain one");
    model plain;
    model_config c = m.config;
    c.feedback = 0;
    cr_assert_eq(model_create(&plain, &c), DT_OK);
    cr_expect_eq(model_forward_feedback(&plain, &ctx, tokens, targets, &run, &out), DT_ERR);
    cr_expect(strstr(dt_error_message(), "feedback = 1") != NULL, "%s", dt_error_message());
    model_free(&plain);
    ag_ctx_free(&ctx);
    model_free(&m);
}
