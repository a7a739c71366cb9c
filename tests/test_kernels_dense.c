/* Tests for the pointwise and indexing kernels: activations (GELU, SiLU,
 * SwiGLU), RoPE, embedding, elementwise / broadcast / row ops, and top-k.
 *
 * Forwards against naive double loops written here (RoPE straight from the
 * SPEC formula with pow/cos/sin); backwards against central finite
 * differences of a double forward, or for linear maps the exact double
 * adjoint, always with pre-filled outputs to check +=. Sizes are odd. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "kernels/topk.h"

#define FD_STEP 1e-5

static void fill_uniform(dt_rng *rng, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * dt_rng_uniform(rng);
}

static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}

static double *alloc_doubles(int64_t n) {
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert_not_null(x);
    return x;
}

static float *copy_floats(const float *src, int64_t n) {
    float *x = alloc_floats(n);
    memcpy(x, src, (size_t)n * sizeof(float));
    return x;
}

/* |got - expected| <= rel * (|expected| + 0.1 * max|expected|) element by element. */
static void assert_close(const float *got, const double *expected, int64_t n, double rel, const char *what) {
    double max_abs = 0.0;
    for (int64_t i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs(expected[i]));
    for (int64_t i = 0; i < n; i++) {
        double tol = rel * (fabs(expected[i]) + 0.1 * max_abs) + 1e-30;
        cr_assert(fabs((double)got[i] - expected[i]) <= tol, "%s[%ld]: got %.9g expected %.9g (tol %.3g)", what,
                  (long)i, (double)got[i], expected[i], tol);
    }
}

static const int64_t LENGTHS[] = {1, 7, 33, 130 * 67};

/* ---------------------------------------------------------------- activations */

