/* bf16 decode weights (eval/decode_weights.h) in the decode engine, at every
 * instruction-set level this CPU runs (kernels/isa.h):
 *   - a bf16 session's logits equal those of a float32 session on a model
 *     whose matrices the test rounded to bf16 itself: widening is exact and
 *     the bf16 kernels run the float32 kernels' FMAs lane for lane, so the
 *     derived tolerance is zero;
 *   - they stay near a float32 session on the unrounded model (first-order
 *     bound below);
 *   - the traffic counters count 2 bytes per matrix element (counted here
 *     from the shapes; against the cost model in test_eval_decode.c); grouped
 *     decode still loads each shared matrix once for both rows. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/decode.h"
#include "eval/decode_weights.h"
#include "eval/matvec.h"
#include "kernels/isa.h"
#include "kernels/type_traits.h"
#include "test_eval_util.h"

#define NANOGPT "family=nanogpt vocab_size=40 block_size=12 n_layer=2 n_head=2 d_model=16 "
#define LLAMA   "family=llama vocab_size=48 block_size=13 n_layer=2 n_head=4 n_kv_head=2 d_model=32 d_ff=40 "
#define MOE     "family=moe vocab_size=40 block_size=12 n_layer=2 n_head=4 n_kv_head=2 d_model=16 d_ff=24 n_expert=4 "

static const eval_decode_mode all_modes[3] = {EVAL_DECODE_BASELINE, EVAL_DECODE_GROUPED, EVAL_DECODE_UNGROUPED};

/* The test's own rounding: every matrix and embedding table through the
 * scalar k_bf16_from_float (round to nearest even, tested in
 * test_kernels_type_traits.c), vectors untouched. */
static void round_matrices(model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        if (!p->is_matrix && !p->is_embedding) continue;
        float *x = dt_f32(p->tensor);
        for (int64_t j = 0; j < p->tensor->size; j++)
            x[j] = k_bf16_to_float(k_bf16_from_float(x[j]));
    }
}

/* Logits of every position P-1 .. T-1, rows [primary, branch] per position: out [T, 2, V]. */
static void decode_logits(const model *m, const eval_decode_weights *w, eval_decode_mode mode, const int32_t *tokens,
                          int64_t T, int64_t P, float *out) {
    const int64_t V = m->config.vocab_size;
    eval_decode_session s;
    cr_assert(eval_decode_init(&s, m, mode, 0) == DT_OK, "%s", dt_error_message());
    s.weights = w;
    cr_assert(eval_decode_prefill(&s, tokens, P, NULL) == DT_OK, "%s", dt_error_message());
    long mallocs = dt_arena_mallocs(&s.arena);
    memset(out, 0, (size_t)(T * 2 * V) * sizeof(float));
    for (int64_t t = P - 1; t < T; t++) {
        if (t > P - 1) cr_assert(eval_decode_step(&s, tokens[t]) == DT_OK, "%s", dt_error_message());
        memcpy(out + t * 2 * V, eval_decode_logits_primary(&s), (size_t)V * sizeof(float));
        if (eval_decode_logits_branch(&s))
            memcpy(out + (t * 2 + 1) * V, eval_decode_logits_branch(&s), (size_t)V * sizeof(float));
    }
    cr_expect_eq(dt_arena_mallocs(&s.arena), mallocs, "bf16 decode steps allocated");
    eval_decode_free(&s);
}

/* bf16 session == float32 session on the test-rounded model, bit for bit, at
 * every level and in every mode; and near the float32 session on the
 * unrounded model. */
