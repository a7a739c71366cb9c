/* The linear ops under bf16 products (ag_ctx.bf16_products, train.precision
 * = bf16): each forward is the float32 op on bf16-rounded operands, bit for
 * bit on the widen engine; the fused MLP is its unfused composition; the
 * gradients are the rounded products the text promises (d_x = r(d_y) r(W),
 * d_W = r(d_y)^T r(x), d_b the float32 column sums) against float64; a
 * weight's bf16 copy gives the same bits as rounding on the fly; and the
 * oneDNN engine agrees with the widen engine within float32 summation. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/type_traits.h"
#include "support/gradcheck.h"
#include "support/onednn_bf16.h"

static ag_ctx ctx;

static void setup(void) {
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    k_set_threads(1);
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_WIDEN), DT_OK);
}
static void teardown(void) {
    ag_ctx_free(&ctx);
    k_bf16_gemm_reset();
}

TestSuite(bf16_ops, .init = setup, .fini = teardown);

enum { M = 24, K = 40, N = 36 };

static dt_tensor *param(uint64_t seed, int ndim, const int64_t *shape) {
    dt_tensor *t = gradcheck_param(seed, 0.5f, ndim, shape);
    cr_assert_not_null(t);
    return t;
}

static float rounded(float x) { return k_bf16_to_float(k_bf16_from_float(x)); }

/* A heap copy of t with every element rounded to bf16. */
static dt_tensor *rounded_copy(const dt_tensor *t) {
    dt_tensor *r = dt_tensor_new(DT_F32, t->ndim, t->shape);
    cr_assert_not_null(r);
    r->requires_grad = t->requires_grad;
    for (int64_t i = 0; i < t->size; i++)
        dt_f32(r)[i] = rounded(dt_f32(t)[i]);
    return r;
}

static void assert_same_bits(const dt_tensor *a, const dt_tensor *b, const char *what) {
    cr_assert_eq(a->size, b->size, "%s", what);
    cr_assert(!memcmp(a->data, b->data, (size_t)a->size * sizeof(float)),
              "%s: bf16 products differ from the float32 op "
              "on rounded operands",
              what);
}

/* out of the op under test, in the precision the tape is set to */
typedef dt_tensor *(*op_fn)(dt_tensor **in);
static dt_tensor *run_linear(dt_tensor **in) { return ag_linear(&ctx, in[0], in[1], in[2]); }
static dt_tensor *run_linear_gelu(dt_tensor **in) { return ag_linear_gelu(&ctx, in[0], in[1], in[2]); }
static dt_tensor *run_linear_residual(dt_tensor **in) { return ag_linear_residual(&ctx, in[3], in[0], in[1], in[2]); }
static dt_tensor *run_coupled_gelu(dt_tensor **in) {
    return ag_linear_coupled(&ctx, in[3], in[0], in[1], in[2], 1, in[4], in[5]);
}
static dt_tensor *run_coupled_plain(dt_tensor **in) {
    return ag_linear_coupled(&ctx, in[3], in[0], in[1], in[2], 0, in[4], in[5]);
}

/* in: x [M,K], W [N,K], b [N], residual [M,N], coupled [M,N], couple [N] */
static void make_inputs(dt_tensor **in) {
    in[0] = param(1, DT_SHAPE(M, K));
    in[1] = param(2, DT_SHAPE(N, K));
    in[2] = param(3, DT_SHAPE(N));
    in[3] = param(4, DT_SHAPE(M, N));
    in[4] = param(5, DT_SHAPE(M, N));
    in[5] = param(6, DT_SHAPE(N));
}

Test(bf16_ops, forwards_are_float32_ops_on_rounded_operands) {
    const struct {
        const char *name;
        op_fn run;
    } ops[] = {{"linear", run_linear},
               {"linear_gelu", run_linear_gelu},
               {"linear_residual", run_linear_residual},
               {"linear_coupled gelu", run_coupled_gelu},
               {"linear_coupled", run_coupled_plain}};
    dt_tensor *in[6], *in_rounded[6];
    make_inputs(in);
    memcpy(in_rounded, in, sizeof in);
    in_rounded[0] = rounded_copy(in[0]); /* the product operands: x and W; the rest enter in float32 */
    in_rounded[1] = rounded_copy(in[1]);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        ctx.bf16_products = 1;
        dt_tensor *got = ops[i].run(in);
        ctx.bf16_products = 0;
        dt_tensor *want = ops[i].run(in_rounded);
        dt_tensor *unrounded = ops[i].run(in);
        cr_assert(got && want && unrounded, "%s", dt_error_message());
        assert_same_bits(got, want, ops[i].name);
        cr_assert(memcmp(got->data, unrounded->data, (size_t)got->size * sizeof(float)) != 0,
                  "%s: the bf16 forward equals the float32 one (nothing was rounded)", ops[i].name);
        ag_reset(&ctx);
    }
    for (int i = 0; i < 6; i++)
        dt_tensor_free(in[i]);
    dt_tensor_free(in_rounded[0]);
    dt_tensor_free(in_rounded[1]);
}