static double gelu_double(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double silu_double(double x) { return x / (1.0 + exp(-x)); }

/* n inputs in [-6, 6], with the first few replaced by extremes. */
static void fill_activation_inputs(dt_rng *rng, float *x, int64_t n) {
    static const float extremes[] = {0.0f, -100.0f, 100.0f, -20.0f, 20.0f, -50.0f, 1e-3f};
    fill_uniform(rng, x, n, -6.0f, 6.0f);
    for (int64_t i = 0; i < n && i < (int64_t)(sizeof extremes / sizeof extremes[0]); i++)
        if (n > 7) x[i] = extremes[i];
}

/* Forward vs f in double, backward vs a central difference of f (times d_out, plus the pre-fill). */
static void check_unary(void (*forward)(float *, const float *, int64_t),
                        void (*backward)(float *, const float *, const float *, int64_t), double (*f)(double),
                        const char *name, uint64_t seed) {
    for (size_t s = 0; s < sizeof LENGTHS / sizeof LENGTHS[0]; s++) {
        int64_t n = LENGTHS[s];
        dt_rng rng;
        dt_rng_seed(&rng, seed + s);
        float *x = alloc_floats(n), *out = alloc_floats(n), *d_out = alloc_floats(n), *d_in = alloc_floats(n);
        double *expected = alloc_doubles(n), *e_in = alloc_doubles(n);
        fill_activation_inputs(&rng, x, n);
        fill_uniform(&rng, d_out, n, -1.0f, 1.0f);
        fill_uniform(&rng, d_in, n, -1.0f, 1.0f);
        forward(out, x, n);
        for (int64_t i = 0; i < n; i++) {
            double e = f(x[i]);
            cr_assert(isfinite(out[i]), "%s(%g) is not finite", name, (double)x[i]);
            cr_assert(fabs(out[i] - e) <= 1e-5 * fabs(e) + 1e-6, "%s(%g) = %.9g, expected %.9g", name, (double)x[i],
                      (double)out[i], e);
            double derivative = (f((double)x[i] + FD_STEP) - f((double)x[i] - FD_STEP)) / (2.0 * FD_STEP);
            e_in[i] = d_in[i] + d_out[i] * derivative;
        }
        backward(d_in, d_out, x, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(d_in[i] - e_in[i]) <= 1e-4 * fabs(e_in[i]) + 1e-6, "%s' at %g: d_in %.9g, expected %.9g",
                      name, (double)x[i], (double)d_in[i], e_in[i]);
        free(x), free(out), free(d_out), free(d_in), free(expected), free(e_in);
    }
}

Test(kernels_activation, gelu_forward_backward) {
    check_unary(k_gelu_forward, k_gelu_backward, gelu_double, "gelu", 1);
}

Test(kernels_activation, silu_forward_backward_stable_at_extremes) {
    check_unary(k_silu_forward, k_silu_backward, silu_double, "silu", 2);
}

Test(kernels_activation, swiglu_forward_backward) {
    for (size_t s = 0; s < sizeof LENGTHS / sizeof LENGTHS[0]; s++) {
        int64_t n = LENGTHS[s];
        dt_rng rng;
        dt_rng_seed(&rng, 30 + s);
        float *gate = alloc_floats(n), *up = alloc_floats(n), *out = alloc_floats(n), *d_out = alloc_floats(n);
        float *d_gate = alloc_floats(n), *d_up = alloc_floats(n);
        fill_activation_inputs(&rng, gate, n);
        fill_uniform(&rng, up, n, -3.0f, 3.0f);
        fill_uniform(&rng, d_out, n, -1.0f, 1.0f);
        fill_uniform(&rng, d_gate, n, -1.0f, 1.0f);
        fill_uniform(&rng, d_up, n, -1.0f, 1.0f);
        float *d_gate_only = copy_floats(d_gate, n), *d_up_only = copy_floats(d_up, n);
        double *e_gate = alloc_doubles(n), *e_up = alloc_doubles(n);
        k_swiglu_forward(out, gate, up, n);
        for (int64_t i = 0; i < n; i++) {
            double g = gate[i], u = up[i], e = silu_double(g) * u;
            cr_assert(fabs(out[i] - e) <= 1e-5 * fabs(e) + 1e-6, "swiglu(%g, %g) = %.9g vs %.9g", g, u, (double)out[i],
                      e);
            /* d/dgate by finite differences; d/dup = silu(gate) exactly */
            double dg = (silu_double(g + FD_STEP) - silu_double(g - FD_STEP)) * u / (2.0 * FD_STEP);
            e_gate[i] = d_gate[i] + d_out[i] * dg;
            e_up[i] = d_up[i] + d_out[i] * silu_double(g);
        }
        k_swiglu_backward(d_gate, d_up, d_out, gate, up, n);
        assert_close(d_gate, e_gate, n, 1e-4, "swiglu d_gate");
        assert_close(d_up, e_up, n, 1e-4, "swiglu d_up");
        /* each output alone gives the same values */
        k_swiglu_backward(d_gate_only, NULL, d_out, gate, up, n);
        k_swiglu_backward(NULL, d_up_only, d_out, gate, up, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(d_gate_only[i] == d_gate[i] && d_up_only[i] == d_up[i]);
        free(gate), free(up), free(out), free(d_out), free(d_gate), free(d_up), free(d_gate_only), free(d_up_only);
        free(e_gate), free(e_up);
    }
}

/* ----------------------------------------------------------------------- RoPE */

/* The SPEC formula, evaluated from scratch: angle = pos * theta^(-2j/hd). */
static void rope_angle(double *c, double *s, int64_t pos, int64_t j, int64_t head_dim, double theta) {
    double angle = (double)pos * pow(theta, -2.0 * (double)j / (double)head_dim);
    *c = cos(angle);
    *s = sin(angle);
}

/* Positions up to 4096: a table built from float angles would be off by ~1e-4 there. */
Test(kernels_rope, table_matches_double_formula) {
    const int64_t n_pos = 4097, head_dim = 64;
    const double thetas[] = {10000.0, 500000.0};
    float *table = alloc_floats(n_pos * head_dim);
    for (int t = 0; t < 2; t++) {
        k_rope_table(table, n_pos, head_dim, thetas[t]);
        for (int64_t pos = 0; pos < n_pos; pos++)
            for (int64_t j = 0; j < head_dim / 2; j++) {
                double c, s;
                rope_angle(&c, &s, pos, j, head_dim, thetas[t]);
                float got_c = table[(pos * head_dim / 2 + j) * 2], got_s = table[(pos * head_dim / 2 + j) * 2 + 1];
                cr_assert(fabs(got_c - c) <= 1e-7 && fabs(got_s - s) <= 1e-7,
                          "pos %ld pair %ld: (%.9g, %.9g) vs (%.9g, %.9g)", (long)pos, (long)j, (double)got_c,
                          (double)got_s, c, s);
            }
    }
    free(table);
}

/* Forward vs the rotation applied in double; backward checked element-wise
 * against R(-angle) and through the adjoint identity d_in · x == d_out · R x. */
static void check_rope(int64_t B, int64_t T, int64_t pos0, int64_t n_head, int64_t head_dim, uint64_t seed) {
    const double theta = 10000.0;
    int64_t width = n_head * head_dim, n = B * T * width;
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    float *table = alloc_floats((pos0 + T) * head_dim);
    float *x = alloc_floats(n), *rotated = alloc_floats(n), *d_out = alloc_floats(n), *d_in = alloc_floats(n);
    double *expected = alloc_doubles(n), *e_in = alloc_doubles(n);
    k_rope_table(table, pos0 + T, head_dim, theta);
    fill_uniform(&rng, x, n, -2.0f, 2.0f);
    fill_uniform(&rng, d_out, n, -1.0f, 1.0f);
    fill_uniform(&rng, d_in, n, -1.0f, 1.0f);
    float *d_in_before = copy_floats(d_in, n);
    memcpy(rotated, x, (size_t)n * sizeof(float));
    k_rope_forward(rotated, table, B, T, pos0, n_head, head_dim);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < n_head; h++)
                for (int64_t j = 0; j < head_dim / 2; j++) {
                    int64_t i = (b * T + t) * width + h * head_dim + 2 * j;
                    double c, s;
                    rope_angle(&c, &s, pos0 + t, j, head_dim, theta);
                    expected[i] = x[i] * c - x[i + 1] * s;
                    expected[i + 1] = x[i] * s + x[i + 1] * c;
                    e_in[i] = d_in[i] + d_out[i] * c + d_out[i + 1] * s;
                    e_in[i + 1] = d_in[i + 1] - d_out[i] * s + d_out[i + 1] * c;
                }
    assert_close(rotated, expected, n, 1e-5, "rope forward");
    k_rope_backward(d_in, d_out, table, B, T, pos0, n_head, head_dim);
    assert_close(d_in, e_in, n, 1e-5, "rope backward");
    double lhs = 0.0, rhs = 0.0, magnitude = 0.0;
    for (int64_t i = 0; i < n; i++) {
        lhs += ((double)d_in[i] - d_in_before[i]) * x[i];
        rhs += (double)d_out[i] * rotated[i];
        magnitude += fabs((double)d_out[i] * rotated[i]);
    }
    cr_assert(fabs(lhs - rhs) <= 1e-5 * magnitude, "adjoint identity: %.9g vs %.9g", lhs, rhs);
    free(table), free(x), free(rotated), free(d_out), free(d_in), free(expected), free(e_in), free(d_in_before);
}

Test(kernels_rope, forward_backward_against_spec_formula) {
    check_rope(1, 1, 0, 1, 2, 1);
    check_rope(2, 7, 5, 3, 8, 2);
    check_rope(1, 33, 0, 1, 64, 3);
    check_rope(3, 130, 17, 2, 34, 4);
}

/* -------------------------------------------------------------------- embedding */

Test(kernels_embedding, forward_gathers_backward_scatters_repeated_tokens) {
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 3, 7}, {33, 5, 33}, {130, 11, 67}}; /* N, V, C */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], V = shapes[s][1], C = shapes[s][2];
        dt_rng rng;
        dt_rng_seed(&rng, 40 + s);
        float *weight = alloc_floats(V * C), *out = alloc_floats(N * C), *d_out = alloc_floats(N * C);
        float *d_weight = alloc_floats(V * C);
        double *e_weight = alloc_doubles(V * C);
        int32_t *tokens = malloc((size_t)N * sizeof(int32_t));
        fill_uniform(&rng, weight, V * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_out, N * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_weight, V * C, -1.0f, 1.0f);
        for (int64_t i = 0; i < N; i++)
            tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V); /* V < N: repeats */
        k_embedding_forward(out, weight, tokens, N, C);
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < C; j++)
                cr_assert(out[i * C + j] == weight[tokens[i] * C + j]);
        for (int64_t i = 0; i < V * C; i++)
            e_weight[i] = d_weight[i];
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < C; j++)
                e_weight[tokens[i] * C + j] += d_out[i * C + j];
        k_embedding_backward(d_weight, d_out, tokens, N, C);
        assert_close(d_weight, e_weight, V * C, 1e-5, "embedding d_weight");
        free(weight), free(out), free(d_out), free(d_weight), free(e_weight), free(tokens);
    }
}

