/* Decode-only multi-row GEMV: see matvec.h for why it is not a k_gemm call.
 *
 * Layout: W [N,K] row-major, float32 or bfloat16. A block of eight rows of W
 * is dotted with one or two input rows at once: 8 (or 16) independent
 * accumulators hide the FMA latency and every weight element is loaded
 * exactly once per pair of input rows. OpenMP splits the blocks statically,
 * so each thread streams one contiguous slab of W (what the hardware
 * prefetcher likes).
 *
 * Measured on the development machine (Xeon, AVX-512, one thread streaming
 * 377 MB of [2048, 768] matrices, GB/s): 4-row blocks M=1 12.2, M=2 10.5;
 * 8-row blocks M=1 13.1, M=2 11.4; 8-row blocks with the weight held in a
 * register (not folded into both FMAs) and a software prefetch 2 KB ahead,
 * M=2 12.0. The two-row form is issue-bound before it is memory-bound on one
 * core, so it gets every trick; the one-row form does not need them.
 *
 * The AVX2 level does not interleave rows: it streams one row at a time
 * (block_dot_avx2's comment). The AVX-512 level has both walks
 * (eval_matvec_walk): the eight-row blocks measured above, its default on
 * Intel, and the AVX2 level's one-row kernel, its default on AMD: on a Zen 4
 * (2026-12-02, runs interleaved) the eight-row blocks streamed 110m
 * decode's bf16 weights at 65-89 tok/s and the one-row kernel at 122-131
 * (fp32: 55-66 against 64-83); docs/DECISIONS.md, "Decode matvec walk".
 *
 * Three instruction-set levels (kernels/isa.h), picked per block at run
 * time, each a block_dot_<level> instantiated for the constant block shapes
 * and both weight types. Within a level the float32 and bfloat16 forms run
 * the same FMAs in the same lanes and order (only the load differs: a bf16
 * element widened is the float32 with the same upper half), so their results
 * are identical for bf16-representable weights; the tests check that. */
#include "eval/matvec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/isa.h"
#include "kernels/type_traits.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MATVEC_X86 1
#endif

enum { ROWS_PER_BLOCK = 8 };

/* Below this many weight elements a parallel region costs more than it saves. */
static const int64_t PARALLEL_MIN_ELEMENTS = 1 << 15;

/* Element i of a weight row of K elements of either type (bf16 packed), as
 * float32 (scalar code and tails). */
static inline __attribute__((always_inline)) float weight_at(const void *w, int64_t i, int64_t K, int bf16) {
    if (!bf16) return ((const float *)w)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)w)[eval_matvec_bf16_position(i, K)] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Expands one level's block_dot for the constant shapes a job block uses:
 * n_w (8 or 1 weight rows) x M (1 or 2 input rows) x the weight type. */
#define BLOCK_SHAPES(dot, out, ldo, x, w, K, n_w, M, bf16)                                                             \
    do {                                                                                                               \
        if ((M) == 2) {                                                                                                \
            if (bf16)                                                                                                  \
                dot(out, ldo, x, w, K, n_w, 2, 1);                                                                     \
            else                                                                                                       \
                dot(out, ldo, x, w, K, n_w, 2, 0);                                                                     \
        } else {                                                                                                       \
            if (bf16)                                                                                                  \
                dot(out, ldo, x, w, K, n_w, 1, 1);                                                                     \
            else                                                                                                       \
                dot(out, ldo, x, w, K, n_w, 1, 0);                                                                     \
        }                                                                                                              \
    } while (0)

/* Rows n0 .. n0+n_rows-1 (n_rows <= ROWS_PER_BLOCK) of one job with one level's
 * block_dot (no bias): a full block at once, a short one row by row. */
#define DEFINE_JOB_BLOCK(name, target, dot)                                                                            \
    static target void name(const eval_matvec_job *job, int64_t n0, int64_t n_rows) {                                  \
        const int bf16 = job->wtype == DT_BF16;                                                                        \
        const int64_t K = job->K, row_bytes = K * (bf16 ? 2 : 4);                                                      \
        const char *w = (const char *)job->weight + n0 * row_bytes;                                                    \
        float *out = job->out + n0;                                                                                    \
        if (n_rows == ROWS_PER_BLOCK)                                                                                  \
            BLOCK_SHAPES(dot, out, job->N, job->in, w, K, ROWS_PER_BLOCK, job->M, bf16);                               \
        else                                                                                                           \
            for (int64_t r = 0; r < n_rows; r++)                                                                       \
                BLOCK_SHAPES(dot, out + r, job->N, job->in, w + r * row_bytes, K, 1, job->M, bf16);                    \
    }

