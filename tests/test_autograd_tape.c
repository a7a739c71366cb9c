/* Tape behaviour: no-grad mode, detach, NULL propagation with the first
 * failing op's message, backward preconditions, gradient accumulation (across
 * steps and across two backward calls on one tape), heap gradients for
 * parameters, and the steady state: after the first step a step performs no
 * arena malloc and does not grow the tape. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "kernels/gemm.h"
#include "support/gradcheck.h"

static ag_ctx ctx;

static void setup(void) { cr_assert_eq(ag_ctx_init(&ctx, 4096), DT_OK); }
static void teardown(void) { ag_ctx_free(&ctx); }

TestSuite(tape, .init = setup, .fini = teardown);

static dt_tensor *param(uint64_t seed, int ndim, const int64_t *shape) {
    dt_tensor *t = gradcheck_param(seed, 1.0f, ndim, shape);
    cr_assert_not_null(t);
    return t;
}

Test(tape, no_grad_mode_records_nothing) {
    dt_tensor *x = param(1, DT_SHAPE(4, 6));
    dt_tensor *w = param(2, DT_SHAPE(5, 6));
    cr_assert_eq(ag_set_grad_enabled(&ctx, 0), 1, "grad mode starts on");
    dt_tensor *y = ag_mean(&ctx, ag_gelu(&ctx, ag_linear(&ctx, x, w, NULL)));
    cr_assert_not_null(y, "no-grad mode still computes: %s", dt_error_message());
    cr_assert_eq(ctx.n_nodes, 0);
    cr_assert_eq(y->requires_grad, 0);
    cr_assert_null(y->producer);
    cr_assert_eq(ag_backward(&ctx, y), DT_ERR, "nothing to differentiate");
    cr_assert(strstr(dt_error_message(), "backward"), "%s", dt_error_message());
    /* Scopes nest: the setter returns the previous state. */
    cr_assert_eq(ag_set_grad_enabled(&ctx, 0), 0);
    cr_assert_eq(ag_set_grad_enabled(&ctx, 1), 0);
    dt_tensor *z = ag_mean(&ctx, ag_linear(&ctx, x, w, NULL));
    cr_assert_eq(ctx.n_nodes, 2);
    cr_assert(z->requires_grad);
    dt_tensor_free(x);
    dt_tensor_free(w);
}

Test(tape, detach_stops_the_gradient) {
    dt_tensor *x = param(3, DT_SHAPE(3, 4));
    dt_tensor *constant = ag_detach(&ctx, x);
    cr_assert_not_null(constant);
    cr_assert_eq(constant->data, x->data, "detach is an alias, not a copy");
    cr_assert_eq(constant->requires_grad, 0);
    cr_assert_null(constant->producer);
    cr_assert_eq(ctx.n_nodes, 0, "detach records no node");
    /* d/dx sum(x * detach(x)) = detach(x) = x, not 2x. */
    dt_tensor *loss = ag_sum(&ctx, ag_mul(&ctx, x, constant));
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
    for (int64_t i = 0; i < x->size; i++)
        cr_assert_float_eq(x->grad[i], dt_f32(x)[i], 1e-6f, "element %lld", (long long)i);

    /* A loss that only reads detached values does not depend on anything. */
    ag_reset(&ctx);
    dt_tensor *only_constant = ag_sum(&ctx, ag_detach(&ctx, x));
    cr_assert_eq(ag_backward(&ctx, only_constant), DT_ERR);
    dt_tensor_free(x);
}

Test(tape, null_propagates_and_the_message_names_the_first_failing_op) {
    dt_tensor *x = param(4, DT_SHAPE(2, 3, 8));
    dt_tensor *w_bad = param(5, DT_SHAPE(6, 7)); /* K = 7 does not match x's 8 */
    dt_tensor *norm = param(6, DT_SHAPE(6));
    dt_tensor *h = ag_linear(&ctx, x, w_bad, NULL);
    cr_assert_null(h);
    char first[1024];
    snprintf(first, sizeof first, "%s", dt_error_message());
    cr_assert(strstr(first, "linear"), "%s", first);
    cr_assert(strstr(first, "[2, 3, 8]") && strstr(first, "[6, 7]"), "both shapes named: %s", first);
    /* The rest of the forward runs unchecked and keeps the first message. */
    dt_tensor *y = ag_rmsnorm(&ctx, h, norm, 1e-5f);
    y = ag_silu(&ctx, y);
    y = ag_add(&ctx, y, y);
    y = ag_attention(&ctx, y, y, y, 2, 1);
    dt_tensor *loss = ag_mean(&ctx, ag_rope(&ctx, y, 2, 10000.0));
    cr_assert_null(loss);
    cr_assert_eq(ag_backward(&ctx, loss), DT_ERR);
    cr_assert_str_eq(dt_error_message(), first, "the message changed to: %s", dt_error_message());
    dt_tensor_free(x);
    dt_tensor_free(w_bad);
    dt_tensor_free(norm);
}

