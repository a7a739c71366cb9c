/* Decode-Branch properties of the training forward pass (SPEC §2), for every
 * family and the MoE routing variants:
 *   - the primary path of a branch model is bit-for-bit the baseline's;
 *   - causality: changing the token at position t changes no logit (primary
 *     or branch) before t, and the teacher-forced branch logit at t equals the
 *     one computed from the prefix 0..t alone (real generation);
 *   - branch-only parameters never reach the primary logits;
 *   - ablation identities: couple = off == zero coupling vectors, branch_emb =
 *     shared == own with branch.tok_emb copied from tok_emb, share = off with
 *     copies of the primary's matrices == share = on, alpha fixed at 0 gives
 *     loss == loss_branch (and at 1, loss == loss_primary);
 *   - the readout: loss, alpha, loss_primary/loss_branch recomputed in double
 *     from the returned logits, and the detach_primary objective;
 *   - input validation (token ids, sequence length);
 *   - the MoE FFN (top-k with ties to the lower index, replay/own selection,
 *     gates, experts, balance fractions) against naive double loops. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "models/model.h"
#include "models/moe.h"

enum { BATCH = 2, SEQ = 7 };

/* One named tiny configuration. */
typedef struct {
    const char *name;
    model_config config;
} named_config;

static model_config tiny_config(model_family family) {
    model_config c = model_config_default(family);
    c.vocab_size = 29;
    c.block_size = 12;
    c.n_layer = 2;
    c.d_model = 16;
    c.n_head = 4;
    c.n_kv_head = family == FAMILY_NANOGPT ? 4 : 2;
    c.d_ff = family == FAMILY_NANOGPT ? 64 : 24;
    if (family == FAMILY_MOE) {
        c.n_expert = 4;
        c.top_k = 2;
        c.top_k_branch = 2;
    }
    c.branch = BRANCH_DECODE;
    return c;
}

/* The configurations every property runs over. */
static int branch_configs(named_config *out) {
    int n = 0;
    out[n++] = (named_config){"nanogpt", tiny_config(FAMILY_NANOGPT)};
    out[n++] = (named_config){"llama", tiny_config(FAMILY_LLAMA)};
    model_config c = tiny_config(FAMILY_MOE);
    c.top_k_branch = 2;
    out[n++] = (named_config){"moe replay k_b=k", c};
    c.top_k_branch = 1;
    out[n++] = (named_config){"moe replay k_b<k", c};
    c.top_k_branch = 3;
    out[n++] = (named_config){"moe replay k_b>k", c};
    c.branch_routing = ROUTING_OWN;
    c.top_k_branch = 1;
    out[n++] = (named_config){"moe own k_b<k", c};
    c.top_k_branch = 3;
    out[n++] = (named_config){"moe own k_b>k", c};
    c = tiny_config(FAMILY_NANOGPT);
    c.share = 0;
    out[n++] = (named_config){"nanogpt share=off", c};
    c = tiny_config(FAMILY_LLAMA);
    c.share = 0;
    c.tie_embeddings = 1;
    out[n++] = (named_config){"llama share=off tied", c};
    c = tiny_config(FAMILY_MOE);
    c.share = 0;
    c.top_k_branch = 1;
    out[n++] = (named_config){"moe share=off replay", c};
    c.branch_routing = ROUTING_OWN;
    out[n++] = (named_config){"moe share=off own", c};
    c = tiny_config(FAMILY_LLAMA);
    c.detach_primary = 1;
    c.mix_alpha_min = 0.0;
    out[n++] = (named_config){"llama detach_primary", c};
    return n;
}

static int ends_with(const char *text, const char *suffix) {
    size_t n = strlen(text), k = strlen(suffix);
    return n >= k && !strcmp(text + n - k, suffix);
}

/* Every parameter random and non-trivial (coupling vectors too, so every path carries signal). */
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
            dt_rng_fill_normal(&rng, x, t->size, strstr(m->params[i].name, "couple") ? 0.5f : 0.3f);
        }
    }
}

static void make_model(model *m, const model_config *config, uint64_t seed) {
    cr_assert_eq(model_create(m, config), DT_OK, "model_create: %s", dt_error_message());
    randomize(m, seed);
}

/* dst's parameters take src's values wherever src has the same name. */
static void copy_params(model *dst, const model *src) {
    for (int i = 0; i < dst->n_params; i++) {
        model_param *p = model_find_param(src, dst->params[i].name);
        if (p) memcpy(dst->params[i].tensor->data, p->tensor->data, (size_t)p->tensor->size * sizeof(float));
    }
}

static void fill_tokens(int32_t *tokens, int64_t n, int64_t vocab, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)vocab);
}

