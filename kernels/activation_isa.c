/* Pointwise activations: GELU (tanh form, SPEC §1), SiLU and the SwiGLU product.
 * Backward functions accumulate (+=); NULL outputs are skipped.
 *
 * Compiled once per instruction-set level (kernels/isa_variant.h); the
 * public k_ functions of activation.h, in activation.c, call the table of
 * the active level. Every loop here vectorises: the exponentials come from
 * kernels/vec_math.h (no libm calls), and GELU's tanh is rewritten as a
 * sigmoid (one exp); the fused bias + GELU pair has explicit AVX-512 code
 * (see gelu_gate16) and AVX2 code (gelu_gate8), each built in its level's
 * variant; the scalar variant keeps the portable loops. */
#include "kernels/activation_ops.h"
#include "kernels/isa_variant.h"

#include <string.h>

#include "kernels/parallel.h"
#include "kernels/type_traits.h"
#include "kernels/vec_math.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC          0.044715f

/* With u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) = sigmoid(2u), so
 * GELU is x * sigmoid(2u). */
static inline float gelu_gate(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    return k_sigmoid(2.0f * u);
}

/* gelu'(x) from its gate s = gelu_gate(x): with 0.5 (1 + tanh u) = s and
 * 1 - tanh^2 u = 4 s (1 - s), gelu'(x) = s + 2 x s (1 - s) du/dx,
 * du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline float gelu_slope(float x, float s) {
    const float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* The fused bias + GELU kernels below are the MLP's non-GEMM work, so they
 * get explicit 16-lane code: the same exp as k_exp, and the sigmoid's
 * reciprocal from rcp14 plus one Newton step (relative error ~1e-7) instead
 * of a division, whose throughput (one zmm per ~10 cycles) bounded the
 * auto-vectorised loop at ~0.7 ns per element. */
static inline __m512 exp16(__m512 x) {
    /* clamp to [-87, 88]; max/min return their second operand for a NaN lane, so NaN stays NaN */
    x = _mm512_min_ps(_mm512_set1_ps(K_EXP_MAX), _mm512_max_ps(_mm512_set1_ps(K_EXP_MIN), x));
    const __m512 magic = _mm512_set1_ps(K_EXP_SHIFTER);
    const __m512 shifted = _mm512_fmadd_ps(x, _mm512_set1_ps(K_EXP_LOG2E), magic);
    const __m512 n = _mm512_sub_ps(shifted, magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(K_EXP_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(K_EXP_LN2_FIX), r);
    __m512 p = _mm512_set1_ps(K_EXP_P6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K_EXP_P5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K_EXP_P1));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i bits = _mm512_slli_epi32(_mm512_castps_si512(_mm512_add_ps(shifted, _mm512_set1_ps(127.0f))), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

/* gelu_gate on 16 lanes: 1 / (1 + e^(-2u)) */
static inline __m512 gelu_gate16(__m512 x) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 two_u =
        _mm512_mul_ps(_mm512_set1_ps(2.0f * GELU_SQRT_2_OVER_PI), _mm512_fmadd_ps(_mm512_set1_ps(GELU_CUBIC), x3, x));
    const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), two_u)));
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f))); /* one Newton step */
}

/* gelu_slope on 16 lanes. */
static inline __m512 gelu_slope16(__m512 x, __m512 s) {
    const __m512 du_dx =
        _mm512_mul_ps(_mm512_set1_ps(GELU_SQRT_2_OVER_PI),
                      _mm512_fmadd_ps(_mm512_set1_ps(3.0f * GELU_CUBIC), _mm512_mul_ps(x, x), _mm512_set1_ps(1.0f)));
    const __m512 spread =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f), x), s), _mm512_sub_ps(_mm512_set1_ps(1.0f), s));
    return _mm512_fmadd_ps(spread, du_dx, s);
}

/* The lanes [j, N) of a row as a mask (all 16 when j + 16 <= N). */
static inline __mmask16 tail_mask(int64_t j, int64_t N) {
    return N - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (N - j)) - 1u);
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GELU_AVX2 1
/* The same kernels in 8 lanes for AVX2-only CPUs (AMD Zen 3 and older): GCC
 * compiled the portable loops below to scalar code there (vdivss in the
 * profile), and the fused GELU was 15% of a char step (experiments/
 * throughput/RESULTS.md). The exp is exp16's; the sigmoid divides (the
 * reciprocal estimate plus one Newton step does not give 1 exactly for 1,
 * so gelu(30) would not be 30). */
