/* Causal GQA attention kernels: flash-style forward and backward over 64x64
 * tiles, and the decode kernel that serves several query rows in one pass over
 * the K/V cache.
 *
 * Why hand-written tile products instead of BLIS: a 64x64x64 product is a few
 * microseconds of work, and BLIS spends a comparable time packing its operands
 * and setting up each call. The tile products here read L1/L2-resident tiles
 * through one register-blocked loop (4 rows x 4 vectors of accumulators)
 * written with GCC vector extensions, so the compiler emits AVX-512 FMAs in
 * the avx512 variant of this file (AVX2 or SSE in the others: it is compiled
 * once per instruction-set level, kernels/isa_variant.h, and attention.c
 * calls the active level's). Measured at T=256, hd=64 this beat
 * per-tile BLIS calls; the large GEMMs of the model still go through k_gemm
 * (kernels/gemm.c).
 *
 * Layouts, chosen so that almost nothing is transposed: the tile product
 * broadcasts single elements of its left operand, so that operand may be read
 * with any strides (a transposed P or dS costs nothing); only the right
 * operand must be row-contiguous. Forward therefore computes the scores
 * transposed, S^T [keys, queries] = K · Q^T, which needs Q^T once per query
 * tile and makes the online softmax statistics per-query VECTORS (no
 * horizontal reductions). Backward builds K^T and V^T once per key tile and
 * reuses them for every query head of the group and every query tile.
 * Right operands are padded with zeros to a whole number of vectors (16
 * floats with AVX-512); when head_dim already is one, q, k, v, d_out and d_q
 * are used in place, without copies. With AVX-512 the transposes go through
 * 16 x 16 register blocks; on the diagonal tile the forward skips the wholly
 * masked score vectors, and the masks themselves are vector selects (at
 * T = 64, hd = 32, nanoGPT-baby's shape, the scalar transposes and masks had
 * been a third of the time). Products whose C is at most 2 vectors wide (P·V,
 * dS·K, dS^T·Q, P^T·dO at hd = 32) use 8-row register blocks.
 *
 * ALiBi's score bias (slopes per query head) is added to each score tile
 * right after its product, computed from the tile's positions, and its
 * exponentials flush subnormal weights to 0 (vec_exp2_flushed); without slopes
 * that pass is skipped, so the unbiased kernels run the code they ran before.
 *
 * Determinism: every output element is produced by one thread in a fixed tile
 * order, whatever the thread count, so results are bit-identical across runs
 * AND across thread counts. Backward is parallelised over (batch, kv head):
 * all query heads of a group and all query tiles that write into one kv head's
 * d_k / d_v run on one thread, and d_q of those heads is written by that same
 * thread, so nothing races and nothing needs atomics. */
#include "kernels/attention_ops.h"
#include "kernels/isa_variant.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/vec_math.h"

#include "kernels/transpose16.h"

/* Queries and keys per tile. Equal on purpose: only the diagonal tile of a
 * query tile needs the causal mask, and the keys past T only ever appear in a
 * diagonal tile, above the diagonal, so the mask removes them too. */
#define TILE 64
/* Floats per vector: one zmm register with AVX-512, else one ymm (AVX2; on
 * older targets the compiler splits it). */
#if defined(__AVX512F__)
#define VEC 16
#else
#define VEC 8
#endif
#define TILE_VECS (TILE / VEC)

/* Below this much work (multiply-adds, ~40 us on one core) a parallel region
 * costs more than it saves, the more so on a loaded machine where waking the
 * other threads can take longer than the work itself. */
#define PARALLEL_MIN_WORK (1 << 21)
/* Decode is memory-bound (each cached K/V row is used once per query head):
 * splitting the stream over threads pays off at a smaller size. */
#define DECODE_PARALLEL_MIN_WORK (1 << 17)

/* The vector helpers below are static and inlined, so GCC's note that passing
 * wide vectors by value changes the ABI when the ISA lacks them is moot. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi" /* clang says it of the scalar variant (8-lane vectors without AVX) */
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vecf __attribute__((vector_size(VEC * sizeof(float))));
typedef int32_t veci __attribute__((vector_size(VEC * sizeof(int32_t))));

