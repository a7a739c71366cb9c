/* Attention residuals (SPEC §6.3; AttnRes arXiv 2603.15031, MHAR arXiv
 * 2607.27230): the residual stream replaced by a learned softmax over depth.
 * Every sublayer reads Route(sources) instead of the running sum, where the
 * sources are the embedding s_0 and the sublayers' raw outputs, grouped into
 * blocks (attn_res = block, N blocks of S = 2L/N sublayers; full is N = 2L):
 * sublayer j of block b routes over [s_0, B_1..B_{b-1}, P_j] (B_m the sum of
 * block m's outputs, P_j the sum of the outputs before j in its block, left
 * out when j is the block's first); the final route over [s_0, B_1..B_N].
 *
 * Route(s_0..s_n) with pseudo-query w [C], RMSNorm weight g [C], R heads of
 * C/R consecutive channels: k_i = RMSNorm_g(s_i); alpha_{i,r} = softmax_i of
 * sum_{c in r} w[c] k_i[c]; h[c] = sum_i alpha_{i,r(c)} s_i[c].
 *
 * The same arithmetic in two forms: taped (training) and on rows of floats
 * (prefill and decode, single-threaded). */
#ifndef MODEL_ATTN_RES_H
#define MODEL_ATTN_RES_H

#include <stdint.h>

#include "autograd/tape.h"

/* ---- taped ---- */

/* The sources one trajectory has made so far. */
typedef struct model_route_sources {
    dt_tensor *s0;      /* [B,T,C] the embedding */
    dt_tensor **blocks; /* [N] sums of the completed blocks */
    int64_t n_blocks;
    dt_tensor *partial; /* the current block's sum so far, NULL when empty */
    int64_t per_block;  /* S sublayers per block */
    int64_t in_block;   /* outputs in the current block */
    dt_tensor *map;     /* [R,C] constant: 1 where channel c belongs to head r */
    dt_tensor *map_t;   /* [C,R] its transpose */
    int64_t heads;      /* R */
    float eps;
} model_route_sources;

/* Starts the sources at s0 [B,T,C] for n_blocks blocks of per_block sublayers
 * and R heads (arena memory of ctx). */
dt_status model_route_begin(ag_ctx *ctx, model_route_sources *src, dt_tensor *s0, int64_t n_blocks, int64_t per_block,
                            int64_t heads, float eps);
/* Appends a sublayer's output [B,T,C]. */
dt_status model_route_add(ag_ctx *ctx, model_route_sources *src, dt_tensor *out);
/* The input of the next sublayer (or the final route): [B,T,C]. */
dt_tensor *model_route_forward(ag_ctx *ctx, const model_route_sources *src, dt_tensor *query, dt_tensor *norm);

/* ---- rows ---- */

/* out [C] = the route of one row over the sources that sublayer `n_out` (the
 * number of outputs so far) reads. history holds s_0 and the outputs so far,
 * history[i] at history + i * history_stride (floats), i = 0..n_out; gathered
 * [n_out + 1, C] and logits [(n_out + 1) * R] are scratch. */
void model_route_row(float *out, const float *history, int64_t history_stride, int64_t n_out, int64_t per_block,
                     const float *query, const float *norm, int64_t heads, int64_t C, float eps, float *gathered,
                     float *logits);

#endif