/* Heap copies of a forward pass's outputs. */
typedef struct {
    int64_t B, T, V;
    float *logits_primary, *logits_branch, *alpha; /* [B,T,V] [B,T,V] [B,T] */
    double loss, loss_reported, loss_primary, loss_branch, aux;
} run_result;

static float *copy_floats(const dt_tensor *t) {
    if (!t) return NULL;
    float *copy = malloc((size_t)t->size * sizeof *copy);
    memcpy(copy, t->data, (size_t)t->size * sizeof *copy);
    return copy;
}

static run_result run(model *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T));
    memcpy(in->data, tokens, (size_t)(B * T) * sizeof(int32_t));
    dt_tensor *tg = NULL;
    if (targets) {
        tg = ag_tensor(&ctx, DT_I32, DT_SHAPE(B, T));
        memcpy(tg->data, targets, (size_t)(B * T) * sizeof(int32_t));
    }
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, in, tg, &out), DT_OK, "model_forward: %s", dt_error_message());
    run_result r = {.B = B, .T = T, .V = m->config.vocab_size};
    r.logits_primary = copy_floats(out.logits_primary);
    r.logits_branch = copy_floats(out.logits_branch);
    r.alpha = copy_floats(out.alpha);
    r.loss = out.loss ? dt_f32(out.loss)[0] : NAN;
    r.loss_reported = out.loss_reported ? dt_f32(out.loss_reported)[0] : NAN;
    r.loss_primary = out.loss_primary ? dt_f32(out.loss_primary)[0] : NAN;
    r.loss_branch = out.loss_branch ? dt_f32(out.loss_branch)[0] : NAN;
    r.aux = out.aux ? dt_f32(out.aux)[0] : NAN;
    ag_ctx_free(&ctx);
    return r;
}

static void free_result(run_result *r) {
    free(r->logits_primary);
    free(r->logits_branch);
    free(r->alpha);
    memset(r, 0, sizeof *r);
}

/* Largest |a - b| over the logits of positions [t0, t1) of every batch row. */
static double max_diff_positions(const float *a, const float *b, int64_t B, int64_t T, int64_t V, int64_t t0,
                                 int64_t t1) {
    double worst = 0.0;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t t = t0; t < t1; t++)
            for (int64_t v = 0; v < V; v++) {
                int64_t i = (bi * T + t) * V + v;
                worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
            }
    return worst;
}

static int equal_floats(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) return 0;
    return 1;
}

Test(branch, primary_is_bitwise_the_baseline) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 11);
    fill_tokens(targets, BATCH * SEQ, 29, 12);
    for (int i = 0; i < n; i++) {
        model with_branch, baseline;
        make_model(&with_branch, &configs[i].config, 100 + (uint64_t)i);
        model_config base_config = configs[i].config;
        base_config.branch = BRANCH_NONE;
        make_model(&baseline, &base_config, 999);
        copy_params(&baseline, &with_branch);
        run_result a = run(&with_branch, tokens, targets, BATCH, SEQ);
        run_result b = run(&baseline, tokens, targets, BATCH, SEQ);
        int64_t n_logits = BATCH * SEQ * a.V;
        cr_assert(memcmp(a.logits_primary, b.logits_primary, (size_t)n_logits * sizeof(float)) == 0,
                  "%s: primary logits differ from the baseline's (max diff %g)", configs[i].name,
                  max_diff_positions(a.logits_primary, b.logits_primary, BATCH, SEQ, a.V, 0, SEQ));
        /* The twin reports its primary's CE from the mixture's own pass (double sums over float blocks, as
         * eval does), the baseline from the cross-entropy op's: the same number to float rounding. */
        cr_assert(fabs(a.loss_primary - b.loss_primary) <= 1e-6 * fabs(b.loss_primary),
                  "%s: loss_primary %.9g vs baseline %.9g", configs[i].name, a.loss_primary, b.loss_primary);
        if (configs[i].config.family == FAMILY_MOE)
            cr_assert(a.aux == b.aux, "%s: aux %.9g vs baseline %.9g", configs[i].name, a.aux, b.aux);
        cr_assert(b.logits_branch == NULL && isnan(b.loss_branch), "%s: the baseline has no branch outputs",
                  configs[i].name);
        free_result(&a);
        free_result(&b);
        model_free(&with_branch);
        model_free(&baseline);
    }
}