static inline vecf vec_load(const float *p) {
    vecf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vec_store(float *p, vecf v) { memcpy(p, &v, sizeof v); }
static inline vecf vec_splat(float x) { return (vecf){0} + x; }
/* Lane-wise a where mask is set, else b (mask lanes are all-ones or zero, as
 * vector comparisons produce them). C has no vector ?:, so select by bits. */
static inline vecf vec_select(veci mask, vecf a, vecf b) {
    veci a_bits, b_bits;
    memcpy(&a_bits, &a, sizeof a_bits);
    memcpy(&b_bits, &b, sizeof b_bits);
    veci bits = (a_bits & mask) | (b_bits & ~mask);
    vecf result;
    memcpy(&result, &bits, sizeof result);
    return result;
}
static inline vecf vec_max(vecf a, vecf b) { return vec_select(a > b, a, b); }
static inline vecf vec_min(vecf a, vecf b) { return vec_select(a < b, a, b); }
static inline float vec_reduce_sum(vecf v) {
    float s = 0.0f;
    for (int i = 0; i < VEC; i++)
        s += v[i];
    return s;
}

/* Dot product of two n-vectors, one vector of lanes at a time. */
static inline float dot_product(const float *a, const float *b, int n) {
    vecf acc = vec_splat(0.0f);
    int i = 0;
    for (; i + VEC <= n; i += VEC)
        acc += vec_load(a + i) * vec_load(b + i);
    float s = vec_reduce_sum(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* 2^x for x <= 0 (the only range softmax needs), relative error ~2e-7.
 * x is clamped to [-127, 0]; at -127 the result is exactly 0, so masked scores
 * (-inf) become exactly zero weights. Cephes exp2f: x = n + f, |f| <= 1/2, a
 * degree-6 polynomial for 2^f, and 2^n built in the exponent bits. Results
 * in [2^-127, 2^-125.5] may be subnormal, and a subnormal product costs a
 * microcode assist (~100 cycles): rare without a bias, but ALiBi's far keys
 * land there in every tile, so the biased kernels use vec_exp2_flushed, which
 * makes them 0 (the biased backward measured ~1.2x the unbiased one with
 * vec_exp2, ~1.07x with it); such weights are below 1e-37 of the row's
 * largest. The unbiased kernels keep vec_exp2's bits. */
static inline vecf vec_exp2(vecf x) {
    x = vec_min(vec_max(x, vec_splat(-127.0f)), vec_splat(0.0f));
    /* round to nearest with the 1.5*2^23 trick (valid for |x| < 2^22) */
    const vecf magic = vec_splat(12582912.0f);
    vecf n = (x + magic) - magic;
    vecf f = x - n;
    vecf p = vec_splat(1.535336188319500e-4f);
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    veci bits = (__builtin_convertvector(n, veci) + 127) << 23; /* n = -127 gives +0.0 */
    vecf two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* vec_exp2 with results below 2^-125.5 flushed to 0 (see above): the biased
 * kernels' exponential. */
static inline vecf vec_exp2_flushed(vecf x) { return vec_select(x < vec_splat(-125.5f), vec_splat(0.0f), vec_exp2(x)); }

/* Rows of C per register block when C is at most 2 vectors wide (head_dim
 * 32 with AVX-512: P·V, dS·K, dS^T·Q, P^T·dO): 8 x 2 accumulators use the 32
 * zmm registers as well as 4 x 4 do, where 4 x 2 would leave half the FMA
 * throughput to the loads. With AVX2 (16 registers) 4 rows already fill them. */
#if defined(__AVX512F__)
#define NARROW_ROWS 8
#else
#define NARROW_ROWS 4
#endif

/* One register block of the tile product: ROWS rows x VECS vectors of C.
 * Always inlined with constant ROWS/VECS, so the accumulators live in
 * registers (4 x 4 zmm for the main block, NARROW_ROWS x 2 for narrow C). */
static inline __attribute__((always_inline)) void matmul_block(int rows, int vecs, int accumulate, int k,
                                                               const float *restrict A, int64_t a_row, int64_t a_col,
                                                               const float *restrict B, int64_t ldb, float *restrict C,
                                                               int64_t ldc) {
    vecf acc[NARROW_ROWS][4];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < vecs; c++)
            acc[r][c] = accumulate ? vec_load(C + r * ldc + c * VEC) : vec_splat(0.0f);
    for (int p = 0; p < k; p++) {
        vecf b[4];
        for (int c = 0; c < vecs; c++)
            b[c] = vec_load(B + p * ldb + c * VEC);
        for (int r = 0; r < rows; r++) {
            const float a = A[r * a_row + p * a_col];
            for (int c = 0; c < vecs; c++)
                acc[r][c] += a * b[c];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < vecs; c++)
            vec_store(C + r * ldc + c * VEC, acc[r][c]);
}

/* Which part of a diagonal tile's product the causal mask leaves (row i of C
 * and column / reduction index j are positions within the tile). Rows run in
 * blocks of 4 and columns in whole vectors, so a little masked work remains;
 * callers mask the rest. Entries of C outside the computed columns are NOT
 * written. */
typedef enum {
    FULL_TILE,         /* off-diagonal tile: everything */
    COLUMNS_FROM_ROW,  /* C[i, j] needed for j >= i (S^T: queries j at or after key i) */
    COLUMNS_UP_TO_ROW, /* C[i, j] needed for j <= i (S, dP: keys j up to query i) */
    SUM_UP_TO_ROW,     /* C[i, :] sums over p <= i (P·V, dS·K: keys up to query i) */
    SUM_FROM_ROW,      /* C[i, :] sums over p >= i (P^T·dO, dS^T·Q: queries from key i) */
} causal_part;

static inline int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

/* Columns [j, j_end) of `rows` rows of C, in blocks of up to 4 vectors. */
static inline __attribute__((always_inline)) void matmul_row_block(int rows, int accumulate, int j, int j_end, int k,
                                                                   const float *restrict A, int64_t a_row,
                                                                   int64_t a_col, const float *restrict B, int64_t ldb,
                                                                   float *restrict C, int64_t ldc) {
    for (; j + 4 * VEC <= j_end; j += 4 * VEC)
        matmul_block(rows, 4, accumulate, k, A, a_row, a_col, B + j, ldb, C + j, ldc);
    switch ((j_end - j) / VEC) {
    case 3:
        matmul_block(rows, 3, accumulate, k, A, a_row, a_col, B + j, ldb, C + j, ldc);
        break;
    case 2:
        matmul_block(rows, 2, accumulate, k, A, a_row, a_col, B + j, ldb, C + j, ldc);
        break;
    case 1:
        matmul_block(rows, 1, accumulate, k, A, a_row, a_col, B + j, ldb, C + j, ldc);
        break;
    default:
        break;
    }
}

/* C [m,n] = A [m,k] · B [k,n]   (accumulate: C += A · B), restricted to the
 * causal part `part` of a diagonal tile.
 * A's element (i, p) is A[i*a_row + p*a_col] (a transposed A is just other
 * strides); B and C are row-major with row strides ldb, ldc; n % VEC == 0. */
static void tile_matmul(int accumulate, causal_part part, int m, int n, int k, const float *restrict A, int64_t a_row,
                        int64_t a_col, const float *restrict B, int64_t ldb, float *restrict C, int64_t ldc) {
    const int narrow = n <= 2 * VEC;
    for (int i = 0; i < m;) {
        const int rows = narrow && m - i >= NARROW_ROWS ? NARROW_ROWS : m - i >= 4 ? 4 : 1;
        int j_begin = 0, j_end = n, p_begin = 0, p_end = k;
        if (part == COLUMNS_FROM_ROW) j_begin = i / VEC * VEC;
        if (part == COLUMNS_UP_TO_ROW) j_end = (int)round_up(i + rows, VEC) < n ? (int)round_up(i + rows, VEC) : n;
        if (part == SUM_UP_TO_ROW) p_end = i + rows < k ? i + rows : k;
        if (part == SUM_FROM_ROW) p_begin = i < k ? i : k;
        const float *a = A + i * a_row + p_begin * a_col;
        const float *b = B + p_begin * ldb;
        float *c = C + i * ldc;
        if (rows == NARROW_ROWS && narrow) {
            /* n <= 2 vectors: one block of 2 or 1 vectors */
            if (j_end - j_begin == 2 * VEC)
                matmul_block(NARROW_ROWS, 2, accumulate, p_end - p_begin, a, a_row, a_col, b + j_begin, ldb,
                             c + j_begin, ldc);
            else if (j_end - j_begin == VEC)
                matmul_block(NARROW_ROWS, 1, accumulate, p_end - p_begin, a, a_row, a_col, b + j_begin, ldb,
                             c + j_begin, ldc);
        } else if (rows == 4)
            matmul_row_block(4, accumulate, j_begin, j_end, p_end - p_begin, a, a_row, a_col, b, ldb, c, ldc);
        else
            matmul_row_block(1, accumulate, j_begin, j_end, p_end - p_begin, a, a_row, a_col, b, ldb, c, ldc);
        i += rows;
    }
}

static int shape_supported(int64_t H, int64_t Hkv, int64_t head_dim) {
    return H >= 1 && Hkv >= 1 && H % Hkv == 0 && head_dim >= 1 && head_dim <= K_ATTENTION_MAX_HEAD_DIM;
}

/* Shapes the kernels cannot serve get NaN outputs: loud, never silently wrong
 * (callers validate with k_attention_check first). */
static void fill_nan(float *x, int64_t n) {
    if (!x) return;
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
}

/* dst [n_rows, hd_pad] = n_rows rows of src (row stride ld), columns past hd zero. */
static void load_rows_padded(float *restrict dst, int hd_pad, const float *restrict src, int64_t ld, int n_rows,
                             int hd) {
    for (int r = 0; r < n_rows; r++) {
        memcpy(dst + r * hd_pad, src + r * ld, (size_t)hd * sizeof(float));
        memset(dst + r * hd_pad + hd, 0, (size_t)(hd_pad - hd) * sizeof(float));
    }
}

/* dst [hd, TILE] = scale * (n_rows rows of src, row stride ld)^T; columns past
 * n_rows are zero. */
static void load_transposed(float *restrict dst, const float *restrict src, int64_t ld, int n_rows, int hd,
                            float scale) {
#if defined(__AVX512F__)
    /* 16 x 16 blocks through registers: rows past n_rows and columns past hd
     * are loaded as zeros, so the padding comes out of the same stores. */
    const __m512 scale16 = _mm512_set1_ps(scale);
    for (int r0 = 0; r0 < TILE; r0 += 16)
        for (int d0 = 0; d0 < hd; d0 += 16) {
            const int width = hd - d0 < 16 ? hd - d0 : 16;
            const __mmask16 lanes = (__mmask16)((1u << width) - 1u);
            __m512 block[16];
            for (int i = 0; i < 16; i++)
                block[i] = r0 + i < n_rows ? _mm512_maskz_loadu_ps(lanes, src + (int64_t)(r0 + i) * ld + d0)
                                           : _mm512_setzero_ps();
            k_transpose16(block);
            for (int j = 0; j < width; j++)
                _mm512_storeu_ps(dst + (d0 + j) * TILE + r0, _mm512_mul_ps(block[j], scale16));
        }
#else
    if (n_rows < TILE)
        for (int d = 0; d < hd; d++)
            memset(dst + d * TILE + n_rows, 0, (size_t)(TILE - n_rows) * sizeof(float));
    /* 8 rows at a time: each source row is read contiguously, and each
     * destination row receives 8 consecutive floats (half a cache line) */
    int r = 0;
    for (; r + 8 <= n_rows; r += 8)
        for (int d = 0; d < hd; d++)
            for (int i = 0; i < 8; i++)
                dst[d * TILE + r + i] = scale * src[(r + i) * ld + d];
    for (; r < n_rows; r++)
        for (int d = 0; d < hd; d++)
            dst[d * TILE + r] = scale * src[r * ld + d];
#endif
}

/* Lane-wise mask of the lanes c0 + lane < limit (limit may be <= c0: none). */
static inline veci lanes_below(int c0, int limit) {
#if VEC == 16
    const veci lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#else
    const veci lane = {0, 1, 2, 3, 4, 5, 6, 7};
#endif
    return lane < limit - c0;
}

/* {0, 1, ..., VEC - 1} as floats: a vector's column offsets. */
static inline vecf lane_offsets(void) {
#if VEC == 16
    return (vecf){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#else
    return (vecf){0, 1, 2, 3, 4, 5, 6, 7};
#endif
}

/* ---------------------------------------------------------------- forward */

/* Adds the ALiBi bias to a transposed score tile in base 2: S^T [nk, TILE]
 * (key k0 + r, query q0 + c) += slope_log2 * (k0 + r - q0 - c), i.e.
 * -(t - s) * slope * log2(e). Rows start at vector first_vec_step * r / VEC,
 * as in the softmax below (on the diagonal the earlier vectors are masked and
 * partly unwritten). Distances are integers below 2^24, exact in float. */
static __attribute__((noinline)) void add_bias_transposed(float *scores_t, int nk, int64_t k0, int64_t q0,
                                                          float slope_log2, int first_vec_step) {
    const vecf slope = vec_splat(slope_log2), lane = lane_offsets();
    for (int r = 0; r < nk; r++)
        for (int c = first_vec_step * r / VEC; c < TILE_VECS; c++) {
            float *row = scores_t + r * TILE + c * VEC;
            const vecf distance = vec_splat((float)(k0 + r - q0 - c * VEC)) - lane;
            vec_store(row, vec_load(row) + distance * slope);
        }
}

/* The same for an unscaled score tile S [nq, TILE] (query q0 + r, key k0 + c):
 * += slope_raw * (k0 + c - q0 - r), slope_raw the slope over the score scale,
 * on the columns the diagonal's product computed (c < round_up(r + 1, VEC)).
 * Zero slopes add exactly +0, which leaves the scores' values. */
static __attribute__((noinline)) void add_bias_rows(float *scores, int nq, int64_t q0, int64_t k0, float slope_raw,
                                                    int diagonal) {
    const vecf slope = vec_splat(slope_raw), lane = lane_offsets();
    for (int r = 0; r < nq; r++) {
        const int c_end = diagonal ? (int)round_up(r + 1, VEC) : TILE;
        for (int c = 0; c < c_end; c += VEC) {
            float *row = scores + r * TILE + c;
            const vecf distance = vec_splat((float)(k0 + c - q0 - r)) + lane;
            vec_store(row, vec_load(row) + distance * slope);
        }
    }
}

/* P^T [nk, TILE] = exp2(S^T - max) in place, max [TILE_VECS] per query
 * vector, row r from vector first_vec_step * r / VEC (zeros before: masked);
 * sum [TILE_VECS] += the new weights. flush: vec_exp2_flushed (biased scores). */
static inline __attribute__((always_inline)) void exponentiate_tile(float *scores_t, int nk, int first_vec_step,
                                                                    const vecf *max, vecf *sum, int flush) {
    for (int r = 0; r < nk; r++) {
        const int first = first_vec_step * r / VEC;
        for (int c = 0; c < first; c++)
            vec_store(scores_t + r * TILE + c * VEC, vec_splat(0.0f));
        for (int c = first; c < TILE_VECS; c++) {
            const vecf x = vec_load(scores_t + r * TILE + c * VEC) - max[c];
            const vecf p = flush ? vec_exp2_flushed(x) : vec_exp2(x);
            sum[c] += p;
            vec_store(scores_t + r * TILE + c * VEC, p);
        }
    }
}

/* out [B,T,H*hd] = causal softmax(q k^T / sqrt(hd) + bias) v; lse [B,H,T] (natural log)
 * q [B,T,H*hd]; k, v [B,T,Hkv*hd]; slopes [H] or NULL */

static void attention_forward_biased(float *out, float *lse, const float *q, const float *k, const float *v, int64_t B,
                                     int64_t T, int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes) {
    if (B <= 0 || T <= 0) return;
    if (!shape_supported(H, Hkv, head_dim)) {
        fill_nan(out, B * T * (H > 0 ? H : 0) * (head_dim > 0 ? head_dim : 0));
        fill_nan(lse, B * (H > 0 ? H : 0) * T);
        return;
    }
    const int hd = (int)head_dim;
    const int hd_pad = (int)round_up(hd, VEC);
    const int64_t group = H / Hkv;
    const int64_t q_stride = H * hd, kv_stride = Hkv * hd;
    const int64_t n_tiles = (T + TILE - 1) / TILE;
    /* Scores are kept in base 2: s2 = q.k * log2(e)/sqrt(hd), so exp becomes exp2. */
    const float scale_log2 = (float)(M_LOG2E / sqrt((double)hd));
    const int64_t n_tasks = B * H * n_tiles;

#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && B * H * T * T * hd > PARALLEL_MIN_WORK)
    for (int64_t task = 0; task < n_tasks; task++) {
        /* Within each (b, h), the longest query tile (most key tiles) first:
         * the tasks handed out last are short ones, which balances the threads. */
        const int64_t tile_q = n_tiles - 1 - task % n_tiles;
        const int64_t bh = task / n_tiles;
        const int64_t b = bh / H, h = bh % H, kv_head = h / group;
        const int64_t q0 = tile_q * TILE;
        const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
        const float slope_log2 = slopes ? slopes[h] * (float)M_LOG2E : 0.0f; /* base 2, as the scores */

        _Alignas(64) float qt_tile[K_ATTENTION_MAX_HEAD_DIM * TILE]; /* [hd, TILE] scaled Q^T */
        _Alignas(64) float v_tile[TILE * K_ATTENTION_MAX_HEAD_DIM];  /* [TILE, hd_pad] when hd % VEC != 0 */
        _Alignas(64) float acc[TILE * K_ATTENTION_MAX_HEAD_DIM];     /* [nq, hd_pad] unnormalised output */
        _Alignas(64) float scores_t[TILE * TILE];                    /* S^T, then P^T [nk, TILE] */
        _Alignas(64) float row_max[TILE], row_sum[TILE];             /* per query, base 2 */

        load_transposed(qt_tile, q + (b * T + q0) * q_stride + h * hd, q_stride, nq, hd, scale_log2);
        memset(acc, 0, (size_t)nq * hd_pad * sizeof(float));
        for (int c = 0; c < TILE; c++) {
            row_max[c] = -INFINITY;
            row_sum[c] = 0.0f;
        }

        for (int64_t tile_k = 0; tile_k <= tile_q; tile_k++) {
            const int64_t k0 = tile_k * TILE;
            const int nk = (int)(T - k0 < TILE ? T - k0 : TILE);
            const float *k_rows = k + (b * T + k0) * kv_stride + kv_head * hd;
            const float *v_rows = v + (b * T + k0) * kv_stride + kv_head * hd;
            int64_t v_ld = kv_stride;
            if (hd != hd_pad) {
                load_rows_padded(v_tile, hd_pad, v_rows, kv_stride, nk, hd);
                v_rows = v_tile;
                v_ld = hd_pad;
            }

            /* S^T [nk, TILE] = K [nk, hd] · Q^T [hd, TILE] */
            const int diagonal = tile_k == tile_q;
            tile_matmul(0, diagonal ? COLUMNS_FROM_ROW : FULL_TILE, nk, TILE, hd, k_rows, kv_stride, 1, qt_tile, TILE,
                        scores_t, TILE);
            /* On the diagonal, key k0+r is visible to query q0+c iff r <= c. Row r's
             * vectors below r / VEC are wholly masked (and partly unwritten): they
             * are skipped by the max, and their weights are stored as zeros
             * without an exponential (exp2 of a masked score is exactly 0). The
             * vector holding column r gets -inf below r. */
            const int first_vec_step = diagonal ? 1 : 0; /* row r starts at vector r / VEC on the diagonal */
            if (slopes) add_bias_transposed(scores_t, nk, k0, q0, slope_log2, first_vec_step);
            if (diagonal)
                for (int r = 1; r < nk; r++) {
                    const int c = r / VEC * VEC;
                    float *row = scores_t + r * TILE + c;
                    vec_store(row, vec_select(lanes_below(c, r), vec_splat(-INFINITY), vec_load(row)));
                }

            /* online softmax, VEC queries per vector: new max, rescale, exponentiate */
            vecf new_max[TILE_VECS], correction[TILE_VECS], sum[TILE_VECS];
            for (int c = 0; c < TILE_VECS; c++)
                new_max[c] = vec_load(row_max + c * VEC);
            for (int r = 0; r < nk; r++)
                for (int c = first_vec_step * r / VEC; c < TILE_VECS; c++)
                    new_max[c] = vec_max(new_max[c], vec_load(scores_t + r * TILE + c * VEC));
            for (int c = 0; c < TILE_VECS; c++) {
                correction[c] = vec_exp2(vec_load(row_max + c * VEC) - new_max[c]);
                sum[c] = vec_splat(0.0f);
            }
            if (slopes)
                exponentiate_tile(scores_t, nk, first_vec_step, new_max, sum, 1);
            else
                exponentiate_tile(scores_t, nk, first_vec_step, new_max, sum, 0);
            for (int c = 0; c < TILE_VECS; c++) {
                vec_store(row_sum + c * VEC, vec_load(row_sum + c * VEC) * correction[c] + sum[c]);
                vec_store(row_max + c * VEC, new_max[c]);
            }
            if (tile_k > 0)
                for (int c = 0; c < nq; c++) {
                    const float scale = correction[c / VEC][c % VEC];
                    float *a = acc + c * hd_pad;
                    for (int d = 0; d < hd_pad; d += VEC)
                        vec_store(a + d, vec_load(a + d) * scale);
                }

            /* acc [nq, hd_pad] += P [nq, nk] · V [nk, hd_pad], P read from P^T */
            tile_matmul(1, diagonal ? SUM_UP_TO_ROW : FULL_TILE, nq, hd_pad, nk, scores_t, 1, TILE, v_rows, v_ld, acc,
                        hd_pad);
        }

        for (int c = 0; c < nq; c++) {
            const float inv_sum = 1.0f / row_sum[c];
            float *o = out + (b * T + q0 + c) * q_stride + h * hd;
            const float *a = acc + c * hd_pad;
            for (int d = 0; d < hd; d++)
                o[d] = a[d] * inv_sum;
            lse[(b * H + h) * T + q0 + c] = (float)((row_max[c] + log2((double)row_sum[c])) * M_LN2);
        }
    }
}

/* --------------------------------------------------------------- backward */

/* With P = softmax(S), S = scale · q k^T + bias (causal), O = P v:
 *   dV = P^T dO,  dP = dO v^T,  dS = P ∘ (dP - D),  D = rowsum(dO ∘ O),
 *   dQ = scale · dS k,  dK = scale · dS^T q.
 * P is recomputed per tile from q, k, the bias and the saved lse; the bias is
 * a constant, so nothing else changes with it. */

static void attention_backward_biased(float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v,
                                      int accumulate_v, const float *d_out, const float *q, const float *k,
                                      const float *v, const float *out, const float *lse, int64_t B, int64_t T,
                                      int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes, float *scratch) {
    if (B <= 0 || T <= 0 || (!d_q && !d_k && !d_v)) return;
    if (!shape_supported(H, Hkv, head_dim)) {
        const int64_t hd = head_dim > 0 ? head_dim : 0;
        fill_nan(d_q, B * T * (H > 0 ? H : 0) * hd);
        fill_nan(d_k, B * T * (Hkv > 0 ? Hkv : 0) * hd);
        fill_nan(d_v, B * T * (Hkv > 0 ? Hkv : 0) * hd);
        return;
    }
    const int hd = (int)head_dim;
    const int hd_pad = (int)round_up(hd, VEC);
    const int in_place = hd == hd_pad; /* rows usable as right operands without copies */
    const int64_t group = H / Hkv;
    const int64_t q_stride = H * hd, kv_stride = Hkv * hd;
    const int64_t n_tiles = (T + TILE - 1) / TILE;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const float scale_log2 = (float)(M_LOG2E / sqrt((double)hd));
    float *row_dot = scratch; /* D [B,H,T] */
    const int64_t n_tasks = B * Hkv;

#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && B * H * T * T * hd > PARALLEL_MIN_WORK)
    for (int64_t task = 0; task < n_tasks; task++) {
        const int64_t b = task / Hkv, kv_head = task % Hkv;
        const int64_t h_first = kv_head * group;

        for (int64_t h = h_first; h < h_first + group; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t offset = (b * T + t) * q_stride + h * hd;
                row_dot[(b * H + h) * T + t] = dot_product(out + offset, d_out + offset, hd);
            }

        _Alignas(64) float kt_tile[K_ATTENTION_MAX_HEAD_DIM * TILE]; /* [hd, TILE] K^T */
        _Alignas(64) float vt_tile[K_ATTENTION_MAX_HEAD_DIM * TILE]; /* [hd, TILE] V^T */
        _Alignas(64) float dk_acc[TILE * K_ATTENTION_MAX_HEAD_DIM];  /* [nk, hd_pad] */
        _Alignas(64) float dv_acc[TILE * K_ATTENTION_MAX_HEAD_DIM];  /* [nk, hd_pad] */
        _Alignas(64) float probs[TILE * TILE];                       /* P [nq, TILE] */
        _Alignas(64) float dscores[TILE * TILE];                     /* dP, then dS [nq, TILE] */
        /* zero-padded copies, used only when hd % VEC != 0 */
        _Alignas(64) float k_tile[TILE * K_ATTENTION_MAX_HEAD_DIM];    /* [nk, hd_pad] */
        _Alignas(64) float q_tile[TILE * K_ATTENTION_MAX_HEAD_DIM];    /* [nq, hd_pad] */
        _Alignas(64) float dout_tile[TILE * K_ATTENTION_MAX_HEAD_DIM]; /* [nq, hd_pad] */
        _Alignas(64) float dq_tile[TILE * K_ATTENTION_MAX_HEAD_DIM];   /* [nq, hd_pad] */
        float lse_log2[TILE], row_dot_tile[TILE];

        for (int64_t tile_k = 0; tile_k < n_tiles; tile_k++) {
            const int64_t k0 = tile_k * TILE;
            const int nk = (int)(T - k0 < TILE ? T - k0 : TILE);
            const float *k_rows = k + (b * T + k0) * kv_stride + kv_head * hd;
            const float *v_rows = v + (b * T + k0) * kv_stride + kv_head * hd;
            int64_t k_ld = kv_stride;
            load_transposed(kt_tile, k_rows, kv_stride, nk, hd, 1.0f);
            if (d_q || d_k) load_transposed(vt_tile, v_rows, kv_stride, nk, hd, 1.0f);
            if (d_q && !in_place) {
                load_rows_padded(k_tile, hd_pad, k_rows, kv_stride, nk, hd);
                k_rows = k_tile;
                k_ld = hd_pad;
            }
            if (d_k) memset(dk_acc, 0, (size_t)nk * hd_pad * sizeof(float));
            if (d_v) memset(dv_acc, 0, (size_t)nk * hd_pad * sizeof(float));

            for (int64_t h = h_first; h < h_first + group; h++) {
                for (int64_t tile_q = tile_k; tile_q < n_tiles; tile_q++) {
                    const int64_t q0 = tile_q * TILE;
                    const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
                    const int64_t row0 = (b * T + q0) * q_stride + h * hd;
                    const float *q_rows = q + row0, *dout_rows = d_out + row0;
                    int64_t q_ld = q_stride;
                    if (!in_place) {
                        load_rows_padded(q_tile, hd_pad, q_rows, q_stride, nq, hd);
                        load_rows_padded(dout_tile, hd_pad, dout_rows, q_stride, nq, hd);
                        q_rows = q_tile;
                        dout_rows = dout_tile;
                        q_ld = hd_pad;
                    }
                    for (int r = 0; r < nq; r++) {
                        lse_log2[r] = lse[(b * H + h) * T + q0 + r] * (float)M_LOG2E;
                        row_dot_tile[r] = row_dot[(b * H + h) * T + q0 + r];
                    }

                    /* P [nq, TILE] = exp(S - lse), S = Q · K^T recomputed */
                    const int diagonal = tile_q == tile_k;
                    tile_matmul(0, diagonal ? COLUMNS_UP_TO_ROW : FULL_TILE, nq, TILE, hd, q_rows, q_ld, 1, kt_tile,
                                TILE, probs, TILE);
                    if (slopes) add_bias_rows(probs, nq, q0, k0, slopes[h] / scale, diagonal);
                    for (int r = 0; r < nq; r++) {
                        /* on the diagonal, columns past round_up(r+1, 16) were not computed */
                        const int c_end = diagonal ? (int)round_up(r + 1, VEC) : TILE;
                        float *p = probs + r * TILE;
                        const vecf shift = vec_splat(lse_log2[r]);
                        if (slopes)
                            for (int c = 0; c < c_end; c += VEC)
                                vec_store(p + c, vec_exp2_flushed(vec_load(p + c) * scale_log2 - shift));
                        else
                            for (int c = 0; c < c_end; c += VEC)
                                vec_store(p + c, vec_exp2(vec_load(p + c) * scale_log2 - shift));
                        if (diagonal) { /* causal mask; also removes keys past T */
                            const int c0 = (r + 1) / VEC * VEC;
                            if (c0 < c_end)
                                vec_store(p + c0,
                                          vec_select(lanes_below(c0, r + 1), vec_load(p + c0), vec_splat(0.0f)));
                            for (int c = c_end; c < TILE; c += VEC)
                                vec_store(p + c, vec_splat(0.0f));
                        }
                    }
                    /* dV [nk, hd_pad] += P^T · dO */
                    if (d_v)
                        tile_matmul(1, diagonal ? SUM_FROM_ROW : FULL_TILE, nk, hd_pad, nq, probs, 1, TILE, dout_rows,
                                    q_ld, dv_acc, hd_pad);
                    if (!d_q && !d_k) continue;

                    /* dS [nq, TILE] = P ∘ (dO · V^T - D) · scale */
                    tile_matmul(0, diagonal ? COLUMNS_UP_TO_ROW : FULL_TILE, nq, TILE, hd, dout_rows, q_ld, 1, vt_tile,
                                TILE, dscores, TILE);
                    for (int r = 0; r < nq; r++) {
                        const int c_end = diagonal ? (int)round_up(r + 1, VEC) : TILE;
                        float *ds = dscores + r * TILE;
                        const float *p = probs + r * TILE;
                        const vecf dot = vec_splat(row_dot_tile[r]);
                        for (int c = 0; c < c_end; c += VEC)
                            vec_store(ds + c, vec_load(p + c) * (vec_load(ds + c) - dot) * scale);
                        for (int c = c_end; c < TILE; c += VEC)
                            vec_store(ds + c, vec_splat(0.0f));
                    }
                    /* dQ [nq, hd] += dS · K; the first key tile writes it when it is not accumulated into */
                    const int add_to_d_q = accumulate_q || tile_k > 0;
                    if (d_q && in_place) {
                        tile_matmul(add_to_d_q, diagonal ? SUM_UP_TO_ROW : FULL_TILE, nq, hd, nk, dscores, TILE, 1,
                                    k_rows, k_ld, d_q + row0, q_stride);
                    } else if (d_q) {
                        tile_matmul(0, diagonal ? SUM_UP_TO_ROW : FULL_TILE, nq, hd_pad, nk, dscores, TILE, 1, k_rows,
                                    k_ld, dq_tile, hd_pad);
                        for (int r = 0; r < nq; r++)
                            for (int d = 0; d < hd; d++)
                                d_q[row0 + r * q_stride + d] =
                                    (add_to_d_q ? d_q[row0 + r * q_stride + d] : 0.0f) + dq_tile[r * hd_pad + d];
                    }
                    /* dK [nk, hd_pad] += dS^T · Q */
                    if (d_k)
                        tile_matmul(1, diagonal ? SUM_FROM_ROW : FULL_TILE, nk, hd_pad, nq, dscores, 1, TILE, q_rows,
                                    q_ld, dk_acc, hd_pad);
                }
            }

            /* Each key tile's d_k, d_v rows are complete here (every query head of
             * the group and every query tile added in): added, or written as
             * 0 + x, the numbers the addition onto zeros gives (-0 comes out +0). */
            for (int r = 0; r < nk; r++) {
                const int64_t offset = (b * T + k0 + r) * kv_stride + kv_head * hd;
                if (d_k)
                    for (int d = 0; d < hd; d++)
                        d_k[offset + d] = (accumulate_k ? d_k[offset + d] : 0.0f) + dk_acc[r * hd_pad + d];
                if (d_v)
                    for (int d = 0; d < hd; d++)
                        d_v[offset + d] = (accumulate_v ? d_v[offset + d] : 0.0f) + dv_acc[r * hd_pad + d];
            }
        }
    }
}

/* ----------------------------------------------------------------- decode */

/* o [hd] = sum over t of (weights[t] / sum) v_head + t * pos_stride (one kv
 * head's values); with skip_zero, positions of weight exactly 0 are not read
 * (ALiBi's far keys). */
static inline __attribute__((always_inline)) void decode_values(float *restrict o, const float *restrict weights,
                                                                float sum, const float *v_head, int64_t pos_stride,
                                                                int64_t n_pos, int64_t hd, int skip_zero) {
    memset(o, 0, (size_t)hd * sizeof(float));
    for (int64_t t = 0; t < n_pos; t++) {
        if (skip_zero && weights[t] == 0.0f) continue;
        const float *v = v_head + t * pos_stride, p = weights[t] / sum;
#pragma omp simd
        for (int64_t i = 0; i < hd; i++)
            o[i] += p * v[i];
    }
}

/* out [n_rows, H*hd]: softmax over positions 0..pos of q·k / sqrt(hd) - (pos - t) * slope,
 * applied to v, for the query heads of kv heads [kv_begin, kv_end) only.
 * q [n_rows, H*hd]; cache: k, v of positions 0..pos in either layout
 * (attention.h, k_kv_cache); slopes [H] or NULL;
 * scratch [n_rows, H, pos+1] (each kv head writes only its own heads' part). */
static void attention_decode_range_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows,
                                          int64_t pos, int64_t H, int64_t Hkv, int64_t head_dim, int64_t kv_begin,
                                          int64_t kv_end, const float *slopes, float *scratch) {
    const int64_t hd = head_dim, group = H / Hkv, n_pos = pos + 1;
    const int64_t q_stride = H * hd, pos_stride = cache->pos_stride;
    const float scale = (float)(1.0 / sqrt((double)hd));
    /* Head by head, each head's scores contiguous: the scores of a head are
     * `omp simd` dot products and one vectorised k_exp pass. (Streaming K once
     * for the whole group, with a score per (row, head) interleaved, measured
     * 1.3-1.6x slower at the decode shapes: hd 32-64, a few hundred positions.) */
    for (int64_t kv_head = kv_begin; kv_head < kv_end; kv_head++)
        for (int64_t row = 0; row < n_rows; row++)
            for (int64_t h = kv_head * group; h < (kv_head + 1) * group; h++) {
                const float *q_head = q + row * q_stride + h * hd;
                float *scores = scratch + (row * H + h) * n_pos, max = -INFINITY, sum = 0.0f;
                const float *k_head = cache->k + kv_head * cache->head_stride;
                for (int64_t t = 0; t < n_pos; t++) {
                    const float *k = k_head + t * pos_stride;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int64_t i = 0; i < hd; i++)
                        dot += q_head[i] * k[i];
                    scores[t] = dot * scale;
                    max = scores[t] > max ? scores[t] : max;
                }
                float *o = out + row * q_stride + h * hd;
                if (!slopes) { /* the unbiased kernel, as it was before the bias */
#pragma omp simd reduction(+ : sum)
                    for (int64_t t = 0; t < n_pos; t++)
                        sum += (scores[t] = k_exp(scores[t] - max));
                    decode_values(o, scores, sum, cache->v + kv_head * cache->head_stride, pos_stride, n_pos, hd, 0);
                    continue;
                }
                /* ALiBi: the bias in a second pass over the scores (L1-resident).
                 * Keys more than 87 below the maximum get weight exactly 0 rather
                 * than k_exp's clamped 1e-38, whose products with v are subnormal
                 * and cost ~100 cycles each: with the bias, most far keys are
                 * there (measured 4-6x slower at pos 1023 before). */
                const float slope = slopes[h];
                max = -INFINITY;
                for (int64_t t = 0; t < n_pos; t++) {
                    scores[t] -= (float)(pos - t) * slope;
                    max = scores[t] > max ? scores[t] : max;
                }
#pragma omp simd reduction(+ : sum)
                for (int64_t t = 0; t < n_pos; t++) {
                    const float x = scores[t] - max;
                    sum += (scores[t] = x < -87.0f ? 0.0f : k_exp(x));
                }
                decode_values(o, scores, sum, cache->v + kv_head * cache->head_stride, pos_stride, n_pos, hd, 1);
            }
}

/* The core with one kv head per work item. */
static void attention_decode_biased(float *out, const float *q, const k_kv_cache *cache, int64_t n_rows, int64_t pos,
                                    int64_t H, int64_t Hkv, int64_t head_dim, const float *slopes, float *scratch) {
    if (n_rows <= 0 || pos < 0) return;
    if (H < 1 || Hkv < 1 || H % Hkv != 0 || head_dim < 1) {
        fill_nan(out, n_rows * (H > 0 ? H : 0) * (head_dim > 0 ? head_dim : 0));
        return;
    }
#pragma omp parallel for schedule(static) if (Hkv > 1 && n_rows * H * (pos + 1) * head_dim > DECODE_PARALLEL_MIN_WORK)
    for (int64_t kv_head = 0; kv_head < Hkv; kv_head++)
        attention_decode_range_biased(out, q, cache, n_rows, pos, H, Hkv, head_dim, kv_head, kv_head + 1, slopes,
                                      scratch);
}

const k_attention_ops K_ISA_VARIANT_NAME(k_attention_ops) = {
    .forward_biased = attention_forward_biased,
    .backward_biased = attention_backward_biased,
    .decode_range_biased = attention_decode_range_biased,
    .decode_biased = attention_decode_biased,
};
