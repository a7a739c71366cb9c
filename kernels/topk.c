/* Top-k selection per row (MoE routing, SPEC §1): descending by value, equal
 * values ordered by the lower index first, exactly like a stable sort.
 *
 * k is small (a few experts) and N modest (up to ~64), so each row keeps a
 * sorted list of its best k candidates and inserts each new value after every
 * kept value that is >= it: a later index never overtakes an equal earlier one. */
#include "kernels/topk.h"

#include "kernels/parallel.h"

#include <math.h>
#include <stddef.h>

/* Below this many compared elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

/* Whether v must be placed before an already kept w: strictly greater (so
 * equal values keep index order), and any number ranks above NaN. */
static inline int ranks_above(float v, float w) { return v > w || (isnan(w) && !isnan(v)); }

/* x [M,N]; idx [M,k]; values [M,k] or NULL.
 * Slots beyond N (k > N) get index -1 and value -INFINITY. NaN ranks below every number. */
void k_topk_range(int32_t *idx, float *values, const float *x, int64_t rows, int64_t N, int64_t k) {
    if (k <= 0) return;
    for (int64_t m = 0; m < rows; m++) {
        const float *row = x + m * N;
        int32_t *best = idx + m * k; /* the sorted candidate list lives in the output */
        int64_t count = 0;
        for (int64_t j = 0; j < N; j++) {
            float v = row[j];
            if (count == k) {
                /* Full: v must beat the current last strictly (ties keep the earlier index). */
                if (!ranks_above(v, row[best[k - 1]])) continue;
                count = k - 1; /* drop the last */
            }
            int64_t pos = count;
            while (pos > 0 && ranks_above(v, row[best[pos - 1]])) {
                best[pos] = best[pos - 1];
                pos--;
            }
            best[pos] = (int32_t)j;
            count++;
        }
        for (int64_t slot = count; slot < k; slot++)
            best[slot] = -1;
        if (values)
            for (int64_t slot = 0; slot < k; slot++)
                values[m * k + slot] = best[slot] >= 0 ? row[best[slot]] : -INFINITY;
    }
}

void k_topk(int32_t *idx, float *values, const float *x, int64_t M, int64_t N, int64_t k) {
    if (k <= 0) return;
    K_FOR_SHARES(M, M * N * k > PARALLEL_MIN_ELEMENTS,
                 k_topk_range(idx + i0 * k, values ? values + i0 * k : NULL, x + i0 * N, i1 - i0, N, k));
}
