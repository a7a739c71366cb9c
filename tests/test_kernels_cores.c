/* The single-threaded cores (k_<op>_range, kernels/norm.h names the scheme)
 * against their OpenMP wrappers and against naive float64 loops.
 *
 * Each wrapper runs on 2 threads at a size above its parallel threshold, so it
 * really splits the range; it must equal the core run on the whole range bit
 * for bit (the wrappers' determinism rests on that), and the core run on two
 * pieces must equal it too (the decode team calls cores on its own shares).
 * The float64 loops are written from the formulas in the headers / SPEC §1. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"

/* Rows x columns above every wrapper's parallel threshold (65536 elements). */
enum { M = 301, C = 257, N_POINTWISE = M * C }; /* odd: the two threads get unequal shares */

static float *random_floats(int64_t n, uint64_t seed, float scale) {
    float *x = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(x);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    dt_rng_fill_normal(&rng, x, n, scale);
    return x;
}

static float *copy_floats(const float *x, int64_t n) {
    float *y = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(y);
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

static void expect_same_bits(const float *a, const float *b, int64_t n, const char *what) {
    cr_expect(memcmp(a, b, (size_t)n * sizeof(float)) == 0, "%s: wrapper and core differ", what);
}

/* |got - want| <= rel * |want| + abs_tol everywhere. */
static void expect_close(const float *got, const double *want, int64_t n, double rel, double abs_tol,
                         const char *what) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!(fabs((double)got[i] - want[i]) <= rel * fabs(want[i]) + abs_tol)) bad = i;
    cr_expect(bad < 0, "%s[%ld]: %.9g vs float64 %.9g", what, (long)bad, bad < 0 ? 0.0 : (double)got[bad],
              bad < 0 ? 0.0 : want[bad]);
}

static double *doubles(int64_t n) {
    double *x = calloc((size_t)n, sizeof(double));
    cr_assert_not_null(x);
    return x;
}

static void init(void) { k_set_threads(2); }

TestSuite(kernels_cores, .init = init);

Test(kernels_cores, rmsnorm_and_layernorm) {
    float *x = random_floats(M * C, 1, 1.0f), *w = random_floats(C, 2, 0.5f), *b = random_floats(C, 3, 0.5f);
    float *wrapped = malloc(sizeof(float) * M * C), *core = malloc(sizeof(float) * M * C);
    float mean_w[M], rstd_w[M], mean_c[M], rstd_c[M];
    double *want = doubles(M * C);
    const float eps = 1e-5f;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *bias = with_bias ? b : NULL;
        k_layernorm_forward(wrapped, mean_w, rstd_w, x, w, bias, M, C, eps);
        k_layernorm_forward_range(core, mean_c, rstd_c, x, w, bias, 100, C, eps);
        k_layernorm_forward_range(core + 100 * C, mean_c + 100, rstd_c + 100, x + 100 * C, w, bias, M - 100, C, eps);
        expect_same_bits(wrapped, core, M * C, "layernorm");
        expect_same_bits(rstd_w, rstd_c, M, "layernorm rstd");
        for (int64_t i = 0; i < M; i++) {
            double mu = 0.0, var = 0.0;
            for (int64_t j = 0; j < C; j++)
                mu += x[i * C + j];
            mu /= C;
            for (int64_t j = 0; j < C; j++)
                var += (x[i * C + j] - mu) * (x[i * C + j] - mu);
            double r = 1.0 / sqrt(var / C + eps);
            for (int64_t j = 0; j < C; j++)
                want[i * C + j] = (x[i * C + j] - mu) * r * w[j] + (bias ? bias[j] : 0.0);
        }
        expect_close(core, want, M * C, 1e-5, 1e-6, "layernorm");
    }
    k_rmsnorm_forward(wrapped, rstd_w, x, w, M, C, eps);
    k_rmsnorm_forward_range(core, rstd_c, x, w, 1, C, eps);
    k_rmsnorm_forward_range(core + C, rstd_c + 1, x + C, w, M - 1, C, eps);
    expect_same_bits(wrapped, core, M * C, "rmsnorm");
    expect_same_bits(rstd_w, rstd_c, M, "rmsnorm rstd");
    for (int64_t i = 0; i < M; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < C; j++)
            ss += (double)x[i * C + j] * x[i * C + j];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int64_t j = 0; j < C; j++)
            want[i * C + j] = x[i * C + j] * r * w[j];
    }
    expect_close(core, want, M * C, 1e-5, 1e-6, "rmsnorm");
    free(x), free(w), free(b), free(wrapped), free(core), free(want);
}

