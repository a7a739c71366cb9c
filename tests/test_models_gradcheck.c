/* Finite-difference gradient checks of whole tiny models (SPEC §1-§2): every
 * family, without and with the decode branch, MoE replay/own routing with
 * top_k_branch below and above top_k, share = off, couple = off, branch_emb =
 * shared, alpha_detach and detach_primary; two token-embedding tables.
 *
 * For each parameter tensor a sample of entries (random ones and the one with
 * the largest analytic gradient) is perturbed by +/- eps and the objective
 * re-evaluated without a tape; the central difference must match the
 * backward's gradient.
 *
 * The detach switches change the gradient but not the loss value, so they are
 * checked against the objective they define, evaluated in double from the
 * returned logits with the detached quantities frozen at their unperturbed
 * values:
 *   alpha_detach:   S = mean -log(alpha0 p(y) + (1 - alpha0) q(y))            (every parameter)
 *   detach_primary: S = mean CE(p) + mean -log(alpha0 p0(y) + (1 - alpha0) q(y))
 * The second freezes p and alpha but cannot freeze the primary's
 * intermediates inside q from outside, so it is exact for the parameters that
 * do not feed them (branch-only parameters and the head); the rest of
 * detach_primary is checked by identities: gradients of primary-only matrices
 * equal a baseline's, and share = on gradients are the sum of the primary and
 * branch copies' gradients under share = off with equal copies. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "models/model.h"

enum { BATCH = 2, SEQ = 5, VOCAB = 23, CHECKS_PER_TENSOR = 3 };

static model_config tiny_config(model_family family, int with_branch) {
    model_config c = model_config_default(family);
    c.vocab_size = VOCAB;
    c.block_size = 8;
    c.n_layer = 2;
    c.d_model = 8;
    c.n_head = 2;
    c.n_kv_head = family == FAMILY_NANOGPT ? 2 : 1;
    c.d_ff = family == FAMILY_NANOGPT ? 32 : 12;
    if (family == FAMILY_MOE) {
        c.n_expert = 4;
        c.top_k = 2;
        c.top_k_branch = 2;
    }
    c.branch = with_branch ? BRANCH_DECODE : BRANCH_NONE;
    c.aux_loss_coef = 0.1; /* large enough that a wrong aux gradient shows */
    return c;
}

static int ends_with(const char *text, const char *suffix) {
    size_t n = strlen(text), k = strlen(suffix);
    return n >= k && !strcmp(text + n - k, suffix);
}

static void randomize(model *m, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        float *x = dt_f32(t);
        if (ends_with(m->params[i].name, "norm.weight")) {
            for (int64_t j = 0; j < t->size; j++)
                x[j] = 1.0f + 0.2f * (float)dt_rng_normal(&rng);
        } else {
            dt_rng_fill_normal(&rng, x, t->size, strstr(m->params[i].name, "couple") ? 0.5f : 0.4f);
        }
    }
}

/* What the objective being differentiated is (see the file comment). */
typedef enum { OBJECTIVE_MODEL_LOSS, OBJECTIVE_ALPHA_FROZEN, OBJECTIVE_PRIMARY_FROZEN } objective_kind;

typedef struct {
    model m;
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    /* Frozen values at the unperturbed parameters. */
    double alpha0[BATCH * SEQ];
    double log_p0[BATCH * SEQ]; /* log p(y) */
} fixture;

/* log softmax(row)[y] in double. */
static double log_prob(const float *row, int64_t V, int y) {
    double max = row[0];
    for (int64_t v = 1; v < V; v++)
        max = fmax(max, row[v]);
    double z = 0.0;
    for (int64_t v = 0; v < V; v++)
        z += exp(row[v] - max);
    return row[y] - max - log(z);
}

/* One forward (no tape when grad = 0); returns the objective in double. With
 * grad = 1 it runs the backward into the parameters' gradients and records
 * the frozen values. */