Test(branch, causality) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], perturbed[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 21);
    for (int i = 0; i < n; i++) {
        model m;
        make_model(&m, &configs[i].config, 200 + (uint64_t)i);
        run_result base = run(&m, tokens, NULL, BATCH, SEQ);
        const int64_t V = base.V;
        for (int64_t t = 1; t < SEQ; t++) {
            memcpy(perturbed, tokens, sizeof perturbed);
            for (int64_t b = 0; b < BATCH; b++)
                perturbed[b * SEQ + t] = (tokens[b * SEQ + t] + 1 + (int32_t)t) % 29;
            run_result p = run(&m, perturbed, NULL, BATCH, SEQ);
            /* MoE expert batches change size when routing at t changes, so the
             * GEMM blocking (and rounding) of earlier rows may differ: allow a few ulps. */
            double before_p = max_diff_positions(base.logits_primary, p.logits_primary, BATCH, SEQ, V, 0, t);
            double before_q = max_diff_positions(base.logits_branch, p.logits_branch, BATCH, SEQ, V, 0, t);
            double at_p = max_diff_positions(base.logits_primary, p.logits_primary, BATCH, SEQ, V, t, t + 1);
            double at_q = max_diff_positions(base.logits_branch, p.logits_branch, BATCH, SEQ, V, t, t + 1);
            cr_assert(before_p <= 1e-5, "%s: token %lld changed a primary logit before it (by %g)", configs[i].name,
                      (long long)t, before_p);
            cr_assert(before_q <= 1e-5, "%s: token %lld changed a branch logit before it (by %g)", configs[i].name,
                      (long long)t, before_q);
            cr_assert(at_p > 1e-3 && at_q > 1e-3, "%s: token %lld did not change its own logits (%g, %g)",
                      configs[i].name, (long long)t, at_p, at_q);
            free_result(&p);
        }
        /* Teacher forcing equals generation: the branch at t from the prefix 0..t alone. */
        for (int64_t t = 0; t < SEQ; t++) {
            int32_t prefix[BATCH * SEQ];
            for (int64_t b = 0; b < BATCH; b++)
                for (int64_t s = 0; s <= t; s++)
                    prefix[b * (t + 1) + s] = tokens[b * SEQ + s];
            run_result p = run(&m, prefix, NULL, BATCH, t + 1);
            double worst = 0.0;
            for (int64_t b = 0; b < BATCH; b++)
                for (int64_t v = 0; v < V; v++) {
                    double full = base.logits_branch[(b * SEQ + t) * V + v];
                    double short_run = p.logits_branch[(b * (t + 1) + t) * V + v];
                    worst = fmax(worst, fabs(full - short_run));
                }
            cr_assert(worst <= 1e-4, "%s: branch logit at %lld differs between the full sequence and the prefix (%g)",
                      configs[i].name, (long long)t, worst);
            free_result(&p);
        }
        free_result(&base);
        model_free(&m);
    }
}

Test(branch, branch_parameters_never_reach_the_primary) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 31);
    fill_tokens(targets, BATCH * SEQ, 29, 32);
    for (int i = 0; i < n; i++) {
        model m;
        make_model(&m, &configs[i].config, 300 + (uint64_t)i);
        run_result base = run(&m, tokens, targets, BATCH, SEQ);
        int64_t n_logits = BATCH * SEQ * base.V;
        int n_branch_params = 0;
        dt_rng rng;
        dt_rng_seed(&rng, 77);
        for (int j = 0; j < m.n_params; j++) {
            if (m.params[j].group != PARAM_BRANCH) continue;
            n_branch_params++;
            dt_tensor *t = m.params[j].tensor;
            float *saved = copy_floats(t);
            for (int64_t e = 0; e < t->size; e++)
                dt_f32(t)[e] += 0.5f * (float)dt_rng_normal(&rng);
            run_result p = run(&m, tokens, targets, BATCH, SEQ);
            cr_assert(memcmp(base.logits_primary, p.logits_primary, (size_t)n_logits * sizeof(float)) == 0,
                      "%s: branch parameter %s changed a primary logit", configs[i].name, m.params[j].name);
            cr_assert(base.loss_primary == p.loss_primary, "%s: %s changed loss_primary", configs[i].name,
                      m.params[j].name);
            double moved = max_diff_positions(base.logits_branch, p.logits_branch, BATCH, SEQ, base.V, 0, SEQ);
            /* Replay with one expert per token: its gate is softmax of one logit = 1, so the
             * branch's own router copy has no effect (SPEC §2), and must have none. */
            int router_inert = strstr(m.params[j].name, "router") && configs[i].config.top_k_branch == 1 &&
                               configs[i].config.branch_routing == ROUTING_REPLAY;
            if (router_inert)
                cr_assert(moved == 0.0, "%s: %s acts although replay with one expert fixes its gate at 1",
                          configs[i].name, m.params[j].name);
            else
                cr_assert(moved > 1e-4, "%s: branch parameter %s does not reach the branch logits", configs[i].name,
                          m.params[j].name);
            memcpy(t->data, saved, (size_t)t->size * sizeof(float));
            free(saved);
            free_result(&p);
        }
        /* branch.tok_emb, and per layer couple_q, couple_out (+ couple_hidden on dense layers). */
        int per_layer = configs[i].config.family == FAMILY_MOE ? 2 : 3;
        cr_assert(n_branch_params >= 1 + per_layer * (int)configs[i].config.n_layer,
                  "%s: only %d branch-only parameters", configs[i].name, n_branch_params);
        free_result(&base);
        model_free(&m);
    }
}

