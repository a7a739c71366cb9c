/* alpha near 1 from every entry point: model_forward (logits-only, its
 * alpha_forward), and the decode engine's alpha, 1 - alpha and mixture, in
 * grouped and un-grouped mode, each against a float64 computation from the
 * same logits. All of them call the one alpha kernel (kernels/mixture.h);
 * before, model_forward and decode each had their own formula with a float
 * alpha, and decode's branch weight 1 - alpha (its mixture) was off by ~1e-3
 * relative at S = 0.99997.
 *
 * The near-1 case: a tiny random Decode-Branch llama whose head is scaled
 * until the primary's last-position distribution has 1 - S = 3e-5. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/decode.h"
#include "kernels/mixture.h"
#include "test_eval_util.h"

#define SPEC                                                                                                           \
    "family=llama vocab_size=48 block_size=8 n_layer=1 n_head=2 d_model=16 d_ff=24 tie_embeddings=0 "                  \
    "branch=decode mix_alpha_min=0.0 mix_alpha_max=1.0"

enum { T = 5, V = 48 };
static const int32_t tokens[T] = {3, 17, 5, 40, 9};

/* model_forward's alpha at the last position; its primary logits there into logits [V]. */
static float model_alpha(model *m, float *logits) {
    ag_ctx ctx;
    cr_assert(ag_ctx_init(&ctx, 0) == DT_OK);
    ag_set_grad_enabled(&ctx, 0);
    dt_tensor *tok = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T));
    memcpy(tok->data, tokens, sizeof tokens);
    model_outputs out;
    memset(&out, 0, sizeof out);
    cr_assert(model_forward(m, &ctx, tok, NULL, &out) == DT_OK, "%s", dt_error_message());
    cr_assert(out.alpha);
    memcpy(logits, dt_f32(out.logits_primary) + (T - 1) * V, V * sizeof(float));
    float alpha = dt_f32(out.alpha)[T - 1];
    ag_ctx_free(&ctx);
    return alpha;
}

/* float64 softmax of logits [V] into p, and 1 - sum p^2. */
static double one_minus_collision(const float *logits, double *p) {
    eval_test_softmax(p, logits, V);
    double s = 0.0;
    for (int64_t v = 0; v < V; v++)
        s += p[v] * p[v];
    return 1.0 - s;
}

/* Scales the head (from `original` [V,C]) by k. */
static void scale_head(model *m, const float *original, double k) {
    float *w = dt_f32(m->lm_head);
    for (int64_t i = 0; i < m->lm_head->size; i++)
        w[i] = (float)(k * original[i]);
}

Test(eval_alpha, near_one_same_from_every_entry_point) {
    model m;
    eval_test_model(&m, SPEC, 21);
    float *original = malloc((size_t)m.lm_head->size * sizeof(float)), logits[V];
    memcpy(original, dt_f32(m.lm_head), (size_t)m.lm_head->size * sizeof(float));
    double p[V], q[V];
    /* geometric bisection on the head scale for 1 - S = 3e-5 */
    double lo = 1.0, hi = 1e4;
    scale_head(&m, original, lo);
    model_alpha(&m, logits);
    cr_assert(one_minus_collision(logits, p) > 3e-5);
    scale_head(&m, original, hi);
    model_alpha(&m, logits);
    cr_assert(one_minus_collision(logits, p) < 3e-5);
    for (int it = 0; it < 60; it++) {
        double mid = sqrt(lo * hi);
        scale_head(&m, original, mid);
        model_alpha(&m, logits);
        if (one_minus_collision(logits, p) > 3e-5)
            lo = mid;
        else
            hi = mid;
    }
    scale_head(&m, original, lo);

    float alpha_tf = model_alpha(&m, logits), alpha_kernel;
    double one_minus_tf = one_minus_collision(logits, p);
    cr_assert(one_minus_tf > 2e-5 && one_minus_tf < 4e-5, "1 - S = %g: not the near-1 case", one_minus_tf);
    cr_expect(fabs((double)alpha_tf - (1.0 - one_minus_tf)) <= 6e-8, "model_forward alpha %.9g vs float64 %.12g",
              (double)alpha_tf, 1.0 - one_minus_tf);
    k_mixture_alpha_range(&alpha_kernel, NULL, logits, 1, V, 0.0f, 1.0f);
    cr_expect_eq(alpha_tf, alpha_kernel, "model_forward's alpha is not the kernel's");

    const eval_decode_mode modes[2] = {EVAL_DECODE_GROUPED, EVAL_DECODE_UNGROUPED};
    for (int i = 0; i < 2; i++) {
        eval_decode_session s;
        cr_assert(eval_decode_init(&s, &m, modes[i], 0) == DT_OK, "%s", dt_error_message());
        cr_assert(eval_decode_prefill(&s, tokens, T, NULL) == DT_OK, "%s", dt_error_message());
        const char *mode = eval_decode_mode_name(modes[i]);
        double one_minus = one_minus_collision(eval_decode_logits_primary(&s), p);
        eval_test_softmax(q, eval_decode_logits_branch(&s), V);
        cr_expect(fabs((double)s.alpha - (1.0 - one_minus)) <= 6e-8, "%s: alpha %.9g vs float64 %.12g", mode,
                  (double)s.alpha, 1.0 - one_minus);
        cr_expect(fabs(s.one_minus_alpha - one_minus) <= 1e-6 * one_minus, "%s: 1 - alpha %.9g vs float64 %.9g", mode,
                  s.one_minus_alpha, one_minus);
        float probs[V];
        eval_decode_mixture(&s, probs);
        for (int64_t v = 0; v < V; v++) {
            double want = (1.0 - one_minus) * p[v] + one_minus * q[v];
            cr_expect(fabs((double)probs[v] - want) <= 1e-5 * want + 1e-30, "%s: mixture[%ld] %.9g vs float64 %.9g",
                      mode, (long)v, (double)probs[v], want);
        }
        eval_decode_free(&s);
    }
    free(original);
    model_free(&m);
}