/* ---- portable C -------------------------------------------------------------
 * Eight partial sums per (weight row, input row), element k into sum k % 8,
 * added pairwise at the end: the order is fixed by the C source, so the
 * float32 and bf16 forms agree whatever the compiler vectorises. */

// out[m*ldo + r] = dot(w row r [K], x row m [K]), r < n_w, m < n_x
static inline __attribute__((always_inline)) void
block_dot_scalar(float *out, int64_t ldo, const float *x, const void *w, int64_t K, int n_w, int n_x, int bf16) {
    const int64_t es = bf16 ? 2 : 4;
    for (int r = 0; r < n_w; r++)
        for (int m = 0; m < n_x; m++) {
            const void *wr = (const char *)w + r * K * es;
            const float *xm = x + m * K;
            float acc[8] = {0};
            for (int64_t k = 0; k < K; k++)
                acc[k % 8] += weight_at(wr, k, K, bf16) * xm[k];
            out[m * ldo + r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
}

DEFINE_JOB_BLOCK(job_block_scalar, , block_dot_scalar)

#ifdef MATVEC_X86

/* ---- AVX2 + FMA: 8 lanes; a tail of K % 8 elements in scalar code ------- */

static inline __attribute__((always_inline)) K_TARGET_AVX2 __m256 load8(const void *w, int64_t i, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)w + i);
    const __m128i half = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

static inline __attribute__((always_inline)) K_TARGET_AVX2 float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The four float32 vectors of elements k .. k+31 of a weight row. */
static inline __attribute__((always_inline)) K_TARGET_AVX2 void load32(__m256 wv[4], const char *wr, int64_t k,
                                                                       int bf16) {
    if (bf16) { /* packed block of 32 (matvec.h): 0-7 and 16-23 in a, 8-15 and 24-31 in b */
        const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
        const __m256i a = _mm256_loadu_si256((const __m256i *)(wr + k * 2));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(wr + k * 2) + 1);
        wv[0] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
        wv[1] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
        wv[2] = _mm256_castsi256_ps(_mm256_and_si256(a, high));
        wv[3] = _mm256_castsi256_ps(_mm256_and_si256(b, high));
    } else {
        for (int u = 0; u < 4; u++)
            wv[u] = _mm256_loadu_ps((const float *)wr + k + 8 * u);
    }
}

/* One weight row at a time, four accumulators per input row (elements k +
 * 8u .. k + 8u + 7 of each 32 into accumulator u): each row is one
 * sequential stream. On an AVX2-only Zen 3 the AVX-512 form's eight-row
 * interleave (eight streams 3-8 KB apart) ran M = 2 at 0.55-0.65x the M = 1
 * rate and bf16 weights at 1.15x float32. This form runs them at 0.8-0.9x and
 * 1.5-1.8x, and the float32 M = 1 product 0-8% slower (docs/DECISIONS.md,
 * "Decode matvec on AVX2"). Each (row, input row) sum runs the same FMAs in
 * the same order whatever n_x is, so grouped and baseline decode agree bit
 * for bit. */