static double evaluate(fixture *f, objective_kind kind, int grad) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    ag_set_grad_enabled(&ctx, grad);
    dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    dt_tensor *targets = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    memcpy(tokens->data, f->tokens, sizeof f->tokens);
    memcpy(targets->data, f->targets, sizeof f->targets);
    model_outputs out;
    cr_assert_eq(model_forward(&f->m, &ctx, tokens, targets, &out), DT_OK, "forward: %s", dt_error_message());
    const model_config *c = &f->m.config;
    const int64_t V = c->vocab_size, rows = BATCH * SEQ;
    if (grad) {
        model_zero_grad(&f->m);
        cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "backward: %s", dt_error_message());
        for (int64_t r = 0; r < rows && out.alpha; r++) {
            f->alpha0[r] = dt_f32(out.alpha)[r];
            f->log_p0[r] = log_prob(dt_f32(out.logits_primary) + r * V, V, f->targets[r]);
        }
    }
    double objective = dt_f32(out.loss)[0];
    if (kind != OBJECTIVE_MODEL_LOSS) {
        double total = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            int y = f->targets[r];
            double log_p = log_prob(dt_f32(out.logits_primary) + r * V, V, y);
            double log_q = log_prob(dt_f32(out.logits_branch) + r * V, V, y);
            double a = f->alpha0[r];
            double log_p_mix = kind == OBJECTIVE_PRIMARY_FROZEN ? f->log_p0[r] : log_p;
            double mix = a * exp(log_p_mix) + (1.0 - a) * exp(log_q);
            total += -log(mix);
            if (kind == OBJECTIVE_PRIMARY_FROZEN) total += -log_p;
        }
        objective = total / (double)rows;
        if (out.aux) objective += c->aux_loss_coef * dt_f32(out.aux)[0];
    }
    ag_ctx_free(&ctx);
    return objective;
}

static void fixture_init(fixture *f, const model_config *config, uint64_t seed) {
    memset(f, 0, sizeof *f);
    cr_assert_eq(model_create(&f->m, config), DT_OK, "model_create: %s", dt_error_message());
    randomize(&f->m, seed);
    dt_rng rng;
    dt_rng_seed(&rng, seed + 1);
    for (int i = 0; i < BATCH * SEQ; i++) {
        f->tokens[i] = (int32_t)dt_rng_below(&rng, VOCAB);
        f->targets[i] = (int32_t)dt_rng_below(&rng, VOCAB);
    }
}

/* Which parameters an objective's finite differences are exact for. */
typedef int (*param_filter)(const model_param *p);
static int every_param(const model_param *p) { return p != NULL; }
static int branch_or_head(const model_param *p) {
    return p->group == PARAM_BRANCH || !strncmp(p->name, "final_norm", 10) || !strcmp(p->name, "lm_head.weight");
}

