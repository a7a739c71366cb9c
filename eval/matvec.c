/* Decode-only multi-row GEMV: see matvec.h for why it is not a k_gemm call.
 *
 * Layout: W [N,K] row-major. A block of eight rows of W is dotted with one or
 * two input rows at once: 8 (or 16) independent accumulators hide the FMA
 * latency and every weight element is loaded exactly once per pair of input
 * rows. OpenMP splits the blocks statically, so each thread streams one
 * contiguous slab of W (what the hardware prefetcher likes).
 *
 * Measured on the development machine (Xeon, AVX-512, one thread streaming
 * 377 MB of [2048, 768] matrices, GB/s): 4-row blocks M=1 12.2, M=2 10.5;
 * 8-row blocks M=1 13.1, M=2 11.4; 8-row blocks with the weight held in a
 * register (not folded into both FMAs) and a software prefetch 2 KB ahead,
 * M=2 12.0. The two-row form is issue-bound before it is memory-bound on one
 * core, so it gets every trick; the one-row form does not need them. */
#include "eval/matvec.h"

#include <immintrin.h>

enum { ROWS_PER_BLOCK = 8 };

/* Below this many weight elements a parallel region costs more than it saves. */
static const int64_t PARALLEL_MIN_ELEMENTS = 1 << 15;

#if defined(__AVX512F__)

/* How far ahead (floats) the two-row loop prefetches each weight row. */
enum { PREFETCH_AHEAD = 512 };

/* out[m*ldo + r] = dot(w[r*K..], x[m*K..]) for r < n_w_rows (1 or 8), m < n_x_rows (1 or 2).
 * Called with constant row counts so the compiler unrolls the r/m loops and
 * keeps every accumulator in a register. */
static inline __attribute__((always_inline)) void block_dot(float *out, int64_t ldo, const float *x,
                                                            const float *w, int64_t K, int n_w_rows,
                                                            int n_x_rows) {
    __m512 acc[ROWS_PER_BLOCK][2];
    for (int r = 0; r < n_w_rows; r++)
        for (int m = 0; m < n_x_rows; m++) acc[r][m] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[2];
        for (int m = 0; m < n_x_rows; m++) xv[m] = _mm512_loadu_ps(x + m * K + k);
        for (int r = 0; r < n_w_rows; r++) {
            if (n_x_rows == 2) _mm_prefetch((const char *)(w + r * K + k + PREFETCH_AHEAD), _MM_HINT_T0);
            __m512 wv = _mm512_loadu_ps(w + r * K + k);
            /* Keep wv in a register: otherwise the compiler folds the load
             * into both FMAs and every weight line is loaded twice. */
            if (n_x_rows == 2) __asm__("" : "+v"(wv));
            for (int m = 0; m < n_x_rows; m++) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
        }
    }
    if (k < K) { /* tail of K % 16 elements: masked loads read nothing past the row */
        __mmask16 mask = (__mmask16)((1u << (K - k)) - 1u);
        __m512 xv[2];
        for (int m = 0; m < n_x_rows; m++) xv[m] = _mm512_maskz_loadu_ps(mask, x + m * K + k);
        for (int r = 0; r < n_w_rows; r++) {
            __m512 wv = _mm512_maskz_loadu_ps(mask, w + r * K + k);
            for (int m = 0; m < n_x_rows; m++) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
        }
    }
    for (int r = 0; r < n_w_rows; r++)
        for (int m = 0; m < n_x_rows; m++) out[m * ldo + r] = _mm512_reduce_add_ps(acc[r][m]);
}

#else

/* Portable form of the same block (the compiler vectorises the k loop). */
static inline __attribute__((always_inline)) void block_dot(float *out, int64_t ldo, const float *x,
                                                            const float *w, int64_t K, int n_w_rows,
                                                            int n_x_rows) {
    for (int r = 0; r < n_w_rows; r++)
        for (int m = 0; m < n_x_rows; m++) {
            const float *wr = w + r * K, *xm = x + m * K;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t k = 0; k < K; k++) sum += wr[k] * xm[k];
            out[m * ldo + r] = sum;
        }
}

#endif

/* Rows n0 .. n0+n_rows-1 (n_rows <= ROWS_PER_BLOCK) of one job. */
static inline void job_block(const eval_matvec_job *job, int64_t n0, int64_t n_rows) {
    const float *w = job->weight + n0 * job->K;
    float *out = job->out + n0;
    if (n_rows == ROWS_PER_BLOCK) {
        if (job->M == 2)
            block_dot(out, job->N, job->in, w, job->K, ROWS_PER_BLOCK, 2);
        else
            block_dot(out, job->N, job->in, w, job->K, ROWS_PER_BLOCK, 1);
    } else {
        for (int64_t r = 0; r < n_rows; r++) {
            if (job->M == 2)
                block_dot(out + r, job->N, job->in, w + r * job->K, job->K, 1, 2);
            else
                block_dot(out + r, job->N, job->in, w + r * job->K, job->K, 1, 1);
        }
    }
    if (job->bias)
        for (int64_t m = 0; m < job->M; m++)
            for (int64_t r = 0; r < n_rows; r++) out[m * job->N + r] += job->bias[n0 + r];
}

// rows n0 .. n0+n_rows-1 of job->out
void eval_matvec_rows(const eval_matvec_job *job, int64_t n0, int64_t n_rows) {
    for (int64_t n = n0; n < n0 + n_rows; n += ROWS_PER_BLOCK) {
        int64_t left = n0 + n_rows - n;
        job_block(job, n, left < ROWS_PER_BLOCK ? left : ROWS_PER_BLOCK);
    }
}

void eval_matvec_batch(const eval_matvec_job *jobs, int n_jobs) {
    /* Blocks of ROWS_PER_BLOCK rows numbered across the jobs: job j owns
     * [first_block[j], first_block[j+1]). */
    int64_t first_block[EVAL_MATVEC_MAX_JOBS + 1], elements = 0;
    first_block[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        first_block[j + 1] = first_block[j] + (jobs[j].N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
        elements += jobs[j].N * jobs[j].K;
    }
    int64_t n_blocks = first_block[n_jobs];
#pragma omp parallel for schedule(static) if (elements >= PARALLEL_MIN_ELEMENTS)
    for (int64_t b = 0; b < n_blocks; b++) {
        int j = 0;
        while (b >= first_block[j + 1]) j++;
        int64_t n0 = (b - first_block[j]) * ROWS_PER_BLOCK, left = jobs[j].N - n0;
        job_block(&jobs[j], n0, left < ROWS_PER_BLOCK ? left : ROWS_PER_BLOCK);
    }
}

// out [M,N], in [M,K], weight [N,K], bias [N] or NULL
void eval_matvec(float *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K,
                 int64_t N) {
    for (int64_t m0 = 0; m0 < M; m0 += 2) {
        eval_matvec_job job = {out + m0 * N, in + m0 * K, weight, bias, M - m0 >= 2 ? 2 : 1, K, N};
        eval_matvec_batch(&job, 1);
    }
}
