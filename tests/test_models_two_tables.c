/* tok_emb_tables = 2, the capacity control of issue 16 (not in the SPEC;
 * docs/DECISIONS.md): a baseline whose input sums two token-embedding tables,
 * tok_emb[x] + tok_emb2[x]. Checked here: the config rules, the registry
 * (tok_emb2 [V,C], an embedding, starting at zero with every other tensor
 * as the baseline's at the same seed), the model file, the `info` counts
 * against the registry and by hand, and what the sum is as a function: one
 * table holding A + B, with tok_emb2's gradient equal to tok_emb's when the
 * head is untied (so AdamW moves the sum at twice the table's step). The
 * gradient check is in test_models_gradcheck.c, decode == teacher-forced in
 * test_eval_decode.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "models/model.h"
#include "models/model_info.h"
#include "models/model_io.h"
#include "support/scratch.h"

enum { BATCH = 2, SEQ = 6 };

static model_config small_config(model_family family, int tables) {
    model_config c = model_config_default(family);
    c.vocab_size = 31;
    c.block_size = 8;
    c.n_layer = 2;
    c.d_model = 8;
    c.n_head = 2;
    c.n_kv_head = family == FAMILY_NANOGPT ? 2 : 1;
    if (family == FAMILY_MOE) {
        c.n_expert = 4;
        c.top_k = 2;
    }
    c.tok_emb_tables = tables;
    return c;
}

Test(two_tables, config_rules) {
    model_config c = small_config(FAMILY_LLAMA, 1);
    cr_assert_eq(model_config_set(&c, "tok_emb_tables", "2"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.tok_emb_tables, 2);
    model_config three = small_config(FAMILY_LLAMA, 3); /* the key's range is 1..2 */
    cr_assert_eq(model_config_validate(&three), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tok_emb_tables") != NULL, "%s", dt_error_message());
    model_config ok = small_config(FAMILY_LLAMA, 2);
    cr_assert_eq(model_config_validate(&ok), DT_OK, "%s", dt_error_message());
    model_config branch = small_config(FAMILY_LLAMA, 2);
    branch.branch = BRANCH_DECODE;
    cr_assert_eq(model_config_validate(&branch), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tok_emb_tables = 2") && strstr(dt_error_message(), "branch = decode"), "%s",
              dt_error_message());
    model_config feedback = small_config(FAMILY_NANOGPT, 2);
    feedback.feedback = 1;
    cr_assert_eq(model_config_validate(&feedback), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tok_emb_tables = 2") && strstr(dt_error_message(), "feedback = 1"), "%s",
              dt_error_message());
}

/* tok_emb2_layer: the table joins a later block's input, on the plain stack of
 * a two-table model only. */