Test(tape, backward_needs_a_scalar) {
    dt_tensor *x = param(7, DT_SHAPE(3, 2));
    dt_tensor *y = ag_scale(&ctx, x, 2.0f);
    cr_assert_eq(ag_backward(&ctx, y), DT_ERR);
    cr_assert(strstr(dt_error_message(), "scalar"), "%s", dt_error_message());
    cr_assert(strstr(dt_error_message(), "6 elements"), "%s", dt_error_message());
    dt_tensor_free(x);
}

/* A few ops whose gradient w.r.t. both parameters is nontrivial. */
static dt_tensor *small_loss(ag_ctx *g, dt_tensor *x, dt_tensor *w) {
    return ag_mean(g, ag_gelu(g, ag_linear(g, x, w, NULL)));
}

Test(tape, parameter_gradients_accumulate_across_steps_and_backward_calls) {
    dt_tensor *x = param(8, DT_SHAPE(5, 4));
    dt_tensor *w = param(9, DT_SHAPE(3, 4));
    cr_assert_eq(ag_backward(&ctx, small_loss(&ctx, x, w)), DT_OK, "%s", dt_error_message());
    float once[12];
    memcpy(once, w->grad, sizeof once);
    float max_abs = 0.0f;
    for (int i = 0; i < 12; i++)
        max_abs = fmaxf(max_abs, fabsf(once[i]));
    cr_assert_gt(max_abs, 1e-3f, "a degenerate gradient would make this test vacuous");

    /* A second step (reset, forward, backward) adds the same gradient again. */
    ag_reset(&ctx);
    cr_assert_eq(ag_backward(&ctx, small_loss(&ctx, x, w)), DT_OK);
    for (int i = 0; i < 12; i++)
        cr_assert_float_eq(w->grad[i], 2.0f * once[i], 1e-6f, "after two steps, element %d", i);

    /* Two backward calls over one tape: parameters accumulate, activations
     * start again from zero (otherwise the second call would add 2x). */
    memset(w->grad, 0, sizeof once);
    memset(x->grad, 0, (size_t)x->size * sizeof(float));
    ag_reset(&ctx);
    dt_tensor *loss = small_loss(&ctx, x, w);
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK);
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK);
    for (int i = 0; i < 12; i++)
        cr_assert_float_eq(w->grad[i], 2.0f * once[i], 1e-6f, "two backward calls, element %d", i);
    dt_tensor_free(x);
    dt_tensor_free(w);
}

Test(tape, a_parameter_without_a_grad_buffer_gets_a_heap_one) {
    dt_tensor *w = dt_tensor_new(DT_F32, DT_SHAPE(4));
    cr_assert_not_null(w);
    w->requires_grad = 1; /* no dt_tensor_alloc_grad */
    for (int i = 0; i < 4; i++)
        dt_f32(w)[i] = (float)(i + 1);
    dt_tensor *loss = ag_sum(&ctx, ag_mul(&ctx, w, w));
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
    ag_reset(&ctx);
    /* Arena memory is reused by the next step: the gradient must survive it. */
    dt_tensor *other = ag_tensor(&ctx, DT_F32, DT_SHAPE(64));
    memset(other->data, 0xff, 64 * sizeof(float));
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(w->grad[i], 2.0f * (i + 1), 1e-6f);
    dt_tensor_free(w); /* frees the grad with free(): ASan flags an arena pointer */
}

Test(tape, reshape_is_an_alias_whose_gradient_passes_through) {
    dt_tensor *x = param(10, DT_SHAPE(2, 3, 4));
    dt_tensor *r = ag_reshape(&ctx, x, DT_SHAPE(6, 4));
    cr_assert_not_null(r);
    cr_assert_eq(r->data, x->data);
    cr_assert_eq(r->ndim, 2);
    dt_tensor *loss = ag_sum(&ctx, ag_scale(&ctx, r, 3.0f));
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK);
    for (int64_t i = 0; i < x->size; i++)
        cr_assert_float_eq(x->grad[i], 3.0f, 1e-6f);
    cr_assert_null(ag_reshape(&ctx, x, DT_SHAPE(5, 5)));
    cr_assert(strstr(dt_error_message(), "reshape") && strstr(dt_error_message(), "[2, 3, 4]"), "%s",
              dt_error_message());
    dt_tensor_free(x);
}

/* One "training step" of a small llama-like stack, repeated enough to need
 * more than the tape's initial 256 node slots. */