static inline __m256 exp8(__m256 x) {
    /* clamp to [-87, 88]; max/min return their second operand for a NaN lane, so NaN stays NaN */
    x = _mm256_min_ps(_mm256_set1_ps(K_EXP_MAX), _mm256_max_ps(_mm256_set1_ps(K_EXP_MIN), x));
    const __m256 magic = _mm256_set1_ps(K_EXP_SHIFTER);
    const __m256 shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(K_EXP_LOG2E), magic);
    const __m256 n = _mm256_sub_ps(shifted, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(K_EXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(K_EXP_LN2_FIX), r);
    __m256 p = _mm256_set1_ps(K_EXP_P6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K_EXP_P5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K_EXP_P1));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i bits = _mm256_slli_epi32(_mm256_castps_si256(_mm256_add_ps(shifted, _mm256_set1_ps(127.0f))), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* gelu_gate on 8 lanes: 1 / (1 + e^(-2u)) */
static inline __m256 gelu_gate8(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 two_u =
        _mm256_mul_ps(_mm256_set1_ps(2.0f * GELU_SQRT_2_OVER_PI), _mm256_fmadd_ps(_mm256_set1_ps(GELU_CUBIC), x3, x));
    const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), two_u)));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), d);
}

/* gelu_slope on 8 lanes. */
static inline __m256 gelu_slope8(__m256 x, __m256 s) {
    const __m256 du_dx =
        _mm256_mul_ps(_mm256_set1_ps(GELU_SQRT_2_OVER_PI),
                      _mm256_fmadd_ps(_mm256_set1_ps(3.0f * GELU_CUBIC), _mm256_mul_ps(x, x), _mm256_set1_ps(1.0f)));
    const __m256 spread =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), x), s), _mm256_sub_ps(_mm256_set1_ps(1.0f), s));
    return _mm256_fmadd_ps(spread, du_dx, s);
}

/* The lanes [j, N) of a row as a maskload/maskstore mask (all 8 when j + 8 <= N). */
static inline __m256i tail_mask8(int64_t j, int64_t N) {
    const int64_t left = N - j >= 8 ? 8 : N - j;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* dy * slope rounded on its own: the barrier keeps GCC (gnu11 contracts)
 * from fusing it into a later add, so the two backward kernels agree bit
 * for bit. */
static inline __m256 rounded_product8(__m256 a, __m256 b) {
    __m256 g = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(g));
    return g;
}
#endif

/* in, out [n]; out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static void gelu_forward_range(float *out, const float *in, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i];
        out[i] = x * gelu_gate(x);
    }
}

static void gelu_forward(float *out, const float *in, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, gelu_forward_range(out + i0, in + i0, i1 - i0));
}

/* d_in, d_out, in [n]; d_in += d_out * gelu'(x). With s = sigmoid(2u), so that
 * 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s):
 * gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
static void gelu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i], s = gelu_gate(x);
        d_in[i] += d_out[i] * gelu_slope(x, s);
    }
}

/* pre, out [rows,N]; bias [N] or NULL; pre += bias, out = gelu(pre) */
static void bias_gelu_forward_range(float *out, float *pre, const float *bias, int64_t rows, int64_t N) {
    for (int64_t i = 0; i < rows; i++) {
        float *p = pre + i * N, *y = out + i * N;
#if defined(__AVX512F__)
        for (int64_t j = 0; j < N; j += 16) {
            const __mmask16 lanes = tail_mask(j, N);
            __m512 x = _mm512_maskz_loadu_ps(lanes, p + j);
            if (bias) {
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lanes, bias + j));
                _mm512_mask_storeu_ps(p + j, lanes, x);
            }
            _mm512_mask_storeu_ps(y + j, lanes, _mm512_mul_ps(x, gelu_gate16(x)));
        }
#elif defined(GELU_AVX2)
        for (int64_t j = 0; j < N; j += 8) {
            const __m256i lanes = tail_mask8(j, N);
            __m256 x = _mm256_maskload_ps(p + j, lanes);
            if (bias) {
                x = _mm256_add_ps(x, _mm256_maskload_ps(bias + j, lanes));
                _mm256_maskstore_ps(p + j, lanes, x);
            }
            _mm256_maskstore_ps(y + j, lanes, _mm256_mul_ps(x, gelu_gate8(x)));
        }
