/* Softmax, log-softmax and the fused softmax + cross-entropy over the last
 * dimension. Every row subtracts its max before exponentiating (no overflow)
 * and sums the exponentials in double (rows can be a whole vocabulary wide).
 * Rows are independent, so they run in parallel; backward accumulates (+=). */
#include "kernels/softmax.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

static float row_max(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* log sum_j exp(x[j]) for one row [n], computed as max + log sum exp(x - max). */
static double row_logsumexp(const float *x, int64_t n) {
    float m = row_max(x, n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        sum += expf(x[j] - m);
    return (double)m + log(sum);
}

/* in, out [M,N] */
void k_softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *x = in + i * N;
        float *y = out + i * N;
        float m = row_max(x, N);
        double sum = 0.0;
        for (int64_t j = 0; j < N; j++) {
            y[j] = expf(x[j] - m);
            sum += y[j];
        }
        float inv_sum = (float)(1.0 / sum);
        for (int64_t j = 0; j < N; j++)
            y[j] *= inv_sum;
    }
}

/* d_in, d_out, out [M,N]; d_in += out * (d_out - sum(d_out * out)) */
void k_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *dy = d_out + i * N, *y = out + i * N;
        float *dx = d_in + i * N;
        double dot = 0.0;
        for (int64_t j = 0; j < N; j++)
            dot += (double)dy[j] * (double)y[j];
        float dot_f = (float)dot;
        for (int64_t j = 0; j < N; j++)
            dx[j] += y[j] * (dy[j] - dot_f);
    }
}

/* in, out [M,N]; out = x - logsumexp(x) */
void k_log_softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *x = in + i * N;
        float *y = out + i * N;
        double lse = row_logsumexp(x, N);
        for (int64_t j = 0; j < N; j++)
            y[j] = (float)((double)x[j] - lse);
    }
}

/* d_in, d_out, out [M,N]; d_in += d_out - exp(out) * sum(d_out) */
void k_log_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *dy = d_out + i * N, *y = out + i * N;
        float *dx = d_in + i * N;
        double sum = 0.0;
        for (int64_t j = 0; j < N; j++)
            sum += dy[j];
        float sum_f = (float)sum;
        for (int64_t j = 0; j < N; j++)
            dx[j] += dy[j] - expf(y[j]) * sum_f;
    }
}

/* logits [M,V]; targets [M]; losses [M] = logsumexp(logits[m]) - logits[m, y] */
void k_cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int64_t M, int64_t V) {
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *x = logits + i * V;
        losses[i] = (float)(row_logsumexp(x, V) - (double)x[targets[i]]);
    }
}

/* d_logits, logits [M,V]; d_losses, targets [M]
 * d_logits += d_losses[m] * (softmax(logits[m]) - onehot(targets[m])) */
void k_cross_entropy_backward(float *d_logits, const float *d_losses, const float *logits, const int32_t *targets,
                              int64_t M, int64_t V) {
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *x = logits + i * V;
        float *dx = d_logits + i * V;
        float m = row_max(x, V);
        double sum = 0.0;
        for (int64_t j = 0; j < V; j++)
            sum += expf(x[j] - m);
        float scale = (float)((double)d_losses[i] / sum); /* d_loss / Z, so p_j * d_loss = exp(x_j - m) * scale */
        for (int64_t j = 0; j < V; j++)
            dx[j] += expf(x[j] - m) * scale;
        dx[targets[i]] -= d_losses[i];
    }
}
