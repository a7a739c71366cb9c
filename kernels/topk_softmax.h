/* The renormalised top-k softmax of DiscoLoop (SPEC §6.6): per row, the
 * softmax over the `top` largest entries only (ties: lower index first, as
 * kernels/topk.h), every other entry exactly 0. One kernel for the training
 * op (autograd/ops_disco.c) and the decode engine (models/disco_rows.c). */
#ifndef K_TOPK_SOFTMAX_H
#define K_TOPK_SOFTMAX_H

#include <stdint.h>

/* x, out [M,N]; idx [M,top] scratch (the kept indices, descending); top >= N
 * is the plain softmax (idx unused). */
void k_topk_softmax(float *out, const float *x, int64_t M, int64_t N, int64_t top, int32_t *idx);
/* single-threaded core on `rows` rows (kernels/norm.h names the scheme) */
void k_topk_softmax_range(float *out, const float *x, int64_t rows, int64_t N, int64_t top, int32_t *idx);

#endif