/* ag_mlp_gelu promises ag_linear_gelu then ag_linear_residual: under bf16
 * products too (the GELU output is rounded as the second product's operand). */
Test(bf16_ops, fused_mlp_is_its_unfused_composition) {
    enum { F = 44 };
    dt_tensor *x = param(11, DT_SHAPE(M, K)), *fc = param(12, DT_SHAPE(F, K)), *fc_bias = param(13, DT_SHAPE(F));
    dt_tensor *proj = param(14, DT_SHAPE(K, F)), *proj_bias = param(15, DT_SHAPE(K));
    dt_tensor *residual = param(16, DT_SHAPE(M, K));
    ctx.bf16_products = 1;
    dt_tensor *fused = ag_mlp_gelu(&ctx, residual, x, fc, fc_bias, proj, proj_bias);
    dt_tensor *hidden = ag_linear_gelu(&ctx, x, fc, fc_bias);
    dt_tensor *unfused = ag_linear_residual(&ctx, residual, hidden, proj, proj_bias);
    cr_assert(fused && unfused, "%s", dt_error_message());
    assert_same_bits(fused, unfused, "mlp_gelu");
    dt_tensor *params[] = {x, fc, fc_bias, proj, proj_bias, residual};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        dt_tensor_free(params[i]);
}

/* The gradients too: the fused backward produces the GELU output and d_pre
 * in bf16 (k_gelu_recompute_backward_bf16) and rounds d_out once for its two
 * products; the unfused ops keep them float32 and round them in each
 * product. Rounding is deterministic, so every gradient is the same bits. */
Test(bf16_ops, fused_mlp_gradients_are_its_unfused_gradients) {
    enum { F = 44 };
    dt_tensor *p[6];
    const int64_t shapes[6][2] = {{M, K}, {F, K}, {F, 0}, {K, F}, {K, 0}, {M, K}};
    dt_tensor *grads[2][6];
    dt_tensor *R = param(17, DT_SHAPE(M, K));
    R->requires_grad = 0;
    for (int i = 0; i < 6; i++)
        p[i] = shapes[i][1] ? param((uint64_t)(31 + i), DT_SHAPE(shapes[i][0], shapes[i][1]))
                            : param((uint64_t)(31 + i), DT_SHAPE(shapes[i][0]));
    for (int fused = 0; fused < 2; fused++) {
        ag_reset(&ctx);
        ctx.bf16_products = 1;
        for (int i = 0; i < 6; i++)
            if (p[i]->grad) memset(p[i]->grad, 0, (size_t)p[i]->size * sizeof(float));
        dt_tensor *y = fused ? ag_mlp_gelu(&ctx, p[5], p[0], p[1], p[2], p[3], p[4])
                             : ag_linear_residual(&ctx, p[5], ag_linear_gelu(&ctx, p[0], p[1], p[2]), p[3], p[4]);
        dt_tensor *loss = ag_sum(&ctx, ag_mul(&ctx, y, R));
        cr_assert_not_null(loss, "%s", dt_error_message());
        cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
        for (int i = 0; i < 6; i++) {
            cr_assert_not_null(p[i]->grad, "parameter %d has no gradient", i);
            grads[fused][i] = dt_tensor_new(DT_F32, p[i]->ndim, p[i]->shape);
            cr_assert_not_null(grads[fused][i]);
            memcpy(grads[fused][i]->data, p[i]->grad, (size_t)p[i]->size * sizeof(float));
        }
    }
    static const char *names[6] = {"x", "fc", "fc_bias", "proj", "proj_bias", "residual"};
    for (int i = 0; i < 6; i++) {
        assert_same_bits(grads[1][i], grads[0][i], names[i]);
        dt_tensor_free(grads[0][i]), dt_tensor_free(grads[1][i]), dt_tensor_free(p[i]);
    }
    dt_tensor_free(R);
}

