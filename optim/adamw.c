/* AdamW on one piece of the flat buffers (formula in optim.h), fused with
 * the clip and the zeroed gradient so a chunk is read once instead of three
 * times. Elementwise, so how the update pass shares chunks among threads
 * cannot change the result.
 *
 * Where the CPU has AVX-512 (k_isa_active) the sweep runs 16 floats at a
 * time: the scalar loop's sqrtf keeps it scalar (without -fno-math-errno,
 * GCC calls sqrtf for negative arguments and cannot vectorise the loop). Both
 * paths compute the same operations in the same order (the FMA contractions
 * aside). */
#include <immintrin.h>
#include <math.h>

#include "kernels/isa.h"
#include "optim/optim.h"

optim_adamw_step optim_adamw_step_at(const optim_hparams *hp, int64_t t, double lr) {
    return (optim_adamw_step){
        .step_size = (float)(lr / (1.0 - pow(hp->beta1, (double)t))),
        .inv_sqrt_bias2 = (float)(1.0 / sqrt(1.0 - pow(hp->beta2, (double)t))),
        .epsilon = (float)hp->eps,
        .b1 = (float)hp->beta1,
        .b2 = (float)hp->beta2,
        .one_minus_b1 = (float)(1.0 - hp->beta1),
        .one_minus_b2 = (float)(1.0 - hp->beta2),
    };
}

/* The AVX-512 sweep over whole 16-float vectors of [0, n); returns how many
 * elements it updated (the scalar loop finishes the rest). */
static K_TARGET_AVX512 int64_t adamw_update16(float *restrict data, float *restrict grad, float *restrict m,
                                              float *restrict v, int64_t n, float clip, float decay,
                                              const optim_adamw_step *k) {
    // data, grad, m, v [n]
    const __m512 clip16 = _mm512_set1_ps(clip), decay16 = _mm512_set1_ps(decay), b1 = _mm512_set1_ps(k->b1),
                 b2 = _mm512_set1_ps(k->b2), one_minus_b1 = _mm512_set1_ps(k->one_minus_b1),
                 one_minus_b2 = _mm512_set1_ps(k->one_minus_b2), step_size = _mm512_set1_ps(k->step_size),
                 inv_sqrt_bias2 = _mm512_set1_ps(k->inv_sqrt_bias2), epsilon = _mm512_set1_ps(k->epsilon);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), clip16);
        const __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(one_minus_b1, g));
        const __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(_mm512_mul_ps(one_minus_b2, g), g));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), inv_sqrt_bias2, epsilon);
        const __m512 change = _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom);
        _mm512_storeu_ps(data + i, _mm512_fmsub_ps(_mm512_loadu_ps(data + i), decay16, change));
        _mm512_storeu_ps(grad + i, _mm512_setzero_ps());
    }
    return i;
}

void optim_adamw_update(float *restrict data, float *restrict grad, float *restrict m, float *restrict v, int64_t n,
                        float clip, float decay, const optim_adamw_step *k) {
    // data, grad, m, v [n]
    const int64_t i0 = k_isa_active() == K_ISA_AVX512 ? adamw_update16(data, grad, m, v, n, clip, decay, k) : 0;
    for (int64_t i = i0; i < n; i++) {
        const float g = grad[i] * clip;
        const float mi = k->b1 * m[i] + k->one_minus_b1 * g;
        const float vi = k->b2 * v[i] + k->one_minus_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) * k->inv_sqrt_bias2 + k->epsilon;
        data[i] = data[i] * decay - k->step_size * mi / denom;
        grad[i] = 0.0f;
    }
}