/* ------------------------------------------------------------------ elementwise */

Test(kernels_elementwise, pointwise_ops) {
    for (size_t s = 0; s < sizeof LENGTHS / sizeof LENGTHS[0]; s++) {
        int64_t n = LENGTHS[s];
        dt_rng rng;
        dt_rng_seed(&rng, 50 + s);
        float *a = alloc_floats(n), *b = alloc_floats(n), *out = alloc_floats(n), *d_out = alloc_floats(n);
        float *d_a = alloc_floats(n), *d_b = alloc_floats(n), *dst = alloc_floats(n);
        fill_uniform(&rng, a, n, -2.0f, 2.0f);
        fill_uniform(&rng, b, n, -2.0f, 2.0f);
        fill_uniform(&rng, d_out, n, -1.0f, 1.0f);
        fill_uniform(&rng, d_a, n, -1.0f, 1.0f);
        fill_uniform(&rng, d_b, n, -1.0f, 1.0f);
        fill_uniform(&rng, dst, n, -1.0f, 1.0f);
        float *d_a0 = copy_floats(d_a, n), *d_b0 = copy_floats(d_b, n), *dst0 = copy_floats(dst, n);
        const double rel = 1e-6; /* one or two float roundings (or a fused multiply-add) */
        k_add(out, a, b, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(out[i] - ((double)a[i] + b[i])) <= rel * 4.0, "add");
        k_mul(out, a, b, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(out[i] - (double)a[i] * b[i]) <= rel * 4.0, "mul");
        k_scale(out, a, -0.75f, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(out[i] - (double)a[i] * -0.75) <= rel * 2.0, "scale");
        k_accumulate(dst, a, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(dst[i] - ((double)dst0[i] + a[i])) <= rel * 4.0, "accumulate");
        k_accumulate_scaled(dst, b, 1.5f, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(dst[i] - ((double)dst0[i] + a[i] + 1.5 * b[i])) <= rel * 10.0, "accumulate_scaled");
        /* d/da of sum(d_out * a * b) is d_out * b (exact for a bilinear map) */
        k_mul_backward(d_a, d_b, d_out, a, b, n);
        for (int64_t i = 0; i < n; i++) {
            cr_assert(fabs(d_a[i] - ((double)d_a0[i] + (double)d_out[i] * b[i])) <= rel * 4.0, "mul d_a");
            cr_assert(fabs(d_b[i] - ((double)d_b0[i] + (double)d_out[i] * a[i])) <= rel * 4.0, "mul d_b");
        }
        memcpy(d_a, d_a0, (size_t)n * sizeof(float));
        k_mul_backward(d_a, NULL, d_out, a, b, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(d_a[i] - ((double)d_a0[i] + (double)d_out[i] * b[i])) <= 4e-6);
        memcpy(d_b, d_b0, (size_t)n * sizeof(float));
        k_mul_backward(NULL, d_b, d_out, a, b, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(d_b[i] - ((double)d_b0[i] + (double)d_out[i] * a[i])) <= 4e-6);
        free(a), free(b), free(out), free(d_out), free(d_a), free(d_b), free(dst), free(d_a0), free(d_b0), free(dst0);
    }
}

