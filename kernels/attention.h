/* Causal multi-head attention with grouped K/V heads (GQA), flash-style.
 *
 * Queries may come from a different tensor than the keys/values: the decode
 * branch's queries attend over the PRIMARY path's K/V (SPEC §2), so the same
 * kernel serves self-attention (q, k, v from one path) and the cross form
 * (q from the branch). Position t attends to positions 0..t. Query head i uses
 * kv head i / (H / Hkv). Scores are scaled by 1/sqrt(head_dim).
 *
 * Forward keeps an online softmax (running max and sum) over key tiles, so at
 * most one tile of scores per thread exists at a time; it saves the
 * log-sum-exp per (b, h, t) for backward, which recomputes the scores tile by
 * tile. Neither allocates: scratch comes from the caller. Results are
 * bit-identical from run to run and for any thread count.
 *
 * Score bias (ALiBi, SPEC §6.4): the `_biased` forms take slopes [H], one per
 * query head, and add -(t - s) * slopes[h] to the score of query head h at
 * position t for the key at s <= t (the cross form gets the same bias: the
 * branch's query at t sees the same keys). The bias is computed per tile, never
 * stored; slopes = NULL is no bias, and the plain names are those forms with
 * NULL (the same code path as before the bias existed). */
#ifndef K_ATTENTION_H
#define K_ATTENTION_H

#include <stdint.h>

#include "core/error.h"

/* Largest head_dim the tiled forward/backward serve (their per-thread tiles
 * live on the stack: about 210 KB forward, 550 KB backward).
 * Shapes outside the limits get NaN outputs; validate with k_attention_check. */
#define K_ATTENTION_MAX_HEAD_DIM 256

/* DT_OK when H is a positive multiple of Hkv and 1 <= head_dim <= the maximum;
 * otherwise DT_ERR with a message naming the value. */
dt_status k_attention_check(int64_t H, int64_t Hkv, int64_t head_dim);

/* q [B,T,H*hd]; k, v [B,T,Hkv*hd]; out [B,T,H*hd]; lse [B,H,T]. */
void k_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int64_t B, int64_t T,
                         int64_t H, int64_t Hkv, int64_t head_dim);
/* The same with the score bias; slopes [H] or NULL. */
void k_attention_forward_biased(float *out, float *lse, const float *q, const float *k, const float *v, int64_t B,
                                int64_t T, int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes);

/* Floats of scratch k_attention_backward needs for these sizes. */
int64_t k_attention_backward_scratch(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim);

/* Accumulates (+=) into d_q [B,T,H*hd], d_k, d_v [B,T,Hkv*hd] (any may be NULL).
 * out and lse are the forward's results; scratch holds
 * k_attention_backward_scratch(...) floats. */
void k_attention_backward(float *d_q, float *d_k, float *d_v, const float *d_out, const float *q, const float *k,
                          const float *v, const float *out, const float *lse, int64_t B, int64_t T, int64_t H,
                          int64_t Hkv, int64_t head_dim, float *scratch);

/* The same, each of d_q, d_k, d_v either accumulated into (accumulate_* = 1)
 * or written (0: its previous contents are never read, so a fresh buffer
 * needs no zero-fill); written results equal the accumulation onto zeros bit
 * for bit. The outputs must not overlap one another. */
void k_attention_backward_into(float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v, int accumulate_v,
                               const float *d_out, const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim,
                               float *scratch);
/* The same for a forward run with slopes [H] (or NULL); out and lse must come
 * from k_attention_forward_biased with the same slopes. */
void k_attention_backward_biased(float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v,
                                 int accumulate_v, const float *d_out, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                 int64_t head_dim, const float *slopes, float *scratch);

/* Decode: n_rows query rows, all at position pos, over a cache holding
 * positions 0..pos (the primary row and the branch row of grouped decode share
 * one pass over the cache).
 * q [n_rows, H*hd]; k_cache, v_cache [n_pos_max, Hkv*hd]; out [n_rows, H*hd];
 * scratch holds n_rows * H * (pos + 1) floats. */
void k_attention_decode(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                        int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, float *scratch);
/* Its single-threaded core (kernels/norm.h names the scheme) for the query
 * heads of kv heads [kv_begin, kv_end): the same arguments, out and scratch
 * written only there, so threads may run disjoint kv-head ranges at once.
 * Shapes must be valid (k_attention_check); the wrapper fills NaN otherwise. */
void k_attention_decode_range(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                              int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, int64_t kv_begin, int64_t kv_end,
                              float *scratch);
/* Both with the score bias at query position pos; slopes [H] or NULL. */
void k_attention_decode_biased(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                               int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes,
                               float *scratch);
void k_attention_decode_range_biased(float *out, const float *q, const float *k_cache, const float *v_cache,
                                     int64_t n_rows, int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim,
                                     int64_t kv_begin, int64_t kv_end, const float *slopes, float *scratch);

/* A decode cache in either layout: element i of kv head h at position t is
 * k[t * pos_stride + h * head_stride + i] (and the same of v). The rows above,
 * [n_pos_max, Hkv*hd], are pos_stride = Hkv*hd, head_stride = hd
 * (k_kv_cache_rows); head blocks [Hkv, n_pos_max, hd] are pos_stride = hd,
 * head_stride = n_pos_max*hd, which eval/decode.c keeps: each head's keys and
 * values are then one sequential stream, where rows make every head a walk
 * of 4-line reads Hkv*hd floats apart (at 800 positions of a 12-head, hd 64
 * cache, 4.7 against 1.4 ms a token for 12 layers on a Zen 4, 2 threads). */
typedef struct k_kv_cache {
    const float *k, *v;
    int64_t pos_stride, head_stride;
} k_kv_cache;

k_kv_cache k_kv_cache_rows(const float *k_cache, const float *v_cache, int64_t Hkv, int64_t head_dim);

/* k_attention_decode_biased and its core on a cache of either layout: the
 * same arithmetic, so both layouts give the same bits. */
void k_attention_decode_cache_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows, int64_t pos,
                                     int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes, float *scratch);
void k_attention_decode_cache_range_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows,
                                           int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, int64_t kv_begin,
                                           int64_t kv_end, const float *slopes, float *scratch);

#endif
