/* Softmax, log-softmax and the fused softmax + cross-entropy over the last
 * dimension. Every row subtracts its max before exponentiating (no overflow)
 * and sums the exponentials in double (rows can be a whole vocabulary wide).
 * Rows are independent, so they run in parallel; backward accumulates (+=).
 *
 * Compiled once per instruction-set level (kernels/isa_variant.h), like
 * activation_isa.c: the cross-entropy's exponentials (k_exp over a whole
 * vocabulary per row) are most of a small model's non-GEMM time, and built
 * for a plain x86-64 they ran 4 lanes wide (a portable binary trained the
 * dsweep config 25% slower than a -march=native one). softmax.c calls the
 * active level's table. */
#include "kernels/isa_variant.h"
#include "kernels/softmax_ops.h"

#include <math.h>

#include "kernels/parallel.h"
#include "kernels/vec_math.h"

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

/* in, out [rows,N] */
static void softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N) {
    for (int64_t i = 0; i < rows; i++) {
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

static void softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
    K_FOR_SHARES(M, M * N > PARALLEL_MIN_ELEMENTS, softmax_forward_range(out + i0 * N, in + i0 * N, i1 - i0, N));
}

/* d_in, d_out, out [M,N]; d_in += out * (d_out - sum(d_out * out)) */
static void softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
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

/* in, out [rows,N]; out = x - logsumexp(x) */
static void log_softmax_forward_range(float *out, const float *in, int64_t rows, int64_t N) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x = in + i * N;
        float *y = out + i * N;
        double lse = row_logsumexp(x, N);
        for (int64_t j = 0; j < N; j++)
            y[j] = (float)((double)x[j] - lse);
    }
}

static void log_softmax_forward(float *out, const float *in, int64_t M, int64_t N) {
    K_FOR_SHARES(M, M * N > PARALLEL_MIN_ELEMENTS, log_softmax_forward_range(out + i0 * N, in + i0 * N, i1 - i0, N));
}

/* d_in, d_out, out [M,N]; d_in += d_out - exp(out) * sum(d_out) */
static void log_softmax_backward(float *d_in, const float *d_out, const float *out, int64_t M, int64_t N) {
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

/* Columns per block of the exp-sum: the block's exponentials are summed in
 * float (16 lanes, ~16 terms each), the blocks in double. */
#define EXP_BLOCK 256

/* Cross-entropy row statistics: the row's max and log sum_j exp(x_j - max),
 * the exponentials through the vectorised k_exp. (A double accumulator in the
 * exp loop itself keeps GCC from vectorising it, hence the blocks.) */
static void cross_entropy_row_stats(const float *x, int64_t V, float *row_max_out, float *log_sum_out) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < V; j++)
        m = x[j] > m ? x[j] : m;
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < V; j0 += EXP_BLOCK) {
        const int64_t n = V - j0 < EXP_BLOCK ? V - j0 : EXP_BLOCK;
        float block_sum = 0.0f;
#pragma omp simd reduction(+ : block_sum)
        for (int64_t j = 0; j < n; j++)
            block_sum += k_exp(x[j0 + j] - m);
        sum += block_sum;
    }
    *row_max_out = m;
    *log_sum_out = (float)log(sum);
}

/* logits [M,V]; targets [M]; losses [M] = logsumexp(logits[m]) - logits[m, y];
 * stats [M,2] (may be NULL): each row's max and log sum exp(x - max) */
static void cross_entropy_forward_stats_range(float *losses, float *stats, const float *logits, const int32_t *targets,
                                              int64_t rows, int64_t V) {
    for (int64_t i = 0; i < rows; i++) {
        const float *x = logits + i * V;
        float m, log_sum;
        cross_entropy_row_stats(x, V, &m, &log_sum);
        losses[i] = (float)((double)m + (double)log_sum - (double)x[targets[i]]);
        if (stats) {
            stats[2 * i] = m;
            stats[2 * i + 1] = log_sum;
        }
    }
}

static void cross_entropy_forward_stats(float *losses, float *stats, const float *logits, const int32_t *targets,
                                        int64_t M, int64_t V) {
    K_FOR_SHARES(M, M * V > PARALLEL_MIN_ELEMENTS,
                 cross_entropy_forward_stats_range(losses + i0, stats ? stats + 2 * i0 : NULL, logits + i0 * V,
                                                   targets + i0, i1 - i0, V));
}

static void cross_entropy_forward(float *losses, const float *logits, const int32_t *targets, int64_t M, int64_t V) {
    cross_entropy_forward_stats(losses, NULL, logits, targets, M, V);
}

/* d_logits, logits [M,V]; d_losses, targets [M]; stats [M,2] from the forward
 * d_logits += d_losses[m] * (softmax(logits[m]) - onehot(targets[m])), with
 * softmax = exp((x - max) - log_sum): both terms small, so no cancellation */
static void cross_entropy_backward_stats(float *d_logits, const float *d_losses, const float *logits,
                                         const float *stats, const int32_t *targets, int64_t M, int64_t V) {
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        const float *x = logits + i * V;
        float *dx = d_logits + i * V;
        const float m = stats[2 * i], log_sum = stats[2 * i + 1], scale = d_losses[i];
#pragma omp simd
        for (int64_t j = 0; j < V; j++)
            dx[j] += scale * k_exp((x[j] - m) - log_sum);
        dx[targets[i]] -= scale;
    }
}

/* d_logits, logits [M,V]; d_losses, targets [M]
 * d_logits += d_losses[m] * (softmax(logits[m]) - onehot(targets[m])) */
static void cross_entropy_backward(float *d_logits, const float *d_losses, const float *logits, const int32_t *targets,
                                   int64_t M, int64_t V) {
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < M; i++) {
        float stats[2];
        cross_entropy_row_stats(logits + i * V, V, &stats[0], &stats[1]);
        cross_entropy_backward_stats(d_logits + i * V, d_losses + i, logits + i * V, stats, targets + i, 1, V);
    }
}

const k_softmax_ops K_ISA_VARIANT_NAME(k_softmax_ops) = {
    .softmax_forward = softmax_forward,
    .softmax_forward_range = softmax_forward_range,
    .softmax_backward = softmax_backward,
    .log_softmax_forward = log_softmax_forward,
    .log_softmax_forward_range = log_softmax_forward_range,
    .log_softmax_backward = log_softmax_backward,
    .cross_entropy_forward = cross_entropy_forward,
    .cross_entropy_backward = cross_entropy_backward,
    .cross_entropy_forward_stats = cross_entropy_forward_stats,
    .cross_entropy_forward_stats_range = cross_entropy_forward_stats_range,
    .cross_entropy_backward_stats = cross_entropy_backward_stats,
};