/* ag_bf16_operand: three linear maps of one marked tensor (q, k and v of a
 * normed x) give the outputs and gradients of the same maps on an unmarked
 * copy, bit for bit; the mark is made once and only on the tape's own
 * tensors, and only under bf16 products. */
Test(bf16_ops, a_shared_operand_gives_the_same_bits) {
    dt_tensor *source = param(41, DT_SHAPE(M, K)), *R = param(45, DT_SHAPE(M, N));
    dt_tensor *W[3] = {param(42, DT_SHAPE(N, K)), param(43, DT_SHAPE(N, K)), param(44, DT_SHAPE(N, K))};
    R->requires_grad = 0;
    dt_tensor *out[2][3], *grads[2][4];
    for (int marked = 0; marked < 2; marked++) {
        ag_reset(&ctx);
        ctx.bf16_products = 1;
        for (int i = 0; i < 3; i++)
            if (W[i]->grad) memset(W[i]->grad, 0, (size_t)W[i]->size * sizeof(float));
        if (source->grad) memset(source->grad, 0, (size_t)source->size * sizeof(float));
        /* the tape's own tensor, as a norm's output is: x = source * 1 */
        dt_tensor *x = ag_scale(&ctx, source, 1.0f);
        cr_assert_not_null(x, "%s", dt_error_message());
        if (marked) {
            cr_assert_eq(ag_bf16_operand(&ctx, x), x);
            cr_assert_not_null(x->bf16, "the tape's tensor got no bf16 copy");
            const uint16_t *first = x->bf16;
            ag_bf16_operand(&ctx, x);
            cr_assert_eq(x->bf16, first, "a second call made a second copy");
            for (int64_t i = 0; i < x->size; i++)
                cr_assert_eq(x->bf16[i], k_bf16_from_float(dt_f32(x)[i]), "copy[%lld]", (long long)i);
        }
        dt_tensor *loss = NULL;
        for (int i = 0; i < 3; i++) {
            dt_tensor *y = ag_linear(&ctx, x, W[i], NULL);
            cr_assert_not_null(y, "%s", dt_error_message());
            out[marked][i] = dt_tensor_new(DT_F32, y->ndim, y->shape);
            memcpy(out[marked][i]->data, y->data, (size_t)y->size * sizeof(float));
            dt_tensor *term = ag_sum(&ctx, ag_mul(&ctx, y, R));
            loss = loss ? ag_add(&ctx, loss, term) : term;
        }
        cr_assert_not_null(loss, "%s", dt_error_message());
        cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
        dt_tensor *params[4] = {W[0], W[1], W[2], source};
        for (int i = 0; i < 4; i++) {
            cr_assert_not_null(params[i]->grad);
            grads[marked][i] = dt_tensor_new(DT_F32, params[i]->ndim, params[i]->shape);
            memcpy(grads[marked][i]->data, params[i]->grad, (size_t)params[i]->size * sizeof(float));
        }
    }
    for (int i = 0; i < 3; i++) {
        assert_same_bits(out[1][i], out[0][i], "outputs");
        dt_tensor_free(out[0][i]), dt_tensor_free(out[1][i]);
    }
    for (int i = 0; i < 4; i++) {
        assert_same_bits(grads[1][i], grads[0][i], "gradients");
        dt_tensor_free(grads[0][i]), dt_tensor_free(grads[1][i]);
    }
    /* no mark on a heap tensor (a caller's input may change between steps), nor under float32 products */
    cr_assert_eq(ag_bf16_operand(&ctx, source), source);
    cr_assert_null(source->bf16);
    ctx.bf16_products = 0;
    dt_tensor *x32 = ag_scale(&ctx, source, 1.0f);
    ag_bf16_operand(&ctx, x32);
    cr_assert_null(x32->bf16);
    cr_assert_null(ag_bf16_operand(&ctx, NULL));
    for (int i = 0; i < 3; i++)
        dt_tensor_free(W[i]);
    dt_tensor_free(source), dt_tensor_free(R);
}

/* loss = sum(y ⊙ R): d_y = R exactly, so every gradient has a closed form. */
static void linear_gradients(dt_tensor *x, dt_tensor *W, dt_tensor *b, dt_tensor *R) {
    ctx.bf16_products = 1;
    dt_tensor *y = ag_linear(&ctx, x, W, b);
    dt_tensor *loss = ag_sum(&ctx, ag_mul(&ctx, y, R));
    cr_assert_not_null(loss, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, loss), DT_OK, "%s", dt_error_message());
}

