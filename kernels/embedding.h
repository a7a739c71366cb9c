/* Token embedding lookup (gather) and its backward (scatter-add). */
#ifndef K_EMBEDDING_H
#define K_EMBEDDING_H

#include <stdint.h>

/* out[N,C] = weight[tokens[n], :]; weight [V,C]; tokens [N] in 0..V-1 (checked by the caller). */
void k_embedding_forward(float *out, const float *weight, const int32_t *tokens, int64_t N, int64_t C);
/* single-threaded cores on `rows` tokens (kernels/norm.h names the scheme) */
void k_embedding_forward_range(float *out, const float *weight, const int32_t *tokens, int64_t rows, int64_t C);
/* out[N,C] += weight[tokens[n], :] (a second table added onto a lookup: positions). */
void k_embedding_accumulate(float *out, const float *weight, const int32_t *tokens, int64_t N, int64_t C);
void k_embedding_accumulate_range(float *out, const float *weight, const int32_t *tokens, int64_t rows, int64_t C);
/* d_weight[tokens[n], :] += d_out[n, :] (deterministic: rows are summed in order). */
void k_embedding_backward(float *d_weight, const float *d_out, const int32_t *tokens, int64_t N, int64_t C);

#endif
