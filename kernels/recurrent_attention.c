/* The recurrent layer's attention for one query position (see the header):
 * plain two-pass softmax per (row, head) over t+1 keys. Scores are computed
 * once into the caller's scratch; the backward recomputes them from q and the
 * saved log-sum-exp, like the flash kernels do. */
#include "kernels/recurrent_attention.h"

#include <math.h>

/* The simd reduction lets the compiler split the sum over vector lanes (a
 * plain float sum is one serial chain: the scan's scores and the backward's
 * d_o . v spent most of a recurrent step waiting on it). */
// a [n], b [n]
static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

// dst [n] += a * src [n]
static void add_scaled(float *dst, const float *restrict src, float a, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dst[i] += a * src[i];
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

/* Keys outermost: each key's gradient rows (the cache row s, Hkv*hd floats)
 * are read and written once for all heads while they are in cache; with
 * heads outermost every head swept all t+1 rows, ld apart, and the
 * backward spent most of its time on those stores. A key's score is
 * recomputed in place (no scores array). Per row of the gradients the sums
 * run in the same order as before (s ascending into d_q, h ascending into
 * d_k and d_v), so the results are unchanged. */
void k_recurrent_attention_backward(float *d_q, const k_recurrent_key_grads *grads, const float *d_out, const float *q,
                                    const float *out, const float *lse, int64_t n_rows, const k_recurrent_keys *keys,
                                    float *scratch) {
    const int64_t t = keys->t, H = keys->H, hd = keys->head_dim, group = H / keys->Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    float *D = scratch; /* [H] d_out . out of each head */
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t h = 0; h < H; h++)
            D[h] = dot(d_out + (r * H + h) * hd, out + (r * H + h) * hd, hd);
        for (int64_t s = 0; s <= t; s++) {
            const int persistent = s < t;
            float *d_k = persistent ? grads->d_k_cache : grads->d_k_tmp;
            float *d_v = persistent ? grads->d_v_cache : grads->d_v_tmp;
            for (int64_t h = 0; h < H; h++) {
                const int64_t kv = h / group, row = r * H + h;
                const float *q_head = q + row * hd, *d_o = d_out + row * hd, *k_s = key_at(keys, s, kv);
                const float slope = keys->slopes ? keys->slopes[h] : 0.0f;
                const float score = dot(q_head, k_s, hd) * scale - (float)(t - s) * slope;
                const float p = expf(score - lse[row]);
                const float d_score = p * (dot(d_o, value_at(keys, s, kv), hd) - D[h]) * scale;
                const int64_t at = (persistent ? s * keys->ld : 0) + kv * hd;
                if (d_q) add_scaled(d_q + row * hd, k_s, d_score, hd);
                if (d_k) add_scaled(d_k + at, q_head, d_score, hd);
                if (d_v) add_scaled(d_v + at, d_o, p, hd);
            }
        }
    }
}

/* ---- the tiled schedule ---- */

/* The key block merged at t: keys [*k0, t], queries [t+1, *q1). */
static void block_of(const k_recurrent_tiles *a, int64_t t, int64_t *k0, int64_t *q1) {
    const int64_t size = (t + 1) & -(t + 1);
    *k0 = t + 1 - size;
    *q1 = t + 1 + size < a->T ? t + 1 + size : a->T;
}

void k_recurrent_tiles_start(const k_recurrent_tiles *a) {
    const int64_t rows = a->B * a->T * a->H;
    for (int64_t i = 0; i < rows; i++) {
        a->max[i] = -INFINITY;
        a->sum[i] = 0.0f;
    }
    for (int64_t i = 0; i < rows * a->head_dim; i++)
        a->acc[i] = 0.0f;
}

/* Score of query (b, tq) head h against persistent key (s, b). */
static float tile_score(const k_recurrent_tiles *a, int64_t b, int64_t tq, int64_t h, int64_t s) {
    const int64_t hd = a->head_dim, W = a->Hkv * hd, kv = h / (a->H / a->Hkv);
    const float *q = a->q + ((b * a->T + tq) * a->H + h) * hd;
    const float *k = a->k_persist + (s * a->B + b) * W + kv * hd;
    return dot(q, k, hd) / sqrtf((float)hd) - (a->slopes ? (float)(tq - s) * a->slopes[h] : 0.0f);
}

