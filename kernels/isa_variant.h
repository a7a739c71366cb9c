/* Internal to kernels/: naming inside a source compiled once per
 * instruction-set level (a *_isa.c file; CMakeLists.txt builds it three
 * times with K_ISA_VARIANT defined to avx512, avx2 or scalar and that
 * level's compiler flags). The file keeps its functions static and exports
 * one table of them, K_ISA_VARIANT_NAME(k_<file>_ops), which becomes
 * k_<file>_ops_avx512, _avx2 or _scalar; the dispatcher beside it
 * (K_ISA_PICK, kernels/isa.h) calls through the table of the level
 * k_isa_active() names.
 *
 * Inside a variant __AVX512F__ / __AVX2__ say what that level may use, so a
 * body keeps the plain #if ladder of one build and still runs every branch
 * of it in one binary. */
#ifndef K_ISA_VARIANT_H
#define K_ISA_VARIANT_H

#ifndef K_ISA_VARIANT
#error "a *_isa.c file is compiled through CMakeLists.txt's dbranch_isa_variants, which defines K_ISA_VARIANT"
#endif

#define K_ISA_PASTE(name, level)  name##_##level
#define K_ISA_EXPAND(name, level) K_ISA_PASTE(name, level)
#define K_ISA_VARIANT_NAME(name)  K_ISA_EXPAND(name, K_ISA_VARIANT)

#endif
