/* Token embedding lookup (a row gather) and its backward (a scatter-add).
 *
 * The backward runs in parallel over column blocks, never over tokens: two
 * tokens that hit the same row would race, and summing each row's
 * contributions in token order keeps the result bit-identical for every
 * thread count. */
#include "kernels/embedding.h"

#include <string.h>

#include "kernels/parallel.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768
/* Columns per block in the column-parallel scatter-add. */
#define COLUMN_BLOCK 64

/* weight [V,C]; tokens [N] in 0..V-1; out [N,C] = weight[tokens[n], :] */
void k_embedding_forward_range(float *out, const float *weight, const int32_t *tokens, int64_t rows, int64_t C) {
    for (int64_t n = 0; n < rows; n++)
        memcpy(out + n * C, weight + (int64_t)tokens[n] * C, (size_t)C * sizeof(float));
}

void k_embedding_forward(float *out, const float *weight, const int32_t *tokens, int64_t N, int64_t C) {
    K_FOR_SHARES(N, N * C > PARALLEL_MIN_ELEMENTS,
                 k_embedding_forward_range(out + i0 * C, weight, tokens + i0, i1 - i0, C));
}

/* weight [V,C]; tokens [N] in 0..V-1; out [N,C] += weight[tokens[n], :] */
void k_embedding_accumulate_range(float *out, const float *weight, const int32_t *tokens, int64_t rows, int64_t C) {
    for (int64_t n = 0; n < rows; n++) {
        const float *row = weight + (int64_t)tokens[n] * C;
        float *y = out + n * C;
        for (int64_t j = 0; j < C; j++)
            y[j] += row[j];
    }
}

void k_embedding_accumulate(float *out, const float *weight, const int32_t *tokens, int64_t N, int64_t C) {
    K_FOR_SHARES(N, N * C > PARALLEL_MIN_ELEMENTS,
                 k_embedding_accumulate_range(out + i0 * C, weight, tokens + i0, i1 - i0, C));
}

/* d_out [N,C]; tokens [N]; d_weight [V,C]: d_weight[tokens[n], :] += d_out[n, :] */
void k_embedding_backward(float *d_weight, const float *d_out, const int32_t *tokens, int64_t N, int64_t C) {
    int64_t n_blocks = (C + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
#pragma omp parallel for schedule(static) if (N * C > PARALLEL_MIN_ELEMENTS)
    for (int64_t block = 0; block < n_blocks; block++) {
        int64_t j0 = block * COLUMN_BLOCK;
        int64_t j1 = j0 + COLUMN_BLOCK < C ? j0 + COLUMN_BLOCK : C;
        for (int64_t n = 0; n < N; n++) {
            const float *d_out_row = d_out + n * C;
            float *d_weight_row = d_weight + (int64_t)tokens[n] * C;
            for (int64_t j = j0; j < j1; j++)
                d_weight_row[j] += d_out_row[j];
        }
    }
}