static void check_bf16_decode(const char *spec, uint64_t seed) {
    model exact, rounded, converted;
    eval_test_model(&exact, spec, seed);
    eval_test_model(&rounded, spec, seed);
    eval_test_model(&converted, spec, seed);
    round_matrices(&rounded);
    eval_decode_weights w;
    cr_assert(eval_decode_weights_init(&w, &converted, DT_BF16) == DT_OK, "%s", dt_error_message());
    /* the view rounded the model's own float32 copy to the values the test computed */
    cr_assert_arr_eq(converted.params_memory, rounded.params_memory, (size_t)rounded.n_floats * sizeof(float),
                     "%s: in-place rounding differs from k_bf16_from_float", spec);

    const int64_t T = exact.config.block_size, V = exact.config.vocab_size, n = T * 2 * V;
    int32_t *tokens = malloc((size_t)T * sizeof(int32_t));
    eval_test_tokens(tokens, T, V, seed + 7);
    float *got = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
    float *fp32 = malloc((size_t)n * sizeof(float));
    const int64_t prompts[2] = {1, T / 2};
    for (int level = 0; level <= (int)k_isa_supported(); level++) {
        cr_assert(k_isa_force((k_isa)level) == DT_OK, "%s", dt_error_message());
        for (int pi = level == (int)k_isa_supported() ? 0 : 1; pi < 2; pi++) /* P = 1 (M <= 2 prefill) once */
            for (int i = 0; i < 3; i++) {
                const int64_t P = prompts[pi];
                decode_logits(&converted, &w, all_modes[i], tokens, T, P, got);
                decode_logits(&rounded, NULL, all_modes[i], tokens, T, P, want);
                for (int64_t j = 0; j < n; j++)
                    cr_assert_eq(got[j], want[j], "%s %s %s P=%lld: bf16 logit %lld = %.9g, float32 on rounded %.9g",
                                 spec, k_isa_name((k_isa)level), eval_decode_mode_name(all_modes[i]), (long long)P,
                                 (long long)j, got[j], want[j]);
                /* Against the unrounded model (once per mode, at the best
                 * level): each matrix element moves by at most 2^-8 of itself
                 * (bf16 keeps 8 significant bits), so each product of a
                 * position moves its output by at most 2^-8 of its |W||x|
                 * sum. The test models' norms bring every sublayer's input
                 * back to O(1), so to first order each product's relative
                 * error reaches the logits with a gain of about one: the
                 * estimate is 2^-8 x (products per position: embedding and
                 * head, and at most 8 per layer) x max|logit|. A first-order
                 * estimate, not a rigorous bound; it does not come from a
                 * bf16 run. */
                if (level != (int)k_isa_supported() || pi != 1) continue;
                decode_logits(&exact, NULL, all_modes[i], tokens, T, P, fp32);
                const double products = 2.0 + 8.0 * (double)exact.config.n_layer;
                const double tol = ldexp(1.0, -8) * products * eval_test_max_abs(fp32, n);
                const double err = eval_test_max_diff(got, fp32, n);
                cr_expect(err <= tol, "%s %s: bf16 vs float32 logits differ by %g (estimate %g)", spec,
                          eval_decode_mode_name(all_modes[i]), err, tol);
                cr_expect(err > 0.0, "%s: bf16 weights changed no logit (was the copy used?)", spec);
            }
    }
    k_isa_reset();
    free(tokens);
    free(got);
    free(want);
    free(fp32);
    eval_decode_weights_free(&w);
    model_free(&exact);
    model_free(&rounded);
    model_free(&converted);
}

Test(decode_bf16, equals_float32_on_rounded_weights_nanogpt) { check_bf16_decode(NANOGPT "branch=decode", 301); }
Test(decode_bf16, equals_float32_on_rounded_weights_llama) { check_bf16_decode(LLAMA "branch=decode", 302); }
Test(decode_bf16, equals_float32_on_rounded_weights_share_off) {
    check_bf16_decode(LLAMA "branch=decode share=off", 303);
}
Test(decode_bf16, equals_float32_on_rounded_weights_moe) {
    check_bf16_decode(MOE "branch=decode top_k=2 top_k_branch=2", 304);
}
Test(decode_bf16, equals_float32_on_rounded_weights_triplu) {
    check_bf16_decode(LLAMA "ffn=triplu ffn_prod_norm=1 branch=decode", 305);
}

/* ---- traffic --------------------------------------------------------------- */

/* The counters equal the cost model's bf16 figures in every mode and for
 * every family and option: decode_traffic::counters_equal_the_cost_model
 * (test_eval_decode.c) runs each of its models with both weight types. */

/* Counted independently of the cost model: a baseline llama step reads every
 * matrix once, so float32 minus bf16 bytes is 2 bytes per element of wq, wk,
 * wv, wo, w1, w3, w2 of every layer and of the (tied) head. And grouped decode
 * still streams each shared bf16 matrix once for both rows. */
