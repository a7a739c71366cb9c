/* Attention of a recurrent layer (SPEC §6.4, Recurrent Transformer): query
 * rows at position t attend over the layer's persistent keys/values of the
 * earlier positions 0..t-1 (computed from the layer's OUTPUT there) and the
 * temporary pair of position t itself (computed from the layer's input).
 *
 * One query position per call: training scans positions in order (out_t must
 * be known before position t+1's persistent key exists), the decode step and
 * the decode branch ask for one position at a time too. Rows of the
 * persistent cache sit `ld` floats apart, so the same kernel reads a
 * [T, B, Hkv*hd] training buffer (ld = B*Hkv*hd) and a [T_max, Hkv*hd] decode
 * cache (ld = Hkv*hd).
 *
 * slopes [H] (or NULL) adds -(t - s) * slopes[h] to query head h's score for
 * persistent key s (ALiBi); the temporary pair at s = t gets 0. Scores are
 * scaled by 1/sqrt(hd); query head i uses kv head i / (H / Hkv).
 * Single-threaded cores; no allocation (scratch from the caller). */
#ifndef K_RECURRENT_ATTENTION_H
#define K_RECURRENT_ATTENTION_H

#include <stdint.h>

/* The keys one query position sees. */
typedef struct k_recurrent_keys {
    const float *k_cache, *v_cache; /* rows 0..t-1, each Hkv*hd floats, ld apart */
    int64_t ld;
    const float *k_tmp, *v_tmp; /* [Hkv*hd] the temporary pair of position t */
    int64_t t;
    int64_t H, Hkv, head_dim;
    const float *slopes; /* [H] or NULL */
} k_recurrent_keys;

/* Gradients of the keys (any pointer may be NULL): rows of d_k_cache /
 * d_v_cache at the same ld as the cache; accumulated (+=). */
typedef struct k_recurrent_key_grads {
    float *d_k_cache, *d_v_cache;
    float *d_k_tmp, *d_v_tmp;
} k_recurrent_key_grads;

/* q [n_rows, H*hd] -> out [n_rows, H*hd]; lse [n_rows, H] (or NULL) the
 * log-sum-exp of each row and head, for the backward. Query heads of kv heads
 * [kv_begin, kv_end) only (threads may split kv heads). scratch: t+1 floats. */
void k_recurrent_attention_forward_range(float *out, float *lse, const float *q, int64_t n_rows,
                                         const k_recurrent_keys *keys, int64_t kv_begin, int64_t kv_end,
                                         float *scratch);

/* The backward of one query position: d_q [n_rows, H*hd] and the key
 * gradients accumulated (+=) from d_out [n_rows, H*hd], with the forward's
 * q, out and lse. scratch: H floats. */
void k_recurrent_attention_backward(float *d_q, const k_recurrent_key_grads *grads, const float *d_out, const float *q,
                                    const float *out, const float *lse, int64_t n_rows, const k_recurrent_keys *keys,
                                    float *scratch);

#endif

/* ---- the tiled schedule (arXiv 2604.21215; SPEC §6.4 allows any order) ----
 *
 * Once out_t (so the persistent pair of t) is known, the key block
 * [t+1-T', t], T' = (t+1) & -(t+1), is merged into the running softmax of
 * every query of the block [t+1, t+T'] at once; query t then only adds its
 * temporary pair ("finish"). Every (query, persistent key) pair is visited
 * exactly once, in blocks: the same function as the per-query kernel above,
 * in another order. The backward mirrors it: the finish takes each query's
 * output gradient (and its delta = d_out . out), every block adds its
 * d_q and key gradients from them. */
typedef struct k_recurrent_tiles {
    int64_t B, T, H, Hkv, head_dim;
    const float *q;                     /* [B,T,H*hd] positioned queries */
    const float *k_persist, *v_persist; /* [T,B,Hkv*hd] */
    const float *k_tmp, *v_tmp;         /* [B,T,Hkv*hd] the temporary pairs (k positioned) */
    const float *slopes;                /* [H] or NULL */
    float *max, *sum;                   /* [B,T,H] each query's running max and sum of exp */
    float *acc;                         /* [B,T,H*hd] its running sum of exp-weighted values */
    float *lse;                         /* [B,T,H] written by finish */
} k_recurrent_tiles;

/* Clears the running state: max = -inf, sum = acc = 0. */
void k_recurrent_tiles_start(const k_recurrent_tiles *a);
/* Merges the key block ending at t into its query block (queries past T-1 dropped). */
void k_recurrent_tiles_merge(const k_recurrent_tiles *a, int64_t t);
/* Query t: adds its temporary pair, out [B,H*hd] (row b = query (b, t)), lse. */
void k_recurrent_tiles_finish(const k_recurrent_tiles *a, int64_t t, float *out);
/* d_out [B,H*hd] of query t (with out): writes delta [B,T,H] row t; adds the
 * temporary pair's share to d_q [B,T,H*hd], d_k_tmp, d_v_tmp [B,T,Hkv*hd]. */
void k_recurrent_tiles_finish_backward(const k_recurrent_tiles *a, int64_t t, const float *d_out, const float *out,
                                       float *delta, float *d_q, float *d_k_tmp, float *d_v_tmp);
/* The block merged at t: from d_out_all [B,T,H*hd] and delta [B,T,H] of its
 * queries adds to d_q and d_k_persist, d_v_persist [T,B,Hkv*hd] (any may be NULL). */
void k_recurrent_tiles_merge_backward(const k_recurrent_tiles *a, int64_t t, const float *d_out_all, const float *delta,
                                      float *d_q, float *d_k_persist, float *d_v_persist);
