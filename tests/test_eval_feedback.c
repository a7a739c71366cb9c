/* Latent feedback decoding (SPEC §6.5, eval/decode.h): the decode engine's
 * soft mode against the K-pass training forward (SPEC's own test: a soft
 * decode of n positions equals the feedback forward with K = n passes), fused
 * mode's prompt against K = 2, standard against the plain pass, in every
 * family. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "eval/decode.h"
#include "models/model.h"
#include "models/model_info.h"

enum { C = 8 };

/* A one-layer feedback model of the family, initialised, with fusion
 * matrices large enough that a feedback pass moves the logits. */
static void new_model(model *m, model_family family, dt_rng *rng) {
    model_config c = model_config_default(family);
    c.vocab_size = 11;
    c.block_size = 8;
    c.n_layer = 2;
    c.d_model = C;
    c.n_head = 2;
    c.n_kv_head = family == FAMILY_NANOGPT ? 2 : 1;
    c.feedback = 1;
    cr_assert_eq(model_create(m, &c), DT_OK, "%s", dt_error_message());
    dt_rng_seed(rng, 21);
    model_init_weights(m, rng);
    dt_rng_fill_normal(rng, dt_f32(m->feedback_w_u), C * C, 0.5f);
    dt_rng_fill_normal(rng, dt_f32(m->feedback_w_g), C * C, 0.5f);
    dt_rng_fill_normal(rng, dt_f32(m->tok_emb), m->tok_emb->size, 1.0f);
}

/* Logits of the K-pass forward over tokens [n] (one row): logits [n, V]. */
static void forward_logits(model *m, const int32_t *tokens, int64_t n, int64_t passes, float *logits) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 22), DT_OK);
    ag_set_grad_enabled(&ctx, 0);
    dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, n));
    memcpy(in->data, tokens, (size_t)n * sizeof *tokens);
    model_feedback_run run = model_feedback_plain();
    run.passes = passes;
    model_outputs out;
    cr_assert_eq(model_forward_feedback(m, &ctx, in, NULL, &run, &out), DT_OK, "%s", dt_error_message());
    memcpy(logits, out.logits_primary->data, (size_t)(n * m->config.vocab_size) * sizeof *logits);
    ag_ctx_free(&ctx);
}

static void expect_close(const float *got, const float *expected, int64_t n, const char *what, int64_t t) {
    float largest = 0.0f, worst = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        largest = fmaxf(largest, fabsf(expected[i]));
        worst = fmaxf(worst, fabsf(got[i] - expected[i]));
    }
    cr_expect(worst <= 1e-4f * fmaxf(largest, 1.0f), "%s, position %lld: max |diff| %g (scale %g)", what, (long long)t,
              worst, largest);
}

/* SPEC §6.5's test: a soft decode of n positions equals the feedback forward
 * with K = n passes; fused prefill's last logits equal the K = 2 forward's
 * over the prompt; standard decoding is the plain pass. */
