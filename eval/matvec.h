/* Decode-only multi-row matrix-vector product (M = 1 or 2 rows).
 *
 * Why this exists beside k_linear_forward: a decode step multiplies one or two
 * rows by every weight matrix, so it is bound by how fast the weights stream
 * from memory, not by FLOPs. A GEMM library tuned for large M packs the weight
 * panel before use, which costs extra memory traffic at M <= 2. This kernel
 * reads each row W[n,:] once and dots it with every input row while it is in
 * L1, with OpenMP over blocks of rows of W. `dbranch bench decode` measures
 * both paths (see eval_decode_session.matvec); the project rule that GEMMs go
 * through BLIS still holds for every M > 2 product (prefill, training).
 *
 * Weights are float32 or bfloat16 (a job's wtype; kernels/type_traits.h):
 * a bf16 weight is widened to float32 in registers (exact: a 16-bit shift)
 * and multiplied and accumulated in float32, lane for lane as the float32
 * kernel does, so a bf16 product equals the float32 product of the same
 * (bf16-representable) weights bit for bit at one instruction-set level. The
 * level (AVX-512, AVX2, portable C) is chosen at run time (kernels/isa.h).
 *
 * bf16 rows are stored packed (eval_matvec_bf16_pack): in each full block of
 * 32 elements of a row, position 2i holds element i and position 2i+1
 * element 16+i (i < 16); the last K % 32 elements stay in order. So one
 * 64-byte load gives two float32 vectors, elements 0-15 by a shift and 16-31
 * by a mask, in the float32 kernel's order: 2 integer operations per 32
 * weights instead of 2 widening shuffles and 2 shifts. */
#ifndef EVAL_MATVEC_H
#define EVAL_MATVEC_H

#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

/* out[M,N] = in[M,K] · weight[N,K]^T + bias[N]  (bias may be NULL).
 * Any M works; the weight is streamed once per pair of input rows. */
void eval_matvec(float *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K, int64_t N);
/* The same with weight [N,K] stored as wtype (DT_F32 or DT_BF16). */
void eval_matvec_typed(float *out, const float *in, const void *weight, dt_dtype wtype, const float *bias, int64_t M,
                       int64_t K, int64_t N);

/* dst [N,K] (bf16, packed as above) = src [N,K] (float32) rounded to nearest even. */
void eval_matvec_bf16_pack(uint16_t *dst, const float *src, int64_t N, int64_t K);
/* Where element k of a packed row of K elements is stored. */
static inline int64_t eval_matvec_bf16_position(int64_t k, int64_t K) {
    if (k >= K - K % 32) return k;
    const int64_t j = k % 32;
    return k - j + (j < 16 ? 2 * j : 2 * (j - 16) + 1);
}

/* One product of a batch: out [M,N] = in [M,K] · weight [N,K]^T + bias [N], M = 1 or 2. */
typedef struct eval_matvec_job {
    float *out;
    const float *in;
    const void *weight; /* [N,K] of wtype (bf16: packed rows) */
    const float *bias;  /* NULL: none */
    int64_t M, K, N;
    dt_dtype wtype; /* DT_F32 (0, the default of a job built without it) or DT_BF16 */
} eval_matvec_job;

enum { EVAL_MATVEC_MAX_JOBS = 8 };

/* Independent products (e.g. Wq, Wk, Wv of one layer) in ONE parallel region:
 * the row blocks of all the weights are split between the threads together,
 * so a decode stage pays one fork/join instead of one per matrix. */
void eval_matvec_batch(const eval_matvec_job *jobs, int n_jobs);

/* Rows n0 .. n0 + n_rows - 1 of one job's output, on the calling thread
 * (the decode team, eval/team.h, hands out such ranges). */
void eval_matvec_rows(const eval_matvec_job *job, int64_t n0, int64_t n_rows);

/* How the AVX-512 level walks the weight rows: eight rows interleaved in
 * 16 lanes (faster on an AMX Xeon, with a software prefetch of the next
 * block) or one row at a time with the AVX2 level's kernel (faster on a
 * Zen 4, whose prefetchers follow one stream better than eight). The AVX2
 * level is always rowwise, portable C always eight rows. The default follows
 * the CPU's vendor; DBRANCH_MATVEC (read once by the CLI) and the tests
 * force either. The two walks sum in different orders, so their results
 * differ in the last bits; each is deterministic and gives an input row the
 * same bits with M = 1 and 2. */
typedef enum { EVAL_MATVEC_INTERLEAVED = 0, EVAL_MATVEC_ROWWISE = 1 } eval_matvec_walk;
eval_matvec_walk eval_matvec_walk_default(void);
eval_matvec_walk eval_matvec_walk_active(void);
/* Not for use while products run on other threads. */
void eval_matvec_walk_force(eval_matvec_walk walk);
void eval_matvec_walk_reset(void);
const char *eval_matvec_walk_name(eval_matvec_walk walk);
/* DBRANCH_MATVEC=interleaved|rowwise when set; another word is an error. */
dt_status eval_matvec_walk_from_environment(void);

#endif