/* couple = off is the same model as couple = on with zero coupling vectors. */
Test(branch, couple_off_equals_zero_coupling) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 41);
    fill_tokens(targets, BATCH * SEQ, 29, 42);
    for (int i = 0; i < n; i++) {
        model coupled, uncoupled;
        make_model(&coupled, &configs[i].config, 400 + (uint64_t)i);
        model_config off = configs[i].config;
        off.couple = 0;
        make_model(&uncoupled, &off, 4);
        copy_params(&uncoupled, &coupled);
        for (int j = 0; j < coupled.n_params; j++)
            if (strstr(coupled.params[j].name, "branch.couple_")) {
                cr_assert_null(model_find_param(&uncoupled, coupled.params[j].name), "%s: couple = off still has %s",
                               configs[i].name, coupled.params[j].name);
                memset(coupled.params[j].tensor->data, 0, (size_t)coupled.params[j].tensor->size * sizeof(float));
            }
        run_result a = run(&coupled, tokens, targets, BATCH, SEQ);
        run_result b = run(&uncoupled, tokens, targets, BATCH, SEQ);
        int64_t n_logits = BATCH * SEQ * a.V;
        cr_assert(equal_floats(a.logits_branch, b.logits_branch, n_logits),
                  "%s: couple = off differs from zero coupling", configs[i].name);
        cr_assert(a.loss == b.loss && a.loss_branch == b.loss_branch, "%s: losses %.9g %.9g vs %.9g %.9g",
                  configs[i].name, a.loss, a.loss_branch, b.loss, b.loss_branch);
        free_result(&a);
        free_result(&b);
        model_free(&coupled);
        model_free(&uncoupled);
    }
}

/* branch_emb = shared embeds the branch with tok_emb: the same as own with a copy of tok_emb. */
Test(branch, shared_embedding_equals_copied_embedding) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 51);
    fill_tokens(targets, BATCH * SEQ, 29, 52);
    for (int i = 0; i < n; i++) {
        model own, shared;
        make_model(&own, &configs[i].config, 500 + (uint64_t)i);
        model_config shared_config = configs[i].config;
        shared_config.branch_emb = BRANCH_EMB_SHARED;
        make_model(&shared, &shared_config, 5);
        cr_assert_null(model_find_param(&shared, "branch.tok_emb.weight"), "%s: shared keeps branch.tok_emb",
                       configs[i].name);
        copy_params(&shared, &own);
        model_param *tok = model_find_param(&own, "tok_emb.weight");
        model_param *branch_tok = model_find_param(&own, "branch.tok_emb.weight");
        cr_assert(tok && branch_tok);
        memcpy(branch_tok->tensor->data, tok->tensor->data, (size_t)tok->tensor->size * sizeof(float));
        run_result a = run(&own, tokens, targets, BATCH, SEQ);
        run_result b = run(&shared, tokens, targets, BATCH, SEQ);
        int64_t n_logits = BATCH * SEQ * a.V;
        cr_assert(equal_floats(a.logits_branch, b.logits_branch, n_logits), "%s: shared embedding differs from a copy",
                  configs[i].name);
        cr_assert(a.loss == b.loss, "%s: loss %.9g vs %.9g", configs[i].name, a.loss, b.loss);
        free_result(&a);
        free_result(&b);
        model_free(&own);
        model_free(&shared);
    }
}

