/* Elementwise arithmetic, [C]-vector broadcasts over rows, per-row scaling,
 * and row gather / scatter-add (MoE dispatch and combine).
 *
 * Reductions over rows into a [C] vector (k_sum_rows, the d_v of
 * k_mul_vec_backward, k_scatter_add_rows) are parallelised over COLUMN blocks,
 * each column summed in row order by one thread: no races, no per-thread
 * partial buffers, and the result is bit-identical for every thread count. */
#include "kernels/elementwise.h"

#include "kernels/parallel.h"

/* Below this many elements a parallel region costs more than it saves (and on
 * a shared 2-core machine many tiny regions stall on spinning barriers). */
#define PARALLEL_MIN_ELEMENTS 65536
/* Columns per block in column-parallel reductions: 64 floats = 4 cache lines. */
#define COLUMN_BLOCK 64

/* out, a, b [n]; out = a + b */
void k_add_range(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void k_add(float *out, const float *a, const float *b, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, k_add_range(out + i0, a + i0, b + i0, i1 - i0));
}

/* out, a, b [n]; out = a * b */
void k_mul_range(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

void k_mul(float *out, const float *a, const float *b, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, k_mul_range(out + i0, a + i0, b + i0, i1 - i0));
}

/* out, a [n]; out = s * a */
void k_scale_range(float *out, const float *a, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = s * a[i];
}

void k_scale(float *out, const float *a, float s, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, k_scale_range(out + i0, a + i0, s, i1 - i0));
}

/* dst, src [n]; dst += src */
void k_accumulate_range(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void k_accumulate(float *dst, const float *src, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, k_accumulate_range(dst + i0, src + i0, i1 - i0));
}

/* dst, src [n]; dst += s * src */
void k_accumulate_scaled_range(float *dst, const float *src, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += s * src[i];
}

void k_accumulate_scaled(float *dst, const float *src, float s, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, k_accumulate_scaled_range(dst + i0, src + i0, s, i1 - i0));
}

/* d_a, d_b, d_out, a, b [n]; d_a += d_out * b ; d_b += d_out * a (NULL skipped) */
void k_mul_backward(float *d_a, float *d_b, const float *d_out, const float *a, const float *b, int64_t n) {
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
void k_add_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] + v[j];
    }
}

void k_add_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, k_add_vec_range(out + i0 * C, x + i0 * C, v, i1 - i0, C));
}

/* x, out [M,C]; v [C]; out = x * v broadcast over rows */
void k_mul_vec_range(float *out, const float *x, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] * v[j];
    }
}

void k_mul_vec(float *out, const float *x, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, k_mul_vec_range(out + i0 * C, x + i0 * C, v, i1 - i0, C));
}

/* out, y [M,C]; v [C]; out += y * v broadcast over rows */
void k_accumulate_mul_vec_range(float *out, const float *y, const float *v, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *y_row = y + i * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] += y_row[j] * v[j];
    }
}

void k_accumulate_mul_vec(float *out, const float *y, const float *v, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, k_accumulate_mul_vec_range(out + i0 * C, y + i0 * C, v, i1 - i0, C));
}

/* d_x, d_out, x [M,C]; v, d_v [C]
 * d_x += d_out * v (rows in parallel); d_v += sum over rows of d_out * x
 * (column blocks in parallel, each column summed in row order). */
void k_mul_vec_backward(float *d_x, float *d_v, const float *d_out, const float *x, const float *v, int64_t M,
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
void k_sum_rows(float *d_v, const float *d_out, int64_t M, int64_t C) {
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
void k_scale_rows_range(float *out, const float *x, const float *s, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + i * C;
        float *out_row = out + i * C;
        float scale = s[i];
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j] * scale;
    }
}

void k_scale_rows(float *out, const float *x, const float *s, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, k_scale_rows_range(out + i0 * C, x + i0 * C, s + i0, i1 - i0, C));
}

/* d_x, d_out, x [M,C]; s, d_s [M]
 * d_x += d_out * s ; d_s += row dot(d_out, x) (one row per thread: deterministic) */
void k_scale_rows_backward(float *d_x, float *d_s, const float *d_out, const float *x, const float *s, int64_t M,
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
void k_gather_rows_range(float *out, const float *x, const int32_t *idx, int64_t rows, int64_t C) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x_row = x + (int64_t)idx[i] * C;
        float *out_row = out + i * C;
        for (int64_t j = 0; j < C; j++)
            out_row[j] = x_row[j];
    }
}

void k_gather_rows(float *out, const float *x, const int32_t *idx, int64_t M, int64_t C) {
    K_FOR_SHARES(M, M * C > PARALLEL_MIN_ELEMENTS, k_gather_rows_range(out + i0 * C, x, idx + i0, i1 - i0, C));
}

/* src [M,C]; idx [M]; out [N,C]; out[idx[m], :] += src[m, :].
 * Several m may hit the same row, so rows are never split across threads:
 * column blocks are, and each block adds the rows in order m = 0..M-1. */
void k_scatter_add_rows(float *out, const float *src, const int32_t *idx, int64_t M, int64_t C) {
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