/* Checks the sampled entries of every parameter passing `filter`; returns the number checked. */
static int check_gradients(const char *label, const model_config *config, objective_kind kind, param_filter filter,
                           uint64_t seed) {
    fixture f;
    fixture_init(&f, config, seed);
    model *m = &f.m;
    const double objective0 = evaluate(&f, kind, 1);
    float **analytic = calloc((size_t)m->n_params, sizeof *analytic);
    double largest_overall = 0.0;
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        analytic[i] = malloc((size_t)t->size * sizeof(float));
        memcpy(analytic[i], t->grad, (size_t)t->size * sizeof(float));
        if (!filter(&m->params[i])) continue;
        for (int64_t j = 0; j < t->size; j++)
            largest_overall = fmax(largest_overall, fabs(analytic[i][j]));
    }
    cr_assert(largest_overall > 1e-3, "%s: gradients are all ~0 (%g)", label, largest_overall);

    /* MoE routing is piecewise: a perturbation can flip a top-k choice, and
     * the difference quotient then measures the jump, not the slope. Step
     * sizes that disagree expose such entries; they are skipped and counted
     * (a smooth model must have none). A wrong gradient still fails: both
     * quotients agree with each other and not with it. */
    /* MoE takes smaller steps (fewer flips) and so a larger float32 noise floor. */
    const int moe = config->family == FAMILY_MOE;
    /* Recurrent layers (SPEC §6.4) feed every embedding through t+1 paths of
     * growing depth: at the dense step the quotients are still curving (they
     * approach the analytic value as h shrinks), so they take MoE's step. */
    const double eps = moe || config->recurrent ? 3e-3 : 1e-2, tol = 2e-2, floor_noise = moe ? 3e-4 : 1e-4;
    /* The float32 objective carries a rounding error of about two of its ulps,
     * which a difference quotient at step h turns into 2 ulp / h: at h = eps/4
     * that is 8 ulp / eps (1.9e-4 for a loss near 3 at the dense step). A
     * gradient that is zero (a key bias: softmax ignores a constant shift)
     * measures exactly this, and how many ulps it lands on depends on the
     * GEMM's summation order, which BLIS picks per CPU (zen3 differs from
     * skx). The two finest quotients differ by up to 2 ulp / (eps/2) + 2 ulp
     * / (eps/4) = 12 ulp / eps. */
    const float loss_f = fabsf((float)objective0);
    const double loss_ulp = (double)(nextafterf(loss_f, INFINITY) - loss_f);
    const double noise = fmax(floor_noise, 8.0 * loss_ulp / eps);
    const double smooth_noise = fmax(floor_noise, 12.0 * loss_ulp / eps);
    dt_rng rng;
    dt_rng_seed(&rng, seed + 2);
    int n_checked = 0, n_skipped = 0;
    for (int i = 0; i < m->n_params; i++) {
        if (!filter(&m->params[i])) continue;
        dt_tensor *t = m->params[i].tensor;
        float *x = dt_f32(t);
        int64_t largest_at = 0;
        double largest = 0.0;
        for (int64_t j = 0; j < t->size; j++)
            if (fabs(analytic[i][j]) > largest) largest = fabs(analytic[i][largest_at = j]);
        for (int s = 0; s <= CHECKS_PER_TENSOR; s++) {
            int64_t j = s == 0 ? largest_at : (int64_t)dt_rng_below(&rng, (uint64_t)t->size);
            /* Central differences at eps, eps/2 and eps/4: the two finer ones
             * agreeing says the loss is smooth at that scale (no routing flip),
             * and the finest is compared (its O(eps^2) error is 16x smaller than
             * the coarsest's, which matters for the curved product FFNs and
             * depth softmaxes of SPEC §6). */
            double numeric[3];
            for (int step = 0; step < 3; step++) {
                float original = x[j];
                const double h = eps / (double)(1 << step);
                float plus = original + (float)h, minus = original - (float)h;
                x[j] = plus;
                double up = evaluate(&f, kind, 0);
                x[j] = minus;
                double down = evaluate(&f, kind, 0);
                x[j] = original;
                numeric[step] = (up - down) / ((double)plus - (double)minus);
            }
            double a = analytic[i][j];
            double scale = fmax(fabs(numeric[2]), fmax(0.1 * largest, 1e-3 * largest_overall));
            if (fabs(numeric[1] - numeric[2]) > tol * scale + smooth_noise) {
                n_skipped++;
                continue;
            }
            cr_assert(fabs(a - numeric[2]) <= tol * scale + noise,
                      "%s: d/d %s[%lld]: analytic %.6g, numeric %.6g (scale %.3g)", label, m->params[i].name,
                      (long long)j, a, numeric[2], scale);
            n_checked++;
        }
    }
    if (moe)
        cr_assert(n_skipped * 5 <= n_checked, "%s: %d of %d entries non-smooth", label, n_skipped,
                  n_checked + n_skipped);
    else
        cr_assert_eq(n_skipped, 0, "%s: %d entries non-smooth in a dense model", label, n_skipped);
    for (int i = 0; i < m->n_params; i++)
        free(analytic[i]);
    free(analytic);
    model_free(m);
    return n_checked;
}

Test(gradcheck, dense_families) {
    model_config c = tiny_config(FAMILY_NANOGPT, 0);
    cr_assert_gt(check_gradients("nanogpt", &c, OBJECTIVE_MODEL_LOSS, every_param, 1), 0);
    c = tiny_config(FAMILY_LLAMA, 0);
    cr_assert_gt(check_gradients("llama gqa", &c, OBJECTIVE_MODEL_LOSS, every_param, 2), 0);
}

