/* Matrix products through BLIS, and the linear layer built on them.
 *
 * Every GEMM in dbranch goes through k_gemm (no hand-written GEMM loops). All
 * matrices are row-major; `ld*` are row strides in elements. */
#ifndef K_GEMM_H
#define K_GEMM_H

#include <stdint.h>

/* C[M,N] = alpha * op(A) · op(B) + beta * C
 * op(A) is [M,K]: A is [M,K] (trans_a = 0) or [K,M] (trans_a = 1).
 * op(B) is [K,N]: B is [K,N] (trans_b = 0) or [N,K] (trans_b = 1). */
void k_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
            const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* out[M,N] = in[M,K] · weight[N,K]^T + bias[N]   (bias may be NULL) */
void k_linear_forward(float *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K,
                      int64_t N);

/* out [M,N] = row [N] in every row (a bias seeded before a GEMM with beta = 1) */
void k_broadcast_rows(float *out, const float *row, int64_t M, int64_t N);

/* Accumulates (+=) into whichever of d_in, d_weight, d_bias is non-NULL:
 * d_in[M,K] += d_out[M,N] · weight[N,K]
 * d_weight[N,K] += d_out[M,N]^T · in[M,K]
 * d_bias[N] += sum over rows of d_out */
void k_linear_backward(float *d_in, float *d_weight, float *d_bias, const float *d_out, const float *in,
                       const float *weight, int64_t M, int64_t K, int64_t N);

/* Sets the thread count used by BLIS and by the OpenMP kernels. Every
 * command that takes a thread count accepts 1..K_MAX_THREADS (one limit). */
enum { K_MAX_THREADS = 1024 };
void k_set_threads(int n_threads);
int k_get_threads(void);

#endif
