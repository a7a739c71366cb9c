/* Internal to kernels/: an AVX-512 single-precision GEMM micro-kernel for
 * BLIS, and the BLIS context that carries it (see gemm_ukernel.c for why). */
#ifndef K_GEMM_UKERNEL_H
#define K_GEMM_UKERNEL_H

#include <stdint.h>

/* The BLIS context (a cntx_t *) whose sgemm micro-kernel and block sizes are
 * ours, or NULL when the active instruction-set level (kernels/isa.h) is
 * below AVX-512 (then BLIS's own context serves every product). Built once,
 * on first use; thread-safe. */
void *k_gemm_ukernel_context(void);

/* Does a product of this shape run faster through that context than through
 * BLIS's own small-matrix ("sup") path? C is [M,N], the inner dimension K;
 * 0 below AVX-512. */
int k_gemm_ukernel_pays(int64_t M, int64_t N, int64_t K);

#endif