typedef struct {
    dt_tensor *emb, *norm, *wq, *wk, *wv, *wo, *w1, *w3, *w2, *head;
    dt_tensor *tokens, *targets;
} toy_model;

enum {
    TOY_B = 2,
    TOY_T = 5,
    TOY_C = 8,
    TOY_H = 2,
    TOY_F = 12,
    TOY_V = 11,
    TOY_LAYERS = 18
}; /* 16 nodes a layer: 290 in all */

static dt_tensor *toy_step(ag_ctx *g, toy_model *m) {
    dt_tensor *h = ag_embedding(g, m->emb, m->tokens);
    for (int l = 0; l < TOY_LAYERS; l++) {
        dt_tensor *x = ag_rmsnorm(g, h, m->norm, 1e-5f);
        dt_tensor *q = ag_rope(g, ag_linear(g, x, m->wq, NULL), TOY_H, 10000.0);
        dt_tensor *k = ag_rope(g, ag_linear(g, x, m->wk, NULL), 1, 10000.0);
        dt_tensor *v = ag_linear(g, x, m->wv, NULL);
        h = ag_add(g, h, ag_linear(g, ag_attention(g, q, k, v, TOY_H, 1), m->wo, NULL));
        x = ag_rmsnorm(g, h, m->norm, 1e-5f);
        dt_tensor *z = ag_swiglu(g, ag_linear(g, x, m->w1, NULL), ag_linear(g, x, m->w3, NULL));
        h = ag_add(g, h, ag_scale(g, ag_linear(g, z, m->w2, NULL), 0.5f));
    }
    dt_tensor *logits = ag_linear(g, ag_rmsnorm(g, h, m->norm, 1e-5f), m->head, NULL);
    return ag_mean(g, ag_cross_entropy(g, logits, m->targets));
}

