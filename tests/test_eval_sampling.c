/* The sampler's filters and `dbranch generate`'s options (eval/generate.h):
 *  - top-k = 1 picks what greedy picks, at any temperature;
 *  - top-p keeps the most likely tokens up to the cumulative probability
 *    asked for, after the temperature, on distributions whose nucleus is
 *    worked out by hand (frequencies within 5 sigma of the renormalised
 *    probabilities); top_p = 1 draws exactly what eval_sample draws;
 *  - seeded generation with top-p reproduces, another seed differs;
 *  - the CLI: --prompt-file equals --prompt, --top-p is range-checked, and
 *    the two llama.cpp-style timing lines on stderr count the prompt's
 *    tokens and the decode runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/generate.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "test_eval_util.h"

enum { DRAWS = 40000 };

Test(sampling, top_k_one_is_greedy) {
    enum { V = 50 };
    float probs[V], weight[V];
    int32_t index[V];
    dt_rng rng, draws;
    dt_rng_seed(&rng, 11);
    dt_rng_seed(&draws, 12);
    for (int trial = 0; trial < 200; trial++) {
        double total = 0;
        for (int v = 0; v < V; v++)
            total += probs[v] = (float)dt_rng_uniform(&rng);
        for (int v = 0; v < V; v++)
            probs[v] = (float)(probs[v] / total);
        int32_t greedy = eval_sample(probs, V, 0.0, 0, &draws, index, weight);
        const double temperatures[] = {0.3, 1.0, 2.5};
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(eval_sample(probs, V, temperatures[t], 1, &draws, index, weight), greedy, "trial %d", trial);
            cr_assert_eq(eval_sample_nucleus(probs, V, temperatures[t], 1, 0.9, &draws, index, weight), greedy);
        }
    }
    const float tie[3] = {0.4f, 0.2f, 0.4f};
    cr_assert_eq(eval_sample(tie, 3, 1.0, 1, &draws, index, weight), 0); /* ties: the lower id, as greedy */
}

/* Counts of DRAWS draws, checked against want[5] (0: never drawn). */
static void check_frequencies(const float *probs, double temperature, int64_t top_k, double top_p, const double *want,
                              uint64_t seed) {
    float weight[5];
    int32_t index[5];
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    int counts[5] = {0};
    for (int i = 0; i < DRAWS; i++)
        counts[eval_sample_nucleus(probs, 5, temperature, top_k, top_p, &rng, index, weight)]++;
    for (int v = 0; v < 5; v++) {
        double f = (double)counts[v] / DRAWS;
        if (want[v] == 0)
            cr_assert_eq(counts[v], 0, "T %g top_p %g: token %d drawn %d times", temperature, top_p, v, counts[v]);
        else
            cr_assert(fabs(f - want[v]) < 5.0 * sqrt(want[v] * (1 - want[v]) / DRAWS) + 1e-12,
                      "T %g top_p %g: token %d at %g, want %g", temperature, top_p, v, f, want[v]);
    }
}

Test(sampling, top_p_on_known_distributions) {
    const float probs[5] = {0.05f, 0.5f, 0.1f, 0.2f, 0.15f};
    /* T = 1, top_p 0.8: 0.5 + 0.2 = 0.7 < 0.8, + 0.15 = 0.85: tokens 1, 3, 4 renormalised over 0.85. */
    const double nucleus_08[5] = {0, 0.5 / 0.85, 0, 0.2 / 0.85, 0.15 / 0.85};
    check_frequencies(probs, 1.0, 0, 0.8, nucleus_08, 1);
    /* top_p 0.45: the first token alone holds 0.5. */
    const double only_first[5] = {0, 1, 0, 0, 0};
    check_frequencies(probs, 1.0, 0, 0.45, only_first, 2);
    /* T = 0.5 squares the weights: 0.25, 0.04, 0.0225, 0.01, 0.0025 of 0.325; 0.25/0.325 = 0.77 < 0.8,
     * + 0.04 -> 0.89: tokens 1 and 3 in ratio 0.25 : 0.04 (the filter reads the tempered distribution). */
    const double tempered[5] = {0, 0.25 / 0.29, 0, 0.04 / 0.29, 0};
    check_frequencies(probs, 0.5, 0, 0.8, tempered, 3);
    /* top-k 2 first (0.5, 0.2), then top_p 0.9 of their 0.7: 0.5/0.7 = 0.71 < 0.9, both stay. */
    const double top2[5] = {0, 0.5 / 0.7, 0, 0.2 / 0.7, 0};
    check_frequencies(probs, 1.0, 2, 0.9, top2, 4);

    /* top_p = 1 is eval_sample, draw for draw. */
    float weight[5];
    int32_t index[5];
    dt_rng a, b;
    dt_rng_seed(&a, 9);
    dt_rng_seed(&b, 9);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(eval_sample_nucleus(probs, 5, 0.7, 0, 1.0, &a, index, weight),
                     eval_sample(probs, 5, 0.7, 0, &b, index, weight));
}

