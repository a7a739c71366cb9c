/* Internal to kernels/: exp and sigmoid written so that GCC vectorises the
 * loops that call them (branch-free float arithmetic and integer bit tricks,
 * no libm calls).
 *
 * Why: libm's expf / tanhf are scalar calls; in the GELU of a training step
 * they took over a quarter of the whole step (perf, nanoGPT baby, one
 * thread). These run 16 lanes at a time under AVX-512.
 *
 * Accuracy: k_exp is within 2 ulp of expf over [-87, 88] (Cody-Waite range
 * reduction, degree-6 minimax polynomial on [-ln2/2, ln2/2]); inputs are
 * clamped to that range, so exp never overflows to inf: k_exp(-inf) is ~1e-38
 * rather than 0 and k_exp(+inf) is ~1.6e38, which every caller here maps to
 * the right limit to within 1e-38 (sigmoid 0 or 1, GELU 0 or x). NaN inputs
 * give NaN. */
#ifndef K_VEC_MATH_H
#define K_VEC_MATH_H

#include <stdint.h>
#include <string.h>

/* k_exp's constants, shared with the explicit vector forms in activation.c
 * (exp16, exp8) so the three stay one function. */
#define K_EXP_MIN     (-87.0f)
#define K_EXP_MAX     88.0f
#define K_EXP_SHIFTER 12582912.0f          /* 1.5 * 2^23 */
#define K_EXP_LOG2E   1.44269504088896341f /* 1 / ln 2 */
#define K_EXP_LN2_HI  0.693359375f         /* ln 2 = K_EXP_LN2_HI - K_EXP_LN2_FIX */
#define K_EXP_LN2_FIX 2.12194440e-4f
#define K_EXP_P6      1.9875691500e-4f /* the polynomial, highest degree first */
#define K_EXP_P5      1.3981999507e-3f
#define K_EXP_P4      8.3334519073e-3f
#define K_EXP_P3      4.1665795894e-2f
#define K_EXP_P2      1.6666665459e-1f
#define K_EXP_P1      5.0000001201e-1f

static inline float k_exp(float x) {
    /* clamp: 2^n must stay a normal float */
    x = x < K_EXP_MIN ? K_EXP_MIN : x;
    x = x > K_EXP_MAX ? K_EXP_MAX : x;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick: after the add, the low
     * mantissa bits of `shifted` hold n (valid for |n| < 2^22) */
    const float shifted = x * K_EXP_LOG2E + K_EXP_SHIFTER;
    const float n = shifted - K_EXP_SHIFTER;
    /* r = x - n ln2, ln2 split in two so n * ln2_hi is exact */
    float r = x - n * K_EXP_LN2_HI;
    r = r + n * K_EXP_LN2_FIX;
    float p = K_EXP_P6;
    p = p * r + K_EXP_P5;
    p = p * r + K_EXP_P4;
    p = p * r + K_EXP_P3;
    p = p * r + K_EXP_P2;
    p = p * r + K_EXP_P1;
    p = p * r * r + r + 1.0f;
    /* 2^n: n + 127 sits in the low mantissa bits of shifted + 127; shifting
     * them into the exponent field drops the rest (no float-to-int conversion) */
    const float biased = shifted + 127.0f;
    uint32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    bits <<= 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* 1 / (1 + e^-x); far out 1 exactly, or within 1e-38 of 0 (see k_exp's clamp). */
static inline float k_sigmoid(float x) { return 1.0f / (1.0f + k_exp(-x)); }

#endif
