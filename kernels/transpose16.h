/* The 16 x 16 transpose of 32-bit lanes through AVX-512 registers, shared by
 * the float32 attention kernels (the avx512 variant of kernels/
 * attention_isa.c), the AMX ones (kernels/attention_amx.c, which transpose
 * bf16 pairs as 32-bit lanes) and the GEMM micro-kernel's packing
 * (kernels/gemm_ukernel.c). The target attribute lets a file built without
 * -mavx512f inline it into its own AVX-512 functions. */
#ifndef K_TRANSPOSE16_H
#define K_TRANSPOSE16_H

#if defined(__x86_64__)
#include <immintrin.h>

/* rows[0..15] hold a 16 x 16 block; afterwards rows[j] holds its column j:
 * pairs, then quads within 128-bit lanes, then lanes. */
static inline __attribute__((always_inline, target("avx512f"))) void k_transpose16(__m512 rows[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        rows[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        rows[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        rows[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        rows[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* rows[4g + j], lane l: column 4l + j of source rows 4g..4g+3 */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(rows[i], rows[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(rows[i], rows[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(rows[8 + i], rows[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(rows[8 + i], rows[12 + i], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        rows[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        rows[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
        rows[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        rows[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
    }
}
#endif

#endif