static void check_close(double got, double exact, double magnitude, const char *what, int64_t i) {
    const double bound = (double)(M + K + 4) * ldexp(1.0, -23) * magnitude + 1e-30;
    cr_assert(fabs(got - exact) <= bound, "%s[%lld] = %.9g, expected %.9g (bound %.3g)", what, (long long)i, got, exact,
              bound);
}

Test(bf16_ops, gradients_are_the_rounded_products) {
    dt_tensor *x = param(21, DT_SHAPE(M, K)), *W = param(22, DT_SHAPE(N, K)), *b = param(23, DT_SHAPE(N));
    dt_tensor *R = param(24, DT_SHAPE(M, N));
    R->requires_grad = 0;
    linear_gradients(x, W, b, R);
    const float *dx = x->grad, *dW = W->grad, *db = b->grad;
    cr_assert(dx && dW && db);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            double exact = 0, magnitude = 0;
            for (int64_t j = 0; j < N; j++) {
                const double p = (double)rounded(dt_f32(R)[i * N + j]) * rounded(dt_f32(W)[j * K + k]);
                exact += p, magnitude += fabs(p);
            }
            check_close(dx[i * K + k], exact, magnitude, "d_x", i * K + k);
        }
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) {
            double exact = 0, magnitude = 0;
            for (int64_t i = 0; i < M; i++) {
                const double p = (double)rounded(dt_f32(R)[i * N + j]) * rounded(dt_f32(x)[i * K + k]);
                exact += p, magnitude += fabs(p);
            }
            check_close(dW[j * K + k], exact, magnitude, "d_W", j * K + k);
        }
    for (int64_t j = 0; j < N; j++) {
        double exact = 0, magnitude = 0; /* the bias gradient is a float32 sum of the unrounded d_y */
        for (int64_t i = 0; i < M; i++)
            exact += dt_f32(R)[i * N + j], magnitude += fabs(dt_f32(R)[i * N + j]);
        check_close(db[j], exact, magnitude, "d_b", j);
    }
    /* and d_W is not the float32 gradient: R and x were rounded */
    double largest_change = 0;
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) {
            double unrounded = 0;
            for (int64_t i = 0; i < M; i++)
                unrounded += (double)dt_f32(R)[i * N + j] * dt_f32(x)[i * K + k];
            largest_change = fmax(largest_change, fabs(unrounded - dW[j * K + k]));
        }
    cr_assert(largest_change > 1e-4, "d_W equals the float32 gradient to %.3g", largest_change);
    dt_tensor *params[] = {x, W, b, R};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        dt_tensor_free(params[i]);
}

/* The weight's stored bf16 copy (what the trainer refreshes once per step)
 * gives the same forward and gradients as rounding the weight on the fly. */
Test(bf16_ops, a_weights_bf16_copy_gives_the_same_bits) {
    dt_tensor *x = param(31, DT_SHAPE(M, K)), *W = param(32, DT_SHAPE(N, K)), *b = param(33, DT_SHAPE(N));
    dt_tensor *R = param(34, DT_SHAPE(M, N));
    R->requires_grad = 0;
    linear_gradients(x, W, b, R);
    float *dx_fly = malloc(M * K * sizeof(float)), *dW_fly = malloc(N * K * sizeof(float));
    memcpy(dx_fly, x->grad, M * K * sizeof(float));
    memcpy(dW_fly, W->grad, N * K * sizeof(float));
    ag_reset(&ctx);
    memset(x->grad, 0, M * K * sizeof(float));
    memset(W->grad, 0, N * K * sizeof(float));
    memset(b->grad, 0, N * sizeof(float));
    uint16_t *copy = malloc(N * K * sizeof(uint16_t));
    k_bf16_round(copy, dt_f32(W), N * K);
    W->bf16 = copy;
    linear_gradients(x, W, b, R);
    cr_assert(!memcmp(dx_fly, x->grad, M * K * sizeof(float)), "d_x through the copy differs");
    cr_assert(!memcmp(dW_fly, W->grad, N * K * sizeof(float)), "d_W through the copy differs");
    /* the copy is what is read: a stale copy changes d_x */
    copy[0] = k_bf16_from_float(dt_f32(W)[0] + 1.0f);
    ag_reset(&ctx);
    memset(x->grad, 0, M * K * sizeof(float));
    linear_gradients(x, W, b, R);
    cr_assert(memcmp(dx_fly, x->grad, M * K * sizeof(float)) != 0, "the bf16 copy was not read");
    W->bf16 = NULL;
    free(copy), free(dx_fly), free(dW_fly);
    dt_tensor *params[] = {x, W, b, R};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        dt_tensor_free(params[i]);
}

