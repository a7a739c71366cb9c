/* Which instruction-set level the kernels use: AVX-512 (F + BW + VL), AVX2
 * (+ FMA) or portable C. The decode matvec (eval/matvec.c), the GEMM
 * micro-kernel and AdamW's sweep carry target attributes per level; the
 * activations and attention are *_isa.c files compiled once per level
 * (kernels/isa_variant.h). One binary runs on any x86-64 CPU: the level is
 * what the CPU reports (cpuid through __builtin_cpu_supports, which also
 * checks that the OS saves the registers), and it can be forced DOWN, never
 * up, so the tests and a user (DBRANCH_ISA=avx2|scalar) run the fallbacks
 * on a machine that has the fast path. Nothing is keyed on the build's
 * -march: a function that uses a level's instructions carries its own
 * target attribute or is built in that level's variant of its file.
 *
 * Also the CPU features of the bf16 paths (AVX512_BF16, AMX-BF16), by which
 * kernels/gemm_bf16.c and attention_amx.c choose theirs at run time. */
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

/* The table of the active level among the three a *_isa.c file exports
 * (kernels/isa_variant.h): table##_avx512, table##_avx2 or table##_scalar. */
#define K_ISA_PICK(table)                                                                                              \
    (k_isa_active() == K_ISA_AVX512 ? &table##_avx512 : k_isa_active() == K_ISA_AVX2 ? &table##_avx2 : &table##_scalar)

/* Target attributes of a function that uses a level's instructions in a file
 * built for any CPU (called only when k_isa_active() reaches the level). */
#define K_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define K_TARGET_AVX2   __attribute__((target("avx2,fma")))

const char *k_isa_name(k_isa level);
/* "avx512", "avx2" or "scalar" (an error naming the word otherwise). */
dt_status k_isa_parse(const char *name, k_isa *level);
/* Applies DBRANCH_ISA when it is set (the CLI calls this once at start):
 * an unknown word or a level the CPU lacks is an error. */
dt_status k_isa_from_environment(void);

/* Features of the matrix units bf16 training would use (cpuid leaves 0 and 7). */
typedef struct k_cpu_bf16 {
    int avx512_bf16; /* vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4) */
    int amx_bf16;    /* AMX tiles with tdpbf16ps (Sapphire Rapids) */
    /* vdpbf16ps at about twice the float32 FMA rate: AMD's (Zen 4 and 5,
     * a bf16 step 0.6x fp32's). Intel's without AMX measured 1.4-1.5x
     * (docs/DECISIONS.md, "Not on an Intel without AMX"). */
    int bf16_dot_doubles_fma;
} k_cpu_bf16;
k_cpu_bf16 k_cpu_bf16_features(void);

#endif