#else
#pragma omp simd
        for (int64_t j = 0; j < N; j++) {
            const float x = bias ? p[j] + bias[j] : p[j];
            p[j] = x;
            y[j] = x * gelu_gate(x);
        }
#endif
    }
}

static void bias_gelu_forward(float *out, float *pre, const float *bias, int64_t M, int64_t N) {
    K_FOR_SHARES(M, M * N > PARALLEL_MIN_ELEMENTS,
                 bias_gelu_forward_range(out + i0 * N, pre + i0 * N, bias, i1 - i0, N));
}

/* Columns per piece of the bf16-output forms: their float32 results pass
 * through a stack buffer this wide (L1-resident) on the way to bf16. */
#define BF16_PIECE 256

/* pre [rows,N], out [rows,N] bf16; bias [N] or NULL */
static void bias_gelu_forward_bf16_range(uint16_t *out, float *pre, const float *bias, int64_t rows, int64_t N) {
    float piece[BF16_PIECE];
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j0 = 0; j0 < N; j0 += BF16_PIECE) {
            const int64_t width = N - j0 < BF16_PIECE ? N - j0 : BF16_PIECE;
            /* pointwise, so a piece of a row is the whole-row arithmetic */
            bias_gelu_forward_range(piece, pre + i * N + j0, bias ? bias + j0 : NULL, 1, width);
            k_bf16_round_range(out + i * N + j0, piece, width);
        }
}

static void bias_gelu_forward_bf16(uint16_t *out, float *pre, const float *bias, int64_t M, int64_t N) {
    K_FOR_SHARES(M, M * N > PARALLEL_MIN_ELEMENTS,
                 bias_gelu_forward_bf16_range(out + i0 * N, pre + i0 * N, bias, i1 - i0, N));
}

/* pre, out, coupled [rows,N]; bias, couple [N] (bias may be NULL) */
static void bias_gelu_couple_forward_range(float *out, float *pre, const float *bias, const float *coupled,
                                           const float *couple, int64_t rows, int64_t N) {
    for (int64_t i = 0; i < rows; i++) {
        float *p = pre + i * N, *y = out + i * N;
        const float *z = coupled + i * N;
#if defined(__AVX512F__)
        for (int64_t j = 0; j < N; j += 16) {
            const __mmask16 lanes = tail_mask(j, N);
            __m512 x = _mm512_maskz_loadu_ps(lanes, p + j);
            if (bias) {
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lanes, bias + j));
                _mm512_mask_storeu_ps(p + j, lanes, x);
            }
            const __m512 term =
                _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, z + j), _mm512_maskz_loadu_ps(lanes, couple + j));
            _mm512_mask_storeu_ps(y + j, lanes, _mm512_add_ps(_mm512_mul_ps(x, gelu_gate16(x)), term));
        }
#elif defined(GELU_AVX2)
        for (int64_t j = 0; j < N; j += 8) {
            const __m256i lanes = tail_mask8(j, N);
            __m256 x = _mm256_maskload_ps(p + j, lanes);
            if (bias) {
                x = _mm256_add_ps(x, _mm256_maskload_ps(bias + j, lanes));
                _mm256_maskstore_ps(p + j, lanes, x);
            }
            const __m256 term = _mm256_mul_ps(_mm256_maskload_ps(z + j, lanes), _mm256_maskload_ps(couple + j, lanes));
            _mm256_maskstore_ps(y + j, lanes, _mm256_add_ps(_mm256_mul_ps(x, gelu_gate8(x)), term));
        }
#else
#pragma omp simd
        for (int64_t j = 0; j < N; j++) {
            const float x = bias ? p[j] + bias[j] : p[j];
            p[j] = x;
            y[j] = x * gelu_gate(x) + z[j] * couple[j];
        }
#endif
    }
}

static void bias_gelu_couple_forward(float *out, float *pre, const float *bias, const float *coupled,
                                     const float *couple, int64_t M, int64_t N) {
    K_FOR_SHARES(
        M, M * N > PARALLEL_MIN_ELEMENTS,
        bias_gelu_couple_forward_range(out + i0 * N, pre + i0 * N, bias, coupled + i0 * N, couple, i1 - i0, N));
}

/* Columns per block of bias_gelu_backward's column-parallel pass. */
#define COLUMN_BLOCK 64

