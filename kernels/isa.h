/* Which instruction-set level the kernels that dispatch at run time use
 * (today the decode matvec, eval/matvec.c): AVX-512 (F + BW + VL), AVX2 (+ FMA)
 * or portable C. One binary runs on any x86-64 CPU: the level is what the CPU
 * reports (cpuid through __builtin_cpu_supports, which also checks that the OS
 * saves the registers), and it can be forced DOWN, never up, so the tests and
 * a user (DBRANCH_ISA=avx2|scalar) run the fallbacks on a machine that has
 * the fast path. Nothing is keyed on the build's -march: a function that uses
 * a level's instructions carries its own target attribute.
 *
 * Also the CPU features bf16 training will need (AVX512_BF16, AMX-BF16),
 * reported by `bench decode`; no kernel uses them yet (docs/DECISIONS.md). */
#ifndef K_ISA_H
#define K_ISA_H

#include "core/error.h"

typedef enum { K_ISA_SCALAR = 0, K_ISA_AVX2 = 1, K_ISA_AVX512 = 2 } k_isa;

/* The best level this CPU runs. */
k_isa k_isa_supported(void);
/* The level the kernels use now: k_isa_supported() unless forced lower. */
k_isa k_isa_active(void);
/* Forces the level (an error naming both when the CPU lacks it). Not for use
 * while kernels run on other threads. */
dt_status k_isa_force(k_isa level);
/* Back to k_isa_supported(). */
void k_isa_reset(void);

const char *k_isa_name(k_isa level);
/* "avx512", "avx2" or "scalar" (an error naming the word otherwise). */
dt_status k_isa_parse(const char *name, k_isa *level);
/* Applies DBRANCH_ISA when it is set (the CLI calls this once at start):
 * an unknown word or a level the CPU lacks is an error. */
dt_status k_isa_from_environment(void);

/* Features of the matrix units bf16 training would use (cpuid leaf 7). */
typedef struct k_cpu_bf16 {
    int avx512_bf16; /* vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4) */
    int amx_bf16;    /* AMX tiles with tdpbf16ps (Sapphire Rapids) */
} k_cpu_bf16;
k_cpu_bf16 k_cpu_bf16_features(void);

#endif