// out[m*ldo + r] = dot(w row r [K], x row m [K]), r < n_w, m < n_x
static inline __attribute__((always_inline)) K_TARGET_AVX2 void
block_dot_avx2(float *out, int64_t ldo, const float *x, const void *w, int64_t K, int n_w, int n_x, int bf16) {
    const int64_t es = bf16 ? 2 : 4;
    for (int r = 0; r < n_w; r++) {
        const char *wr = (const char *)w + r * K * es;
        __m256 acc[2][4];
        for (int m = 0; m < n_x; m++)
            for (int u = 0; u < 4; u++)
                acc[m][u] = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            __m256 wv[4];
            /* Two input rows of bf16 weights (grouped decode): the row 512 B
             * ahead into L1. On a Zen 4 (158.7M config, 2 threads, runs
             * interleaved) grouped went 8.7-10.8 -> 8.2-8.9 ms per token with
             * baseline unchanged; 128 B ahead gave 7.9-9.4, and for float32
             * rows, or for one input row, the prefetch was slower or no faster
             * (grouped float32 12.0-13.9 -> 14.2-15.7 ms). */
            if (bf16 && n_x == 2) _mm_prefetch(wr + (k + 256) * es, _MM_HINT_T0);
            load32(wv, wr, k, bf16);
            for (int m = 0; m < n_x; m++)
                for (int u = 0; u < 4; u++)
                    acc[m][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + m * K + k + 8 * u), acc[m][u]);
        }
        for (; k + 8 <= K; k += 8) { /* past the last whole 32: plain (unpacked) elements */
            const __m256 wv = load8(wr, k, bf16);
            for (int m = 0; m < n_x; m++)
                acc[m][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * K + k), acc[m][0]);
        }
        for (int m = 0; m < n_x; m++) {
            const __m256 *a = acc[m];
            float sum = sum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
            for (int64_t t = k; t < K; t++) /* fmaf: one rounding, whatever the compiler would contract */
                sum = fmaf(weight_at(wr, t, K, bf16), x[m * K + t], sum);
            out[m * ldo + r] = sum;
        }
    }
}

DEFINE_JOB_BLOCK(job_block_avx2, K_TARGET_AVX2, block_dot_avx2)

/* ---- AVX-512 (F + BW + VL): 16 lanes; the tail by masked loads ---------- */

static inline __attribute__((always_inline)) K_TARGET_AVX512 __m512 load16(const void *w, int64_t i, int bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)w + i);
    const __m256i half = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* The first popcount(mask) elements at i; nothing past them is read. */
