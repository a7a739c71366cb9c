/* The run-time instruction-set level (isa.h): detection, the forced level,
 * the DBRANCH_ISA setting and the bf16 feature bits. */
#include "kernels/isa.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define K_ISA_X86 1
#endif

static const char *const names[] = {"scalar", "avx2", "avx512"};

/* -1: not forced. Read by the kernels on every product (a plain load). */
static int forced_level = -1;

k_isa k_isa_supported(void) {
#ifdef K_ISA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return K_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return K_ISA_AVX2;
#endif
    return K_ISA_SCALAR;
}

k_isa k_isa_active(void) {
    static int supported = -1; /* cached: cpuid is not free */
    if (forced_level >= 0) return (k_isa)forced_level;
    if (supported < 0) supported = (int)k_isa_supported();
    return (k_isa)supported;
}

dt_status k_isa_force(k_isa level) {
    if ((int)level < 0 || (int)level > K_ISA_AVX512) return dt_errorf("instruction-set level %d unknown", (int)level);
    if (level > k_isa_supported())
        return dt_errorf("instruction-set level %s: this CPU supports up to %s", k_isa_name(level),
                         k_isa_name(k_isa_supported()));
    forced_level = (int)level;
    return DT_OK;
}

void k_isa_reset(void) { forced_level = -1; }

const char *k_isa_name(k_isa level) { return (int)level >= 0 && (int)level <= K_ISA_AVX512 ? names[level] : "?"; }

dt_status k_isa_parse(const char *name, k_isa *level) {
    for (int i = 0; i <= K_ISA_AVX512; i++)
        if (!strcmp(name, names[i])) {
            *level = (k_isa)i;
            return DT_OK;
        }
    return dt_errorf("instruction-set level '%s': expected avx512, avx2 or scalar", name);
}

dt_status k_isa_from_environment(void) {
    const char *value = getenv("DBRANCH_ISA");
    if (!value) return DT_OK;
    k_isa level = K_ISA_SCALAR;
    if (k_isa_parse(value, &level) != DT_OK || k_isa_force(level) != DT_OK) return dt_error_context("DBRANCH_ISA");
    return DT_OK;
}

k_cpu_bf16 k_cpu_bf16_features(void) {
    k_cpu_bf16 f = {0, 0, 0};
#ifdef K_ISA_X86
    unsigned a, b, c, d;
    __cpuid(0, a, b, c, d);                                                   /* EAX: the highest leaf */
    const int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" in EBX EDX ECX */
    if (a >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.amx_bf16 = (d >> 22) & 1; /* leaf 7.0 EDX bit 22 */
        if (a >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f.avx512_bf16 = (a >> 5) & 1; /* leaf 7.1 EAX bit 5 */
        }
    }
    f.bf16_dot_doubles_fma = f.avx512_bf16 && amd;
#endif
    return f;
}