#define SMALL_LLAMA "family=llama vocab_size=48 block_size=16 n_layer=1 n_head=2 d_model=16 d_ff=32"

Test(sampling, seeded_top_p_generation_reproduces) {
    model m;
    eval_test_model(&m, SMALL_LLAMA, 5);
    int32_t prompt[3] = {1, 2, 3}, a[40], b[40], c[40];
    eval_generate_options o = eval_generate_default_options();
    o.n_tokens = 40;
    o.temperature = 1.3;
    o.top_p = 0.9;
    o.seed = 7;
    eval_generate_timing timing;
    o.timing = &timing;
    int64_t na, nb, nc;
    cr_assert_eq(eval_generate(&m, prompt, 3, &o, a, &na), DT_OK, "%s", dt_error_message());
    cr_assert_eq(timing.prompt_tokens, 3);
    cr_assert_eq(timing.eval_runs, 39); /* the first token comes from the prefill */
    cr_assert(timing.prompt_seconds >= 0 && timing.eval_seconds >= 0);
    cr_assert_eq(eval_generate(&m, prompt, 3, &o, b, &nb), DT_OK);
    o.seed = 8;
    cr_assert_eq(eval_generate(&m, prompt, 3, &o, c, &nc), DT_OK);
    cr_assert_eq(na, 40);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert(memcmp(a, c, sizeof a) != 0, "seeds 7 and 8 gave the same 40 tokens");
    o.top_p = 0;
    cr_assert_eq(eval_generate(&m, prompt, 3, &o, a, &na), DT_ERR);
    cr_assert(strstr(dt_error_message(), "top_p"), "%s", dt_error_message());
    model_free(&m);
}

static char dir[256];
static void setup(void) { test_scratch_dir(dir, sizeof dir, "sampling_cli"); }
static void teardown(void) { test_remove_dir(dir); }

Test(sampling, cli_prompt_file_top_p_and_timing, .init = setup, .fini = teardown) {
    char model_path[300], prompt_path[300], args[1024], *out, *again, *err;
    snprintf(model_path, sizeof model_path, "%s/m.h5", dir);
    model m;
    eval_test_model(&m, "family=llama vocab_size=256 block_size=16 n_layer=1 n_head=2 d_model=16 d_ff=32", 3);
    cr_assert_eq(model_save(&m, model_path), DT_OK, "%s", dt_error_message());
    model_free(&m);
    snprintf(prompt_path, sizeof prompt_path, "%s/prompt.txt", dir);
    FILE *f = fopen(prompt_path, "w");
    cr_assert(f);
    fputs("the fox", f);
    fclose(f);

    snprintf(args, sizeof args, "generate --model '%s' --prompt 'the fox' --tokens 8 --top-p 0.8 --seed 4", model_path);
    cr_assert_eq(test_run_dbranch("OMP_NUM_THREADS=1", args, &out, &err), 0, "%s", err);
    free(err);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-file '%s' --tokens 8 --top-p 0.8 --seed 4", model_path,
             prompt_path);
    cr_assert_eq(test_run_dbranch("OMP_NUM_THREADS=1", args, &again, &err), 0, "%s", err);
    cr_assert_str_eq(out, again);
    cr_assert(!strncmp(out, "the fox", 7), "%s", out);
    /* Two timing lines: the 7 prompt bytes, then 7 decode runs for 8 tokens. */
    double ms, per_token, per_second;
    long long count;
    char *line = strstr(err, "prompt eval time = ");
    cr_assert(line, "%s", err);
    cr_assert_eq(sscanf(line, "prompt eval time = %lf ms / %lld tokens (%lf ms per token, %lf tokens per second)", &ms,
                        &count, &per_token, &per_second),
                 4, "%s", err);
    cr_assert_eq(count, 7);
    cr_assert(fabs(per_token - ms / 7) < 0.01, "%s", line);
    line = strstr(line + 1, "       eval time = ");
    cr_assert(line, "%s", err);
    cr_assert_eq(sscanf(line, " eval time = %lf ms / %lld runs (%lf ms per token, %lf tokens per second)", &ms, &count,
                        &per_token, &per_second),
                 4, "%s", err);
    cr_assert_eq(count, 7);
    free(out);
    free(again);
    free(err);

    snprintf(args, sizeof args, "generate --model '%s' --prompt x --top-p 1.5", model_path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 2);
    test_assert_one_line_error(err, "dbranch generate: ", "--top-p");
    free(err);
    snprintf(args, sizeof args, "generate --model '%s' --prompt-file '%s/none.txt'", model_path, dir);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch generate: ", "none.txt");
    free(err);
}