/* The oneDNN engine computes the same rounded products (its own float32 sum order). */
Test(bf16_ops, onednn_engine_agrees_with_widen) {
    test_require_onednn_bf16();
    dt_tensor *x = param(41, DT_SHAPE(M, K)), *W = param(42, DT_SHAPE(N, K)), *b = param(43, DT_SHAPE(N));
    ctx.bf16_products = 1;
    dt_tensor *widened = ag_linear_gelu(&ctx, x, W, b);
    cr_assert_eq(k_bf16_gemm_force(K_BF16_GEMM_ONEDNN), DT_OK, "%s", dt_error_message());
    dt_tensor *onednn = ag_linear_gelu(&ctx, x, W, b);
    cr_assert(widened && onednn);
    for (int64_t i = 0; i < widened->size; i++)
        cr_assert(fabsf(dt_f32(widened)[i] - dt_f32(onednn)[i]) <= 1e-5f * (1.0f + fabsf(dt_f32(widened)[i])),
                  "[%lld] widen %.9g, onednn %.9g", (long long)i, dt_f32(widened)[i], dt_f32(onednn)[i]);
    dt_tensor_free(x), dt_tensor_free(W), dt_tensor_free(b);
}

/* Attention under bf16 products runs the bf16 kernels of the context's
 * engine (kernels/attention_amx.h: AMX tiles or AVX512_BF16), forward and
 * backward, and the float32 kernels otherwise, with ALiBi's bias, or with
 * the engine K_BF16_ATTENTION_FP32: the op's output and gradients are those
 * kernels' bits. */
static void check_attention_engine(int bf16_products, const float *slopes, k_bf16_attention_engine expect) {
    enum { B = 2, T = 70, H = 2, Hkv = 1, HD = 32 };
    dt_tensor *q = param(61, DT_SHAPE(B, T, H * HD)), *k = param(62, DT_SHAPE(B, T, Hkv * HD));
    dt_tensor *v = param(63, DT_SHAPE(B, T, Hkv * HD)), *R = param(64, DT_SHAPE(B, T, H * HD));
    R->requires_grad = 0;
    ag_reset(&ctx);
    ctx.bf16_products = bf16_products;
    dt_tensor *out = ag_attention_biased(&ctx, q, k, v, H, Hkv, slopes);
    cr_assert_not_null(out, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, ag_mul(&ctx, out, R))), DT_OK, "%s", dt_error_message());

    float want_out[B * T * H * HD], lse[B * H * T], d_q[B * T * H * HD], d_k[B * T * Hkv * HD], d_v[B * T * Hkv * HD];
    if (expect != K_BF16_ATTENTION_FP32) {
        static _Alignas(64) unsigned char scratch[1 << 20];
        cr_assert(k_attention_amx_backward_scratch(B, T, H, Hkv, HD) <= sizeof scratch);
        k_attention_amx_forward(expect, want_out, lse, dt_f32(q), dt_f32(k), dt_f32(v), B, T, H, Hkv, HD, scratch);
        k_attention_amx_backward(expect, d_q, 0, d_k, 0, d_v, 0, dt_f32(R), dt_f32(q), dt_f32(k), dt_f32(v), want_out,
                                 lse, B, T, H, Hkv, HD, scratch);
    } else {
        static float scratch[B * H * T];
        cr_assert(k_attention_backward_scratch(B, T, H, Hkv, HD) <= (int64_t)(sizeof scratch / sizeof *scratch));
        k_attention_forward_biased(want_out, lse, dt_f32(q), dt_f32(k), dt_f32(v), B, T, H, Hkv, HD, slopes);
        k_attention_backward_biased(d_q, 0, d_k, 0, d_v, 0, dt_f32(R), dt_f32(q), dt_f32(k), dt_f32(v), want_out, lse,
                                    B, T, H, Hkv, HD, slopes, scratch);
    }
    const char *engine = k_bf16_attention_name(expect);
    cr_assert(!memcmp(out->data, want_out, sizeof want_out), "attention's output is not the %s kernels'", engine);
    cr_assert(!memcmp(q->grad, d_q, sizeof d_q), "d_q is not the %s kernels'", engine);
    cr_assert(!memcmp(k->grad, d_k, sizeof d_k), "d_k is not the %s kernels'", engine);
    cr_assert(!memcmp(v->grad, d_v, sizeof d_v), "d_v is not the %s kernels'", engine);
    ctx.bf16_products = 0;
    dt_tensor_free(q), dt_tensor_free(k), dt_tensor_free(v), dt_tensor_free(R);
}