/* One row of bias_gelu_backward over width columns: g = dy ⊙ gelu'(x),
 * dx = g or dx += g (accumulate), column_sum [width] += g. */
static inline void gelu_backward_row(float *dx, int accumulate, float *column_sum, const float *x, const float *dy,
                                     int64_t width) {
#if defined(__AVX512F__)
    for (int64_t j = 0; j < width; j += 16) {
        const __mmask16 lanes = tail_mask(j, width);
        const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + j), s = gelu_gate16(xv);
        /* du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2); gelu' = s + 2 x s (1 - s) du/dx */
        const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, dy + j), gelu_slope16(xv, s));
        const __m512 previous = accumulate ? _mm512_maskz_loadu_ps(lanes, dx + j) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(dx + j, lanes, _mm512_add_ps(previous, g));
        _mm512_storeu_ps(column_sum + j, _mm512_add_ps(_mm512_loadu_ps(column_sum + j), g)); /* g is 0 past the tail */
    }
#elif defined(GELU_AVX2)
    for (int64_t j = 0; j < width; j += 8) {
        const __m256i lanes = tail_mask8(j, width);
        const __m256 xv = _mm256_maskload_ps(x + j, lanes), s = gelu_gate8(xv);
        const __m256 g = rounded_product8(_mm256_maskload_ps(dy + j, lanes), gelu_slope8(xv, s));
        const __m256 previous = accumulate ? _mm256_maskload_ps(dx + j, lanes) : _mm256_setzero_ps();
        _mm256_maskstore_ps(dx + j, lanes, _mm256_add_ps(previous, g));
        _mm256_storeu_ps(column_sum + j, _mm256_add_ps(_mm256_loadu_ps(column_sum + j), g)); /* g is 0 past the tail */
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < width; j++) {
        const float s = gelu_gate(x[j]);
        const float g = dy[j] * gelu_slope(x[j], s);
        dx[j] = accumulate ? dx[j] + g : g;
        column_sum[j] += g;
    }
#endif
}

/* One row piece of the recomputing backward: y [width] =
 * gelu(x), dx [width] = dy ⊙ gelu'(x), column_sum [width] += dx. */
static inline void gelu_recompute_row(float *y, float *dx, float *column_sum, const float *x, const float *dy,
                                      int64_t width) {
#if defined(__AVX512F__)
    for (int64_t j = 0; j < width; j += 16) {
        const __mmask16 lanes = tail_mask(j, width);
        const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + j), s = gelu_gate16(xv);
        _mm512_mask_storeu_ps(y + j, lanes, _mm512_mul_ps(xv, s));
        /* a masked product, which GCC does not contract into the FMAs below: g is rounded on
         * its own, as in bias_gelu_backward, so d_pre and d_bias match it bit for bit */
        const __m512 g = _mm512_maskz_mul_ps(lanes, _mm512_maskz_loadu_ps(lanes, dy + j), gelu_slope16(xv, s));
        /* 0 + g, as bias_gelu_backward writes it (a -0 gradient comes out +0 there too) */
        _mm512_mask_storeu_ps(dx + j, lanes, _mm512_add_ps(_mm512_setzero_ps(), g));
        _mm512_storeu_ps(column_sum + j, _mm512_add_ps(_mm512_loadu_ps(column_sum + j), g)); /* g is 0 past the tail */
    }
#elif defined(GELU_AVX2)
    for (int64_t j = 0; j < width; j += 8) {
        const __m256i lanes = tail_mask8(j, width);
        const __m256 xv = _mm256_maskload_ps(x + j, lanes), s = gelu_gate8(xv);
        _mm256_maskstore_ps(y + j, lanes, _mm256_mul_ps(xv, s));
        const __m256 g = rounded_product8(_mm256_maskload_ps(dy + j, lanes), gelu_slope8(xv, s));
        /* 0 + g, as bias_gelu_backward writes it (a -0 gradient comes out +0 there too) */
        _mm256_maskstore_ps(dx + j, lanes, _mm256_add_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(column_sum + j, _mm256_add_ps(_mm256_loadu_ps(column_sum + j), g)); /* g is 0 past the tail */
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < width; j++) {
        const float s = gelu_gate(x[j]);
        const float g = dy[j] * gelu_slope(x[j], s);
        y[j] = x[j] * s;
        dx[j] = g;
        column_sum[j] += g;
    }
#endif
}

