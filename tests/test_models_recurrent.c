/* The recurrent layer's two evaluation orders (SPEC §6.4,
 * models/recurrent.h): the per-position scan and the paper's tiled schedule
 * compute the same function, so the loss and every gradient agree to float
 * rounding, for every family, with the decode branch, GQA, per-layer heads,
 * product FFNs and MoE. (Correctness of the function itself: the reference
 * files in tests/reference/options*, test_models_reference.c.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "models/recurrent.h"
#include "models/reference.h"
#include "test_eval_util.h"

typedef struct run_result {
    double loss;
    float *grads; /* [n_floats] */
    int merges;   /* tiled merge ops on the tape */
} run_result;

static run_result train_step(model *m, const int32_t *tokens, int64_t B, int64_t T, model_recurrent_schedule which) {
    model_recurrent_set_schedule(which);
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T)), *target = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            dt_i32(in)[b * T + t] = tokens[b * (T + 1) + t];
            dt_i32(target)[b * T + t] = tokens[b * (T + 1) + t + 1];
        }
    model_zero_grad(m);
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, in, target, &out), DT_OK, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "%s", dt_error_message());
    run_result r = {dt_f32(out.loss)[0], malloc((size_t)m->n_floats * sizeof(float)), 0};
    memcpy(r.grads, m->grads_memory, (size_t)m->n_floats * sizeof(float));
    for (int i = 0; i < ctx.n_nodes; i++)
        r.merges += !strcmp(ctx.nodes[i]->op, "recurrent_tiles_merge");
    ag_ctx_free(&ctx);
    model_recurrent_set_schedule(MODEL_RECURRENT_SCAN);
    return r;
}

static void check_orders_agree(const char *spec, uint64_t seed) {
    model m;
    eval_test_model(&m, spec, seed);
    const int64_t B = 2, T = m.config.block_size;
    int32_t *tokens = malloc((size_t)(B * (T + 1)) * sizeof(int32_t));
    eval_test_tokens(tokens, B * (T + 1), m.config.vocab_size, seed + 7);
    run_result scan = train_step(&m, tokens, B, T, MODEL_RECURRENT_SCAN);
    run_result tiled = train_step(&m, tokens, B, T, MODEL_RECURRENT_TILED);
    cr_expect_eq(scan.merges, 0, "%s: the scan recorded tiled merges", spec);
    /* one merge per position but the last, per layer */
    cr_expect_eq(tiled.merges, (int)(m.config.n_layer * (T - 1)), "%s: %d merges", spec, tiled.merges);
    cr_expect(fabs(scan.loss - tiled.loss) <= 1e-5 * fabs(scan.loss), "%s: loss %.9g (scan) vs %.9g (tiled)", spec,
              scan.loss, tiled.loss);
    double max_grad = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < m.n_floats; i++) {
        max_grad = fmax(max_grad, fabs(scan.grads[i]));
        max_diff = fmax(max_diff, fabs(scan.grads[i] - tiled.grads[i]));
    }
    cr_expect_gt(max_grad, 0.0, "%s: no gradient", spec);
    cr_log_info("%s: grad diff/max %g, loss diff %g", spec, max_diff / max_grad,
                fabs(scan.loss - tiled.loss) / fabs(scan.loss));
    /* Summation order only: observed <= 6e-6 of the largest gradient, 5e-5 with
     * TriPLU's cubic products on Intel and 1.2e-4 on a Zen 4 (BLIS's zen4
     * kernels sum in another order; the same at every DBRANCH_ISA level); a
     * pair visited twice or never would be O(1). */
    cr_expect(max_diff <= 4e-4 * max_grad, "%s: gradients differ by %g (largest %g)", spec, max_diff, max_grad);
    free(scan.grads);
    free(tiled.grads);
    free(tokens);
    model_free(&m);
}

#define NANOGPT "family=nanogpt vocab_size=40 block_size=11 n_layer=2 n_head=2 d_model=16 recurrent=1 "
#define LLAMA   "family=llama vocab_size=48 block_size=13 n_layer=2 n_head=4 n_kv_head=2 d_model=32 d_ff=40 recurrent=1 "
#define MOE                                                                                                            \
    "family=moe vocab_size=40 block_size=12 n_layer=2 n_head=4 n_kv_head=2 d_model=16 d_ff=24 n_expert=4 recurrent=1 "

Test(recurrent, tiled_equals_scan_nanogpt) { check_orders_agree(NANOGPT "branch=none", 1); }
Test(recurrent, tiled_equals_scan_nanogpt_branch) { check_orders_agree(NANOGPT "branch=decode", 2); }
Test(recurrent, tiled_equals_scan_llama_gqa_layer_heads_branch) {
    check_orders_agree(LLAMA "layer_heads=2,8 branch=decode mix_alpha_min=0.1 mix_alpha_max=0.9", 3);
}
Test(recurrent, tiled_equals_scan_llama_triplu) { check_orders_agree(LLAMA "ffn=triplu branch=none", 4); }
Test(recurrent, tiled_equals_scan_moe_branch) {
    check_orders_agree(MOE "top_k=2 top_k_branch=1 branch=decode mix_alpha_min=0.1 mix_alpha_max=0.9", 5);
}

/* The tiled schedule against the independent implementation's numbers. */
Test(recurrent, tiled_passes_the_reference_files) {
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    const char *files[] = {"options/11_llama_recurrent.h5", "options/17_nanogpt_recurrent_branch.h5",
                           "options_heldout/llama_recurrent_gqa_branch.h5", "options_heldout/moe_recurrent_branch.h5",
                           "options_heldout/nanogpt_recurrent.h5"};
    model_recurrent_set_schedule(MODEL_RECURRENT_TILED);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/reference/%s", root ? root : ".", files[i]);
        model_reference_report report;
        cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s: %s", path, dt_error_message());
        cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail (tiled)", path, report.n_failed, report.n_lines);
        model_reference_report_free(&report);
    }
    model_recurrent_set_schedule(MODEL_RECURRENT_SCAN);
}
Test(recurrent, tiled_equals_scan_detach_primary_share_off) {
    check_orders_agree(LLAMA "branch=decode detach_primary=1 share=off mix_alpha_min=0.1 mix_alpha_max=0.9", 6);
}