Test(decode_bf16_traffic, two_bytes_per_matrix_element_and_one_load_for_both_rows) {
    model m;
    eval_test_model(&m, LLAMA "branch=decode", 23);
    const model_config *c = &m.config;
    eval_decode_weights w;
    cr_assert(eval_decode_weights_init(&w, &m, DT_BF16) == DT_OK);
    int32_t tokens[8];
    eval_test_tokens(tokens, 8, c->vocab_size, 9);
    eval_decode_traffic fp32[3], bf16[3];
    for (int i = 0; i < 3; i++)
        for (int half = 0; half < 2; half++) {
            eval_decode_session s;
            cr_assert(eval_decode_init(&s, &m, all_modes[i], 0) == DT_OK);
            s.weights = half ? &w : NULL;
            cr_assert(eval_decode_prefill(&s, tokens, 5, NULL) == DT_OK);
            cr_assert(eval_decode_step(&s, tokens[5]) == DT_OK);
            (half ? bf16 : fp32)[i] = s.traffic;
            eval_decode_free(&s);
        }
    const int64_t C = c->d_model, F = c->d_ff, kv = c->n_kv_head * (C / c->n_head);
    const double per_layer = (double)(C * C + 2 * kv * C + C * C + 3 * F * C);
    const double matrix_elements = (double)c->n_layer * per_layer + (double)(c->vocab_size * C);
    cr_expect_eq(fp32[0].weight_bytes - bf16[0].weight_bytes, 2.0 * matrix_elements);
    cr_expect_eq(bf16[0].matrix_loads, fp32[0].matrix_loads);
    /* grouped: the branch row adds only float32 vectors (its embedding row, the coupling vectors) */
    const double coupling = (double)c->n_layer * (double)(C + F + C);
    cr_expect_eq(bf16[1].weight_bytes, bf16[0].weight_bytes + 4.0 * ((double)C + coupling));
    cr_expect_eq(bf16[1].matrix_loads, bf16[0].matrix_loads);
    /* un-grouped reads the shared matrices (all but wk, wv) again, in bf16 */
    const double shared = (double)c->n_layer * (double)(2 * C * C + 3 * F * C) + (double)(c->vocab_size * C);
    cr_expect_eq(fp32[2].weight_bytes - bf16[2].weight_bytes, 2.0 * (matrix_elements + shared));
    eval_decode_weights_free(&w);
    model_free(&m);
}

/* The view maps whole rows of converted tensors to their packed twins, and
 * nothing else (part rows, vectors, memory outside the model); fp32 is the identity. */
Test(decode_bf16, view_finds_twins_inside_the_model_only) {
    model m;
    eval_test_model(&m, LLAMA "branch=none", 24);
    eval_decode_weights w, f;
    cr_assert(eval_decode_weights_init(&w, &m, DT_BF16) == DT_OK);
    cr_assert(eval_decode_weights_init(&f, &m, DT_F32) == DT_OK);
    const dt_tensor *t = m.layers[1].primary.wq;
    const float *wq = dt_f32(t);
    const int64_t N = t->shape[0], K = t->shape[1];
    dt_dtype type;
    const uint16_t *twin = eval_decode_weights_find(&w, wq, N, K, &type);
    cr_assert_eq(type, DT_BF16);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            cr_assert_eq(k_bf16_to_float(twin[n * K + eval_matvec_bf16_position(k, K)]), wq[n * K + k]);
    cr_assert_eq(eval_decode_weights_find(&w, wq + K, N - 1, K, &type), twin + K, "whole rows from row 1");
    cr_assert_eq(type, DT_BF16);
    /* not whole rows of this tensor: the float32 weight */
    cr_assert_eq(eval_decode_weights_find(&w, wq + 1, 1, K, &type), wq + 1);
    cr_assert_eq(type, DT_F32);
    cr_assert_eq(eval_decode_weights_find(&w, wq, 1, K / 2, &type), wq);
    cr_assert_eq(type, DT_F32);
    cr_assert_eq(eval_decode_weights_find(&w, wq, N + 1, K, &type), wq);
    cr_assert_eq(type, DT_F32);
    const float *norm = dt_f32(m.layers[1].attn_norm);
    cr_assert_eq(eval_decode_weights_find(&w, norm, 1, m.layers[1].attn_norm->size, &type), norm, "vectors stay");
    cr_assert_eq(type, DT_F32);
    float outside[4] = {0};
    cr_assert_eq(eval_decode_weights_find(&w, outside, 1, 4, &type), outside);
    cr_assert_eq(type, DT_F32);
    cr_assert_eq(eval_decode_weights_find(&f, wq, 1, K, &type), wq);
    cr_assert_eq(type, DT_F32);
    cr_assert_eq(eval_decode_weights_find(NULL, wq, 1, K, &type), wq);
    dt_dtype parsed;
    cr_assert_eq(eval_decode_weights_parse("bf16", &parsed), DT_OK);
    cr_assert_eq(parsed, DT_BF16);
    cr_assert_eq(eval_decode_weights_parse("fp16", &parsed), DT_ERR);
    cr_assert(strstr(dt_error_message(), "fp16"), "%s", dt_error_message());
    eval_decode_weights_free(&w);
    eval_decode_weights_free(&f);
    model_free(&m);
}