Test(tape, steady_state_steps_do_not_malloc_or_grow_the_tape) {
    /* One thread: ~1000 tiny GEMMs, each of which would otherwise wake a
     * second BLIS thread (milliseconds apiece on a loaded 2-core machine). */
    k_set_threads(1);
    toy_model m;
    int hd = TOY_C / TOY_H;
    m.emb = param(20, DT_SHAPE(TOY_V, TOY_C));
    m.norm = param(21, DT_SHAPE(TOY_C));
    m.wq = param(22, DT_SHAPE(TOY_C, TOY_C));
    m.wk = param(23, DT_SHAPE(hd, TOY_C));
    m.wv = param(24, DT_SHAPE(hd, TOY_C));
    m.wo = param(25, DT_SHAPE(TOY_C, TOY_C));
    m.w1 = param(26, DT_SHAPE(TOY_F, TOY_C));
    m.w3 = param(27, DT_SHAPE(TOY_F, TOY_C));
    m.w2 = param(28, DT_SHAPE(TOY_C, TOY_F));
    m.head = param(29, DT_SHAPE(TOY_V, TOY_C));
    m.tokens = dt_tensor_new(DT_I32, DT_SHAPE(TOY_B, TOY_T));
    m.targets = dt_tensor_new(DT_I32, DT_SHAPE(TOY_B, TOY_T));
    for (int i = 0; i < TOY_B * TOY_T; i++) {
        dt_i32(m.tokens)[i] = (i * 7) % TOY_V;
        dt_i32(m.targets)[i] = (i * 3 + 1) % TOY_V;
    }

    ag_reset(&ctx);
    dt_tensor *loss = toy_step(&ctx, &m);
    cr_assert_not_null(loss, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
    float first_loss = dt_f32(loss)[0];
    int first_nodes = ctx.n_nodes;
    cr_assert_gt(first_nodes, 256, "the step should outgrow the initial tape capacity (%d nodes)", first_nodes);
    cr_assert_gt(dt_arena_mallocs(&ctx.arena), 1, "the step should outgrow the initial 4 KB arena");

    ag_reset(&ctx); /* folds the arena: one malloc here, none after */
    long mallocs = dt_arena_mallocs(&ctx.arena);
    int cap_nodes = ctx.cap_nodes;
    ag_node **nodes = ctx.nodes;
    for (int step = 0; step < 3; step++) {
        ag_reset(&ctx);
        loss = toy_step(&ctx, &m);
        cr_assert_eq(ag_backward(&ctx, loss), DT_OK);
        cr_assert_eq(dt_f32(loss)[0], first_loss, "same parameters, same loss");
        cr_assert_eq(ctx.n_nodes, first_nodes);
    }
    cr_assert_eq(dt_arena_mallocs(&ctx.arena), mallocs, "a steady-state step allocated arena chunks");
    cr_assert_eq(ctx.cap_nodes, cap_nodes, "the tape grew");
    cr_assert_eq(ctx.nodes, nodes, "the tape was reallocated");

    dt_tensor *all[] = {m.emb, m.norm, m.wq, m.wk, m.wv, m.wo, m.w1, m.w3, m.w2, m.head, m.tokens, m.targets};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_free(all[i]);
}

/* ---- every op: NULL in -> NULL out, message untouched ---- */

Test(tape, every_op_passes_null_through_without_touching_the_message) {
    dt_tensor *x = param(30, DT_SHAPE(2, 3, 4));
    dt_tensor *m2 = param(31, DT_SHAPE(6, 4));
    dt_tensor *v = param(32, DT_SHAPE(4));
    dt_tensor *idx = dt_tensor_new(DT_I32, DT_SHAPE(6));
    dt_tensor *idx2 = dt_tensor_new(DT_I32, DT_SHAPE(6, 2));
    float fractions[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    dt_tensor *alpha = x;
    dt_errorf("sentinel");
    dt_tensor *results[] = {
        ag_linear(&ctx, NULL, m2, NULL),
        ag_linear(&ctx, x, NULL, NULL),
        ag_add(&ctx, NULL, x),
        ag_add(&ctx, x, NULL),
        ag_mul(&ctx, NULL, x),
        ag_mul(&ctx, x, NULL),
        ag_scale(&ctx, NULL, 2.0f),
        ag_add_vec(&ctx, NULL, v),
        ag_add_vec(&ctx, x, NULL),
        ag_mul_vec(&ctx, NULL, v),
        ag_mul_vec(&ctx, x, NULL),
        ag_scale_rows(&ctx, NULL, v),
        ag_scale_rows(&ctx, m2, NULL),
        ag_clip(&ctx, NULL, 0.0f, 1.0f),
        ag_logsumexp2(&ctx, NULL, x),
        ag_logsumexp2(&ctx, x, NULL),
        ag_sum(&ctx, NULL),
        ag_mean(&ctx, NULL),
        ag_reshape(&ctx, NULL, DT_SHAPE(24)),
        ag_concat_last(&ctx, NULL, x),
        ag_concat_last(&ctx, x, NULL),
        ag_slice_last(&ctx, NULL, 0, 1),
        ag_detach(&ctx, NULL),
        ag_embedding(&ctx, NULL, idx),
        ag_embedding(&ctx, m2, NULL),
        ag_gather_rows(&ctx, NULL, idx),
        ag_gather_rows(&ctx, m2, NULL),
        ag_scatter_add_rows(&ctx, NULL, idx, 6),
        ag_scatter_add_rows(&ctx, m2, NULL, 6),
        ag_gather_cols(&ctx, NULL, idx2),
        ag_gather_cols(&ctx, m2, NULL),
        ag_layernorm(&ctx, NULL, v, v, 1e-5f),
        ag_layernorm(&ctx, x, NULL, v, 1e-5f),
        ag_rmsnorm(&ctx, NULL, v, 1e-5f),
        ag_rmsnorm(&ctx, x, NULL, 1e-5f),
        ag_gelu(&ctx, NULL),
        ag_silu(&ctx, NULL),
        ag_swiglu(&ctx, NULL, x),
        ag_swiglu(&ctx, x, NULL),
        ag_softmax(&ctx, NULL),
        ag_log_softmax(&ctx, NULL),
        ag_rope(&ctx, NULL, 2, 10000.0),
        ag_attention(&ctx, NULL, x, x, 2, 1),
        ag_attention(&ctx, x, NULL, x, 2, 1),
        ag_attention(&ctx, x, x, NULL, 2, 1),
        ag_cross_entropy(&ctx, NULL, idx),
        ag_cross_entropy(&ctx, m2, NULL),
        ag_mixture_nll(&ctx, NULL, m2, idx, 0.5f, 1.0f, 0, 0, &alpha),
        ag_mixture_nll(&ctx, m2, NULL, idx, 0.5f, 1.0f, 0, 0, NULL),
        ag_mixture_nll(&ctx, m2, m2, NULL, 0.5f, 1.0f, 0, 0, NULL),
        ag_moe_balance(&ctx, NULL, fractions),
    };
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++)
        cr_assert_null(results[i], "call %zu", i);
    cr_assert_null(alpha, "alpha_out is cleared on failure");
    cr_assert_str_eq(dt_error_message(), "sentinel");
    cr_assert_eq(ctx.n_nodes, 0);
    dt_tensor_free(x);
    dt_tensor_free(m2);
    dt_tensor_free(v);
    dt_tensor_free(idx);
    dt_tensor_free(idx2);
}