/* Columns whose running sums one pass of the backward kernels keeps on the
 * stack (32 KB); wider matrices take several passes over the rows. */
#define SUM_GROUP 8192

/* What a GELU backward kernel computes per row piece (see gelu_backward_columns). */
typedef struct gelu_backward_job {
    int recompute;                      /* 0: bias_gelu_backward; 1: also the GELU output */
    int accumulate;                     /* bias_gelu_backward: d_pre += g */
    float *d_pre, *hidden;              /* float32 outputs, or */
    uint16_t *d_pre_bf16, *hidden_bf16; /* bf16 outputs (recompute only) */
    const float *d_out, *pre;           /* d_out: d_hidden when recomputing */
} gelu_backward_job;

static inline void gelu_backward_piece(const gelu_backward_job *job, float *sums, int64_t at, int64_t width) {
    const float *x = job->pre + at, *dy = job->d_out + at;
    if (!job->recompute)
        gelu_backward_row(job->d_pre + at, job->accumulate, sums, x, dy, width);
    else if (job->hidden_bf16) {
        float y_piece[COLUMN_BLOCK], dx_piece[COLUMN_BLOCK];
        gelu_recompute_row(y_piece, dx_piece, sums, x, dy, width);
        k_bf16_round_range(job->hidden_bf16 + at, y_piece, width);
        k_bf16_round_range(job->d_pre_bf16 + at, dx_piece, width);
    } else
        gelu_recompute_row(job->hidden + at, job->d_pre + at, sums, x, dy, width);
}

/* The single-threaded core shared by the GELU backward kernels, on columns
 * [c0, c1) of [M,N]: it walks them row by row (the pieces of one row are
 * contiguous), keeping one running sum per column. Every column's sum adds
 * its rows in order from 0 and is added to d_bias once, whatever the column
 * range or pass width: the same bits as summing each column block on its
 * own, so the wrappers' thread shares (whole column blocks) change nothing.
 * Walking one 64-column block down all rows before the next, as before, read
 * 256 bytes per row with a row's stride between them: a bf16 char step
 * profiled that at 2.2 ns per element, most of it waiting on memory. */
static void gelu_backward_columns(const gelu_backward_job *job, float *d_bias, int64_t M, int64_t N, int64_t c0,
                                  int64_t c1) {
    float column_sum[SUM_GROUP];
    for (int64_t g0 = c0; g0 < c1; g0 += SUM_GROUP) {
        const int64_t g1 = c1 - g0 < SUM_GROUP ? c1 : g0 + SUM_GROUP;
        memset(column_sum, 0, (size_t)(g1 - g0) * sizeof(float));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j0 = g0; j0 < g1; j0 += COLUMN_BLOCK) {
                const int64_t width = g1 - j0 < COLUMN_BLOCK ? g1 - j0 : COLUMN_BLOCK;
                gelu_backward_piece(job, column_sum + (j0 - g0), i * N + j0, width);
            }
        if (d_bias)
            for (int64_t j = g0; j < g1; j++)
                d_bias[j] += column_sum[j - g0];
    }
}