Test(kernels_cores, rope) {
    enum { T = 64, H = 8, HD = 32, POS0 = 5 };
    const int64_t width = H * HD, n = 2 * T * width;
    float *table = malloc(sizeof(float) * (POS0 + T) * HD);
    k_rope_table(table, POS0 + T, HD, 10000.0);
    float *x = random_floats(n, 4, 1.0f), *wrapped = copy_floats(x, n), *core = copy_floats(x, n);
    k_rope_forward(wrapped, table, 2, T, POS0, H, HD);
    for (int64_t b = 0; b < 2; b++) /* per batch: rows at POS0.., heads in two groups (decode's per-kv-head calls) */
        for (int64_t t = 0; t < T; t++) {
            float *row = core + (b * T + t) * width;
            k_rope_forward_range(row, table, 1, POS0 + t, 3, HD);
            k_rope_forward_range(row + 3 * HD, table, 1, POS0 + t, H - 3, HD);
        }
    expect_same_bits(wrapped, core, n, "rope");
    float *batch_core = copy_floats(x, n);
    for (int64_t b = 0; b < 2; b++)
        k_rope_forward_range(batch_core + b * T * width, table, T, POS0, H, HD);
    expect_same_bits(wrapped, batch_core, n, "rope (rows at once)");
    double *want = doubles(n);
    for (int64_t r = 0; r < 2 * T; r++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < HD / 2; j++) {
                double angle = (double)(POS0 + r % T) * pow(10000.0, -2.0 * (double)j / HD);
                const float *p = x + r * width + h * HD + 2 * j;
                want[r * width + h * HD + 2 * j] = p[0] * cos(angle) - p[1] * sin(angle);
                want[r * width + h * HD + 2 * j + 1] = p[0] * sin(angle) + p[1] * cos(angle);
            }
    expect_close(core, want, n, 1e-5, 1e-6, "rope");
    free(table), free(x), free(wrapped), free(core), free(batch_core), free(want);
}

Test(kernels_cores, attention_decode_per_kv_head) {
    enum { ROWS = 2, H = 8, HKV = 4, HD = 64, POS = 200, NPOS = 256 };
    const int64_t qd = H * HD, kvd = HKV * HD;
    float *q = random_floats(ROWS * qd, 5, 1.0f), *k = random_floats(NPOS * kvd, 6, 1.0f);
    float *v = random_floats(NPOS * kvd, 7, 1.0f);
    float *wrapped = malloc(sizeof(float) * ROWS * qd), *core = malloc(sizeof(float) * ROWS * qd);
    float *scratch = malloc(sizeof(float) * ROWS * H * NPOS);
    k_attention_decode(wrapped, q, k, v, ROWS, POS, H, HKV, HD, scratch);
    for (int64_t kv = HKV - 1; kv >= 0; kv--) /* any order: each kv head writes only its own heads */
        k_attention_decode_range(core, q, k, v, ROWS, POS, H, HKV, HD, kv, kv + 1, scratch);
    expect_same_bits(wrapped, core, ROWS * qd, "attention decode");
    double *want = doubles(ROWS * qd), scores[POS + 1];
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / HKV);
            double max = -INFINITY, sum = 0.0;
            for (int64_t t = 0; t <= POS; t++) {
                double dot = 0.0;
                for (int64_t i = 0; i < HD; i++)
                    dot += (double)q[r * qd + h * HD + i] * k[t * kvd + g * HD + i];
                scores[t] = dot / sqrt((double)HD);
                max = fmax(max, scores[t]);
            }
            for (int64_t t = 0; t <= POS; t++)
                sum += (scores[t] = exp(scores[t] - max));
            for (int64_t t = 0; t <= POS; t++)
                for (int64_t i = 0; i < HD; i++)
                    want[r * qd + h * HD + i] += scores[t] / sum * v[t * kvd + g * HD + i];
        }
    expect_close(core, want, ROWS * qd, 1e-4, 1e-5, "attention decode");
    free(q), free(k), free(v), free(wrapped), free(core), free(scratch), free(want);
}

