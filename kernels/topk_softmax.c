/* Renormalised top-k softmax (see topk_softmax.h). The kept set comes from
 * k_topk (the MoE routing kernel: a sorted candidate list per row), its
 * exponentials are summed in double like kernels/softmax.c, and the row is
 * zero outside it, so the softmax backward (d_x += p (d_p - p·d_p)) is the
 * exact gradient through the kept probabilities and 0 elsewhere. */
#include "kernels/topk_softmax.h"

#include <math.h>
#include <string.h>

#include "kernels/parallel.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

void k_topk_softmax_range(float *out, const float *x, int64_t rows, int64_t N, int64_t top, int32_t *idx) {
    if (top >= N) {
        k_softmax_forward_range(out, x, rows, N);
        return;
    }
    for (int64_t i = 0; i < rows; i++) {
        const float *row = x + i * N;
        float *p = out + i * N;
        int32_t *kept = idx + i * top;
        k_topk_range(kept, NULL, row, 1, N, top);
        memset(p, 0, (size_t)N * sizeof *p);
        const float max = row[kept[0]]; /* descending: the first kept is the largest */
        double sum = 0.0;
        for (int64_t j = 0; j < top; j++) {
            p[kept[j]] = expf(row[kept[j]] - max);
            sum += p[kept[j]];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < top; j++)
            p[kept[j]] *= inv;
    }
}

void k_topk_softmax(float *out, const float *x, int64_t M, int64_t N, int64_t top, int32_t *idx) {
    K_FOR_SHARES(M, M * N > PARALLEL_MIN_ELEMENTS,
                 k_topk_softmax_range(out + i0 * N, x + i0 * N, i1 - i0, N, top, idx ? idx + i0 * top : NULL));
}
