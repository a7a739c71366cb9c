/* Generation (eval/generate.h): greedy decoding is deterministic and follows
 * the argmax of the teacher-forced mixture; sampling follows probs^(1/T)
 * restricted to the top k; seeds reproduce; bad prompts are errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/generate.h"
#include "test_eval_util.h"

#define LLAMA_BRANCH                                                                                                   \
    "family=llama vocab_size=48 block_size=16 n_layer=2 n_head=4 n_kv_head=2 d_model=32 d_ff=40 branch=decode "        \
    "mix_alpha_min=0.05 mix_alpha_max=0.95"
#define MOE_BRANCH                                                                                                     \
    "family=moe vocab_size=40 block_size=14 n_layer=2 n_head=2 d_model=16 d_ff=24 n_expert=4 top_k=2 top_k_branch=1 "  \
    "branch=decode mix_alpha_min=0.05"

/* argmax over v of x [V] in double (first maximum). */
static int64_t argmax_double(const double *x, int64_t V) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (x[v] > x[best]) best = v;
    return best;
}

static void check_greedy(const char *spec, eval_decode_mode mode, uint64_t seed) {
    model m;
    eval_test_model(&m, spec, seed);
    int64_t V = m.config.vocab_size, P = 4, N = m.config.block_size - P + 1;
    int32_t seq[64], out[64], again[64];
    eval_test_tokens(seq, P, V, seed + 1);
    eval_generate_options o = eval_generate_default_options();
    o.temperature = 0.0;
    o.n_tokens = N;
    o.mode = mode;
    int64_t n_out = 0, n_again = 0;
    cr_assert(eval_generate(&m, seq, P, &o, out, &n_out) == DT_OK, "%s", dt_error_message());
    cr_assert_eq(n_out, N);
    o.seed = 999; /* the seed does not matter at temperature 0 */
    cr_assert(eval_generate(&m, seq, P, &o, again, &n_again) == DT_OK);
    cr_assert_eq(n_again, N);
    cr_expect_arr_eq(out, again, (size_t)N * sizeof(int32_t), "greedy generation is not deterministic");

    /* teacher-forced over prompt + generated: each generated token is the argmax
     * of the mixture (or of p for baseline) at the position before it */
    memcpy(seq + P, out, (size_t)(N - 1) * sizeof(int32_t));
    int64_t T = P + N - 1;
    eval_test_tf tf;
    eval_test_teacher_forced(&m, seq, T, &tf);
    double *p = malloc((size_t)V * sizeof(double));
    for (int64_t i = 0; i < N; i++) {
        int64_t t = P - 1 + i;
        const double *dist = tf.mixture + t * V;
        if (mode == EVAL_DECODE_BASELINE) {
            eval_test_softmax(p, tf.logits_primary + t * V, V);
            dist = p;
        }
        cr_expect_eq(out[i], argmax_double(dist, V), "token %lld: generated %d, teacher-forced argmax %lld",
                     (long long)i, out[i], (long long)argmax_double(dist, V));
    }
    free(p);
    eval_test_tf_free(&tf);
    model_free(&m);
}

Test(generate, greedy_grouped_follows_teacher_forced_mixture) { check_greedy(LLAMA_BRANCH, EVAL_DECODE_GROUPED, 1); }
Test(generate, greedy_ungrouped_follows_teacher_forced_mixture) {
    check_greedy(LLAMA_BRANCH, EVAL_DECODE_UNGROUPED, 2);
}
Test(generate, greedy_baseline_follows_primary) { check_greedy(LLAMA_BRANCH, EVAL_DECODE_BASELINE, 3); }
Test(generate, greedy_moe) { check_greedy(MOE_BRANCH, EVAL_DECODE_GROUPED, 4); }

Test(generate, sampling_reproducible_past_the_context) {
    model m;
    eval_test_model(&m, LLAMA_BRANCH, 5);
    int32_t prompt[3] = {1, 2, 3}, a[64], b[64], c[64];
    eval_generate_options o = eval_generate_default_options();
    o.n_tokens = 50; /* more than fit in block 16: the context slides */
    o.temperature = 1.5;
    o.seed = 7;
    int64_t na, nb, nc;
    cr_assert(eval_generate(&m, prompt, 3, &o, a, &na) == DT_OK);
    cr_assert(eval_generate(&m, prompt, 3, &o, b, &nb) == DT_OK);
    o.seed = 8;
    cr_assert(eval_generate(&m, prompt, 3, &o, c, &nc) == DT_OK);
    cr_expect_eq(na, 50);
    cr_expect_eq(nb, na);
    cr_expect_arr_eq(a, b, (size_t)na * sizeof(int32_t));
    cr_expect(memcmp(a, c, (size_t)na * sizeof(int32_t)) != 0, "different seeds gave the same 50 tokens");
    for (int64_t i = 0; i < na; i++)
        cr_expect(a[i] >= 0 && a[i] < m.config.vocab_size);
    model_free(&m);
}

