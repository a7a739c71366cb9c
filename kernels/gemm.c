/* Matrix products through BLIS (k_gemm), the linear layer built on them, and
 * the one place that sets the thread count for BLIS and the OpenMP kernels.
 *
 * Row-major throughout: a row-major matrix with row stride ld is, to BLIS, a
 * matrix with row stride ld and column stride 1, so no transposes are needed
 * to adapt to BLIS's (general-stride) typed API.
 *
 * Threading: every BLIS call here is single-threaded; a large product is cut
 * into one contiguous block of output rows (or columns) per thread, each block
 * a separate BLIS call. BLIS's own threading synchronises its threads with
 * busy-wait barriers several times per call, and on a shared 2-core machine a
 * thread spinning while its partner is descheduled stalls the whole product:
 * on M=4096, K=N=384 with the machine under load, BLIS's own 2-thread mode
 * ran at a median 12-16 GFLOP/s (below its 1-thread speed), the split at
 * 40-61 in the same runs. Each block repacks the operand it shares (the
 * smaller one, since the larger output dimension is split), a small cost next
 * to its share of the arithmetic. */
#include "kernels/gemm.h"

#include "kernels/elementwise.h"
#include "kernels/gemm_ukernel.h"

/* blis.h is not included as a system header, and under -Wall -Wextra -Werror
 * its plain `static` helpers (-Wunused-function) and its kernel-id range
 * checks (-Wtype-limits) would break the build: silence just those, just here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop
#include <omp.h>

/* Products with fewer multiply-adds than this (about 0.1 ms of one core) run
 * on the calling thread: a parallel region would cost more than it saves. */
#define GEMM_PARALLEL_MIN_MACS (2.0 * 1024 * 1024)
/* Blocks handed to threads are multiples of this many rows / columns (a
 * multiple of BLIS's micro-tile sides, so only the last block has edge tiles). */
#define GEMM_BLOCK_ALIGN 48

/* 0 until k_set_threads is called: then k_get_threads reports OpenMP's default. */
static int configured_threads = 0;

void k_set_threads(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    configured_threads = n_threads;
    bli_thread_set_num_threads(n_threads);
    omp_set_num_threads(n_threads);
}

int k_get_threads(void) { return configured_threads > 0 ? configured_threads : omp_get_max_threads(); }

/* One BLIS call on the calling thread; same arguments as k_gemm (K >= 1).
 * Products big enough to pay for packing run through the AVX-512 micro-kernel
 * (kernels/gemm_ukernel.c) on BLIS's packed path; the rest through BLIS's own
 * context, whose small-matrix path skips packing. */
static void gemm_single_thread(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    float alpha_copy = alpha, beta_copy = beta; /* BLIS takes scalars by non-const pointer */
    rntm_t single_thread = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &single_thread);
    cntx_t *context = NULL;
    if (k_gemm_ukernel_pays(M, N, K) && (context = k_gemm_ukernel_context()) != NULL)
        bli_rntm_disable_l3_sup(&single_thread); /* the sup path would bypass the micro-kernel */
    bli_sgemm_ex(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, (dim_t)M,
                 (dim_t)N, (dim_t)K, &alpha_copy, (float *)A, (inc_t)lda, 1, (float *)B, (inc_t)ldb, 1, &beta_copy, C,
                 (inc_t)ldc, 1, context, &single_thread);
}

/* C [M,N] = alpha * op(A) [M,K] · op(B) [K,N] + beta * C
 * A is [M,K] (lda >= K) or, with trans_a, [K,M] (lda >= M); B likewise. */
void k_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
            const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        /* Nothing to multiply: C = beta * C, with beta == 0 meaning overwrite
         * (so uninitialised or NaN contents of C never leak through). */
        for (int64_t i = 0; i < M; i++) {
            float *c_row = C + i * ldc;
            for (int64_t j = 0; j < N; j++)
                c_row[j] = (beta == 0.0f) ? 0.0f : beta * c_row[j];
        }
        return;
    }
    int n_threads = k_get_threads();
    if (n_threads <= 1 || (double)M * (double)N * (double)K < GEMM_PARALLEL_MIN_MACS || omp_in_parallel()) {
        /* Small products (decode rows, per-head tiles), and calls from inside
         * the caller's own parallel region (which would oversubscribe). */
        gemm_single_thread(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger output dimension into contiguous aligned blocks. */
    int split_rows = M >= N;
    int64_t extent = split_rows ? M : N;
    int64_t block = (extent + n_threads - 1) / n_threads;
    block = (block + GEMM_BLOCK_ALIGN - 1) / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
    int64_t n_blocks = (extent + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int64_t b = 0; b < n_blocks; b++) {
        int64_t start = b * block, length = start + block <= extent ? block : extent - start;
        if (split_rows) {
            /* rows [start, start+length) of C and of op(A) */
            const float *A_block = trans_a ? A + start : A + start * lda;
            gemm_single_thread(trans_a, trans_b, length, N, K, alpha, A_block, lda, B, ldb, beta, C + start * ldc, ldc);
        } else {
            /* columns [start, start+length) of C and of op(B) */
            const float *B_block = trans_b ? B + start * ldb : B + start;
            gemm_single_thread(trans_a, trans_b, M, length, K, alpha, A, lda, B_block, ldb, beta, C + start, ldc);
        }
    }
}

/* out [M,N] = in [M,K] · weight [N,K]^T + bias [N] (bias may be NULL) */
void k_linear_forward(float *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K,
                      int64_t N) {
    if (M <= 0 || N <= 0) return;
    float beta = 0.0f;
    if (bias) {
        k_broadcast_rows(out, bias, M, N); /* the GEMM adds onto the bias */
        beta = 1.0f;
    }
    k_gemm(0, 1, M, N, K, 1.0f, in, K, weight, K, beta, out, N);
}

/* out [M,N] = row [N] in every row */
void k_broadcast_rows(float *out, const float *row, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > 65536 && !omp_in_parallel())
    for (int64_t i = 0; i < M; i++) {
        float *out_row = out + i * N;
        for (int64_t j = 0; j < N; j++)
            out_row[j] = row[j];
    }
}

/* d_in [M,K] += d_out [M,N] · weight [N,K]
 * d_weight [N,K] += d_out^T · in [M,K]
 * d_bias [N] += column sums of d_out. NULL outputs are skipped. */
void k_linear_backward(float *d_in, float *d_weight, float *d_bias, const float *d_out, const float *in,
                       const float *weight, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (d_in) k_gemm(0, 0, M, K, N, 1.0f, d_out, N, weight, K, 1.0f, d_in, K);
    if (d_weight) k_gemm(1, 0, N, K, M, 1.0f, d_out, N, in, K, 1.0f, d_weight, K);
    if (d_bias) k_sum_rows(d_bias, d_out, M, N); /* deterministic column sums */
}