/* Threads take contiguous shares of whole column blocks. */
static void gelu_backward_run(const gelu_backward_job *job, float *d_bias, int64_t M, int64_t N) {
    const int64_t n_blocks = (N + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
    K_FOR_SHARES(
        n_blocks, M * N > PARALLEL_MIN_ELEMENTS,
        gelu_backward_columns(job, d_bias, M, N, i0 * COLUMN_BLOCK, i1 * COLUMN_BLOCK < N ? i1 * COLUMN_BLOCK : N));
}

/* d_pre, d_out, pre [M,N]; d_bias [N] or NULL (formula as gelu_backward).
 * d_pre may be d_out (each element is read before it is written). */
static void bias_gelu_backward(float *d_pre, int accumulate, float *d_bias, const float *d_out, const float *pre,
                               int64_t M, int64_t N) {
    const gelu_backward_job job = {.accumulate = accumulate, .d_pre = d_pre, .d_out = d_out, .pre = pre};
    gelu_backward_run(&job, d_bias, M, N);
}

/* bias_gelu_backward's traversal (so d_bias sums alike), with the GELU
 * output stored from the same gate: ag_mlp_gelu's backward reads pre once
 * and computes each gate once instead of twice. Outputs in float32 (hidden,
 * d_pre) or bf16 (hidden_bf16, d_pre_bf16: each row piece goes through a
 * stack buffer and is rounded there). */
static void gelu_recompute_backward_any(float *hidden, float *d_pre, uint16_t *hidden_bf16, uint16_t *d_pre_bf16,
                                        float *d_bias, const float *d_hidden, const float *pre, int64_t M, int64_t N) {
    const gelu_backward_job job = {.recompute = 1,
                                   .d_pre = d_pre,
                                   .hidden = hidden,
                                   .d_pre_bf16 = d_pre_bf16,
                                   .hidden_bf16 = hidden_bf16,
                                   .d_out = d_hidden,
                                   .pre = pre};
    gelu_backward_run(&job, d_bias, M, N);
}

/* hidden, d_pre, d_hidden, pre [M,N]; d_bias [N] or NULL */
static void gelu_recompute_backward(float *hidden, float *d_pre, float *d_bias, const float *d_hidden, const float *pre,
                                    int64_t M, int64_t N) {
    gelu_recompute_backward_any(hidden, d_pre, NULL, NULL, d_bias, d_hidden, pre, M, N);
}

/* hidden, d_pre [M,N] bf16; d_hidden, pre [M,N]; d_bias [N] or NULL */
static void gelu_recompute_backward_bf16(uint16_t *hidden, uint16_t *d_pre, float *d_bias, const float *d_hidden,
                                         const float *pre, int64_t M, int64_t N) {
    gelu_recompute_backward_any(NULL, NULL, hidden, d_pre, d_bias, d_hidden, pre, M, N);
}

/* in, out [n]; out = x * sigmoid(x) */
static void silu_forward_range(float *out, const float *in, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] * k_sigmoid(in[i]);
}

static void silu_forward(float *out, const float *in, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, silu_forward_range(out + i0, in + i0, i1 - i0));
}

/* d_in, d_out, in [n]; silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
static void silu_backward(float *d_in, const float *d_out, const float *in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float x = in[i], s = k_sigmoid(x);
        d_in[i] += d_out[i] * s * (1.0f + x * (1.0f - s));
    }
}

/* gate, up, out [n]; out = silu(gate) * up */
static void swiglu_forward_range(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] * k_sigmoid(gate[i]) * up[i];
}

static void swiglu_forward(float *out, const float *gate, const float *up, int64_t n) {
    K_FOR_SHARES(n, n > PARALLEL_MIN_ELEMENTS, swiglu_forward_range(out + i0, gate + i0, up + i0, i1 - i0));
}

/* d_gate, d_up, d_out, gate, up [n]
 * d_gate += d_out * up * silu'(gate) ; d_up += d_out * silu(gate) */
static void swiglu_backward(float *d_gate, float *d_up, const float *d_out, const float *gate, const float *up,
                            int64_t n) {
    if (d_gate) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i], s = k_sigmoid(g);
            d_gate[i] += d_out[i] * up[i] * s * (1.0f + g * (1.0f - s));
        }
    }
    if (d_up) {
#pragma omp parallel for simd schedule(static) if (n > PARALLEL_MIN_ELEMENTS)
        for (int64_t i = 0; i < n; i++)
            d_up[i] += d_out[i] * gate[i] * k_sigmoid(gate[i]);
    }
}

const k_activation_ops K_ISA_VARIANT_NAME(k_activation_ops) = {
    .gelu_forward = gelu_forward,
    .gelu_forward_range = gelu_forward_range,
    .gelu_backward = gelu_backward,
    .bias_gelu_forward = bias_gelu_forward,
    .bias_gelu_forward_range = bias_gelu_forward_range,
    .bias_gelu_couple_forward = bias_gelu_couple_forward,
    .bias_gelu_couple_forward_range = bias_gelu_couple_forward_range,
    .bias_gelu_backward = bias_gelu_backward,
    .gelu_recompute_backward = gelu_recompute_backward,
    .bias_gelu_forward_bf16 = bias_gelu_forward_bf16,
    .bias_gelu_forward_bf16_range = bias_gelu_forward_bf16_range,
    .gelu_recompute_backward_bf16 = gelu_recompute_backward_bf16,
    .silu_forward = silu_forward,
    .silu_forward_range = silu_forward_range,
    .silu_backward = silu_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_forward_range = swiglu_forward_range,
    .swiglu_backward = swiglu_backward,
};