Test(generate, sampler_distribution) {
    const float probs[5] = {0.1f, 0.2f, 0.3f, 0.15f, 0.25f};
    int32_t index[5];
    float weight[5];
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    enum { DRAWS = 40000 };
    /* temperature 0.5: probs^2 renormalised */
    double expected[5], total = 0.0;
    for (int v = 0; v < 5; v++)
        total += (expected[v] = (double)probs[v] * probs[v]);
    int counts[5] = {0};
    for (int i = 0; i < DRAWS; i++)
        counts[eval_sample(probs, 5, 0.5, 0, &rng, index, weight)]++;
    for (int v = 0; v < 5; v++) {
        double f = (double)counts[v] / DRAWS, e = expected[v] / total;
        cr_expect(fabs(f - e) < 5.0 * sqrt(e * (1 - e) / DRAWS), "T=0.5 token %d: %g vs %g", v, f, e);
    }
    /* top-2 at temperature 1: only tokens 2 and 4, in ratio 0.3 : 0.25 */
    memset(counts, 0, sizeof counts);
    for (int i = 0; i < DRAWS; i++)
        counts[eval_sample(probs, 5, 1.0, 2, &rng, index, weight)]++;
    cr_expect(counts[0] == 0 && counts[1] == 0 && counts[3] == 0);
    double f2 = (double)counts[2] / DRAWS, e2 = 0.3 / 0.55;
    cr_expect(fabs(f2 - e2) < 5.0 * sqrt(e2 * (1 - e2) / DRAWS), "top-2: %g vs %g", f2, e2);
    /* greedy, and ties go to the lower id */
    cr_expect_eq(eval_sample(probs, 5, 0.0, 0, &rng, index, weight), 2);
    const float tie[3] = {0.4f, 0.2f, 0.4f};
    cr_expect_eq(eval_sample(tie, 3, 0.0, 0, &rng, index, weight), 0);
}

Test(generate, bad_requests) {
    model m;
    eval_test_model(&m, LLAMA_BRANCH, 6);
    int32_t prompt[20] = {0}, out[8];
    int64_t n;
    eval_generate_options o = eval_generate_default_options();
    o.n_tokens = 4;
    cr_expect_eq(eval_generate(&m, prompt, 0, &o, out, &n), DT_ERR);
    cr_expect(strstr(dt_error_message(), "empty") != NULL, "%s", dt_error_message());
    prompt[1] = 48;
    cr_expect_eq(eval_generate(&m, prompt, 3, &o, out, &n), DT_ERR);
    prompt[1] = 0;
    o.temperature = -1.0;
    cr_expect_eq(eval_generate(&m, prompt, 3, &o, out, &n), DT_ERR);
    model_free(&m);
}

/* Past block_size the context slides: the cache restarts from the last
 * block_size / 2 tokens, so the token after the slide is the argmax of the
 * teacher-forced mixture over exactly that window; a prompt longer than
 * block_size keeps its end. */
Test(generate, sliding_context_and_long_prompt) {
    model m;
    eval_test_model(&m, LLAMA_BRANCH, 9);
    int64_t V = m.config.vocab_size, block = m.config.block_size, P = 4, N = 20, keep = block / 2;
    int32_t history[64], out[64], prefix[64];
    eval_test_tokens(history, P, V, 10);
    eval_generate_options o = eval_generate_default_options();
    o.temperature = 0.0;
    o.n_tokens = N;
    int64_t n_out, n_prefix;
    cr_assert(eval_generate(&m, history, P, &o, out, &n_out) == DT_OK, "%s", dt_error_message());
    cr_assert_eq(n_out, N);
    o.n_tokens = block - P + 1; /* what fits without sliding */
    cr_assert(eval_generate(&m, history, P, &o, prefix, &n_prefix) == DT_OK);
    cr_expect_arr_eq(out, prefix, (size_t)n_prefix * sizeof(int32_t));
    memcpy(history + P, out, (size_t)N * sizeof(int32_t));
    /* token index block - P + 1 is the first one after the slide: its window is
     * the `keep` tokens just before it */
    int64_t i = block - P + 1, end = P + i; /* history[end - keep .. end) */
    eval_test_tf tf;
    eval_test_teacher_forced(&m, history + end - keep, keep, &tf);
    cr_expect_eq(out[i], argmax_double(tf.mixture + (keep - 1) * V, V), "first token after the slide");
    eval_test_tf_free(&tf);

    /* a prompt of 20 tokens > block 16: the same as its last 16 */
    int32_t long_out[4], short_out[4];
    o.n_tokens = 4;
    cr_assert(eval_generate(&m, history, 20, &o, long_out, &n_out) == DT_OK, "%s", dt_error_message());
    cr_assert(eval_generate(&m, history + 4, 16, &o, short_out, &n_out) == DT_OK);
    cr_expect_arr_eq(long_out, short_out, sizeof long_out);
    model_free(&m);
}