Test(two_tables, later_entry_rules) {
    model_config c = small_config(FAMILY_LLAMA, 2);
    c.n_layer = 3;
    c.tok_emb2_layer = 2;
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    model_config one = c;
    one.tok_emb_tables = 1;
    cr_assert_eq(model_config_validate(&one), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tok_emb2_layer = 2 needs tok_emb_tables = 2"), "%s", dt_error_message());
    model_config past = c;
    past.tok_emb2_layer = 3;
    cr_assert_eq(model_config_validate(&past), DT_ERR);
    cr_assert(strstr(dt_error_message(), "below n_layer = 3"), "%s", dt_error_message());
    const char *exclusive[3][2] = {{"attn_res", "full"}, {"recurrent", "1"}, {"n_loop", "2"}};
    for (int i = 0; i < 3; i++) {
        model_config x = c;
        cr_assert_eq(model_config_set(&x, exclusive[i][0], exclusive[i][1]), DT_OK, "%s", dt_error_message());
        cr_assert_eq(model_config_validate(&x), DT_ERR, "%s", exclusive[i][0]);
        cr_assert(strstr(dt_error_message(), "tok_emb2_layer = 2") && strstr(dt_error_message(), exclusive[i][0]), "%s",
                  dt_error_message());
    }
}

static float loss_of(model *m, const int32_t *tokens, const int32_t *targets, int grad);

/* Records the stream entering each sublayer (probe.h) as a heap copy. */
typedef struct {
    float *input[8];
    int64_t size;
} sublayer_inputs;

static void record_input(void *user, int64_t j, const dt_tensor *x) {
    sublayer_inputs *r = user;
    cr_assert(j < 8);
    free(r->input[j]);
    r->input[j] = malloc((size_t)x->size * sizeof(float));
    memcpy(r->input[j], x->data, (size_t)x->size * sizeof(float));
    r->size = x->size;
}

/* With tok_emb2_layer = 2 the stream into block 2 is what it would be with
 * a zero tok_emb2 (blocks 0 and 1 never see the table) plus tok_emb2[x],
 * bit for bit, and the blocks before it are untouched; so the table is no
 * longer a term a single input table absorbs. Every family. */
Test(two_tables, a_later_entry_joins_that_block_input) {
    const model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int f = 0; f < 3; f++) {
        model_config c = small_config(families[f], 2);
        c.n_layer = 3;
        c.tok_emb2_layer = 2;
        model m;
        cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
        dt_rng rng;
        dt_rng_seed(&rng, 21 + (uint64_t)f);
        model_init_weights(&m, &rng);
        float *table = malloc((size_t)m.tok_emb2->size * sizeof(float));
        dt_rng_fill_normal(&rng, table, m.tok_emb2->size, 0.5f);
        int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
        for (int i = 0; i < BATCH * SEQ; i++) {
            tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)c.vocab_size);
            targets[i] = (int32_t)dt_rng_below(&rng, (uint64_t)c.vocab_size);
        }
        sublayer_inputs zero = {0}, full = {0};
        model_probe probe = {.user = &zero, .sublayer_input = record_input};
        m.probe = &probe;
        const float loss_zero = loss_of(&m, tokens, targets, 0); /* tok_emb2 starts at zero */
        memcpy(m.tok_emb2->data, table, (size_t)m.tok_emb2->size * sizeof(float));
        probe.user = &full;
        const float loss_full = loss_of(&m, tokens, targets, 0);
        m.probe = NULL;
        cr_assert_neq(loss_zero, loss_full);
        const int64_t C = c.d_model;
        for (int j = 0; j < 4; j++) /* blocks 0 and 1: both sublayers' inputs unchanged */
            cr_assert(!memcmp(zero.input[j], full.input[j], (size_t)zero.size * sizeof(float)), "sublayer %d", j);
        for (int64_t i = 0; i < BATCH * SEQ; i++)
            for (int64_t k = 0; k < C; k++) {
                const float want = zero.input[4][i * C + k] + table[(int64_t)tokens[i] * C + k];
                cr_assert_eq(full.input[4][i * C + k], want, "family %d, row %lld, %lld", f, (long long)i,
                             (long long)k);
            }
        for (int j = 0; j < 8; j++) {
            free(zero.input[j]);
            free(full.input[j]);
        }
        free(table);
        model_free(&m);
    }
}

/* tok_emb2 is declared after tok_emb, starts at zero, and draws nothing: every
 * other tensor starts as the baseline's at the same seed, bit for bit. */