/* share = off with the branch copies equal to the primary's matrices computes what share = on does. */
Test(branch, unshared_copies_equal_shared) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 61);
    fill_tokens(targets, BATCH * SEQ, 29, 62);
    for (int i = 0; i < n; i++) {
        if (!configs[i].config.share) continue;
        model shared, unshared;
        make_model(&shared, &configs[i].config, 600 + (uint64_t)i);
        model_config off = configs[i].config;
        off.share = 0;
        make_model(&unshared, &off, 6);
        copy_params(&unshared, &shared);
        int n_copies = 0;
        for (int j = 0; j < unshared.n_params; j++) {
            const char *name = unshared.params[j].name;
            if (strncmp(name, "branch.layers.", 14)) continue;
            model_param *primary = model_find_param(&shared, name + 7); /* drop "branch." */
            cr_assert(primary, "%s: %s has no primary counterpart", configs[i].name, name);
            memcpy(unshared.params[j].tensor->data, primary->tensor->data,
                   (size_t)primary->tensor->size * sizeof(float));
            n_copies++;
        }
        cr_assert(n_copies > 0, "%s: share = off made no branch copies", configs[i].name);
        run_result a = run(&shared, tokens, targets, BATCH, SEQ);
        run_result b = run(&unshared, tokens, targets, BATCH, SEQ);
        int64_t n_logits = BATCH * SEQ * a.V;
        cr_assert(equal_floats(a.logits_branch, b.logits_branch, n_logits), "%s: share = off with copies differs",
                  configs[i].name);
        cr_assert(a.loss == b.loss, "%s: loss %.9g vs %.9g", configs[i].name, a.loss, b.loss);
        free_result(&a);
        free_result(&b);
        model_free(&shared);
        model_free(&unshared);
    }
}

/* alpha fixed at 0 reads out the branch alone; fixed at 1 the primary alone. */
Test(branch, fixed_alpha_extremes) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 71);
    fill_tokens(targets, BATCH * SEQ, 29, 72);
    for (int i = 0; i < n; i++) {
        for (int bound = 0; bound <= 1; bound++) {
            model_config c = configs[i].config;
            c.mix_alpha_min = c.mix_alpha_max = bound;
            c.aux_loss_coef = 0.0; /* compare the readout alone */
            model m;
            make_model(&m, &c, 700 + (uint64_t)i);
            run_result r = run(&m, tokens, targets, BATCH, SEQ);
            double expected = bound ? r.loss_primary : r.loss_branch;
            cr_assert(fabs(r.loss_reported - expected) <= 1e-6 * fabs(expected),
                      "%s: alpha = %d gives loss %.9g, expected %.9g", configs[i].name, bound, r.loss_reported,
                      expected);
            for (int64_t j = 0; j < BATCH * SEQ; j++)
                cr_assert(r.alpha[j] == (float)bound);
            free_result(&r);
            model_free(&m);
        }
    }
}

/* The readout recomputed in double from the returned logits (SPEC §2). */
Test(branch, readout_matches_double_recomputation) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 81);
    fill_tokens(targets, BATCH * SEQ, 29, 82);
    for (int i = 0; i < n; i++) {
        for (int variant = 0; variant < 2; variant++) {
            model_config c = configs[i].config;
            /* variant 1: alpha mostly unclipped */
            if (variant) c.mix_alpha_min = 0.05;
            model m;
            make_model(&m, &c, 800 + (uint64_t)i);
            run_result r = run(&m, tokens, targets, BATCH, SEQ);
            const int64_t V = r.V, rows = BATCH * SEQ;
            double nll_sum = 0.0, ce_p_sum = 0.0, ce_q_sum = 0.0;
            for (int64_t row = 0; row < rows; row++) {
                const float *lp = r.logits_primary + row * V, *lq = r.logits_branch + row * V;
                double max_p = lp[0], max_q = lq[0];
                for (int64_t v = 1; v < V; v++) {
                    max_p = fmax(max_p, lp[v]);
                    max_q = fmax(max_q, lq[v]);
                }
                double z_p = 0.0, z_q = 0.0;
                for (int64_t v = 0; v < V; v++) {
                    z_p += exp(lp[v] - max_p);
                    z_q += exp(lq[v] - max_q);
                }
                double collision = 0.0;
                for (int64_t v = 0; v < V; v++)
                    collision += pow(exp(lp[v] - max_p) / z_p, 2);
                double alpha = fmin(fmax(collision, c.mix_alpha_min), c.mix_alpha_max);
                int y = targets[row];
                double p_y = exp(lp[y] - max_p) / z_p, q_y = exp(lq[y] - max_q) / z_q;
                nll_sum += -log(alpha * p_y + (1.0 - alpha) * q_y);
                ce_p_sum += -log(p_y);
                ce_q_sum += -log(q_y);
                cr_assert(fabs(r.alpha[row] - alpha) <= 1e-5, "%s: alpha[%lld] = %g, expected %g", configs[i].name,
                          (long long)row, r.alpha[row], alpha);
            }
            double nll = nll_sum / rows, ce_p = ce_p_sum / rows, ce_q = ce_q_sum / rows;
            cr_assert(fabs(r.loss_reported - nll) <= 1e-5 * nll, "%s: mixture loss %.8g, expected %.8g",
                      configs[i].name, r.loss_reported, nll);
            cr_assert(fabs(r.loss_primary - ce_p) <= 1e-5 * ce_p, "%s: loss_primary %.8g vs %.8g", configs[i].name,
                      r.loss_primary, ce_p);
            cr_assert(fabs(r.loss_branch - ce_q) <= 1e-5 * ce_q, "%s: loss_branch %.8g vs %.8g", configs[i].name,
                      r.loss_branch, ce_q);
            /* The objective: + CE(p) under detach_primary, + coef * aux for moe. */
            double objective = nll + (c.detach_primary ? ce_p : 0.0);
            if (c.family == FAMILY_MOE) {
                cr_assert(r.aux >= 0.99 && r.aux <= (double)c.n_expert, "%s: aux %g outside [1, E]", configs[i].name,
                          r.aux);
                objective += c.aux_loss_coef * r.aux;
            } else {
                cr_assert(isnan(r.aux), "%s: a dense model reports aux", configs[i].name);
            }
            cr_assert(fabs(r.loss - objective) <= 1e-5 * objective, "%s: objective %.8g, expected %.8g",
                      configs[i].name, r.loss, objective);
            free_result(&r);
            model_free(&m);
        }
    }
}

