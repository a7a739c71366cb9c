/* Elementwise arithmetic, [C]-vector broadcasts over rows, per-row scaling,
 * and row gather / scatter-add (MoE dispatch and combine).
 *
 * Reductions over rows into a [C] vector (sum_rows, the d_v of
 * mul_vec_backward, scatter_add_rows) are parallelised over COLUMN blocks,
 * each column summed in row order by one thread: no races, no per-thread
 * partial buffers, and the result is bit-identical for every thread count.
 * Compiled once per instruction-set level (kernels/isa_variant.h; why:
 * softmax_isa.c); elementwise.c calls the active level's table. */
#include "kernels/elementwise_ops.h"
#include "kernels/isa_variant.h"

#include "kernels/parallel.h"

/* Below this many elements a parallel region costs more than it saves (and on
 * a shared 2-core machine many tiny regions stall on spinning barriers). */
#define PARALLEL_MIN_ELEMENTS 65536
/* Columns per block in column-parallel reductions: 64 floats = 4 cache lines. */
#define COLUMN_BLOCK 64

/* out, a, b [n]; out = a + b */
static void add_range(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

static void add(float *out, const float *a, const float *b, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, add_range(out + i0, a + i0, b + i0, i1 - i0));
}

/* out, a, b [n]; out = a * b */
static void mul_range(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

static void mul(float *out, const float *a, const float *b, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, mul_range(out + i0, a + i0, b + i0, i1 - i0));
}

/* out, a [n]; out = s * a */
static void scale_range(float *out, const float *a, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = s * a[i];
}

static void scale(float *out, const float *a, float s, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, scale_range(out + i0, a + i0, s, i1 - i0));
}

/* dst, src [n]; dst += src */
static void accumulate_range(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static void accumulate(float *dst, const float *src, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, accumulate_range(dst + i0, src + i0, i1 - i0));
}

/* dst, src [n]; dst += s * src */
static void accumulate_scaled_range(float *dst, const float *src, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += s * src[i];
}

static void accumulate_scaled(float *dst, const float *src, float s, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, accumulate_scaled_range(dst + i0, src + i0, s, i1 - i0));
}

/* d_a, d_b, d_out, a, b [n]; d_a += d_out * b ; d_b += d_out * a (NULL skipped) */
static void mul_backward(float *d_a, float *d_b, const float *d_out, const float *a, const float *b, int64_t n) {
    if (d_a) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++)
            d_a[i] += d_out[i] * b[i];
    }
    if (d_b) {
#pragma omp parallel for schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++)
            d_b[i] += d_out[i] * a[i];
    }
}

/* x, out [M,C]; v [C]; out = x + v broadcast over rows */
static void add_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] + v[j];
    }
}

static void add_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, add_vec_range(out + i0 * C, x + i0 * C, v, i1 - i0, C));
}

/* x, out [M,C]; v [C]; out = x * v broadcast over rows */
static void mul_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] * v[j];
    }
}

static void mul_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, mul_vec_range(out + i0 * C, x + i0 * C, v, i1 - i0, C));
}

/* out, y [M,C]; v [C]; out += y * v broadcast over rows */
static void accumulate_mul_vec_range(float *out, const float *y, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *y_row = y + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] += y_row[j] * v[j];
    }
}

static void accumulate_mul_vec(float *out, const float *y, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, accumulate_mul_vec_range(out + i0 * C, y + i0 * C, v, i1 - i0, C));
}

/* d_x, d_out, x [M,C]; v, d_v [C]
 * d_x += d_out * v (rows in parallel); d_v += sum over rows of d_out * x
 * (column blocks in parallel, each column summed in row order). */
static void mul_vec_backward(float *d_x, float *d_v, const float *d_out, const float *x, const float *v, int64_t M,
                             int64_t C) {
    if (d_x) {
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < M; i++) {
            const float *d_out_row = d_out + i * C;
            float *d_x_row = d_x + i * C;
            for (int64_t j = 0; j < C; j++)
                d_x_row[j] += d_out_row[j] * v[j];
        }
    }
    if (d_v) {
        int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
        for (int64_t block = 0; block < n_blocks; block++) {
            int64_t j0 = block * COLUMN_BLOCK;
            int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
            for (int64_t i = 0; i < M; i++) {
                const float *d_out_row = d_out + i * C;
                const float *x_row = x + i * C;
                for (int64_t j = j0; j < j1; j++)
                    d_v[j] += d_out_row[j] * x_row[j];
            }
        }
    }
}