static const int64_t SHAPES[][2] = {{1, 1}, {7, 33}, {33, 7}, {130, 67}};

Test(kernels_elementwise, vector_broadcasts_and_row_sums) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int64_t M = SHAPES[s][0], C = SHAPES[s][1];
        dt_rng rng;
        dt_rng_seed(&rng, 60 + s);
        float *x = alloc_floats(M * C), *v = alloc_floats(C), *out = alloc_floats(M * C), *d_out = alloc_floats(M * C);
        float *d_x = alloc_floats(M * C), *d_v = alloc_floats(C), *sums = alloc_floats(C);
        fill_uniform(&rng, x, M * C, -2.0f, 2.0f);
        fill_uniform(&rng, v, C, -2.0f, 2.0f);
        fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_x, M * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_v, C, -1.0f, 1.0f);
        fill_uniform(&rng, sums, C, -1.0f, 1.0f);
        double *e_x = alloc_doubles(M * C), *e_v = alloc_doubles(C), *e_sums = alloc_doubles(C);
        double *e_out = alloc_doubles(M * C);

        k_add_vec(out, x, v, M, C);
        for (int64_t i = 0; i < M * C; i++)
            e_out[i] = (double)x[i] + v[i % C];
        assert_close(out, e_out, M * C, 1e-6, "add_vec");
        k_mul_vec(out, x, v, M, C);
        for (int64_t i = 0; i < M * C; i++)
            e_out[i] = (double)x[i] * v[i % C];
        assert_close(out, e_out, M * C, 1e-6, "mul_vec");

        for (int64_t j = 0; j < C; j++)
            e_v[j] = d_v[j], e_sums[j] = sums[j];
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < C; j++) {
                e_x[i * C + j] = d_x[i * C + j] + (double)d_out[i * C + j] * v[j];
                e_v[j] += (double)d_out[i * C + j] * x[i * C + j];
                e_sums[j] += d_out[i * C + j];
            }
        k_mul_vec_backward(d_x, d_v, d_out, x, v, M, C);
        assert_close(d_x, e_x, M * C, 1e-5, "mul_vec d_x");
        assert_close(d_v, e_v, C, 1e-5, "mul_vec d_v");
        k_sum_rows(sums, d_out, M, C);
        assert_close(sums, e_sums, C, 1e-5, "sum_rows");
        free(x), free(v), free(out), free(d_out), free(d_x), free(d_v), free(sums), free(e_x), free(e_v), free(e_sums);
        free(e_out);
    }
}