Test(branch, rejects_bad_inputs) {
    model m;
    model_config c = tiny_config(FAMILY_LLAMA);
    make_model(&m, &c, 9);
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    model_outputs out;
    dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, 4));
    int32_t ids[4] = {1, 2, 29, 3};
    memcpy(tokens->data, ids, sizeof ids);
    cr_assert_eq(model_forward(&m, &ctx, tokens, NULL, &out), DT_ERR);
    cr_assert(strstr(dt_error_message(), "29"), "message names the id: %s", dt_error_message());
    ids[2] = -1;
    memcpy(tokens->data, ids, sizeof ids);
    cr_assert_eq(model_forward(&m, &ctx, tokens, NULL, &out), DT_ERR);
    cr_assert(strstr(dt_error_message(), "-1"), "message names the id: %s", dt_error_message());
    ids[2] = 5;
    memcpy(tokens->data, ids, sizeof ids);
    dt_tensor *targets = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, 4));
    int32_t bad_targets[4] = {0, 1, 2, 100};
    memcpy(targets->data, bad_targets, sizeof bad_targets);
    cr_assert_eq(model_forward(&m, &ctx, tokens, targets, &out), DT_ERR);
    cr_assert(strstr(dt_error_message(), "100"), "message names the target: %s", dt_error_message());
    dt_tensor *long_tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, 13));
    memset(long_tokens->data, 0, 13 * sizeof(int32_t));
    cr_assert_eq(model_forward(&m, &ctx, long_tokens, NULL, &out), DT_ERR);
    cr_assert(strstr(dt_error_message(), "13") && strstr(dt_error_message(), "12"), "message names T: %s",
              dt_error_message());
    /* And a valid call still works on the same context. */
    cr_assert_eq(model_forward(&m, &ctx, tokens, NULL, &out), DT_OK, "%s", dt_error_message());
    cr_assert_not_null(out.logits_branch);
    cr_assert_not_null(out.alpha);
    cr_assert_null(out.loss);
    ag_ctx_free(&ctx);
    model_free(&m);
}

/* ---- the MoE FFN against naive double loops (SPEC §1, §2 routing) ---- */

/* silu(a) * b in double */
static double swiglu_double(double a, double b) { return a / (1.0 + exp(-a)) * b; }

/* Expert e's SwiGLU of row x [C] into y [C], double. */
static void expert_double(double *y, const float *x, const model_moe_weights *w, int64_t e, int64_t C, int64_t F) {
    const float *w1 = dt_f32(w->w1) + e * F * C, *w3 = dt_f32(w->w3) + e * F * C, *w2 = dt_f32(w->w2) + e * C * F;
    double hidden[64];
    for (int64_t f = 0; f < F; f++) {
        double a = 0.0, b = 0.0;
        for (int64_t c = 0; c < C; c++) {
            a += (double)w1[f * C + c] * x[c];
            b += (double)w3[f * C + c] * x[c];
        }
        hidden[f] = swiglu_double(a, b);
    }
    for (int64_t c = 0; c < C; c++) {
        y[c] = 0.0;
        for (int64_t f = 0; f < F; f++)
            y[c] += (double)w2[c * F + f] * hidden[f];
    }
}