/* d_out [M,C]; d_v [C] += sum over rows of d_out */
static void sum_rows(float *d_v, const float *d_out, int64_t M, int64_t C) {
    int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
    for (int64_t block = 0; block < n_blocks; block++) {
        int64_t j0 = block * COLUMN_BLOCK;
        int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
        for (int64_t i = 0; i < M; i++) {
            const float *d_out_row = d_out + i * C;
            for (int64_t j = j0; j < j1; j++)
                d_v[j] += d_out_row[j];
        }
    }
}

/* x, out [M,C]; s [M]; out = x * s per row */
static void scale_rows_range(float *out, const float *x, const float *s, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        float scale = s[i];
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] * scale;
    }
}

static void scale_rows(float *out, const float *x, const float *s, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, scale_rows_range(out + i0 * C, x + i0 * C, s + i0, i1 - i0, C));
}

/* d_x, d_out, x [M,C]; s, d_s [M]
 * d_x += d_out * s ; d_s += row dot(d_out, x) (one row per thread: deterministic) */
static void scale_rows_backward(float *d_x, float *d_s, const float *d_out, const float *x, const float *s, int64_t M,
                                int64_t C) {
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *d_out_row = d_out + i * C;
        if (d_x) {
            float *d_x_row = d_x + i * C;
            float scale = s[i];
            for (int64_t j = 0; j < C; j++)
                d_x_row[j] += d_out_row[j] * scale;
        }
        if (d_s) {
            const float *x_row = x + i * C;
            float dot = 0.0f;
            for (int64_t j = 0; j < C; j++)
                dot += d_out_row[j] * x_row[j];
            d_s[i] += dot;
        }
    }
}

/* x [N,C]; idx [M] in 0..N-1; out [M,C] = x[idx[m], :] */
static void gather_rows_range(float *out, const float *x, const int32_t *idx, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + (int64_t)idx[i] * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j];
    }
}

static void gather_rows(float *out, const float *x, const int32_t *idx, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, gather_rows_range(out + i0 * C, x, idx + i0, i1 - i0, C));
}

/* src [M,C]; idx [M]; out [N,C]; out[idx[m], :] += src[m, :].
 * Several m may hit the same row, so rows are never split across threads:
 * column blocks are, and each block adds the rows in order m = 0..M-1. */
static void scatter_add_rows(float *out, const float *src, const int32_t *idx, int64_t M, int64_t C) {
    int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (M * C > PARALLEL_MIN_ELEMENTS)
    for (int64_t block = 0; block < n_blocks; block++) {
        int64_t j0 = block * COLUMN_BLOCK;
        int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
        for (int64_t i = 0; i < M; i++) {
            const float *src_row = src + i * C;
            float *out_row = out + (int64_t)idx[i] * C;
            for (int64_t j = j0; j < j1; j++)
                out_row[j] += src_row[j];
        }
    }
}

const k_elementwise_ops K_ISA_VARIANT_NAME(k_elementwise_ops) = {
    .add = add,
    .add_range = add_range,
    .mul = mul,
    .mul_range = mul_range,
    .scale = scale,
    .scale_range = scale_range,
    .accumulate = accumulate,
    .accumulate_range = accumulate_range,
    .accumulate_scaled = accumulate_scaled,
    .accumulate_scaled_range = accumulate_scaled_range,
    .mul_backward = mul_backward,
    .add_vec = add_vec,
    .add_vec_range = add_vec_range,
    .mul_vec = mul_vec,
    .mul_vec_range = mul_vec_range,
    .accumulate_mul_vec = accumulate_mul_vec,
    .accumulate_mul_vec_range = accumulate_mul_vec_range,
    .mul_vec_backward = mul_vec_backward,
    .sum_rows = sum_rows,
    .scale_rows = scale_rows,
    .scale_rows_range = scale_rows_range,
    .scale_rows_backward = scale_rows_backward,
    .gather_rows = gather_rows,
    .gather_rows_range = gather_rows_range,
    .scatter_add_rows = scatter_add_rows,
};