static double gelu64(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double sigmoid64(double x) { return 1.0 / (1.0 + exp(-x)); }

Test(kernels_cores, activations) {
    const int64_t n = N_POINTWISE;
    float *a = random_floats(n, 8, 2.0f), *b = random_floats(n, 9, 1.0f), *bias = random_floats(C, 10, 0.5f);
    float *couple = random_floats(C, 11, 0.5f);
    float *wrapped = malloc(sizeof(float) * n), *core = malloc(sizeof(float) * n);
    double *want = doubles(n);

    k_gelu_forward(wrapped, a, n);
    k_gelu_forward_range(core, a, 777);
    k_gelu_forward_range(core + 777, a + 777, n - 777);
    expect_same_bits(wrapped, core, n, "gelu");
    for (int64_t i = 0; i < n; i++)
        want[i] = gelu64(a[i]);
    expect_close(core, want, n, 1e-5, 1e-6, "gelu");

    k_silu_forward(wrapped, a, n);
    k_silu_forward_range(core, a, 5);
    k_silu_forward_range(core + 5, a + 5, n - 5);
    expect_same_bits(wrapped, core, n, "silu");
    for (int64_t i = 0; i < n; i++)
        want[i] = a[i] * sigmoid64(a[i]);
    expect_close(core, want, n, 1e-5, 1e-6, "silu");

    k_swiglu_forward(wrapped, a, b, n);
    k_swiglu_forward_range(core, a, b, 1001);
    k_swiglu_forward_range(core + 1001, a + 1001, b + 1001, n - 1001);
    expect_same_bits(wrapped, core, n, "swiglu");
    for (int64_t i = 0; i < n; i++)
        want[i] = a[i] * sigmoid64(a[i]) * b[i];
    expect_close(core, want, n, 1e-5, 1e-6, "swiglu");

    for (int coupled = 0; coupled < 2; coupled++) {
        float *pre_w = copy_floats(a, n), *pre_c = copy_floats(a, n);
        if (coupled) {
            k_bias_gelu_couple_forward(wrapped, pre_w, bias, b, couple, M, C);
            k_bias_gelu_couple_forward_range(core, pre_c, bias, b, couple, 7, C);
            k_bias_gelu_couple_forward_range(core + 7 * C, pre_c + 7 * C, bias, b + 7 * C, couple, M - 7, C);
        } else {
            k_bias_gelu_forward(wrapped, pre_w, bias, M, C);
            k_bias_gelu_forward_range(core, pre_c, bias, 7, C);
            k_bias_gelu_forward_range(core + 7 * C, pre_c + 7 * C, bias, M - 7, C);
        }
        expect_same_bits(wrapped, core, n, coupled ? "bias gelu couple" : "bias gelu");
        expect_same_bits(pre_w, pre_c, n, "bias gelu pre");
        for (int64_t i = 0; i < n; i++)
            want[i] = gelu64((double)a[i] + bias[i % C]) + (coupled ? (double)b[i] * couple[i % C] : 0.0);
        expect_close(core, want, n, 1e-5, 1e-5, coupled ? "bias gelu couple" : "bias gelu");
        free(pre_w), free(pre_c);
    }
    free(a), free(b), free(bias), free(couple), free(wrapped), free(core), free(want);
}

Test(kernels_cores, elementwise) {
    const int64_t n = N_POINTWISE, cut = 4099;
    float *a = random_floats(n, 12, 1.0f), *b = random_floats(n, 13, 1.0f), *v = random_floats(C, 14, 1.0f);
    float *s = random_floats(M, 15, 1.0f);
    float *wrapped = malloc(sizeof(float) * n), *core = malloc(sizeof(float) * n);
    double *want = doubles(n);
    for (int op = 0; op < 5; op++) {
        memcpy(wrapped, b, sizeof(float) * n), memcpy(core, b, sizeof(float) * n);
        for (int64_t piece = 0; piece < 2; piece++) {
            const int64_t i0 = piece ? cut : 0, len = piece ? n - cut : cut;
            switch (op) {
            case 0:
                k_add_range(core + i0, a + i0, b + i0, len);
                break;
            case 1:
                k_mul_range(core + i0, a + i0, b + i0, len);
                break;
            case 2:
                k_scale_range(core + i0, a + i0, 0.37f, len);
                break;
            case 3:
                k_accumulate_range(core + i0, a + i0, len);
                break;
            case 4:
                k_accumulate_scaled_range(core + i0, a + i0, -1.3f, len);
                break;
            }
        }
        switch (op) {
        case 0:
            k_add(wrapped, a, b, n);
            break;
        case 1:
            k_mul(wrapped, a, b, n);
            break;
        case 2:
            k_scale(wrapped, a, 0.37f, n);
            break;
        case 3:
            k_accumulate(wrapped, a, n);
            break;
        case 4:
            k_accumulate_scaled(wrapped, a, -1.3f, n);
            break;
        }
        const double sums[5][3] = {{1, 1, 0}, {0, 0, 1}, {0.37f, 0, 0}, {1, 1, 0}, {-1.3f, 1, 0}};
        for (int64_t i = 0; i < n; i++) /* want = c_a a + c_b b + c_ab a b */
            want[i] = sums[op][0] * a[i] + sums[op][1] * b[i] + sums[op][2] * (double)a[i] * b[i];
        expect_same_bits(wrapped, core, n, "pointwise op");
        expect_close(core, want, n, 1e-6, 1e-6, "pointwise op");
    }
    int32_t idx[M];
    for (int64_t i = 0; i < M; i++)
        idx[i] = (int32_t)((i * 37) % M);
    for (int op = 0; op < 5; op++) {
        memcpy(wrapped, b, sizeof(float) * n), memcpy(core, b, sizeof(float) * n);
        for (int64_t piece = 0; piece < 2; piece++) {
            const int64_t r0 = piece ? 11 : 0, rows = piece ? M - 11 : 11;
            float *o = core + r0 * C;
            switch (op) {
            case 0:
                k_add_vec_range(o, a + r0 * C, v, rows, C);
                break;
            case 1:
                k_mul_vec_range(o, a + r0 * C, v, rows, C);
                break;
            case 2:
                k_accumulate_mul_vec_range(o, a + r0 * C, v, rows, C);
                break;
            case 3:
                k_scale_rows_range(o, a + r0 * C, s + r0, rows, C);
                break;
            case 4:
                k_gather_rows_range(o, a, idx + r0, rows, C);
                break;
            }
        }
        switch (op) {
        case 0:
            k_add_vec(wrapped, a, v, M, C);
            break;
        case 1:
            k_mul_vec(wrapped, a, v, M, C);
            break;
        case 2:
            k_accumulate_mul_vec(wrapped, a, v, M, C);
            break;
        case 3:
            k_scale_rows(wrapped, a, s, M, C);
            break;
        case 4:
            k_gather_rows(wrapped, a, idx, M, C);
            break;
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < C; j++) {
                const double x = a[i * C + j], y = b[i * C + j];
                const double w[5] = {x + v[j], x * v[j], y + x * v[j], x * s[i], a[idx[i] * C + j]};
                want[i * C + j] = w[op];
            }
        expect_same_bits(wrapped, core, n, "row op");
        expect_close(core, want, n, 1e-6, 1e-6, "row op");
    }
    free(a), free(b), free(v), free(s), free(wrapped), free(core), free(want);
}

Test(kernels_cores, embedding) {
    enum { V = 50 };
    float *table = random_floats(V * C, 16, 1.0f), *base = random_floats(M * C, 17, 1.0f);
    int32_t tokens[M];
    for (int64_t i = 0; i < M; i++)
        tokens[i] = (int32_t)((i * 7 + 3) % V);
    for (int acc = 0; acc < 2; acc++) {
        float *wrapped = copy_floats(base, M * C), *core = copy_floats(base, M * C);
        double *want = doubles(M * C);
        if (acc) {
            k_embedding_accumulate(wrapped, table, tokens, M, C);
            k_embedding_accumulate_range(core, table, tokens, 1, C);
            k_embedding_accumulate_range(core + C, table, tokens + 1, M - 1, C);
        } else {
            k_embedding_forward(wrapped, table, tokens, M, C);
            k_embedding_forward_range(core, table, tokens, 1, C);
            k_embedding_forward_range(core + C, table, tokens + 1, M - 1, C);
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < C; j++)
                want[i * C + j] = (double)table[tokens[i] * C + j] + (acc ? base[i * C + j] : 0.0);
        expect_same_bits(wrapped, core, M * C, "embedding");
        expect_close(core, want, M * C, 1e-6, 0.0, "embedding");
        free(wrapped), free(core), free(want);
    }
    free(table), free(base);
}

Test(kernels_cores, softmax_log_softmax_cross_entropy_topk) {
    float *x = random_floats(M * C, 18, 3.0f);
    float *wrapped = malloc(sizeof(float) * M * C), *core = malloc(sizeof(float) * M * C);
    double *want = doubles(M * C);
    for (int log_form = 0; log_form < 2; log_form++) {
        if (log_form) {
            k_log_softmax_forward(wrapped, x, M, C);
            k_log_softmax_forward_range(core, x, 3, C);
            k_log_softmax_forward_range(core + 3 * C, x + 3 * C, M - 3, C);
        } else {
            k_softmax_forward(wrapped, x, M, C);
            k_softmax_forward_range(core, x, 3, C);
            k_softmax_forward_range(core + 3 * C, x + 3 * C, M - 3, C);
        }
        for (int64_t i = 0; i < M; i++) {
            double max = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < C; j++)
                max = fmax(max, x[i * C + j]);
            for (int64_t j = 0; j < C; j++)
                sum += exp(x[i * C + j] - max);
            for (int64_t j = 0; j < C; j++)
                want[i * C + j] = log_form ? x[i * C + j] - max - log(sum) : exp(x[i * C + j] - max) / sum;
        }
        expect_same_bits(wrapped, core, M * C, log_form ? "log softmax" : "softmax");
        expect_close(core, want, M * C, 1e-5, 1e-6, log_form ? "log softmax" : "softmax");
    }
    int32_t targets[M];
    for (int64_t i = 0; i < M; i++)
        targets[i] = (int32_t)(i % C);
    float loss_w[M], loss_c[M], stats_w[2 * M], stats_c[2 * M];
    double loss_want[M];
    k_cross_entropy_forward_stats(loss_w, stats_w, x, targets, M, C);
    k_cross_entropy_forward_stats_range(loss_c, stats_c, x, targets, 9, C);
    k_cross_entropy_forward_stats_range(loss_c + 9, stats_c + 18, x + 9 * C, targets + 9, M - 9, C);
    expect_same_bits(loss_w, loss_c, M, "cross entropy");
    expect_same_bits(stats_w, stats_c, 2 * M, "cross entropy stats");
    for (int64_t i = 0; i < M; i++)
        loss_want[i] = -(want[i * C + targets[i]]); /* want holds log softmax */
    expect_close(loss_c, loss_want, M, 1e-5, 1e-6, "cross entropy");

    enum { K = 5 };
    int32_t idx_w[M * K], idx_c[M * K];
    float val_w[M * K], val_c[M * K];
    k_topk(idx_w, val_w, x, M, C, K);
    k_topk_range(idx_c, val_c, x, 2, C, K);
    k_topk_range(idx_c + 2 * K, val_c + 2 * K, x + 2 * C, M - 2, C, K);
    cr_expect(memcmp(idx_w, idx_c, sizeof idx_w) == 0, "top-k: wrapper and core differ");
    expect_same_bits(val_w, val_c, M * K, "top-k values");
    for (int64_t i = 0; i < M; i++) { /* naive: the k largest, each a strict rank below the previous */
        int32_t chosen[K];
        for (int64_t slot = 0; slot < K; slot++) {
            int32_t best = -1;
            for (int64_t j = 0; j < C; j++) {
                int taken = 0;
                for (int64_t p = 0; p < slot; p++)
                    taken |= chosen[p] == j;
                if (!taken && (best < 0 || x[i * C + j] > x[i * C + best])) best = (int32_t)j;
            }
            chosen[slot] = best;
            cr_expect_eq(idx_c[i * K + slot], best, "top-k row %ld slot %ld", (long)i, (long)slot);
        }
    }
    free(x), free(wrapped), free(core), free(want);
}