Test(moe, ffn_matches_naive_double) {
    enum { N = 13, C = 8, F = 6, E = 4 };
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    model_moe_weights w;
    memset(&w, 0, sizeof w);
    w.router = dt_tensor_new(DT_F32, DT_SHAPE(E, C));
    w.w1 = dt_tensor_new(DT_F32, DT_SHAPE(E, F, C));
    w.w3 = dt_tensor_new(DT_F32, DT_SHAPE(E, F, C));
    w.w2 = dt_tensor_new(DT_F32, DT_SHAPE(E, C, F));
    dt_tensor *weights[4] = {w.router, w.w1, w.w3, w.w2};
    for (int i = 0; i < 4; i++)
        dt_rng_fill_normal(&rng, dt_f32(weights[i]), weights[i]->size, 0.5f);
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    for (int use_select = 0; use_select <= 1; use_select++)
        for (int64_t k = 1; k <= E; k++) {
            ag_reset(&ctx);
            dt_tensor *x = ag_tensor(&ctx, DT_F32, DT_SHAPE(N, C));
            dt_rng_fill_normal(&rng, dt_f32(x), x->size, 1.0f);
            dt_tensor *select = NULL;
            if (use_select) {
                select = ag_tensor(&ctx, DT_F32, DT_SHAPE(N, E));
                dt_rng_fill_normal(&rng, dt_f32(select), select->size, 1.0f);
                /* Exact ties in row 0: experts 1 and 3 tie for first, 0 and 2 for third. */
                float tie_row[E] = {0.25f, 2.0f, 0.25f, 2.0f};
                memcpy(dt_f32(select), tie_row, sizeof tie_row);
            }
            model_moe_result result;
            cr_assert_eq(model_moe_forward(&ctx, &w, x, k, select, &result), DT_OK, "%s", dt_error_message());
            for (int64_t n = 0; n < N; n++) {
                const float *xn = dt_f32(x) + n * C;
                double logits[E];
                for (int64_t e = 0; e < E; e++) {
                    logits[e] = 0.0;
                    for (int64_t c = 0; c < C; c++)
                        logits[e] += (double)dt_f32(w.router)[e * C + c] * xn[c];
                }
                /* Top-k by selection, stable toward the lower index. */
                double chooser[E];
                for (int64_t e = 0; e < E; e++)
                    chooser[e] = select ? dt_f32(select)[n * E + e] : logits[e];
                int chosen[E], taken[E] = {0};
                for (int64_t j = 0; j < k; j++) {
                    int best = -1;
                    for (int e = 0; e < E; e++)
                        if (!taken[e] && (best < 0 || chooser[e] > chooser[best])) best = e;
                    taken[best] = 1;
                    chosen[j] = best;
                    cr_assert_eq(dt_i32(result.experts)[n * k + j], best, "row %lld slot %lld: expert %d, expected %d",
                                 (long long)n, (long long)j, dt_i32(result.experts)[n * k + j], best);
                }
                /* Gates: softmax of THIS path's router logits over the chosen experts. */
                double max = -INFINITY, z = 0.0;
                for (int64_t j = 0; j < k; j++)
                    max = fmax(max, logits[chosen[j]]);
                for (int64_t j = 0; j < k; j++)
                    z += exp(logits[chosen[j]] - max);
                double y[C] = {0}, expert_y[C];
                for (int64_t j = 0; j < k; j++) {
                    expert_double(expert_y, xn, &w, chosen[j], C, F);
                    double gate = exp(logits[chosen[j]] - max) / z;
                    for (int64_t c = 0; c < C; c++)
                        y[c] += gate * expert_y[c];
                }
                for (int64_t c = 0; c < C; c++)
                    cr_assert(fabs(dt_f32(result.out)[n * C + c] - y[c]) <= 1e-5 * (1.0 + fabs(y[c])),
                              "k %lld select %d: out[%lld, %lld] = %.7g, expected %.7g", (long long)k, use_select,
                              (long long)n, (long long)c, dt_f32(result.out)[n * C + c], y[c]);
            }
        }
    /* The fractions of the balance term: counts / (N k). */
    ag_reset(&ctx);
    dt_tensor *experts = ag_tensor(&ctx, DT_I32, DT_SHAPE(3, 2));
    int32_t assignment[6] = {0, 2, 2, 3, 0, 2};
    memcpy(experts->data, assignment, sizeof assignment);
    float fractions[E];
    model_moe_fractions(fractions, experts, E);
    cr_assert(fractions[0] == 2.0f / 6 && fractions[1] == 0.0f && fractions[2] == 3.0f / 6 && fractions[3] == 1.0f / 6);
    ag_ctx_free(&ctx);
    for (int i = 0; i < 4; i++)
        dt_tensor_free(weights[i]);
}

/* Per-step memory comes from the arena: after the first step, a forward +
 * backward allocates nothing (no arena chunk, no tape growth). */