static void check_decode_modes(model_family family) {
    enum { N = 6, PROMPT = 3 };
    model m;
    dt_rng rng;
    new_model(&m, family, &rng);
    const int64_t V = m.config.vocab_size;
    int32_t tokens[N];
    for (int t = 0; t < N; t++)
        tokens[t] = (int32_t)dt_rng_below(&rng, (uint64_t)V);
    static float expected[N * 64], plain[N * 64], fused2[PROMPT * 64];
    forward_logits(&m, tokens, N, N, expected);
    forward_logits(&m, tokens, N, 1, plain);
    forward_logits(&m, tokens, PROMPT, 2, fused2);
    eval_decode_session s;
    cr_assert_eq(eval_decode_init(&s, &m, EVAL_DECODE_BASELINE, 0), DT_OK, "%s", dt_error_message());
    const eval_feedback_mode modes[] = {EVAL_FEEDBACK_SOFT, EVAL_FEEDBACK_STANDARD};
    for (int k = 0; k < 2; k++) {
        s.feedback = modes[k];
        const float *want = modes[k] == EVAL_FEEDBACK_SOFT ? expected : plain;
        cr_assert_eq(eval_decode_prefill(&s, tokens, 1, NULL), DT_OK, "%s", dt_error_message());
        expect_close(eval_decode_logits_primary(&s), want, V, eval_feedback_mode_name(modes[k]), 0);
        for (int64_t t = 1; t < N; t++) {
            cr_assert_eq(eval_decode_step(&s, tokens[t]), DT_OK, "%s", dt_error_message());
            expect_close(eval_decode_logits_primary(&s), want + t * V, V, eval_feedback_mode_name(modes[k]), t);
        }
    }
    /* the plain and the K = n logits differ (else the test could not fail) */
    float differ = 0.0f;
    for (int64_t i = V; i < N * V; i++)
        differ = fmaxf(differ, fabsf(expected[i] - plain[i]));
    cr_expect_gt(differ, 1e-2f);
    s.feedback = EVAL_FEEDBACK_FUSED;
    cr_assert_eq(eval_decode_prefill(&s, tokens, PROMPT, NULL), DT_OK, "%s", dt_error_message());
    expect_close(eval_decode_logits_primary(&s), fused2 + (PROMPT - 1) * V, V, "fused prompt", PROMPT - 1);
    eval_decode_free(&s);
    /* a model without feedback refuses the soft modes */
    model base;
    model_config c = m.config;
    c.feedback = 0;
    cr_assert_eq(model_create(&base, &c), DT_OK);
    cr_assert_eq(eval_decode_init(&s, &base, EVAL_DECODE_BASELINE, 0), DT_OK);
    s.feedback = EVAL_FEEDBACK_SOFT;
    cr_expect_eq(eval_decode_prefill(&s, tokens, 1, NULL), DT_ERR);
    cr_expect(strstr(dt_error_message(), "feedback = 1") != NULL, "%s", dt_error_message());
    eval_decode_free(&s);
    model_free(&base);
    model_free(&m);
}

Test(feedback, soft_decode_equals_the_n_pass_forward_llama) { check_decode_modes(FAMILY_LLAMA); }
Test(feedback, soft_decode_equals_the_n_pass_forward_nanogpt) { check_decode_modes(FAMILY_NANOGPT); }
Test(feedback, soft_decode_equals_the_n_pass_forward_moe) { check_decode_modes(FAMILY_MOE); }

/* `dbranch info`'s cost model (models/model_info.h) counts the feedback
 * parameters as model_create allocates them, and a soft step's extra weight
 * bytes as the decode engine's counters see them. */
Test(feedback, cost_model_counts_the_fusion) {
    model m;
    dt_rng rng;
    new_model(&m, FAMILY_LLAMA, &rng);
    model_info info;
    cr_assert_eq(model_info_compute(&m.config, 0, &info), DT_OK, "%s", dt_error_message());
    cr_expect_eq(info.params_total, model_param_count(&m, -1));
    cr_expect_eq(info.feedback_params, 2 * C * C + 2 * C);
    eval_decode_session s;
    cr_assert_eq(eval_decode_init(&s, &m, EVAL_DECODE_BASELINE, 0), DT_OK);
    const int32_t tokens[2] = {3, 4};
    double bytes[2];
    for (int k = 0; k < 2; k++) {
        s.feedback = k ? EVAL_FEEDBACK_SOFT : EVAL_FEEDBACK_STANDARD;
        cr_assert_eq(eval_decode_prefill(&s, tokens, 1, NULL), DT_OK);
        cr_assert_eq(eval_decode_step(&s, tokens[1]), DT_OK);
        bytes[k] = s.traffic.weight_bytes;
    }
    cr_expect_float_eq(bytes[0], info.weight_bytes_baseline, 1e-6, "a standard step is the baseline");
    cr_expect_float_eq(bytes[1] - bytes[0], info.feedback_weight_bytes, 1e-6);
    eval_decode_free(&s);
    model_free(&m);
}
