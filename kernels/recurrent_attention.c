/* The recurrent layer's attention for one query position (see the header):
 * plain two-pass softmax per (row, head) over t+1 keys. Scores are computed
 * once into the caller's scratch; the backward recomputes them from q and the
 * saved log-sum-exp, like the flash kernels do. */
#include "kernels/recurrent_attention.h"

#include <math.h>

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Key s (s < t: persistent row s; s == t: the temporary pair) of kv head kv. */
static const float *key_at(const k_recurrent_keys *keys, int64_t s, int64_t kv) {
    const int64_t hd = keys->head_dim;
    return (s < keys->t ? keys->k_cache + s * keys->ld : keys->k_tmp) + kv * hd;
}

static const float *value_at(const k_recurrent_keys *keys, int64_t s, int64_t kv) {
    const int64_t hd = keys->head_dim;
    return (s < keys->t ? keys->v_cache + s * keys->ld : keys->v_tmp) + kv * hd;
}

/* scores [t+1] of query head h (q_head [hd]); ALiBi: -(t - s) * slope. */
static void head_scores(float *scores, const float *q_head, const k_recurrent_keys *keys, int64_t h) {
    const int64_t t = keys->t, hd = keys->head_dim, kv = h / (keys->H / keys->Hkv);
    const float scale = 1.0f / sqrtf((float)hd);
    const float slope = keys->slopes ? keys->slopes[h] : 0.0f;
    for (int64_t s = 0; s <= t; s++)
        scores[s] = dot(q_head, key_at(keys, s, kv), hd) * scale - (float)(t - s) * slope;
}

void k_recurrent_attention_forward_range(float *out, float *lse, const float *q, int64_t n_rows,
                                         const k_recurrent_keys *keys, int64_t kv_begin, int64_t kv_end,
                                         float *scratch) {
    const int64_t t = keys->t, H = keys->H, hd = keys->head_dim, group = H / keys->Hkv;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = kv_begin * group; h < kv_end * group; h++) {
            const int64_t kv = h / group;
            head_scores(scratch, q + (r * H + h) * hd, keys, h);
            float max = scratch[0];
            for (int64_t s = 1; s <= t; s++)
                max = scratch[s] > max ? scratch[s] : max;
            float sum = 0.0f;
            for (int64_t s = 0; s <= t; s++)
                sum += scratch[s] = expf(scratch[s] - max);
            float *o = out + (r * H + h) * hd;
            for (int64_t i = 0; i < hd; i++)
                o[i] = 0.0f;
            for (int64_t s = 0; s <= t; s++) {
                const float p = scratch[s] / sum;
                const float *v = value_at(keys, s, kv);
                for (int64_t i = 0; i < hd; i++)
                    o[i] += p * v[i];
            }
            if (lse) lse[r * H + h] = max + logf(sum);
        }
}

static void add_scaled(float *dst, const float *src, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += a * src[i];
}

void k_recurrent_attention_backward(float *d_q, const k_recurrent_key_grads *grads, const float *d_out, const float *q,
                                    const float *out, const float *lse, int64_t n_rows, const k_recurrent_keys *keys,
                                    float *scratch) {
    const int64_t t = keys->t, H = keys->H, hd = keys->head_dim, group = H / keys->Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kv = h / group, row = r * H + h;
            const float *q_head = q + row * hd, *d_o = d_out + row * hd;
            head_scores(scratch, q_head, keys, h);
            const float D = dot(d_o, out + row * hd, hd);
            for (int64_t s = 0; s <= t; s++) {
                const float p = expf(scratch[s] - lse[row]);
                const float d_score = p * (dot(d_o, value_at(keys, s, kv), hd) - D) * scale;
                const int persistent = s < t;
                float *d_k = persistent ? grads->d_k_cache : grads->d_k_tmp;
                float *d_v = persistent ? grads->d_v_cache : grads->d_v_tmp;
                const int64_t at = (persistent ? s * keys->ld : 0) + kv * hd;
                if (d_q) add_scaled(d_q + row * hd, key_at(keys, s, kv), d_score, hd);
                if (d_k) add_scaled(d_k + at, q_head, d_score, hd);
                if (d_v) add_scaled(d_v + at, d_o, p, hd);
            }
        }
}
