/* The attention kernels of attention.h: the ALiBi-biased cores call the
 * variant of the active instruction-set level (attention_isa.c holds them,
 * with the design notes; k_isa_active() is read per call, so DBRANCH_ISA and
 * k_isa_force reach them); the unbiased forms pass no slopes. */
#include "kernels/attention.h"

#include <stddef.h>

#include "kernels/attention_ops.h"
#include "kernels/isa.h"

dt_status k_attention_check(int64_t H, int64_t Hkv, int64_t head_dim) {
    if (H < 1 || Hkv < 1 || H % Hkv != 0)
        return dt_errorf("attention: n_head %lld must be a positive multiple of n_kv_head %lld", (long long)H,
                         (long long)Hkv);
    if (head_dim < 1 || head_dim > K_ATTENTION_MAX_HEAD_DIM)
        return dt_errorf("attention: head_dim %lld outside 1..%d", (long long)head_dim, K_ATTENTION_MAX_HEAD_DIM);
    return DT_OK;
}

int64_t k_attention_backward_scratch(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim) {
    (void)Hkv;
    (void)head_dim;
    return B * H * T; /* D = rowsum(d_out ∘ out) per (b, h, t) */
}

void k_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int64_t B, int64_t T,
                         int64_t H, int64_t Hkv, int64_t head_dim) {
    k_attention_forward_biased(out, lse, q, k, v, B, T, H, Hkv, head_dim, NULL);
}

void k_attention_backward_into(float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v, int accumulate_v,
                               const float *d_out, const float *q, const float *k, const float *v, const float *out,
                               const float *lse, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim,
                               float *scratch) {
    k_attention_backward_biased(d_q, accumulate_q, d_k, accumulate_k, d_v, accumulate_v, d_out, q, k, v, out, lse, B, T,
                                H, Hkv, head_dim, NULL, scratch);
}

void k_attention_backward(float *d_q, float *d_k, float *d_v, const float *d_out, const float *q, const float *k,
                          const float *v, const float *out, const float *lse, int64_t B, int64_t T, int64_t H,
                          int64_t Hkv, int64_t head_dim, float *scratch) {
    k_attention_backward_biased(d_q, 1, d_k, 1, d_v, 1, d_out, q, k, v, out, lse, B, T, H, Hkv, head_dim, NULL,
                                scratch);
}

void k_attention_decode_range(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                              int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, int64_t kv_begin, int64_t kv_end,
                              float *scratch) {
    k_attention_decode_range_biased(out, q, k_cache, v_cache, n_rows, pos, H, Hkv, head_dim, kv_begin, kv_end, NULL,
                                    scratch);
}

void k_attention_decode(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                        int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, float *scratch) {
    k_attention_decode_biased(out, q, k_cache, v_cache, n_rows, pos, H, Hkv, head_dim, NULL, scratch);
}

void k_attention_forward_biased(float *out, float *lse, const float *q, const float *k, const float *v, int64_t B,
                                int64_t T, int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes) {
    K_ISA_PICK(k_attention_ops)->forward_biased(out, lse, q, k, v, B, T, H, Hkv, head_dim, slopes);
}

void k_attention_backward_biased(float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v,
                                 int accumulate_v, const float *d_out, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                 int64_t head_dim, const float *slopes, float *scratch) {
    K_ISA_PICK(k_attention_ops)
        ->backward_biased(d_q, accumulate_q, d_k, accumulate_k, d_v, accumulate_v, d_out, q, k, v, out, lse, B, T, H,
                          Hkv, head_dim, slopes, scratch);
}

k_kv_cache k_kv_cache_rows(const float *k_cache, const float *v_cache, int64_t Hkv, int64_t head_dim) {
    return (k_kv_cache){.k = k_cache, .v = v_cache, .pos_stride = Hkv * head_dim, .head_stride = head_dim};
}

void k_attention_decode_range_biased(float *out, const float *q, const float *k_cache, const float *v_cache,
                                     int64_t n_rows, int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim,
                                     int64_t kv_begin, int64_t kv_end, const float *slopes, float *scratch) {
    const k_kv_cache cache = k_kv_cache_rows(k_cache, v_cache, Hkv, head_dim);
    k_attention_decode_cache_range_biased(out, q, &cache, n_rows, pos, H, Hkv, head_dim, kv_begin, kv_end, slopes,
                                          scratch);
}

void k_attention_decode_biased(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t n_rows,
                               int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes,
                               float *scratch) {
    const k_kv_cache cache = k_kv_cache_rows(k_cache, v_cache, Hkv, head_dim);
    k_attention_decode_cache_biased(out, q, &cache, n_rows, pos, H, Hkv, head_dim, slopes, scratch);
}

void k_attention_decode_cache_range_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows,
                                           int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, int64_t kv_begin,
                                           int64_t kv_end, const float *slopes, float *scratch) {
    K_ISA_PICK(k_attention_ops)
        ->decode_range_biased(out, q, cache, n_rows, pos, H, Hkv, head_dim, kv_begin, kv_end, slopes, scratch);
}

void k_attention_decode_cache_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows, int64_t pos,
                                     int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes, float *scratch) {
    K_ISA_PICK(k_attention_ops)->decode_biased(out, q, cache, n_rows, pos, H, Hkv, head_dim, slopes, scratch);
}