void k_recurrent_tiles_merge(const k_recurrent_tiles *a, int64_t t) {
    int64_t k0, q1;
    block_of(a, t, &k0, &q1);
    const int64_t hd = a->head_dim, W = a->Hkv * hd, group = a->H / a->Hkv;
    float scores[64];
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t tq = t + 1; tq < q1; tq++)
            for (int64_t h = 0; h < a->H; h++) {
                const int64_t row = (b * a->T + tq) * a->H + h;
                float *acc = a->acc + row * hd;
                for (int64_t s0 = k0; s0 <= t; s0 += 64) { /* the block in chunks of 64 keys */
                    const int64_t n = t + 1 - s0 < 64 ? t + 1 - s0 : 64;
                    float block_max = -INFINITY;
                    for (int64_t j = 0; j < n; j++) {
                        scores[j] = tile_score(a, b, tq, h, s0 + j);
                        block_max = scores[j] > block_max ? scores[j] : block_max;
                    }
                    const float new_max = block_max > a->max[row] ? block_max : a->max[row];
                    const float rescale = expf(a->max[row] - new_max); /* 0 while nothing was merged */
                    a->sum[row] *= rescale;
                    for (int64_t i = 0; i < hd; i++)
                        acc[i] *= rescale;
                    for (int64_t j = 0; j < n; j++) {
                        const float p = expf(scores[j] - new_max);
                        a->sum[row] += p;
                        add_scaled(acc, a->v_persist + ((s0 + j) * a->B + b) * W + (h / group) * hd, p, hd);
                    }
                    a->max[row] = new_max;
                }
            }
}

void k_recurrent_tiles_finish(const k_recurrent_tiles *a, int64_t t, float *out) {
    const int64_t hd = a->head_dim, W = a->Hkv * hd, group = a->H / a->Hkv;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            const int64_t row = (b * a->T + t) * a->H + h, kv = h / group;
            const float *k = a->k_tmp + (b * a->T + t) * W + kv * hd, *v = a->v_tmp + (b * a->T + t) * W + kv * hd;
            const float score = dot(a->q + row * hd, k, hd) / sqrtf((float)hd); /* bias 0 at s = t */
            const float new_max = score > a->max[row] ? score : a->max[row];
            const float rescale = expf(a->max[row] - new_max), p = expf(score - new_max);
            const float sum = a->sum[row] * rescale + p;
            float *o = out + (b * a->H + h) * hd;
            for (int64_t i = 0; i < hd; i++)
                o[i] = (a->acc[row * hd + i] * rescale + p * v[i]) / sum;
            a->lse[row] = new_max + logf(sum);
        }
}

void k_recurrent_tiles_finish_backward(const k_recurrent_tiles *a, int64_t t, const float *d_out, const float *out,
                                       float *delta, float *d_q, float *d_k_tmp, float *d_v_tmp) {
    const int64_t hd = a->head_dim, W = a->Hkv * hd, group = a->H / a->Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            const int64_t row = (b * a->T + t) * a->H + h, tmp = (b * a->T + t) * W + (h / group) * hd;
            const float *d_o = d_out + (b * a->H + h) * hd, *q = a->q + row * hd;
            delta[row] = dot(d_o, out + (b * a->H + h) * hd, hd);
            const float p = expf(dot(q, a->k_tmp + tmp, hd) * scale - a->lse[row]);
            const float d_score = p * (dot(d_o, a->v_tmp + tmp, hd) - delta[row]) * scale;
            if (d_q) add_scaled(d_q + row * hd, a->k_tmp + tmp, d_score, hd);
            if (d_k_tmp) add_scaled(d_k_tmp + tmp, q, d_score, hd);
            if (d_v_tmp) add_scaled(d_v_tmp + tmp, d_o, p, hd);
        }
}

void k_recurrent_tiles_merge_backward(const k_recurrent_tiles *a, int64_t t, const float *d_out_all, const float *delta,
                                      float *d_q, float *d_k_persist, float *d_v_persist) {
    int64_t k0, q1;
    block_of(a, t, &k0, &q1);
    const int64_t hd = a->head_dim, W = a->Hkv * hd, group = a->H / a->Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t tq = t + 1; tq < q1; tq++)
            for (int64_t h = 0; h < a->H; h++) {
                const int64_t row = (b * a->T + tq) * a->H + h;
                const float *q = a->q + row * hd, *d_o = d_out_all + row * hd;
                for (int64_t s = k0; s <= t; s++) {
                    const int64_t at = (s * a->B + b) * W + (h / group) * hd;
                    const float p = expf(tile_score(a, b, tq, h, s) - a->lse[row]);
                    const float d_score = p * (dot(d_o, a->v_persist + at, hd) - delta[row]) * scale;
                    if (d_q) add_scaled(d_q + row * hd, a->k_persist + at, d_score, hd);
                    if (d_k_persist) add_scaled(d_k_persist + at, q, d_score, hd);
                    if (d_v_persist) add_scaled(d_v_persist + at, d_o, p, hd);
                }
            }
}