Test(two_tables, registry_and_init_match_the_baseline) {
    const model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int f = 0; f < 3; f++) {
        model base, two;
        model_config cb = small_config(families[f], 1), c2 = small_config(families[f], 2);
        cr_assert_eq(model_create(&base, &cb), DT_OK, "%s", dt_error_message());
        cr_assert_eq(model_create(&two, &c2), DT_OK, "%s", dt_error_message());
        cr_assert_null(base.tok_emb2);
        cr_assert_null(model_find_param(&base, "tok_emb2.weight"));
        model_param *p = model_find_param(&two, "tok_emb2.weight");
        cr_assert_not_null(p);
        cr_assert_eq(p->tensor, two.tok_emb2);
        cr_assert(p->tensor->ndim == 2 && p->tensor->shape[0] == c2.vocab_size && p->tensor->shape[1] == c2.d_model);
        cr_assert(p->is_embedding && !p->is_matrix && p->group == PARAM_PRIMARY);
        cr_assert_eq(two.n_params, base.n_params + 1);
        dt_rng rng;
        dt_rng_seed(&rng, 7);
        model_init_weights(&base, &rng);
        dt_rng_seed(&rng, 7);
        for (int64_t j = 0; j < two.tok_emb2->size; j++) /* init must overwrite this */
            dt_f32(two.tok_emb2)[j] = 1.0f;
        model_init_weights(&two, &rng);
        for (int64_t j = 0; j < two.tok_emb2->size; j++)
            cr_assert_eq(dt_f32(two.tok_emb2)[j], 0.0f);
        for (int i = 0; i < base.n_params; i++) {
            const model_param *q = model_find_param(&two, base.params[i].name);
            cr_assert_not_null(q, "%s", base.params[i].name);
            cr_assert(
                !memcmp(dt_f32(q->tensor), dt_f32(base.params[i].tensor), (size_t)q->tensor->size * sizeof(float)),
                "%s starts unlike the baseline's", q->name);
        }
        model_free(&base);
        model_free(&two);
    }
}

/* Loss and, with grad, the backward into the parameters (tokens [BATCH, SEQ]). */
static float loss_of(model *m, const int32_t *tokens, const int32_t *targets, int grad) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 20), DT_OK);
    ag_set_grad_enabled(&ctx, grad);
    dt_tensor *x = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    dt_tensor *y = ag_tensor(&ctx, DT_I32, DT_SHAPE(BATCH, SEQ));
    memcpy(x->data, tokens, BATCH * SEQ * sizeof *tokens);
    memcpy(y->data, targets, BATCH * SEQ * sizeof *targets);
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, x, y, &out), DT_OK, "%s", dt_error_message());
    const float loss = dt_f32(out.loss)[0];
    if (grad) {
        model_zero_grad(m);
        cr_assert_eq(ag_backward(&ctx, out.loss), DT_OK, "%s", dt_error_message());
    }
    ag_ctx_free(&ctx);
    return loss;
}

/* A two-table model with tables A, B computes what a baseline with the one
 * table A + B computes (llama: the same bits; the sum is formed the same
 * way). Untied, both tables get the same gradient, which is the baseline's
 * table gradient; tied (nanogpt), tok_emb's adds the head's. */
static void check_one_table(model_family family) {
    model base, two;
    model_config cb = small_config(family, 1), c2 = small_config(family, 2);
    cr_assert_eq(model_create(&base, &cb), DT_OK, "%s", dt_error_message());
    cr_assert_eq(model_create(&two, &c2), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    model_init_weights(&two, &rng);
    dt_rng_fill_normal(&rng, dt_f32(two.tok_emb), two.tok_emb->size, 0.5f);
    dt_rng_fill_normal(&rng, dt_f32(two.tok_emb2), two.tok_emb2->size, 0.5f);
    for (int i = 0; i < base.n_params; i++) {
        const model_param *q = model_find_param(&two, base.params[i].name);
        memcpy(dt_f32(base.params[i].tensor), dt_f32(q->tensor), (size_t)q->tensor->size * sizeof(float));
    }
    const int tied = cb.tie_embeddings;
    for (int64_t j = 0; j < base.tok_emb->size && !tied; j++)
        dt_f32(base.tok_emb)[j] = dt_f32(two.tok_emb)[j] + dt_f32(two.tok_emb2)[j];
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    for (int i = 0; i < BATCH * SEQ; i++) {
        tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)cb.vocab_size);
        targets[i] = (int32_t)dt_rng_below(&rng, (uint64_t)cb.vocab_size);
    }
    const float loss_two = loss_of(&two, tokens, targets, 1);
    const int64_t n = two.tok_emb->size;
    if (!tied) {
        const float loss_base = loss_of(&base, tokens, targets, 1);
        cr_assert_eq(loss_two, loss_base, "two tables %.9g, one table A + B %.9g", loss_two, loss_base);
        cr_assert(!memcmp(two.tok_emb2->grad, two.tok_emb->grad, (size_t)n * sizeof(float)),
                  "untied: tok_emb2's gradient is not tok_emb's");
        cr_assert(!memcmp(two.tok_emb->grad, base.tok_emb->grad, (size_t)n * sizeof(float)),
                  "untied: the tables' gradient is not the one table's");
    } else { /* the same input gradient, plus the head's in tok_emb */
        double differ = 0.0, input = 0.0;
        for (int64_t j = 0; j < n; j++) {
            differ = fmax(differ, fabs(two.tok_emb->grad[j] - two.tok_emb2->grad[j]));
            input = fmax(input, fabs(two.tok_emb2->grad[j]));
        }
        cr_assert_gt(input, 1e-4, "tok_emb2 gets no gradient");
        cr_assert_gt(differ, 1e-4, "tied: tok_emb's gradient lacks the head's part");
    }
    /* tok_emb2 is read: zeroing it changes the loss */
    memset(two.tok_emb2->data, 0, (size_t)n * sizeof(float));
    cr_assert_neq(loss_of(&two, tokens, targets, 0), loss_two, "the loss does not depend on tok_emb2");
    model_free(&base);
    model_free(&two);
}