Test(branch, second_step_allocates_nothing) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 91);
    fill_tokens(targets, BATCH * SEQ, 29, 92);
    for (int i = 0; i < n; i++) {
        model m;
        make_model(&m, &configs[i].config, 900 + (uint64_t)i);
        ag_ctx ctx;
        cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
        long mallocs = 0;
        int cap_nodes = 0;
        for (int step = 0; step < 3; step++) {
            ag_reset(&ctx);
            if (step == 2) {
                mallocs = dt_arena_mallocs(&ctx.arena);
                cap_nodes = ctx.cap_nodes;
            }
            dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
            dt_tensor *tg = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
            memcpy(in->data, tokens, sizeof tokens);
            memcpy(tg->data, targets, sizeof targets);
            model_outputs out;
            cr_assert_eq(model_forward(&m, &ctx, in, tg, &out), DT_OK, "%s", dt_error_message());
            cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "%s", dt_error_message());
        }
        cr_assert_eq(dt_arena_mallocs(&ctx.arena), mallocs, "%s: a steady-state step grew the arena", configs[i].name);
        cr_assert_eq(ctx.cap_nodes, cap_nodes, "%s: a steady-state step grew the tape", configs[i].name);
        ag_ctx_free(&ctx);
        model_free(&m);
    }
}

/* One forward + backward on a fresh tape whose arena may hold at most
 * backward_limit bytes once the forward is done (0: no limit). Returns
 * ag_backward's status; the parameters' gradients are zeroed first. */
static dt_status step_with_backward_limit(model *m, const int32_t *tokens, const int32_t *targets,
                                          size_t backward_limit, size_t *forward_bytes, size_t *step_bytes) {
    for (int p = 0; p < m->n_params; p++)
        if (m->params[p].tensor->grad)
            memset(m->params[p].tensor->grad, 0, (size_t)m->params[p].tensor->size * sizeof(float));
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    dt_tensor *tg = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    memcpy(in->data, tokens, sizeof(int32_t) * BATCH * SEQ);
    memcpy(tg->data, targets, sizeof(int32_t) * BATCH * SEQ);
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, in, tg, &out), DT_OK, "%s", dt_error_message());
    if (forward_bytes) *forward_bytes = ctx.arena.total_used;
    ctx.arena.limit = backward_limit;
    dt_status status = ag_backward(&ctx, out.loss);
    if (step_bytes) *step_bytes = ctx.arena.peak;
    ag_ctx_free(&ctx);
    return status;
}

/* An allocation that fails inside backward (a gradient buffer, a temp, an
 * op's scratch) makes ag_backward fail: it never returns DT_OK with partial
 * gradients. The arena's limit fails every allocation past a chosen size,
 * swept from the forward's footprint to the whole step's; at each one the
 * backward either fails with an out-of-memory message or returns gradients
 * equal to the unlimited run's bit for bit. */
Test(branch, backward_out_of_memory_fails_never_partial) {
    named_config configs[16];
    int n = branch_configs(configs);
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    fill_tokens(tokens, BATCH * SEQ, 29, 93);
    fill_tokens(targets, BATCH * SEQ, 29, 94);
    const int n_limits = 40;
    for (int i = 0; i < n; i++) {
        model m;
        make_model(&m, &configs[i].config, 950 + (uint64_t)i);
        size_t forward_bytes = 0, step_bytes = 0;
        cr_assert_eq(step_with_backward_limit(&m, tokens, targets, 0, &forward_bytes, &step_bytes), DT_OK, "%s",
                     dt_error_message());
        float *want[128];
        cr_assert(m.n_params <= 128);
        for (int p = 0; p < m.n_params; p++) {
            size_t bytes = (size_t)m.params[p].tensor->size * sizeof(float);
            want[p] = malloc(bytes);
            cr_assert(want[p] && m.params[p].tensor->grad, "%s: %s", configs[i].name, m.params[p].name);
            memcpy(want[p], m.params[p].tensor->grad, bytes);
        }
        cr_assert(step_bytes > forward_bytes, "%s", configs[i].name);
        int failed = 0, finished = 0;
        for (int l = 0; l <= n_limits; l++) {
            size_t limit = forward_bytes + (step_bytes - forward_bytes) * (size_t)l / n_limits;
            if (step_with_backward_limit(&m, tokens, targets, limit, NULL, NULL) != DT_OK) {
                cr_assert(strstr(dt_error_message(), "out of memory"), "%s at %zu: %s", configs[i].name, limit,
                          dt_error_message());
                failed++;
                continue;
            }
            finished++;
            for (int p = 0; p < m.n_params; p++)
                cr_assert(equal_floats(m.params[p].tensor->grad, want[p], m.params[p].tensor->size),
                          "%s: backward within %zu bytes returned DT_OK with a partial gradient of %s", configs[i].name,
                          limit, m.params[p].name);
        }
        cr_assert(failed > 0 && finished > 0, "%s: %d limits failed, %d finished", configs[i].name, failed, finished);
        for (int p = 0; p < m.n_params; p++)
            free(want[p]);
        model_free(&m);
    }
}
