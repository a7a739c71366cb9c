/* Rotary position embedding, interleaved pairs (Meta LLaMA / llama2.c), SPEC §1:
 * for pair j of a head, freq = theta^(-2j/hd), angle = pos * freq,
 * (x[2j], x[2j+1]) -> (x[2j] cos - x[2j+1] sin, x[2j] sin + x[2j+1] cos). */
#ifndef K_ROPE_H
#define K_ROPE_H

#include <stdint.h>

/* table [n_pos, head_dim/2, 2] = (cos, sin) of angle(pos, j), computed in double. */
void k_rope_table(float *table, int64_t n_pos, int64_t head_dim, double theta);

/* x [B,T,n_head*head_dim], rotated in place; row t of each batch uses position pos0 + t.
 * table covers positions up to pos0 + T - 1. */
void k_rope_forward(float *x, const float *table, int64_t B, int64_t T, int64_t pos0, int64_t n_head, int64_t head_dim);
/* core (kernels/norm.h names the scheme): x [rows, n_head*head_dim], row r at
 * position pos0 + r; n_head may be a subset of a row's heads (decode rotates
 * the heads of one kv group). */
void k_rope_forward_range(float *x, const float *table, int64_t rows, int64_t pos0, int64_t n_head, int64_t head_dim);
/* d_in += R(-angle) d_out  (the transpose of the rotation), same layout. */
void k_rope_backward(float *d_in, const float *d_out, const float *table, int64_t B, int64_t T, int64_t pos0,
                     int64_t n_head, int64_t head_dim);

#endif
