/* Rotary position embedding, interleaved pairs as in Meta's LLaMA and
 * llama2.c (SPEC §1). The (cos, sin) table is computed once in double, so the
 * angle pos * theta^(-2j/hd) is exact to float rounding even at large pos. */
#include "kernels/rope.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

/* table [n_pos, head_dim/2, 2] = (cos, sin) of pos * theta^(-2j/head_dim) */
void k_rope_table(float *table, int64_t n_pos, int64_t head_dim, double theta) {
    int64_t half = head_dim / 2;
    for (int64_t pos = 0; pos < n_pos; pos++) {
        for (int64_t j = 0; j < half; j++) {
            double freq = pow(theta, -2.0 * (double)j / (double)head_dim);
            double angle = (double)pos * freq;
            table[(pos * half + j) * 2 + 0] = (float)cos(angle);
            table[(pos * half + j) * 2 + 1] = (float)sin(angle);
        }
    }
}

/* x [rows,n_head*head_dim] rotated in place, row r at position pos0 + r;
 * table [>= pos0+rows, head_dim/2, 2]. (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos) */
void k_rope_forward_range(float *x, const float *table, int64_t rows, int64_t pos0, int64_t n_head, int64_t head_dim) {
    const int64_t half = head_dim / 2, width = n_head * head_dim;
    for (int64_t row = 0; row < rows; row++) {
        const float *angles = table + (pos0 + row) * half * 2; /* [half, 2] for this position */
        float *x_row = x + row * width;
        for (int64_t h = 0; h < n_head; h++) {
            float *head = x_row + h * head_dim;
            for (int64_t j = 0; j < half; j++) {
                float c = angles[2 * j], s = angles[2 * j + 1];
                float x0 = head[2 * j], x1 = head[2 * j + 1];
                head[2 * j] = x0 * c - x1 * s;
                head[2 * j + 1] = x0 * s + x1 * c;
            }
        }
    }
}

/* x [B,T,n_head*head_dim]: the core per row (rows of a batch restart at pos0) */
void k_rope_forward(float *x, const float *table, int64_t B, int64_t T, int64_t pos0, int64_t n_head,
                    int64_t head_dim) {
    const int64_t width = n_head * head_dim;
#pragma omp parallel for schedule(static) if (B * T * width > PARALLEL_MIN_ELEMENTS)
    for (int64_t row = 0; row < B * T; row++)
        k_rope_forward_range(x + row * width, table, 1, pos0 + row % T, n_head, head_dim);
}

/* d_in, d_out [B,T,n_head*head_dim]; d_in += R^T d_out, R^T being the rotation by -angle:
 * (d0, d1) -> (d0 cos + d1 sin, -d0 sin + d1 cos) */
void k_rope_backward(float *d_in, const float *d_out, const float *table, int64_t B, int64_t T, int64_t pos0,
                     int64_t n_head, int64_t head_dim) {
    int64_t half = head_dim / 2, width = n_head * head_dim;
#pragma omp parallel for schedule(static) if (B * T * width > PARALLEL_MIN_ELEMENTS)
    for (int64_t row = 0; row < B * T; row++) {
        const float *angles = table + (pos0 + row % T) * half * 2;
        const float *d_out_row = d_out + row * width;
        float *d_in_row = d_in + row * width;
        for (int64_t h = 0; h < n_head; h++) {
            const float *d_head = d_out_row + h * head_dim;
            float *d_in_head = d_in_row + h * head_dim;
            for (int64_t j = 0; j < half; j++) {
                float c = angles[2 * j], s = angles[2 * j + 1];
                float d0 = d_head[2 * j], d1 = d_head[2 * j + 1];
                d_in_head[2 * j] += d0 * c + d1 * s;
                d_in_head[2 * j + 1] += -d0 * s + d1 * c;
            }
        }
    }
}