Test(two_tables, the_sum_is_one_table) {
    check_one_table(FAMILY_LLAMA);
    check_one_table(FAMILY_MOE);
    check_one_table(FAMILY_NANOGPT);
}

/* info: one more [V,C] table among the embeddings, one more row per decode step. */
Test(two_tables, info_counts) {
    const model_family families[3] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int f = 0; f < 3; f++) {
        model_config cb = small_config(families[f], 1), c2 = small_config(families[f], 2);
        model_info ib, i2;
        cr_assert_eq(model_info_compute(&cb, 0, &ib), DT_OK, "%s", dt_error_message());
        cr_assert_eq(model_info_compute(&c2, 0, &i2), DT_OK, "%s", dt_error_message());
        const int64_t VC = c2.vocab_size * c2.d_model;
        cr_assert_eq(i2.other_params_primary, ib.other_params_primary + VC);
        cr_assert_eq(i2.layer_params_primary, ib.layer_params_primary);
        cr_assert_eq(i2.params_total, ib.params_total + VC);
        cr_assert_eq(i2.params_branch, 0);
        cr_assert_eq(i2.weight_bytes_baseline, ib.weight_bytes_baseline + 4.0 * (double)c2.d_model);
        cr_assert_eq(i2.weight_bytes_bf16_baseline, ib.weight_bytes_bf16_baseline + 4.0 * (double)c2.d_model);
        cr_assert_eq(i2.decode_flops_baseline, ib.decode_flops_baseline);
        model m;
        cr_assert_eq(model_create(&m, &c2), DT_OK, "%s", dt_error_message());
        cr_assert_eq(model_param_count(&m, -1), i2.params_total);
        model_free(&m);
    }
}

/* The model file keeps tok_emb2 and the key; a file without the key (written
 * before it) is one table. */
Test(two_tables, model_file_round_trip) {
    char dir[256], path[512];
    test_scratch_dir(dir, sizeof dir, "two_tables");
    snprintf(path, sizeof path, "%s/model.h5", dir);
    model m, back;
    model_config c = small_config(FAMILY_LLAMA, 2);
    cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    model_init_weights(&m, &rng);
    dt_rng_fill_normal(&rng, dt_f32(m.tok_emb2), m.tok_emb2->size, 0.3f);
    cr_assert_eq(model_save(&m, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(model_load(&back, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(back.config.tok_emb_tables, 2);
    cr_assert_not_null(back.tok_emb2);
    cr_assert(!memcmp(back.tok_emb2->data, m.tok_emb2->data, (size_t)m.tok_emb2->size * sizeof(float)));
    model_free(&back);
    model_free(&m);
    test_remove_dir(dir);
}
