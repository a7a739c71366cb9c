/* Input validation of every op: a shape or dtype mismatch returns NULL with a
 * one-line message naming the op and the shapes (or the bad value), records
 * no node, and never crashes. */
#include <criterion/criterion.h>
#include <string.h>

#include "autograd/ops.h"
#include "support/gradcheck.h"

static ag_ctx ctx;
static dt_tensor *x234, *x243, *m64, *m65, *v4, *v5, *ids6, *ids6x2, *ids5;

static dt_tensor *make_ids(int ndim, const int64_t *shape, int32_t fill) {
    dt_tensor *t = dt_tensor_new(DT_I32, ndim, shape);
    cr_assert_not_null(t);
    for (int64_t i = 0; i < t->size; i++)
        dt_i32(t)[i] = fill;
    return t;
}

static void setup(void) {
    cr_assert_eq(ag_ctx_init(&ctx, 1 << 16), DT_OK);
    x234 = gradcheck_param(1, 1.0f, DT_SHAPE(2, 3, 4));
    x243 = gradcheck_param(2, 1.0f, DT_SHAPE(2, 4, 3));
    m64 = gradcheck_param(3, 1.0f, DT_SHAPE(6, 4));
    m65 = gradcheck_param(4, 1.0f, DT_SHAPE(6, 5));
    v4 = gradcheck_param(5, 1.0f, DT_SHAPE(4));
    v5 = gradcheck_param(6, 1.0f, DT_SHAPE(5));
    ids6 = make_ids(DT_SHAPE(6), 1);
    ids6x2 = make_ids(DT_SHAPE(6, 2), 1);
    ids5 = make_ids(DT_SHAPE(5), 1);
}

static void teardown(void) {
    dt_tensor *all[] = {x234, x243, m64, m65, v4, v5, ids6, ids6x2, ids5};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_free(all[i]);
    ag_ctx_free(&ctx);
}

TestSuite(errors, .init = setup, .fini = teardown);