Test(kernels_elementwise, scale_rows_forward_backward) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int64_t M = SHAPES[s][0], C = SHAPES[s][1];
        dt_rng rng;
        dt_rng_seed(&rng, 70 + s);
        float *x = alloc_floats(M * C), *scale = alloc_floats(M), *out = alloc_floats(M * C);
        float *d_out = alloc_floats(M * C), *d_x = alloc_floats(M * C), *d_s = alloc_floats(M);
        fill_uniform(&rng, x, M * C, -2.0f, 2.0f);
        fill_uniform(&rng, scale, M, -2.0f, 2.0f);
        fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_x, M * C, -1.0f, 1.0f);
        fill_uniform(&rng, d_s, M, -1.0f, 1.0f);
        double *e_out = alloc_doubles(M * C), *e_x = alloc_doubles(M * C), *e_s = alloc_doubles(M);
        k_scale_rows(out, x, scale, M, C);
        for (int64_t i = 0; i < M; i++) {
            e_s[i] = d_s[i];
            for (int64_t j = 0; j < C; j++) {
                e_out[i * C + j] = (double)x[i * C + j] * scale[i];
                e_x[i * C + j] = d_x[i * C + j] + (double)d_out[i * C + j] * scale[i];
                e_s[i] += (double)d_out[i * C + j] * x[i * C + j];
            }
        }
        assert_close(out, e_out, M * C, 1e-6, "scale_rows");
        float *d_s_only = copy_floats(d_s, M);
        k_scale_rows_backward(d_x, d_s, d_out, x, scale, M, C);
        assert_close(d_x, e_x, M * C, 1e-5, "scale_rows d_x");
        assert_close(d_s, e_s, M, 1e-5, "scale_rows d_s");
        k_scale_rows_backward(NULL, d_s_only, d_out, x, scale, M, C);
        for (int64_t i = 0; i < M; i++)
            cr_assert(d_s_only[i] == d_s[i], "d_s alone matches");
        free(x), free(scale), free(out), free(d_out), free(d_x), free(d_s), free(e_out), free(e_x), free(e_s);
        free(d_s_only);
    }
}

