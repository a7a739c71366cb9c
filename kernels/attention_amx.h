/* Causal GQA attention with bfloat16 products on AMX tiles or, on a CPU with
 * AVX512_BF16 but no tiles (a Zen 4), on vdpbf16ps: the attention of
 * mixed-precision training (train.precision = bf16).
 *
 * What is computed: the float32 kernels' attention (kernels/attention.h, the
 * same arguments, lse and accumulate rules), with every operand of the seven
 * matrix products rounded to bfloat16 (nearest, ties to even) and summed in
 * float32 on the tiles (tdpbf16ps): S = Q K^T and O = P V forward; S again,
 * dP = dO V^T, dV = P^T dO, dQ = dS K and dK = dS^T Q backward. The softmax,
 * its statistics (running max, sum, lse), D = rowsum(dO ∘ O) and dS = P ∘
 * (dP - D) stay float32; the sum normalising P is that of the float32
 * weights, the product reads them rounded (as flash attention's bf16 kernels
 * do). No score bias: ALiBi keeps the float32 kernels.
 *
 * Shapes served: head_dim a multiple of 32 up to K_ATTENTION_AMX_MAX_HEAD_DIM
 * (one tile row holds 32 bf16), any T and B; k_attention_amx_serves says.
 * The caller supplies scratch (the operands in tile layouts, built once per
 * call, and float32 d_q sums), whose size the _scratch functions give.
 *
 * Engine choice (bf16 products only; float32 training always runs the float32
 * kernels): amx where the CPU has AMX-BF16 and AVX512_BF16 and Linux grants
 * the tile state (arch_prctl); else avx512_bf16 where it has AVX512_BF16 (the
 * same flash loop and operand layouts, each product on vdpbf16ps); both only
 * when the ISA level is not forced below AVX-512 (kernels/isa.h); fp32
 * otherwise. DBRANCH_BF16_ATTENTION=amx|avx512_bf16|fp32 or
 * k_bf16_attention_force chooses one, so the tests run each the CPU has.
 *
 * Determinism as the float32 kernels: each output element comes from one
 * thread in a fixed order, whatever the thread count. */
#ifndef K_ATTENTION_AMX_H
#define K_ATTENTION_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define K_ATTENTION_AMX_MAX_HEAD_DIM 128

typedef enum {
    K_BF16_ATTENTION_FP32 = 0,
    K_BF16_ATTENTION_AMX = 1,
    K_BF16_ATTENTION_AVX512_BF16 = 2
} k_bf16_attention_engine;

/* 1 when this CPU and kernel run the AMX kernels (asks Linux for the tile
 * state the first time). */
int k_attention_amx_available(void);
/* 1 when this CPU has AVX512_BF16 and the ISA level is not forced below AVX-512. */
int k_attention_avx512_bf16_available(void);
/* 1 when the engine can run here now (fp32: always). */
int k_bf16_attention_available(k_bf16_attention_engine engine);
/* The engine this CPU defaults to, and the one in use (default unless forced). */
k_bf16_attention_engine k_bf16_attention_default(void);
k_bf16_attention_engine k_bf16_attention_active(void);
/* Forces an engine; one the CPU lacks is an error saying so. Not for
 * use while kernels run on other threads. */
dt_status k_bf16_attention_force(k_bf16_attention_engine engine);
void k_bf16_attention_reset(void);
const char *k_bf16_attention_name(k_bf16_attention_engine engine);
/* "amx", "avx512_bf16" or "fp32" (an error naming the word otherwise). */
dt_status k_bf16_attention_parse(const char *name, k_bf16_attention_engine *engine);
/* Applies DBRANCH_BF16_ATTENTION when it is set (the CLI calls this once). */
dt_status k_bf16_attention_from_environment(void);

/* 1 when the AMX kernels serve these sizes (H a multiple of Hkv, head_dim a
 * multiple of 32 and at most the maximum). */
int k_attention_amx_serves(int64_t H, int64_t Hkv, int64_t head_dim);

/* Bytes of scratch each kernel needs (64-byte aligned by the caller). */
size_t k_attention_amx_forward_scratch(int64_t B, int64_t T, int64_t Hkv, int64_t head_dim);
size_t k_attention_amx_backward_scratch(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim);

/* out [B,T,H*hd] = causal softmax(q k^T / sqrt(hd)) v; lse [B,H,T] (natural
 * log); q [B,T,H*hd]; k, v [B,T,Hkv*hd]; products on engine (amx or
 * avx512_bf16). Call only when the engine is available and the shape served
 * (else every output is NaN: a wrong call is loud). */
void k_attention_amx_forward(k_bf16_attention_engine engine, float *out, float *lse, const float *q, const float *k,
                             const float *v, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim,
                             void *scratch);

/* d_q [B,T,H*hd], d_k, d_v [B,T,Hkv*hd] (any may be NULL) accumulated into
 * (accumulate_* = 1) or written (0), as k_attention_backward_into; out and
 * lse come from k_attention_amx_forward on the same q, k, v. */
void k_attention_amx_backward(k_bf16_attention_engine engine, float *d_q, int accumulate_q, float *d_k,
                              int accumulate_k, float *d_v, int accumulate_v, const float *d_out, const float *q,
                              const float *k, const float *v, const float *out, const float *lse, int64_t B, int64_t T,
                              int64_t H, int64_t Hkv, int64_t head_dim, void *scratch);

#endif