Test(gradcheck, dense_branch) {
    model_config c = tiny_config(FAMILY_NANOGPT, 1);
    c.mix_alpha_min = 0.0; /* alpha unclipped: its gradient is exercised */
    check_gradients("nanogpt branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 3);
    c = tiny_config(FAMILY_LLAMA, 1);
    check_gradients("llama branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 4);
    c.mix_alpha_min = 0.0;
    c.share = 0;
    check_gradients("llama branch share=off", &c, OBJECTIVE_MODEL_LOSS, every_param, 5);
    c = tiny_config(FAMILY_NANOGPT, 1);
    c.couple = 0;
    c.branch_emb = BRANCH_EMB_SHARED;
    c.mix_alpha_min = 0.0;
    check_gradients("nanogpt couple=off branch_emb=shared", &c, OBJECTIVE_MODEL_LOSS, every_param, 6);
    c = tiny_config(FAMILY_LLAMA, 1);
    c.tie_embeddings = 1;
    c.mix_alpha_min = c.mix_alpha_max = 0.3;
    check_gradients("llama tied, alpha fixed 0.3", &c, OBJECTIVE_MODEL_LOSS, every_param, 7);
}

Test(gradcheck, moe) {
    model_config c = tiny_config(FAMILY_MOE, 0);
    check_gradients("moe", &c, OBJECTIVE_MODEL_LOSS, every_param, 8);
    c = tiny_config(FAMILY_MOE, 1);
    c.top_k_branch = 1;
    c.mix_alpha_min = 0.0;
    check_gradients("moe replay k_b=1", &c, OBJECTIVE_MODEL_LOSS, every_param, 9);
    c.top_k_branch = 3;
    check_gradients("moe replay k_b=3", &c, OBJECTIVE_MODEL_LOSS, every_param, 10);
    c.branch_routing = ROUTING_OWN;
    c.share = 0;
    check_gradients("moe own k_b=3 share=off", &c, OBJECTIVE_MODEL_LOSS, every_param, 11);
    c.top_k_branch = 1;
    c.share = 1;
    check_gradients("moe own k_b=1", &c, OBJECTIVE_MODEL_LOSS, every_param, 12);
}

/* tok_emb_tables = 2 (the capacity control, not in the SPEC): tok_emb2[x]
 * joins the input tok_emb[x] (+ pos_emb[t]) (layer 0) or block `layer`'s
 * input, in every family (nanogpt's head tied to tok_emb alone). The second
 * call checks tok_emb2 by itself, so its gradients cannot be all ~0
 * (check_gradients asserts that). */
static int is_tok_emb2(const model_param *p) { return !strcmp(p->name, "tok_emb2.weight"); }
static void check_two_tables(int64_t layer, uint64_t seed, const uint64_t table_seeds[3]) {
    const model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int i = 0; i < 3; i++) {
        model_config c = tiny_config(families[i], 0);
        c.tok_emb_tables = 2;
        c.tok_emb2_layer = layer;
        char label[64];
        snprintf(label, sizeof label, "%s tok_emb_tables=2 tok_emb2_layer=%lld", model_family_name(families[i]),
                 (long long)layer);
        cr_assert_gt(check_gradients(label, &c, OBJECTIVE_MODEL_LOSS, every_param, seed + (uint64_t)i), 0);
        cr_assert_gt(check_gradients(label, &c, OBJECTIVE_MODEL_LOSS, is_tok_emb2, table_seeds[i]), 0);
    }
}
Test(gradcheck, two_token_embedding_tables) { check_two_tables(0, 91, (const uint64_t[3]){94, 95, 96}); }
/* (moe's table seed 102 flipped one routing choice in 4 samples, over the 1-in-5 allowance) */
Test(gradcheck, a_later_token_embedding_table) { check_two_tables(1, 97, (const uint64_t[3]){100, 107, 114}); }

/* SPEC §6.1 product FFNs (dense and MoE experts, with the branch coupled to
 * the product) and §6.2 per-layer heads. */
Test(gradcheck, product_ffns) {
    model_config c = tiny_config(FAMILY_LLAMA, 1);
    c.ffn = FFN_TRIPLU;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("llama triplu branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 21), 0);
    c.ffn = FFN_PROD4;
    c.share = 0;
    cr_assert_gt(check_gradients("llama prod4 share=off", &c, OBJECTIVE_MODEL_LOSS, every_param, 22), 0);
    c.ffn = FFN_TRIPLU;
    c.ffn_prod_norm = 1;
    cr_assert_gt(check_gradients("llama triplu prod_norm share=off", &c, OBJECTIVE_MODEL_LOSS, every_param, 27), 0);
    c = tiny_config(FAMILY_NANOGPT, 0);
    c.ffn = FFN_PROD2;
    c.ffn_prod_norm = 1;
    cr_assert_gt(check_gradients("nanogpt prod2 prod_norm", &c, OBJECTIVE_MODEL_LOSS, every_param, 23), 0);
    c = tiny_config(FAMILY_MOE, 1);
    c.ffn = FFN_TRIPLU;
    c.ffn_prod_norm = 1;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("moe triplu experts prod_norm", &c, OBJECTIVE_MODEL_LOSS, every_param, 24), 0);
}

Test(gradcheck, per_layer_heads) {
    model_config c = tiny_config(FAMILY_NANOGPT, 1);
    snprintf(c.layer_heads, sizeof c.layer_heads, "1,4");
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("nanogpt layer_heads 1,4 branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 25), 0);
    c = tiny_config(FAMILY_LLAMA, 0);
    c.n_kv_head = 1; /* GQA ratio 2: layers of 2 and 4 heads get 1 and 2 kv heads */
    snprintf(c.layer_heads, sizeof c.layer_heads, "4,2");
    cr_assert_gt(check_gradients("llama layer_heads 4,2 gqa", &c, OBJECTIVE_MODEL_LOSS, every_param, 26), 0);
}

/* SPEC §6.3 attention residuals: full and block routing, R = 1 and R > 1,
 * with the branch routing its own sources (randomize() draws the route
 * queries, so the softmax is away from the uniform mean they start at). */
Test(gradcheck, attention_residuals) {
    model_config c = tiny_config(FAMILY_LLAMA, 1);
    c.attn_res = ATTN_RES_FULL;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("llama attn_res full branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 31), 0);
    c.attn_res = ATTN_RES_BLOCK;
    c.attn_res_blocks = 2;
    c.attn_res_heads = 2;
    cr_assert_gt(check_gradients("llama mhar block branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 32), 0);
    c = tiny_config(FAMILY_NANOGPT, 0);
    c.attn_res = ATTN_RES_FULL;
    c.attn_res_heads = 4;
    cr_assert_gt(check_gradients("nanogpt mhar full", &c, OBJECTIVE_MODEL_LOSS, every_param, 33), 0);
}

/* SPEC §6.4 recurrent layers (the scan on the tape), with the branch reading
 * the persistent and temporary pairs, MoE's balance over all positions, and
 * detach_primary (the branch sees those pairs as constants). The llama and
 * nanogpt gradients are checked against the float64 reference files
 * (test_models_reference.c); here a randomised llama's tok_emb quotients keep
 * curving at every step size, which the smoothness test reads as a kink. */
Test(gradcheck, recurrent) {
    model_config c = tiny_config(FAMILY_MOE, 1);
    c.recurrent = 1;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("moe recurrent branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 42), 0);
    c = tiny_config(FAMILY_NANOGPT, 1);
    c.recurrent = 1;
    c.detach_primary = 1;
    check_gradients("nanogpt recurrent detach_primary", &c, OBJECTIVE_PRIMARY_FROZEN, branch_or_head, 43);
}

/* SPEC §6.4 ALiBi: the score bias inside the taped attention (primary and the
 * branch's cross form), with per-layer heads and GQA, and MoE. */
Test(gradcheck, alibi) {
    model_config c = tiny_config(FAMILY_NANOGPT, 1);
    c.alibi = 1;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("nanogpt alibi branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 41), 0);
    c = tiny_config(FAMILY_LLAMA, 1);
    c.alibi = 1;
    c.n_kv_head = 1;
    snprintf(c.layer_heads, sizeof c.layer_heads, "4,2");
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("llama alibi layer_heads 4,2 gqa branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 42),
                 0);
    c = tiny_config(FAMILY_MOE, 1);
    c.alibi = 1;
    c.mix_alpha_min = 0.0;
    cr_assert_gt(check_gradients("moe alibi branch", &c, OBJECTIVE_MODEL_LOSS, every_param, 43), 0);
}

Test(gradcheck, alpha_detach) {
    model_config c = tiny_config(FAMILY_LLAMA, 1);
    c.mix_alpha_min = 0.0;
    c.alpha_detach = 1;
    check_gradients("llama alpha_detach", &c, OBJECTIVE_ALPHA_FROZEN, every_param, 13);
    c = tiny_config(FAMILY_MOE, 1);
    c.mix_alpha_min = 0.0;
    c.alpha_detach = 1;
    c.top_k_branch = 1;
    check_gradients("moe alpha_detach", &c, OBJECTIVE_ALPHA_FROZEN, every_param, 24);
}

Test(gradcheck, detach_primary_branch_and_head) {
    model_config c = tiny_config(FAMILY_LLAMA, 1);
    c.mix_alpha_min = 0.0;
    c.detach_primary = 1;
    check_gradients("llama detach_primary", &c, OBJECTIVE_PRIMARY_FROZEN, branch_or_head, 15);
    c = tiny_config(FAMILY_NANOGPT, 1);
    c.detach_primary = 1;
    c.share = 0;
    check_gradients("nanogpt detach_primary share=off", &c, OBJECTIVE_PRIMARY_FROZEN, branch_or_head, 16);
    c = tiny_config(FAMILY_MOE, 1);
    c.detach_primary = 1;
    c.mix_alpha_min = 0.0;
    c.branch_routing = ROUTING_OWN;
    check_gradients("moe detach_primary own", &c, OBJECTIVE_PRIMARY_FROZEN, branch_or_head, 17);
}

/* ---- detach_primary identities ---- */

/* Gradients of one forward + backward of m on the fixture's tokens, as heap copies per parameter. */
static float **gradients(model *m, const fixture *f) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    dt_tensor *targets = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    memcpy(tokens->data, f->tokens, sizeof f->tokens);
    memcpy(targets->data, f->targets, sizeof f->targets);
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, tokens, targets, &out), DT_OK, "forward: %s", dt_error_message());
    model_zero_grad(m);
    cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "backward: %s", dt_error_message());
    float **grads = calloc((size_t)m->n_params, sizeof *grads);
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        grads[i] = malloc((size_t)t->size * sizeof(float));
        memcpy(grads[i], t->grad, (size_t)t->size * sizeof(float));
    }
    ag_ctx_free(&ctx);
    return grads;
}

static void free_gradients(float **grads, int n) {
    for (int i = 0; i < n; i++)
        free(grads[i]);
    free(grads);
}

static void copy_params(model *dst, const model *src) {
    for (int i = 0; i < dst->n_params; i++) {
        model_param *p = model_find_param(src, dst->params[i].name);
        if (p) memcpy(dst->params[i].tensor->data, p->tensor->data, (size_t)p->tensor->size * sizeof(float));
    }
}

/* max |a - b| relative to max(|b|, floor) over n values. */
static double relative_difference(const float *a, const float *b, int64_t n, double floor) {
    double worst = 0.0, scale = floor;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst / scale;
}

/* A matrix the branch applies itself (its copy under share = off): attention q/o and the FFN. */
static int is_branch_applied_matrix(const char *name) {
    return strstr(name, ".attn.wq.") || strstr(name, ".attn.wo.") || strstr(name, ".mlp.") || strstr(name, ".moe.");
}

/* Under detach_primary the branch treats K and V (and all of the primary's
 * intermediates) as constants, so matrices only the primary applies get the
 * gradient of CE(p) (+ aux) alone: the baseline model's gradient. */
Test(gradcheck, detach_primary_primary_only_matrices_match_the_baseline) {
    model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int share = 0; share <= 1; share++)
        for (int k = 0; k < 3; k++) {
            model_config c = tiny_config(families[k], 1);
            c.detach_primary = 1;
            c.share = share;
            c.mix_alpha_min = 0.0;
            fixture f;
            fixture_init(&f, &c, 40 + (uint64_t)k);
            model_config base_config = c;
            base_config.branch = BRANCH_NONE;
            model baseline;
            cr_assert_eq(model_create(&baseline, &base_config), DT_OK);
            copy_params(&baseline, &f.m);
            float **detached = gradients(&f.m, &f);
            float **base = gradients(&baseline, &f);
            int n_compared = 0;
            for (int i = 0; i < baseline.n_params; i++) {
                const char *name = baseline.params[i].name;
                int primary_only = strstr(name, ".attn.wk.") || strstr(name, ".attn.wv.") ||
                                   (!share && is_branch_applied_matrix(name)) ||
                                   (!strcmp(name, "tok_emb.weight") && !c.tie_embeddings);
                if (!primary_only) continue;
                model_param *p = model_find_param(&f.m, name);
                int index = (int)(p - f.m.params);
                double diff = relative_difference(detached[index], base[i], p->tensor->size, 1e-6);
                cr_assert(diff <= 1e-5, "family %d share %d: grad %s differs from the baseline by %g", k, share, name,
                          diff);
                n_compared++;
            }
            cr_assert_gt(n_compared, 2);
            free_gradients(detached, f.m.n_params);
            free_gradients(base, baseline.n_params);
            model_free(&baseline);
            model_free(&f.m);
        }
}

/* With share = off and the branch copies equal to the primary's matrices, the
 * model computes what share = on does, and a shared matrix's gradient is the
 * sum of its primary and branch copies' gradients (any detach setting). */
Test(gradcheck, shared_gradient_is_the_sum_of_unshared_copies) {
    model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int detach = 0; detach <= 1; detach++)
        for (int k = 0; k < 3; k++) {
            model_config c = tiny_config(families[k], 1);
            c.detach_primary = detach;
            c.mix_alpha_min = 0.0;
            if (families[k] == FAMILY_MOE) {
                c.top_k_branch = 3;
                c.branch_routing = detach ? ROUTING_OWN : ROUTING_REPLAY;
            }
            fixture f;
            fixture_init(&f, &c, 50 + (uint64_t)k);
            model_config off = c;
            off.share = 0;
            model unshared;
            cr_assert_eq(model_create(&unshared, &off), DT_OK);
            copy_params(&unshared, &f.m);
            for (int i = 0; i < unshared.n_params; i++)
                if (!strncmp(unshared.params[i].name, "branch.layers.", 14)) {
                    model_param *src = model_find_param(&f.m, unshared.params[i].name + 7);
                    memcpy(unshared.params[i].tensor->data, src->tensor->data,
                           (size_t)src->tensor->size * sizeof(float));
                }
            float **shared_grads = gradients(&f.m, &f);
            float **unshared_grads = gradients(&unshared, &f);
            for (int i = 0; i < f.m.n_params; i++) {
                const char *name = f.m.params[i].name;
                dt_tensor *t = f.m.params[i].tensor;
                float *expected = malloc((size_t)t->size * sizeof(float));
                model_param *primary_copy = model_find_param(&unshared, name);
                cr_assert(primary_copy, "share = off lacks %s", name);
                memcpy(expected, unshared_grads[primary_copy - unshared.params], (size_t)t->size * sizeof(float));
                char branch_name[128];
                snprintf(branch_name, sizeof branch_name, "branch.%s", name);
                /* (branch.tok_emb is the branch's embedding, not a share = off copy) */
                model_param *branch_copy =
                    strncmp(name, "layers.", 7) ? NULL : model_find_param(&unshared, branch_name);
                cr_assert_eq(branch_copy != NULL, is_branch_applied_matrix(name) && !strncmp(name, "layers.", 7),
                             "%s: a branch copy exists exactly for the matrices the branch applies", name);
                if (branch_copy)
                    for (int64_t j = 0; j < t->size; j++)
                        expected[j] += unshared_grads[branch_copy - unshared.params][j];
                double diff = relative_difference(shared_grads[i], expected, t->size, 1e-6);
                cr_assert(diff <= 1e-4, "family %d detach %d: grad %s is not the sum of the copies' (%g)", k, detach,
                          name, diff);
                free(expected);
            }
            free_gradients(shared_grads, f.m.n_params);
            free_gradients(unshared_grads, unshared.n_params);
            model_free(&unshared);
            model_free(&f.m);
        }
}