/* Asserts the op failed, recorded nothing, and its message contains each fragment. */
#define EXPECT_ERROR(call, ...)                                                                                        \
    do {                                                                                                               \
        dt_error_clear();                                                                                              \
        int nodes_before = ctx.n_nodes;                                                                                \
        cr_assert_null((call), "%s should fail", #call);                                                               \
        cr_assert_eq(ctx.n_nodes, nodes_before, "%s recorded a node", #call);                                          \
        const char *fragments[] = {__VA_ARGS__};                                                                       \
        for (size_t f = 0; f < sizeof fragments / sizeof fragments[0]; f++)                                            \
            cr_assert(strstr(dt_error_message(), fragments[f]), "%s: message '%s' lacks '%s'", #call,                  \
                      dt_error_message(), fragments[f]);                                                               \
        cr_assert_null(strchr(dt_error_message(), '\n'), "one line");                                                  \
    } while (0)

Test(errors, linear) {
    EXPECT_ERROR(ag_linear(&ctx, x234, m65, NULL), "linear", "[2, 3, 4]", "[6, 5]");
    EXPECT_ERROR(ag_linear(&ctx, x234, v4, NULL), "linear", "weight", "[4]");
    EXPECT_ERROR(ag_linear(&ctx, x234, m64, v4), "linear", "[6, 4]", "[4]");
    EXPECT_ERROR(ag_linear(&ctx, ids6x2, m64, NULL), "linear", "float32");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, elementwise) {
    EXPECT_ERROR(ag_add(&ctx, x234, x243), "add", "[2, 3, 4]", "[2, 4, 3]");
    EXPECT_ERROR(ag_mul(&ctx, x234, x243), "mul", "[2, 3, 4]", "[2, 4, 3]");
    EXPECT_ERROR(ag_add_vec(&ctx, x234, v5), "add_vec", "[2, 3, 4]", "[5]");
    EXPECT_ERROR(ag_mul_vec(&ctx, x234, m64), "mul_vec", "[2, 3, 4]", "[6, 4]");
    EXPECT_ERROR(ag_scale_rows(&ctx, m64, v5), "scale_rows", "[6, 4]", "[5]");
    EXPECT_ERROR(ag_clip(&ctx, x234, 1.0f, -1.0f), "clip", "1", "-1");
    EXPECT_ERROR(ag_logsumexp2(&ctx, m64, m65), "logsumexp2", "[6, 4]", "[6, 5]");
    EXPECT_ERROR(ag_scale(&ctx, ids6, 2.0f), "scale", "float32");
    EXPECT_ERROR(ag_sum(&ctx, ids6), "sum", "float32");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, shape_ops) {
    EXPECT_ERROR(ag_reshape(&ctx, x234, DT_SHAPE(5, 5)), "reshape", "[2, 3, 4]", "25");
    EXPECT_ERROR(ag_reshape(&ctx, x234, DT_SHAPE(24, 0)), "reshape", "dimension 1");
    EXPECT_ERROR(ag_concat_last(&ctx, x234, m64), "concat_last", "[2, 3, 4]", "[6, 4]");
    EXPECT_ERROR(ag_slice_last(&ctx, x234, 2, 3), "slice_last", "[2, 5)", "[2, 3, 4]");
    EXPECT_ERROR(ag_slice_last(&ctx, x234, -1, 2), "slice_last", "[-1, 1)");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, indexing_names_the_bad_id) {
    dt_tensor *tokens = make_ids(DT_SHAPE(2, 3), 2);
    dt_i32(tokens)[4] = 6; /* V = 6: out of range */
    EXPECT_ERROR(ag_embedding(&ctx, m64, tokens), "embedding", "token[4] = 6", "[0, 6)");
    dt_i32(tokens)[4] = -1;
    EXPECT_ERROR(ag_embedding(&ctx, m64, tokens), "embedding", "= -1");
    EXPECT_ERROR(ag_embedding(&ctx, m64, m64), "embedding", "int32");
    dt_tensor_free(tokens);

    dt_i32(ids6)[5] = 9;
    EXPECT_ERROR(ag_gather_rows(&ctx, m64, ids6), "gather_rows", "idx[5] = 9", "[0, 6)");
    EXPECT_ERROR(ag_scatter_add_rows(&ctx, m64, ids6, 7), "scatter_add_rows", "idx[5] = 9", "[0, 7)");
    dt_i32(ids6)[5] = 1;
    EXPECT_ERROR(ag_scatter_add_rows(&ctx, m64, ids5, 7), "scatter_add_rows", "[6, 4]", "[5]");
    EXPECT_ERROR(ag_scatter_add_rows(&ctx, m64, ids6, 0), "scatter_add_rows", "n_rows = 0");
    dt_i32(ids6x2)[11] = 4;
    EXPECT_ERROR(ag_gather_cols(&ctx, m64, ids6x2), "gather_cols", "idx[11] = 4", "[0, 4)");
    EXPECT_ERROR(ag_gather_cols(&ctx, m64, ids6), "gather_cols", "[6, 4]", "[6]");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, norms_and_activations) {
    EXPECT_ERROR(ag_layernorm(&ctx, x234, v5, v4, 1e-5f), "layernorm", "[2, 3, 4]", "[5]");
    EXPECT_ERROR(ag_layernorm(&ctx, x234, v4, v5, 1e-5f), "layernorm", "[2, 3, 4]", "[5]");
    EXPECT_ERROR(ag_rmsnorm(&ctx, x234, v5, 1e-5f), "rmsnorm", "[2, 3, 4]", "[5]");
    EXPECT_ERROR(ag_swiglu(&ctx, x234, x243), "swiglu", "[2, 3, 4]", "[2, 4, 3]");
    EXPECT_ERROR(ag_gelu(&ctx, ids6), "gelu", "float32");
    EXPECT_ERROR(ag_silu(&ctx, ids6), "silu", "float32");
    EXPECT_ERROR(ag_softmax(&ctx, ids6), "softmax", "float32");
    EXPECT_ERROR(ag_log_softmax(&ctx, ids6), "log_softmax", "float32");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, rope_and_attention) {
    EXPECT_ERROR(ag_rope(&ctx, m64, 2, 10000.0), "rope", "[6, 4]");
    EXPECT_ERROR(ag_rope(&ctx, x234, 3, 10000.0), "rope", "[2, 3, 4]", "3 heads");
    EXPECT_ERROR(ag_rope(&ctx, x234, 4, 10000.0), "rope", "even"); /* head width 1 */
    dt_tensor *q = gradcheck_param(7, 1.0f, DT_SHAPE(2, 3, 8));
    dt_tensor *kv = gradcheck_param(8, 1.0f, DT_SHAPE(2, 3, 4));
    dt_tensor *kv_long = gradcheck_param(9, 1.0f, DT_SHAPE(2, 4, 4));
    EXPECT_ERROR(ag_attention(&ctx, q, kv, kv, 4, 3), "attention", "4", "3");
    EXPECT_ERROR(ag_attention(&ctx, q, kv_long, kv_long, 4, 2), "attention", "[2, 3, 8]", "[2, 4, 4]");
    EXPECT_ERROR(ag_attention(&ctx, q, kv, kv_long, 4, 2), "attention", "[2, 3, 4]", "[2, 4, 4]");
    EXPECT_ERROR(ag_attention(&ctx, q, q, q, 4, 2), "attention", "[2, 3, 8]"); /* k too wide for 2 kv heads */
    EXPECT_ERROR(ag_attention(&ctx, m64, m64, m64, 2, 1), "attention", "[6, 4]");
    dt_tensor_free(q);
    dt_tensor_free(kv);
    dt_tensor_free(kv_long);
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}

Test(errors, losses) {
    EXPECT_ERROR(ag_cross_entropy(&ctx, m64, ids5), "cross_entropy", "[6, 4]", "[5]");
    dt_i32(ids6)[3] = 4;
    EXPECT_ERROR(ag_cross_entropy(&ctx, m64, ids6), "cross_entropy", "target[3] = 4", "[0, 4)");
    EXPECT_ERROR(ag_mixture_nll(&ctx, m64, m64, ids6, 0.5f, 1.0f, 0, 0, NULL), "mixture_nll", "target[3] = 4");
    dt_i32(ids6)[3] = 1;
    EXPECT_ERROR(ag_mixture_nll(&ctx, m64, m65, ids6, 0.5f, 1.0f, 0, 0, NULL), "mixture_nll", "[6, 4]", "[6, 5]");
    EXPECT_ERROR(ag_mixture_nll(&ctx, m64, m64, ids5, 0.5f, 1.0f, 0, 0, NULL), "mixture_nll", "[6, 4]", "[5]");
    EXPECT_ERROR(ag_mixture_nll(&ctx, m64, m64, ids6, 0.8f, 0.5f, 0, 0, NULL), "mixture_nll", "0.8", "0.5");
    EXPECT_ERROR(ag_mixture_nll(&ctx, m64, m64, ids6, 0.5f, 1.5f, 0, 0, NULL), "mixture_nll", "1.5");
    EXPECT_ERROR(ag_moe_balance(&ctx, x234, (const float[4]){0}), "moe_balance", "[2, 3, 4]");
    EXPECT_ERROR(ag_moe_balance(&ctx, m64, NULL), "moe_balance", "fractions");
    cr_assert_eq(ctx.n_nodes, 0, "the refused calls left %d nodes on the tape", ctx.n_nodes);
}
