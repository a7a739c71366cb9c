/* Top-k selection per row, ties broken toward the lower index (SPEC §1 MoE routing). */
#ifndef K_TOPK_H
#define K_TOPK_H

#include <stdint.h>

/* x [M,N]; idx [M,k] (descending by value; equal values: lower index first); values [M,k] may be NULL. */
void k_topk(int32_t *idx, float *values, const float *x, int64_t M, int64_t N, int64_t k);
/* single-threaded core on `rows` rows (kernels/norm.h names the scheme) */
void k_topk_range(int32_t *idx, float *values, const float *x, int64_t rows, int64_t N, int64_t k);

#endif