static inline __attribute__((always_inline)) K_TARGET_AVX512 __m512 load16_masked(const void *w, int64_t i,
                                                                                  __mmask16 mask, int bf16) {
    if (!bf16) return _mm512_maskz_loadu_ps(mask, (const float *)w + i);
    const __m256i half = _mm256_maskz_loadu_epi16(mask, (const uint16_t *)w + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* Called with constant row counts so the compiler unrolls the r/m loops and
 * keeps every accumulator in a register. */
static inline __attribute__((always_inline)) K_TARGET_AVX512 void
block_dot_avx512(float *out, int64_t ldo, const float *x, const void *w, int64_t K, int n_w, int n_x, int bf16) {
    const int64_t es = bf16 ? 2 : 4;
    __m512 acc[ROWS_PER_BLOCK][2];
    for (int r = 0; r < n_w; r++)
        for (int m = 0; m < n_x; m++)
            acc[r][m] = _mm512_setzero_ps();
    int64_t k = 0;
    /* bf16 packed blocks of 32 (matvec.h): one load, elements 0-15 by a
     * shift, 16-31 by a mask, applied in the float32 loop's order.
     * Prefetch: each line asks for the same line of the next block's row r
     * (ROWS_PER_BLOCK rows on: rows are contiguous). A bf16 row is short
     * (1.5 KB at K = 768), over before the hardware prefetcher ramps up on
     * its stream. On an AMX Xeon this took 110m bf16 decode from 95-100 to
     * 136-139 tok/s (66% -> 80-88% of the read probe). For float32 rows, twice
     * as long, the same prefetch made M = 1 slower (67 -> 62 tok/s), so the
     * float32 loop below prefetches only with two input rows, and into L2
     * (grouped / baseline on the 158.7M config: 1.175 at 2 KB ahead, 1.14
     * one block ahead into L1, 1.116-1.117 into L2, against 1.13-1.14 in the
     * same window; L2 for bf16 was slower, 7.3-7.7 against 6.8-7.2 ms). */
    for (; bf16 && k + 32 <= K; k += 32) {
        __m512 xv[2][2];
        for (int m = 0; m < n_x; m++) {
            xv[m][0] = _mm512_loadu_ps(x + m * K + k);
            xv[m][1] = _mm512_loadu_ps(x + m * K + k + 16);
        }
        for (int r = 0; r < n_w; r++) {
            const char *wr = (const char *)w + (r * K + k) * es;
            _mm_prefetch(wr + ROWS_PER_BLOCK * K * es, _MM_HINT_T0); /* the next block's row r, at k */
            const __m512i packed = _mm512_loadu_si512((const void *)wr);
            const __m512 low = _mm512_castsi512_ps(_mm512_slli_epi32(packed, 16));
            const __m512 high = _mm512_castsi512_ps(_mm512_and_si512(packed, _mm512_set1_epi32((int)0xffff0000u)));
            for (int m = 0; m < n_x; m++) {
                acc[r][m] = _mm512_fmadd_ps(low, xv[m][0], acc[r][m]);
                acc[r][m] = _mm512_fmadd_ps(high, xv[m][1], acc[r][m]);
            }
        }
    }
    for (; k + 16 <= K; k += 16) {
        __m512 xv[2];
        for (int m = 0; m < n_x; m++)
            xv[m] = _mm512_loadu_ps(x + m * K + k);
        for (int r = 0; r < n_w; r++) {
            const char *wr = (const char *)w + r * K * es;
            if (n_x == 2) _mm_prefetch(wr + (ROWS_PER_BLOCK * K + k) * es, _MM_HINT_T1);
            __m512 wv = load16(wr, k, bf16);
            /* Keep wv in a register: otherwise the compiler folds the load
             * into both FMAs and every weight line is loaded twice. */
            if (n_x == 2) __asm__("" : "+v"(wv));
            for (int m = 0; m < n_x; m++)
                acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
        }
    }
    if (k < K) { /* tail of K % 16 elements: masked loads read nothing past the row */
        __mmask16 mask = (__mmask16)((1u << (K - k)) - 1u);
        __m512 xv[2];
        for (int m = 0; m < n_x; m++)
            xv[m] = _mm512_maskz_loadu_ps(mask, x + m * K + k);
        for (int r = 0; r < n_w; r++) {
            __m512 wv = load16_masked((const char *)w + r * K * es, k, mask, bf16);
            for (int m = 0; m < n_x; m++)
                acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
        }
    }
    for (int r = 0; r < n_w; r++)
        for (int m = 0; m < n_x; m++)
            out[m * ldo + r] = _mm512_reduce_add_ps(acc[r][m]);
}

DEFINE_JOB_BLOCK(job_block_avx512, K_TARGET_AVX512, block_dot_avx512)

#endif

/* ---- which walk the AVX-512 level takes ---------------------------------- */

static int walk_forced = -1; /* -1: the CPU's default */

eval_matvec_walk eval_matvec_walk_default(void) {
#ifdef MATVEC_X86
    /* Measured: interleaved on an AMX Xeon, rowwise on a Zen 4 (see above). */
    return __builtin_cpu_is("amd") ? EVAL_MATVEC_ROWWISE : EVAL_MATVEC_INTERLEAVED;
#else
    return EVAL_MATVEC_INTERLEAVED;
#endif
}

eval_matvec_walk eval_matvec_walk_active(void) {
    return walk_forced < 0 ? eval_matvec_walk_default() : (eval_matvec_walk)walk_forced;
}

void eval_matvec_walk_force(eval_matvec_walk walk) { walk_forced = (int)walk; }
void eval_matvec_walk_reset(void) { walk_forced = -1; }

const char *eval_matvec_walk_name(eval_matvec_walk walk) {
    return walk == EVAL_MATVEC_ROWWISE ? "rowwise" : "interleaved";
}

dt_status eval_matvec_walk_from_environment(void) {
    const char *name = getenv("DBRANCH_MATVEC");
    if (!name) return DT_OK;
    if (!strcmp(name, "rowwise"))
        eval_matvec_walk_force(EVAL_MATVEC_ROWWISE);
    else if (!strcmp(name, "interleaved"))
        eval_matvec_walk_force(EVAL_MATVEC_INTERLEAVED);
    else
        return dt_errorf("DBRANCH_MATVEC '%s': expected interleaved or rowwise", name);
    return DT_OK;
}

/* The block kernel of the active level and walk, looked up once per call,
 * not per block. The AVX-512 level's rowwise walk is the AVX2 level's
 * one-row kernel: a 16-lane port of it measured slower on the Zen 4 it is
 * for (110m decode, fp32 54-68 against 64-77 tok/s, bf16 103-129 against
 * 123-131; its 512-bit operations issue as two 256-bit halves), so there is
 * none. */
typedef enum { BLOCKS_PORTABLE, BLOCKS_ONE_ROW, BLOCKS_EIGHT_ROWS } block_kernel;

static block_kernel active_block_kernel(void) {
    switch (k_isa_active()) {
#ifdef MATVEC_X86
    case K_ISA_AVX512:
        return eval_matvec_walk_active() == EVAL_MATVEC_ROWWISE ? BLOCKS_ONE_ROW : BLOCKS_EIGHT_ROWS;
    case K_ISA_AVX2:
        return BLOCKS_ONE_ROW;
#endif
    default:
        return BLOCKS_PORTABLE;
    }
}

/* Rows n0 .. n0+n_rows-1 (n_rows <= ROWS_PER_BLOCK) of one job with `kernel`, then the bias. */
static inline void job_block(block_kernel kernel, const eval_matvec_job *job, int64_t n0, int64_t n_rows) {
    switch (kernel) {
#ifdef MATVEC_X86
    case BLOCKS_EIGHT_ROWS:
        job_block_avx512(job, n0, n_rows);
        break;
    case BLOCKS_ONE_ROW:
        job_block_avx2(job, n0, n_rows);
        break;
#endif
    default:
        job_block_scalar(job, n0, n_rows);
    }
    float *out = job->out + n0;
    if (job->bias)
        for (int64_t m = 0; m < job->M; m++)
            for (int64_t r = 0; r < n_rows; r++)
                out[m * job->N + r] += job->bias[n0 + r];
}

// rows n0 .. n0+n_rows-1 of job->out
void eval_matvec_rows(const eval_matvec_job *job, int64_t n0, int64_t n_rows) {
    const block_kernel kernel = active_block_kernel();
    for (int64_t n = n0; n < n0 + n_rows; n += ROWS_PER_BLOCK) {
        int64_t left = n0 + n_rows - n;
        job_block(kernel, job, n, left < ROWS_PER_BLOCK ? left : ROWS_PER_BLOCK);
    }
}

void eval_matvec_batch(const eval_matvec_job *jobs, int n_jobs) {
    /* Blocks of ROWS_PER_BLOCK rows numbered across the jobs: job j owns
     * [first_block[j], first_block[j+1]). */
    int64_t first_block[EVAL_MATVEC_MAX_JOBS + 1], elements = 0;
    first_block[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        first_block[j + 1] = first_block[j] + (jobs[j].N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
        elements += jobs[j].N * jobs[j].K;
    }
    int64_t n_blocks = first_block[n_jobs];
    const block_kernel kernel = active_block_kernel();
#pragma omp parallel for schedule(static) if (elements >= PARALLEL_MIN_ELEMENTS)
    for (int64_t b = 0; b < n_blocks; b++) {
        int j = 0;
        while (b >= first_block[j + 1])
            j++;
        int64_t n0 = (b - first_block[j]) * ROWS_PER_BLOCK, left = jobs[j].N - n0;
        job_block(kernel, &jobs[j], n0, left < ROWS_PER_BLOCK ? left : ROWS_PER_BLOCK);
    }
}

// dst [N,K] packed bf16, src [N,K]
void eval_matvec_bf16_pack(uint16_t *dst, const float *src, int64_t N, int64_t K) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            dst[n * K + eval_matvec_bf16_position(k, K)] = k_bf16_from_float(src[n * K + k]);
}

// out [M,N], in [M,K], weight [N,K], bias [N] or NULL
void eval_matvec(float *out, const float *in, const float *weight, const float *bias, int64_t M, int64_t K, int64_t N) {
    eval_matvec_typed(out, in, weight, DT_F32, bias, M, K, N);
}

// out [M,N], in [M,K], weight [N,K] of wtype, bias [N] or NULL
void eval_matvec_typed(float *out, const float *in, const void *weight, dt_dtype wtype, const float *bias, int64_t M,
                       int64_t K, int64_t N) {
    for (int64_t m0 = 0; m0 < M; m0 += 2) {
        eval_matvec_job job = {out + m0 * N, in + m0 * K, weight, bias, M - m0 >= 2 ? 2 : 1, K, N, wtype};
        eval_matvec_batch(&job, 1);
    }
}
