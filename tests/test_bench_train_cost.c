/* The closed forms of `dbranch bench train` (bench_train_cost_of): parameter
 * counts, model FLOPs per token and the memory estimate, against counts
 * written out here from the SPEC's parameter list. */
#include <criterion/criterion.h>
#include <math.h>

#include "bench/bench_train.h"
#include "models/model.h"

static model make(model_config c) {
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    model m;
    cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
    return m;
}

/* nanoGPT baby: V=256, T=64, L=4, H=4, C=128, tied head. */
Test(bench_train, nanogpt_counts_flops_and_memory) {
    model_config c = model_config_default(FAMILY_NANOGPT);
    c.vocab_size = 256, c.block_size = 64, c.n_layer = 4, c.n_head = 4, c.d_model = 128;
    model m = make(c);
    const double V = 256, T = 64, L = 4, H = 4, C = 128, B = 12;
    /* per layer: 2 LayerNorms (w, b), q k v o with biases, fc 4C x C + 4C, proj C x 4C + C */
    const double per_layer = 2 * 2 * C + 4 * (C * C + C) + (4 * C * C + 4 * C) + (C * 4 * C + C);
    const double total = V * C + T * C + L * per_layer + 2 * C;
    bench_train_cost cost;
    bench_train_cost_of(&m, (int64_t)B, (int64_t)T, &cost);
    cr_assert_eq(cost.params_total, (int64_t)total);
    cr_assert_eq(cost.params_flop, (int64_t)(total - T * C), "N excludes the position embeddings only");
    cr_assert_eq(cost.params_flop_branch, 0);
    cr_assert(fabs(cost.flops_per_token - (6 * (total - T * C) + 12 * L * C * T)) < 0.5);
    cr_assert(fabs(cost.bytes_params - 4 * total) < 0.5 && fabs(cost.bytes_grads - 4 * total) < 0.5);
    cr_assert(fabs(cost.bytes_adam - 8 * total) < 0.5);
    /* activations per token: the embedded input; per layer 18C (norm outputs, q k v, attention output,
     * projections, residuals, fc output and GELU) + 4 norm statistics + H log-sum-exps; the final
     * norm (C + 2) and the logits (V) */
    const double per_token = C + L * (18 * C + 4 + H) + C + 2 + V;
    cr_assert(fabs(cost.bytes_activations - 4 * per_token * B * T) < 0.5, "activations %.0f vs %.0f",
              cost.bytes_activations, 4 * per_token * B * T);
    cr_assert(fabs(cost.bytes_total - (16 * total + 4 * per_token * B * T)) < 1.0);
    model_free(&m);
}

/* A decode branch adds its trajectory: every shared matrix but K/V, its head product. */
Test(bench_train, decode_branch_adds_its_trajectory) {
    model_config c = model_config_default(FAMILY_NANOGPT);
    c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.d_model = 32, c.branch = BRANCH_DECODE;
    model m = make(c);
    const double V = 64, T = 16, L = 2, C = 32;
    const double primary_layer = 2 * 2 * C + 4 * (C * C + C) + (4 * C * C + 4 * C) + (C * 4 * C + C);
    const double primary = V * C + T * C + L * primary_layer + 2 * C;
    const double couple = C + 4 * C + C;
    bench_train_cost cost;
    bench_train_cost_of(&m, 4, (int64_t)T, &cost);
    cr_assert_eq(cost.params_total, (int64_t)(primary + V * C + L * couple),
                 "+ branch.tok_emb and the coupling vectors");
    cr_assert_eq(cost.params_flop, (int64_t)(primary - T * C));
    /* the branch applies norms, wq, wo, fc, proj (not wk, wv), its coupling vectors and the head */
    const double branch_layer = primary_layer - 2 * (C * C + C) + couple;
    const double branch = L * branch_layer + 2 * C + V * C;
    cr_assert_eq(cost.params_flop_branch, (int64_t)branch, "%lld vs %.0f", (long long)cost.params_flop_branch, branch);
    cr_assert(fabs(cost.flops_per_token - (6 * (primary - T * C) + 6 * branch + 2 * 12 * L * C * T)) < 0.5);
    model_free(&m);
}

/* MoE counts the experts a token uses (top_k of E), not all of them. */
Test(bench_train, moe_counts_active_experts) {
    model_config c = model_config_default(FAMILY_MOE); /* E = 4, top_k = 2 */
    c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_model = 32, c.d_ff = 48;
    model m = make(c);
    const double V = 64, L = 2, C = 32, F = 48, E = 4, kv = 2 * 8;
    const double experts = 3 * E * F * C;
    const double per_layer = 2 * C + C * C + 2 * kv * C + C * C + E * C + experts;
    const double total = V * C + L * per_layer + C + V * C; /* untied head */
    bench_train_cost cost;
    bench_train_cost_of(&m, 2, 16, &cost);
    cr_assert_eq(cost.params_total, (int64_t)total);
    cr_assert_eq(cost.params_flop, (int64_t)(total - L * experts * (1.0 - 2.0 / E)));
    model_free(&m);
}
