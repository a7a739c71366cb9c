/* Matrix products with bfloat16 operands and float32 results: the products of
 * mixed-precision training (train.precision = bf16).
 *
 * What is computed, on every engine: C = alpha * op(A) · op(B) + beta * C
 * where every element of A and B is first rounded to bfloat16 (nearest, ties
 * to even; kernels/type_traits.h) and every product and sum is float32. A
 * product of two bfloat16 values is exact in float32 (8 + 8 significant bits
 * fit in 24), so the engines differ only in the order of the float32 sums.
 *
 * Engines, chosen at run time:
 * - onednn: oneDNN's bf16 matmul (Debian libdnnl), which itself picks the
 *   CPU's best kernel: AMX tiles (tdpbf16ps) on Sapphire Rapids,
 *   AVX512_BF16 (vdpbf16ps) on Cooper Lake and Zen 4, and on plain AVX-512
 *   an emulation (correct, about a quarter of float32 speed).
 * - widen: the operands rounded and widened back to float32, then the
 *   float32 GEMM (k_gemm, BLIS). bf16 numerics at a little below float32
 *   speed: the fallback on a CPU without bf16 units.
 * The default is onednn when the CPU reports AVX512_BF16 or AMX-BF16, widen
 * otherwise; DBRANCH_BF16_GEMM=onednn|widen (or k_bf16_gemm_force) chooses
 * one, so the tests run both on any AVX-512 machine.
 *
 * Row-major throughout; `ld*` are row strides in elements, as in k_gemm. */
#ifndef K_GEMM_BF16_H
#define K_GEMM_BF16_H

#include <stdint.h>

#include "core/error.h"

typedef enum { K_BF16_GEMM_WIDEN = 0, K_BF16_GEMM_ONEDNN = 1 } k_bf16_gemm_engine;

/* The engine this CPU defaults to (see above). */
k_bf16_gemm_engine k_bf16_gemm_default(void);
/* The engine k_gemm_bf16 uses now: the default unless forced. */
k_bf16_gemm_engine k_bf16_gemm_active(void);
/* Forces an engine: onednn is refused (an error saying so) when oneDNN cannot
 * build a bf16 matmul on this CPU. Not for use while products run on other
 * threads. */
dt_status k_bf16_gemm_force(k_bf16_gemm_engine engine);
/* Back to the default. */
void k_bf16_gemm_reset(void);
const char *k_bf16_gemm_name(k_bf16_gemm_engine engine);
/* "onednn" or "widen" (an error naming the word otherwise). */
dt_status k_bf16_gemm_parse(const char *name, k_bf16_gemm_engine *engine);
/* Applies DBRANCH_BF16_GEMM when it is set (the CLI calls this once). */
dt_status k_bf16_gemm_from_environment(void);
/* The kernel oneDNN runs a bf16 product with here ("brg:avx512_core_amx",
 * "gemm:jit", ...), or "unavailable". For `bench` headers and the docs. */
const char *k_bf16_gemm_onednn_kernel(void);

/* C [M,N] = alpha * op(A) [M,K] · op(B) [K,N] + beta * C, operands rounded to
 * bfloat16 as above. Each operand is given as float32 (A, B) or as its
 * bfloat16 copy already rounded (A_bf16, B_bf16: same layout and ld), or both
 * (the copy is used); at least one of each pair is non-NULL. beta == 0
 * overwrites C. A is [M,K] (lda >= K) or, with trans_a, [K,M] (lda >= M); B
 * is [K,N] or, with trans_b, [N,K]. DT_ERR (C untouched, the error says
 * why) only when the operand scratch cannot be allocated; a thread's scratch
 * grows to its largest product once and is reused. */
dt_status k_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16, int64_t ldb,
                      float beta, float *C, int64_t ldc);

/* C [M,N] = alpha * op(A) · op(B) + bias [N] in every row (bias may be
 * NULL: then C is overwritten with the product alone), operands as above.
 * On oneDNN the bias is the matmul's own bias argument, added to the
 * product's float32 sum; on the widen engine C starts as the bias and the
 * product is added onto it (the float32 linear map's order). A float32 sum
 * plus one float32 bias rounds the same either way. It saves a pass that
 * writes the bias into C and the product's read of C back. */
dt_status k_gemm_bf16_bias(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16, int64_t ldb,
                           const float *bias, float *C, int64_t ldc);

/* dst [n] = src [n] rounded to bfloat16 (nearest, ties to even; NaN stays a
 * quiet NaN), threaded over large n. The bf16 copies of the weights. */
void k_bf16_round(uint16_t *dst, const float *src, int64_t n);

#endif