Test(bf16_ops, attention_engine_follows_precision_and_cpu) {
    const float slopes[2] = {0.5f, 0.25f};
    ctx.bf16_attention = k_bf16_attention_default();
    check_attention_engine(1, NULL, k_bf16_attention_default());
    check_attention_engine(0, NULL, K_BF16_ATTENTION_FP32);
    check_attention_engine(1, slopes, K_BF16_ATTENTION_FP32); /* ALiBi keeps float32 */
    ctx.bf16_attention = K_BF16_ATTENTION_FP32;
    check_attention_engine(1, NULL, K_BF16_ATTENTION_FP32);
    /* each engine the CPU has; one it lacks runs float32 */
    const k_bf16_attention_engine engines[] = {K_BF16_ATTENTION_AVX512_BF16, K_BF16_ATTENTION_AMX};
    for (int e = 0; e < 2; e++) {
        ctx.bf16_attention = engines[e];
        check_attention_engine(1, NULL, k_bf16_attention_available(engines[e]) ? engines[e] : K_BF16_ATTENTION_FP32);
    }
    ctx.bf16_attention = K_BF16_ATTENTION_FP32;
}

/* One tensor as q, k and v (H = Hkv): under the bf16 kernels its gradient is
 * the sum of the three the kernel gives separately (within float32 rounding
 * of the different order of the sums). */
Test(bf16_ops, aliased_attention_on_amx_sums_the_three_gradients) {
    const k_bf16_attention_engine engine = k_bf16_attention_default();
    if (engine == K_BF16_ATTENTION_FP32) cr_skip_test("this CPU has neither AMX-BF16 tiles nor AVX512_BF16");
    enum { B = 1, T = 90, H = 2, HD = 32, N = B * T * H * HD };
    dt_tensor *x = param(71, DT_SHAPE(B, T, H * HD)), *R = param(72, DT_SHAPE(B, T, H * HD));
    R->requires_grad = 0;
    ag_reset(&ctx);
    ctx.bf16_products = 1;
    ctx.bf16_attention = engine;
    dt_tensor *out = ag_attention(&ctx, x, x, x, H, H);
    cr_assert_not_null(out, "%s", dt_error_message());
    cr_assert_eq(ag_backward(&ctx, ag_sum(&ctx, ag_mul(&ctx, out, R))), DT_OK, "%s", dt_error_message());
    ctx.bf16_products = 0;
    ctx.bf16_attention = K_BF16_ATTENTION_FP32;

    static float want_out[N], lse[B * H * T], d_q[N], d_k[N], d_v[N];
    static _Alignas(64) unsigned char scratch[1 << 20];
    cr_assert(k_attention_amx_backward_scratch(B, T, H, H, HD) <= sizeof scratch);
    k_attention_amx_forward(engine, want_out, lse, dt_f32(x), dt_f32(x), dt_f32(x), B, T, H, H, HD, scratch);
    k_attention_amx_backward(engine, d_q, 0, d_k, 0, d_v, 0, dt_f32(R), dt_f32(x), dt_f32(x), dt_f32(x), want_out, lse,
                             B, T, H, H, HD, scratch);
    cr_assert(!memcmp(out->data, want_out, sizeof want_out), "the aliased forward is not the %s kernel's",
              k_bf16_attention_name(engine));
    for (int i = 0; i < N; i++) {
        const float want = d_q[i] + d_k[i] + d_v[i];
        const float scale = fabsf(d_q[i]) + fabsf(d_k[i]) + fabsf(d_v[i]);
        cr_assert(fabsf(x->grad[i] - want) <= 1e-6f * scale + 1e-30f, "d_x[%d] = %g, the three gradients sum to %g", i,
                  x->grad[i], want);
    }
    dt_tensor_free(x), dt_tensor_free(R);
}
