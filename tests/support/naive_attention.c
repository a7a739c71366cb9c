/* Naive causal GQA attention and its gradients in double precision: the
 * references of the attention kernels' tests (float32 and AMX). */
#include "support/naive_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

static double *calloc_doubles(int64_t n) {
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    cr_assert_not_null(x);
    return x;
}

/* -(t - j) * slope of head h, in double (0 without slopes). */
static double bias(const float *slopes, int64_t h, int64_t t, int64_t j) {
    return slopes ? -(double)(t - j) * (double)slopes[h] : 0.0;
}

/* Naive causal GQA attention in double: out [B,T,H*hd], lse [B,H,T]. */
void naive_attention_forward(double *out, double *lse, const float *q, const float *k, const float *v,
                             naive_attention_shape s, const float *slopes) {
    const int64_t group = s.H / s.Hkv, qs = s.H * s.hd, kvs = s.Hkv * s.hd;
    const double scale = 1.0 / sqrt((double)s.hd);
    double *scores = calloc_doubles(s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++)
            for (int64_t t = 0; t < s.T; t++) {
                const float *qr = q + (b * s.T + t) * qs + h * s.hd;
                double max = -INFINITY;
                for (int64_t j = 0; j <= t; j++) {
                    const float *kr = k + (b * s.T + j) * kvs + (h / group) * s.hd;
                    double dot = 0.0;
                    for (int64_t d = 0; d < s.hd; d++)
                        dot += (double)qr[d] * kr[d];
                    scores[j] = dot * scale + bias(slopes, h, t, j);
                    max = fmax(max, scores[j]);
                }
                double sum = 0.0;
                for (int64_t j = 0; j <= t; j++)
                    sum += exp(scores[j] - max);
                double *o = out + (b * s.T + t) * qs + h * s.hd;
                for (int64_t d = 0; d < s.hd; d++)
                    o[d] = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const double p = exp(scores[j] - max) / sum;
                    const float *vr = v + (b * s.T + j) * kvs + (h / group) * s.hd;
                    for (int64_t d = 0; d < s.hd; d++)
                        o[d] += p * vr[d];
                }
                if (lse) lse[(b * s.H + h) * s.T + t] = max + log(sum);
            }
    free(scores);
}

/* Naive gradients in double (overwrites dq, dk, dv) for upstream d_out. */
void naive_attention_backward(double *dq, double *dk, double *dv, const float *d_out, const float *q, const float *k,
                              const float *v, naive_attention_shape s, const float *slopes) {
    const int64_t group = s.H / s.Hkv, qs = s.H * s.hd, kvs = s.Hkv * s.hd;
    const double scale = 1.0 / sqrt((double)s.hd);
    memset(dq, 0, (size_t)(s.B * s.T * s.H * s.hd) * sizeof(double));
    memset(dk, 0, (size_t)(s.B * s.T * s.Hkv * s.hd) * sizeof(double));
    memset(dv, 0, (size_t)(s.B * s.T * s.Hkv * s.hd) * sizeof(double));
    double *p = calloc_doubles(s.T), *dp = calloc_doubles(s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++)
            for (int64_t t = 0; t < s.T; t++) {
                const int64_t qo = (b * s.T + t) * qs + h * s.hd;
                double max = -INFINITY;
                for (int64_t j = 0; j <= t; j++) {
                    const int64_t ko = (b * s.T + j) * kvs + (h / group) * s.hd;
                    double dot = 0.0;
                    for (int64_t d = 0; d < s.hd; d++)
                        dot += (double)q[qo + d] * k[ko + d];
                    p[j] = dot * scale + bias(slopes, h, t, j);
                    max = fmax(max, p[j]);
                }
                double sum = 0.0;
                for (int64_t j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - max));
                double row_dot = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    p[j] /= sum;
                    const int64_t ko = (b * s.T + j) * kvs + (h / group) * s.hd;
                    double dot = 0.0;
                    for (int64_t d = 0; d < s.hd; d++)
                        dot += (double)d_out[qo + d] * v[ko + d];
                    dp[j] = dot;
                    row_dot += p[j] * dot;
                }
                for (int64_t j = 0; j <= t; j++) {
                    const int64_t ko = (b * s.T + j) * kvs + (h / group) * s.hd;
                    const double ds = p[j] * (dp[j] - row_dot) * scale;
                    for (int64_t d = 0; d < s.hd; d++) {
                        dq[qo + d] += ds * k[ko + d];
                        dk[ko + d] += ds * q[qo + d];
                        dv[ko + d] += p[j] * d_out[qo + d];
                    }
                }
            }
    free(p);
    free(dp);
}