Test(kernels_elementwise, gather_and_scatter_add_rows_with_repeats) {
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 3, 33}, {33, 5, 7}, {130, 17, 67}}; /* M, N, C */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], C = shapes[s][2];
        dt_rng rng;
        dt_rng_seed(&rng, 80 + s);
        float *x = alloc_floats(N * C), *gathered = alloc_floats(M * C), *src = alloc_floats(M * C);
        float *target = alloc_floats(N * C);
        double *e_target = alloc_doubles(N * C);
        int32_t *idx = malloc((size_t)M * sizeof(int32_t));
        fill_uniform(&rng, x, N * C, -1.0f, 1.0f);
        fill_uniform(&rng, src, M * C, -1.0f, 1.0f);
        fill_uniform(&rng, target, N * C, -1.0f, 1.0f);
        for (int64_t i = 0; i < M; i++)
            idx[i] = (int32_t)dt_rng_below(&rng, (uint64_t)N);
        k_gather_rows(gathered, x, idx, M, C);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < C; j++)
                cr_assert(gathered[i * C + j] == x[idx[i] * C + j]);
        for (int64_t i = 0; i < N * C; i++)
            e_target[i] = target[i];
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < C; j++)
                e_target[idx[i] * C + j] += src[i * C + j];
        k_scatter_add_rows(target, src, idx, M, C);
        assert_close(target, e_target, N * C, 1e-5, "scatter_add_rows");
        free(x), free(gathered), free(src), free(target), free(e_target), free(idx);
    }
}

/* Column-parallel reductions (sum_rows, mul_vec d_v, scatter-add, embedding
 * backward) give the same bits with 1 and 2 threads and across two runs. */
Test(kernels_elementwise, reductions_thread_count_independent) {
    const int64_t M = 400, C = 257, N = 13;
    dt_rng rng;
    dt_rng_seed(&rng, 90);
    float *x = alloc_floats(M * C), *d_out = alloc_floats(M * C), *v = alloc_floats(C);
    int32_t *idx = malloc((size_t)M * sizeof(int32_t));
    fill_uniform(&rng, x, M * C, -1.0f, 1.0f);
    fill_uniform(&rng, d_out, M * C, -1.0f, 1.0f);
    fill_uniform(&rng, v, C, -1.0f, 1.0f);
    for (int64_t i = 0; i < M; i++)
        idx[i] = (int32_t)dt_rng_below(&rng, (uint64_t)N);
    const int threads[3] = {1, 2, 2};
    float *sums[3], *d_v[3], *scattered[3], *d_embedding[3];
    for (int run = 0; run < 3; run++) {
        k_set_threads(threads[run]);
        sums[run] = calloc((size_t)C, sizeof(float));
        d_v[run] = calloc((size_t)C, sizeof(float));
        scattered[run] = calloc((size_t)(N * C), sizeof(float));
        d_embedding[run] = calloc((size_t)(N * C), sizeof(float));
        k_sum_rows(sums[run], d_out, M, C);
        k_mul_vec_backward(NULL, d_v[run], d_out, x, v, M, C);
        k_scatter_add_rows(scattered[run], d_out, idx, M, C);
        k_embedding_backward(d_embedding[run], d_out, idx, M, C);
    }
    k_set_threads(2);
    for (int run = 1; run < 3; run++) {
        for (int64_t j = 0; j < C; j++)
            cr_assert(sums[run][j] == sums[0][j] && d_v[run][j] == d_v[0][j]);
        for (int64_t i = 0; i < N * C; i++)
            cr_assert(scattered[run][i] == scattered[0][i] && d_embedding[run][i] == d_embedding[0][i]);
    }
    for (int run = 0; run < 3; run++)
        free(sums[run]), free(d_v[run]), free(scattered[run]), free(d_embedding[run]);
    free(x), free(d_out), free(v), free(idx);
}

/* ------------------------------------------------------------------------ top-k */

/* Independent reference: k rounds of "largest value not yet taken, first index
 * wins among equals" (strict > while scanning upward). */
static void naive_topk(int32_t *idx, const float *x, int64_t N, int64_t k) {
    for (int64_t slot = 0; slot < k; slot++) {
        int64_t best = -1;
        for (int64_t j = 0; j < N; j++) {
            int taken = 0;
            for (int64_t prior = 0; prior < slot; prior++)
                taken |= idx[prior] == j;
            if (!taken && (best < 0 || x[j] > x[best])) best = j;
        }
        idx[slot] = (int32_t)best;
    }
}

Test(kernels_topk, ties_go_to_the_lower_index) {
    const float row[5] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
    int32_t idx[5];
    float values[5];
    k_topk(idx, values, row, 1, 5, 3);
    cr_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 4, "got %d %d %d", idx[0], idx[1], idx[2]);
    cr_assert(values[0] == 3.0f && values[1] == 3.0f && values[2] == 3.0f);
    k_topk(idx, NULL, row, 1, 5, 1);
    cr_assert(idx[0] == 1);
    k_topk(idx, values, row, 1, 5, 5);
    cr_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 4 && idx[3] == 3 && idx[4] == 0);
    const float flat[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    k_topk(idx, NULL, flat, 1, 8, 4);
    cr_assert(idx[0] == 0 && idx[1] == 1 && idx[2] == 2 && idx[3] == 3);
    const float descending_late[4] = {-INFINITY, -1.0f, -1.0f, -3.0f};
    k_topk(idx, values, descending_late, 1, 4, 4);
    cr_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 3 && idx[3] == 0 && values[3] == -INFINITY);
}

/* Rows of 1..64 values drawn from 4 levels (lots of ties), k up to 8. */
Test(kernels_topk, random_rows_with_ties_match_naive_selection) {
    const int64_t M = 130;
    dt_rng rng;
    dt_rng_seed(&rng, 100);
    const int64_t widths[] = {1, 7, 8, 33, 64};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        int64_t N = widths[w];
        float *x = alloc_floats(M * N);
        for (int64_t i = 0; i < M * N; i++)
            x[i] = (float)(int)(4.0f * dt_rng_uniform(&rng)) - 1.5f;
        for (int64_t k = 1; k <= 8 && k <= N; k++) {
            int32_t *idx = malloc((size_t)(M * k) * sizeof(int32_t)), expected[8];
            float *values = alloc_floats(M * k);
            k_topk(idx, values, x, M, N, k);
            for (int64_t m = 0; m < M; m++) {
                naive_topk(expected, x + m * N, N, k);
                for (int64_t slot = 0; slot < k; slot++) {
                    cr_assert(idx[m * k + slot] == expected[slot], "N=%ld k=%ld row %ld slot %ld: %d vs %d", (long)N,
                              (long)k, (long)m, (long)slot, idx[m * k + slot], expected[slot]);
                    cr_assert(values[m * k + slot] == x[m * N + expected[slot]]);
                }
            }
            free(idx), free(values);
        }
        free(x);
    }
}

Test(kernels_topk, k_larger_than_n_pads_with_minus_one) {
    const float row[2] = {0.25f, 0.75f};
    int32_t idx[4];
    float values[4];
    k_topk(idx, values, row, 1, 2, 4);
    cr_assert(idx[0] == 1 && idx[1] == 0 && idx[2] == -1 && idx[3] == -1);
    cr_assert(values[2] == -INFINITY && values[3] == -INFINITY);
}
