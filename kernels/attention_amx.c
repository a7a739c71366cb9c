/* Flash attention with bf16 products on AMX tiles, or on vdpbf16ps where the
 * CPU has AVX512_BF16 but no tiles (kernels/attention_amx.h).
 *
 * Why its own kernel: at train.precision = bf16 the float32 flash attention
 * was 17% of a char step on the AMX Xeon, and one oneDNN call per (batch,
 * head) measured slower than it (per-call cost, the masked half computed; see
 * experiments/throughput/RESULTS.md). Here the products run on the tiles
 * inside the flash loop: no call overhead, the causal half skipped in 32 x 32
 * blocks.
 *
 * Tile products. Every product is C [64, n] (+)= A [64, k] · B [k, n] over
 * 64-row tiles of queries or keys, in 32 x 32 blocks of C held in tiles 0-3,
 * A's two 16-row strips in tiles 4-5 and B's two 16-column strips in 6-7;
 * each tdpbf16ps consumes 32 of k. A is bf16 rows; B is in the tiles' pair
 * layout [k/2][n][2] (B[2p][j] and B[2p+1][j] side by side). So each operand
 * is built once in the layout its product wants, from the float32 tensors:
 *   forward  S = Q K^T   A: Q rows            B: K^T pairs  [hd/2][64 keys][2]
 *            O += P V    A: P rows (bf16)     B: V row pairs [32][hd][2]
 *   backward S, dP = dO V^T (B: V^T pairs), dV += P^T dO (A: P^T, B: dO row
 *            pairs), dK += dS^T Q (B: Q row pairs), dQ += dS K (B: K row pairs).
 * K and V in their layouts are built once per call (forward: all key tiles up
 * front, then every query tile and head of the group reads them; backward:
 * Q, dO and K, V sides up front). P^T and dS^T come from float32 16 x 16
 * register transposes, then rounding.
 *
 * The tile state is per thread; every task loads the configuration (eight
 * 16 x 64-byte tiles) before its first product, because oneDNN's kernels on
 * the same thread load their own between our calls. Linux hands out the tile
 * state only on request (arch_prctl ARCH_REQ_XCOMP_PERM), asked once.
 *
 * The vdpbf16ps engine is the same code with one product function swapped
 * (pair_dot_product for tile_product, through product()) and the tile
 * configuration skipped: the flash functions carry the AMX target attribute,
 * but only tile_product and the configure/release pair hold AMX
 * instructions, and those run only with tiles = 1.
 *
 * Functions that use AVX-512 or AMX carry target attributes, so the file
 * builds for any x86-64 and nothing runs unless k_bf16_attention_available
 * says the engine can. */
#include "kernels/attention_amx.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/isa.h"

#if defined(__x86_64__) && defined(__linux__)
#define AMX_BUILD 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/transpose16.h"
#else
#define AMX_BUILD 0
#endif

/* Queries and keys per tile, as the float32 kernels. */
#define TILE 64
/* One tile row: 64 bytes, 32 bf16 of the reduction dimension. */
#define TILE_K 32

#define PARALLEL_MIN_WORK (1 << 21)

/* ---- availability and engine choice ---- */

static pthread_once_t available_once = PTHREAD_ONCE_INIT;
static int amx_available = 0;

#if AMX_BUILD
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

static void probe_amx(void) {
    const k_cpu_bf16 cpu = k_cpu_bf16_features();
    if (!cpu.amx_bf16 || !cpu.avx512_bf16 || k_isa_supported() < K_ISA_AVX512) return;
    /* Linux 5.16+: without this permission the first tile instruction faults */
    amx_available = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
static void probe_amx(void) {}
#endif

int k_attention_amx_available(void) {
    pthread_once(&available_once, probe_amx);
    return amx_available;
}

static int engine_forced = 0;
static k_bf16_attention_engine forced_engine = K_BF16_ATTENTION_FP32;

int k_attention_avx512_bf16_available(void) {
#if AMX_BUILD
    return k_cpu_bf16_features().avx512_bf16 && k_isa_active() >= K_ISA_AVX512;
#else
    return 0;
#endif
}

int k_bf16_attention_available(k_bf16_attention_engine engine) {
    switch (engine) {
    case K_BF16_ATTENTION_AMX:
        return k_attention_amx_available() && k_isa_active() >= K_ISA_AVX512;
    case K_BF16_ATTENTION_AVX512_BF16:
        return k_attention_avx512_bf16_available();
    default:
        return 1;
    }
}

/* A forced lower ISA level (DBRANCH_ISA=avx2|scalar, the tests' fallbacks)
 * turns the AVX-512 and AMX kernels off too. */
k_bf16_attention_engine k_bf16_attention_default(void) {
    if (k_bf16_attention_available(K_BF16_ATTENTION_AMX)) return K_BF16_ATTENTION_AMX;
    if (k_bf16_attention_available(K_BF16_ATTENTION_AVX512_BF16)) return K_BF16_ATTENTION_AVX512_BF16;
    return K_BF16_ATTENTION_FP32;
}

k_bf16_attention_engine k_bf16_attention_active(void) {
    return engine_forced ? forced_engine : k_bf16_attention_default();
}

dt_status k_bf16_attention_force(k_bf16_attention_engine engine) {
    if (engine == K_BF16_ATTENTION_AMX && !k_attention_amx_available())
        return dt_errorf("bf16 attention engine amx: this CPU (or kernel) has no AMX-BF16 tiles to run it");
    if (engine == K_BF16_ATTENTION_AVX512_BF16 && !k_attention_avx512_bf16_available())
        return dt_errorf("bf16 attention engine avx512_bf16: this CPU has no AVX512_BF16 (or DBRANCH_ISA forces a "
                         "level below AVX-512)");
    engine_forced = 1;
    forced_engine = engine;
    return DT_OK;
}

void k_bf16_attention_reset(void) { engine_forced = 0; }

const char *k_bf16_attention_name(k_bf16_attention_engine engine) {
    switch (engine) {
    case K_BF16_ATTENTION_AMX:
        return "amx";
    case K_BF16_ATTENTION_AVX512_BF16:
        return "avx512_bf16";
    default:
        return "fp32";
    }
}

dt_status k_bf16_attention_parse(const char *name, k_bf16_attention_engine *engine) {
    if (!strcmp(name, "amx"))
        *engine = K_BF16_ATTENTION_AMX;
    else if (!strcmp(name, "avx512_bf16"))
        *engine = K_BF16_ATTENTION_AVX512_BF16;
    else if (!strcmp(name, "fp32"))
        *engine = K_BF16_ATTENTION_FP32;
    else
        return dt_errorf("bf16 attention engine '%s' must be amx|avx512_bf16|fp32", name);
    return DT_OK;
}

dt_status k_bf16_attention_from_environment(void) {
    const char *name = getenv("DBRANCH_BF16_ATTENTION");
    if (!name || !*name) return DT_OK;
    k_bf16_attention_engine engine;
    if (k_bf16_attention_parse(name, &engine) != DT_OK || k_bf16_attention_force(engine) != DT_OK)
        return dt_error_context("DBRANCH_BF16_ATTENTION");
    return DT_OK;
}

int k_attention_amx_serves(int64_t H, int64_t Hkv, int64_t head_dim) {
    return H >= 1 && Hkv >= 1 && H % Hkv == 0 && head_dim >= TILE_K && head_dim % TILE_K == 0 &&
           head_dim <= K_ATTENTION_AMX_MAX_HEAD_DIM;
}

/* ---- scratch layout ----
 * One operand tile in any of the layouts is TILE * hd bf16 (a [64, hd] row
 * tile, a [hd/2, 64, 2] transposed pair tile or a [32, hd, 2] row-pair tile). */

static size_t tile_elements(int64_t hd) { return (size_t)TILE * (size_t)hd; }
static int64_t tiles_of(int64_t T) { return (T + TILE - 1) / TILE; }
static size_t round_up_64(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t k_attention_amx_forward_scratch(int64_t B, int64_t T, int64_t Hkv, int64_t head_dim) {
    /* K^T pairs and V row pairs per (b, kv head, key tile) */
    return 2 * round_up_64((size_t)(B * Hkv * tiles_of(T)) * tile_elements(head_dim) * sizeof(uint16_t));
}

size_t k_attention_amx_backward_scratch(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim) {
    const size_t q_side = round_up_64((size_t)(B * H * tiles_of(T)) * tile_elements(head_dim) * sizeof(uint16_t));
    const size_t kv_side = round_up_64((size_t)(B * Hkv * tiles_of(T)) * tile_elements(head_dim) * sizeof(uint16_t));
    const size_t d_q_sums = round_up_64((size_t)(B * H * tiles_of(T)) * tile_elements(head_dim) * sizeof(float));
    const size_t row_dot = round_up_64((size_t)(B * H * T) * sizeof(float));
    /* Q rows, dO rows, Q pairs, dO pairs; K^T pairs, V^T pairs, K pairs */
    return 4 * q_side + 3 * kv_side + d_q_sums + row_dot;
}

#if AMX_BUILD

#define TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define TARGET_AMX         __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

/* Tile loads are asm statements without a memory operand: this barrier keeps
 * the compiler from moving our stores of an operand past its load. */
#define COMPILER_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct __attribute__((packed, aligned(64))) tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} tile_config;

/* Eight tiles of 16 rows x 64 bytes (palette 1). */
TARGET_AMX static void configure_tiles(void) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
}

/* Gives the tile state back (see configure_tiles: a function of its own for
 * the same reason as row_dots). */
TARGET_AMX static void release_tiles(void) { _tile_release(); }

/* Which part of a diagonal tile a product needs (row blocks of 32 in C). */
typedef enum {
    WHOLE,              /* off-diagonal tile */
    BLOCKS_ON_OR_BELOW, /* S, dP: blocks whose keys are not all after their queries */
    SUM_UP_TO_ROW,      /* O, dQ: C's rows are queries, the sum runs over keys up to them */
    SUM_FROM_ROW,       /* dV, dK: C's rows are keys, the sum runs over queries from them on */
} tile_part;

/* C [64, n] (+)= A [64, k] · B [k, n] on the tiles.
 * A: bf16 rows, lda elements apart; B: pair layout [k/2][n][2], ldb bf16 per
 * pair row; C: float32 rows, ldc apart; n and k multiples of 32. */
TARGET_AMX static void tile_product(float *C, int64_t ldc, int accumulate, const uint16_t *A, int64_t lda,
                                    const uint16_t *B, int64_t ldb, int n, int k, tile_part part) {
    COMPILER_BARRIER();
    for (int i = 0; i < TILE; i += 32)
        for (int j = 0; j < n; j += 32) {
            if (part == BLOCKS_ON_OR_BELOW && j > i) continue; /* all its keys come after its queries */
            const int k_begin = part == SUM_FROM_ROW ? i : 0;
            const int k_end = part == SUM_UP_TO_ROW ? i + 32 : k;
            float *c = C + i * ldc + j;
            const int64_t c_bytes = ldc * (int64_t)sizeof(float);
            if (accumulate) {
                _tile_loadd(0, c, c_bytes);
                _tile_loadd(1, c + 16, c_bytes);
                _tile_loadd(2, c + 16 * ldc, c_bytes);
                _tile_loadd(3, c + 16 * ldc + 16, c_bytes);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int p = k_begin; p < k_end; p += TILE_K) {
                const uint16_t *a = A + i * lda + p, *b = B + (p / 2) * ldb + 2 * j;
                _tile_loadd(4, a, lda * 2);
                _tile_loadd(5, a + 16 * lda, lda * 2);
                _tile_loadd(6, b, ldb * 2);
                _tile_loadd(7, b + 32, ldb * 2);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c, c_bytes);
            _tile_stored(1, c + 16, c_bytes);
            _tile_stored(2, c + 16 * ldc, c_bytes);
            _tile_stored(3, c + 16 * ldc + 16, c_bytes);
        }
}

/* The same product as tile_product with vdpbf16ps (AVX512_BF16 without the
 * tiles: a Zen 4), on the same operand layouts. Each 32 x 32 block of C runs
 * in four strips of 8 rows: 16 accumulators (8 rows x two 16-column halves);
 * per pair of k, the two 64-byte halves of B's pair row and one broadcast
 * pair of A per row, so each instruction sums 16 columns x 2 of k. Sums are
 * float32 as on the tiles (the order within a pair differs: both engines are
 * checked against float64 on the rounded operands, not against each other). */
// C [64, n] (+)= A [64, k] bf16 rows (lda) · B [k/2][n][2] bf16 pairs (ldb per pair row)
TARGET_AVX512_BF16 static void pair_dot_product(float *C, int64_t ldc, int accumulate, const uint16_t *A, int64_t lda,
                                                const uint16_t *B, int64_t ldb, int n, int k, tile_part part) {
    enum { STRIP = 8 };
    for (int i = 0; i < TILE; i += 32)
        for (int j = 0; j < n; j += 32) {
            if (part == BLOCKS_ON_OR_BELOW && j > i) continue; /* as tile_product */
            const int k_begin = part == SUM_FROM_ROW ? i : 0;
            const int k_end = part == SUM_UP_TO_ROW ? i + 32 : k;
            for (int r0 = i; r0 < i + 32; r0 += STRIP) {
                __m512 acc[STRIP][2];
                for (int r = 0; r < STRIP; r++) {
                    const float *c = C + (r0 + r) * ldc + j;
                    acc[r][0] = accumulate ? _mm512_loadu_ps(c) : _mm512_setzero_ps();
                    acc[r][1] = accumulate ? _mm512_loadu_ps(c + 16) : _mm512_setzero_ps();
                }
                for (int p = k_begin; p < k_end; p += 2) {
                    const uint16_t *b = B + (p / 2) * ldb + 2 * j;
                    const __m512bh b_low = (__m512bh)_mm512_loadu_si512((const void *)b);
                    const __m512bh b_high = (__m512bh)_mm512_loadu_si512((const void *)(b + 32));
                    for (int r = 0; r < STRIP; r++) {
                        uint32_t pair;
                        memcpy(&pair, A + (r0 + r) * lda + p, sizeof pair);
                        const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
                        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b_low);
                        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b_high);
                    }
                }
                for (int r = 0; r < STRIP; r++) {
                    float *c = C + (r0 + r) * ldc + j;
                    _mm512_storeu_ps(c, acc[r][0]);
                    _mm512_storeu_ps(c + 16, acc[r][1]);
                }
            }
        }
}

/* The product on the engine's unit (tiles: AMX; else vdpbf16ps). */
TARGET_AMX static inline void product(int tiles, float *C, int64_t ldc, int accumulate, const uint16_t *A, int64_t lda,
                                      const uint16_t *B, int64_t ldb, int n, int k, tile_part part) {
    if (tiles)
        tile_product(C, ldc, accumulate, A, lda, B, ldb, n, k, part);
    else
        pair_dot_product(C, ldc, accumulate, A, lda, B, ldb, n, k, part);
}

/* ---- operand layouts (float32 in, bf16 out, rows past n_rows as zeros) ---- */

/* 32 floats at p, rounded: bf16 of p[0..31] in order. */
TARGET_AVX512_BF16 static inline __m512i round32(const float *p) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

/* dst [64, hd] bf16 = n_rows rows of src (row stride ld). */
TARGET_AVX512_BF16 static void pack_rows(uint16_t *restrict dst, const float *restrict src, int64_t ld, int n_rows,
                                         int hd) {
    for (int r = 0; r < TILE; r++)
        for (int d = 0; d < hd; d += 32)
            _mm512_storeu_si512(dst + r * hd + d, r < n_rows ? round32(src + r * ld + d) : _mm512_setzero_si512());
}

/* dst [hd/2, 64, 2] bf16: dst[p][r] = (src[r][2p], src[r][2p+1]), i.e. the
 * transpose of src's rows as 32-bit pairs (B = src^T for a product over hd). */
TARGET_AVX512_BF16 static void pack_transposed_pairs(uint16_t *restrict dst, const float *restrict src, int64_t ld,
                                                     int n_rows, int hd) {
    for (int r0 = 0; r0 < TILE; r0 += 16)
        for (int d0 = 0; d0 < hd; d0 += 32) {
            __m512 block[16];
            for (int i = 0; i < 16; i++)
                block[i] =
                    r0 + i < n_rows ? _mm512_castsi512_ps(round32(src + (r0 + i) * ld + d0)) : _mm512_setzero_ps();
            k_transpose16(block); /* block[p]: pair d0/2 + p of rows r0..r0+15 */
            for (int p = 0; p < 16; p++)
                _mm512_storeu_ps((float *)(dst + (int64_t)(d0 / 2 + p) * 2 * TILE + 2 * r0), block[p]);
        }
}

/* dst [32, hd, 2] bf16: dst[p][d] = (src[2p][d], src[2p+1][d]) (B = src for a
 * product over src's rows). */
TARGET_AVX512_BF16 static void pack_row_pairs(uint16_t *restrict dst, const float *restrict src, int64_t ld, int n_rows,
                                              int hd) {
    /* lanes 2i and 2i+1 of the result: element i of the even row, then of the odd row */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                                6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int p = 0; p < TILE / 2; p++)
        for (int d = 0; d < hd; d += 16) {
            const __m512 even = 2 * p < n_rows ? _mm512_loadu_ps(src + 2 * p * ld + d) : _mm512_setzero_ps();
            const __m512 odd = 2 * p + 1 < n_rows ? _mm512_loadu_ps(src + (2 * p + 1) * ld + d) : _mm512_setzero_ps();
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even); /* even row in the low half */
            _mm512_storeu_si512(dst + (int64_t)p * 2 * hd + 2 * d, _mm512_permutexvar_epi16(interleave, both));
        }
}

/* dst [64, 64] bf16 = src [64, 64]^T (float32, row stride TILE), rounded. */
TARGET_AVX512_BF16 static void transpose_rounded(uint16_t *restrict dst, const float *restrict src) {
    for (int r0 = 0; r0 < TILE; r0 += 16)
        for (int c0 = 0; c0 < TILE; c0 += 16) {
            __m512 block[16];
            for (int i = 0; i < 16; i++)
                block[i] = _mm512_loadu_ps(src + (r0 + i) * TILE + c0);
            k_transpose16(block); /* block[j]: column c0 + j, rows r0.. */
            for (int j = 0; j < 16; j++)
                _mm256_storeu_si256((__m256i *)(dst + (c0 + j) * TILE + r0), (__m256i)_mm512_cvtneps_pbh(block[j]));
        }
}

/* 2^x for x <= 0, relative error ~2e-7 (Cephes' exp2f polynomial on the
 * fraction, the exponent applied by scalef); below -126 it is 0, so no weight
 * is subnormal (subnormal arithmetic costs microcode assists). */
TARGET_AVX512_BF16 static inline __m512 exp2_nonpositive(__m512 x) {
    const __mmask16 representable = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(representable, p, n);
}

/* 16 bf16 at p as float32 (exact: a bf16 is a float32's upper half). */
TARGET_AVX512_BF16 static inline __m512 widen16(const uint16_t *p) {
    const __m512i bits = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
}

/* Lanes c0 + lane < limit of a 16-lane vector. */
static inline __mmask16 lanes_before(int c0, int limit) {
    const int n = limit - c0;
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* ---- forward ---- */

/* K^T pairs and V row pairs of every (b, kv head, key tile); k, v [B,T,Hkv*hd]. */
TARGET_AVX512_BF16 static void pack_keys_values(uint16_t *k_pairs_t, uint16_t *v_pairs, const float *k, const float *v,
                                                int64_t B, int64_t T, int64_t Hkv, int hd) {
    const int64_t n_tiles = tiles_of(T), kv_stride = Hkv * hd, n_tasks = B * Hkv * n_tiles;
#pragma omp parallel for schedule(static) if (n_tasks > 1 && B * T * kv_stride > PARALLEL_MIN_WORK / 16)
    for (int64_t task = 0; task < n_tasks; task++) {
        const int64_t tile = task % n_tiles, kv_head = task / n_tiles % Hkv, b = task / n_tiles / Hkv;
        const int64_t k0 = tile * TILE;
        const int nk = (int)(T - k0 < TILE ? T - k0 : TILE);
        const int64_t offset = (b * T + k0) * kv_stride + kv_head * hd;
        pack_transposed_pairs(k_pairs_t + task * tile_elements(hd), k + offset, kv_stride, nk, hd);
        pack_row_pairs(v_pairs + task * tile_elements(hd), v + offset, kv_stride, nk, hd);
    }
}

/* One (b, h, query tile): the online softmax over its key tiles.
 * q_rows: the tile's first query row in q [B,T,H*hd]; k_pairs_t, v_pairs: the
 * kv head's tiles; out, lse: the tile's rows of out [B,T,H*hd] and lse [B,H,T]. */
TARGET_AMX static void forward_query_tile(int tiles, float *out, float *lse, const float *q_rows, int64_t q_stride,
                                          const uint16_t *k_pairs_t, const uint16_t *v_pairs, int64_t tile_q, int nq,
                                          int hd, float scale_log2) {
    _Alignas(64) uint16_t q_tile[TILE * K_ATTENTION_AMX_MAX_HEAD_DIM]; /* [64, hd] bf16 */
    _Alignas(64) uint16_t probs[TILE * TILE];                          /* P [64 queries, 64 keys] bf16 */
    _Alignas(64) float scores[TILE * TILE];                            /* S [64, 64] */
    _Alignas(64) float acc[TILE * K_ATTENTION_AMX_MAX_HEAD_DIM];       /* [64, hd] unnormalised output */
    float row_max[TILE], row_sum[TILE];                                /* base 2 */

    pack_rows(q_tile, q_rows, q_stride, nq, hd);
    memset(acc, 0, (size_t)TILE * hd * sizeof(float));
    for (int r = 0; r < TILE; r++) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
    }
    const __m512 scale = _mm512_set1_ps(scale_log2);
    for (int64_t tile_k = 0; tile_k <= tile_q; tile_k++) {
        const int diagonal = tile_k == tile_q;
        product(tiles, scores, TILE, 0, q_tile, hd, k_pairs_t + tile_k * tile_elements(hd), 2 * TILE, TILE, hd,
                diagonal ? BLOCKS_ON_OR_BELOW : WHOLE);
        /* Query r sees keys c < limit. Skipped blocks hold stale numbers: masked
         * lanes are loaded as zeros and their weights set to 0 by a mask. */
        for (int r = 0; r < TILE; r++) {
            const int limit = diagonal ? r + 1 : TILE;
            __m512 x[TILE / 16];
            __mmask16 visible[TILE / 16];
            __m512 max = _mm512_set1_ps(-INFINITY);
            for (int c = 0; c < TILE / 16; c++) {
                visible[c] = lanes_before(16 * c, limit);
                x[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(visible[c], scores + r * TILE + 16 * c), scale);
                max = _mm512_mask_max_ps(max, visible[c], max, x[c]);
            }
            const float tile_max = _mm512_reduce_max_ps(max);
            const float new_max = tile_max > row_max[r] ? tile_max : row_max[r];
            const float correction = exp2f(row_max[r] - new_max); /* 0 on the first tile */
            __m512 sum = _mm512_setzero_ps();
            __m512 p[TILE / 16];
            for (int c = 0; c < TILE / 16; c++) {
                p[c] = _mm512_maskz_mov_ps(visible[c], exp2_nonpositive(_mm512_sub_ps(x[c], _mm512_set1_ps(new_max))));
                sum = _mm512_add_ps(sum, p[c]);
            }
            for (int c = 0; c < TILE / 16; c += 2)
                _mm512_storeu_si512(probs + r * TILE + 16 * c, (__m512i)_mm512_cvtne2ps_pbh(p[c + 1], p[c]));
            row_sum[r] = row_sum[r] * correction + _mm512_reduce_add_ps(sum);
            row_max[r] = new_max;
            if (tile_k > 0) {
                const __m512 factor = _mm512_set1_ps(correction);
                for (int d = 0; d < hd; d += 16)
                    _mm512_storeu_ps(acc + r * hd + d, _mm512_mul_ps(_mm512_loadu_ps(acc + r * hd + d), factor));
            }
        }
        COMPILER_BARRIER();
        product(tiles, acc, hd, 1, probs, TILE, v_pairs + tile_k * tile_elements(hd), 2 * hd, hd, TILE,
                diagonal ? SUM_UP_TO_ROW : WHOLE);
    }
    for (int r = 0; r < nq; r++) {
        const __m512 inv_sum = _mm512_set1_ps(1.0f / row_sum[r]);
        for (int d = 0; d < hd; d += 16)
            _mm512_storeu_ps(out + r * q_stride + d, _mm512_mul_ps(_mm512_loadu_ps(acc + r * hd + d), inv_sum));
        lse[r] = (float)((row_max[r] + log2((double)row_sum[r])) * M_LN2);
    }
}

TARGET_AMX static void forward_amx(int tiles, float *out, float *lse, const float *q, const float *k, const float *v,
                                   int64_t B, int64_t T, int64_t H, int64_t Hkv, int hd, void *scratch) {
    const int64_t n_tiles = tiles_of(T), group = H / Hkv, q_stride = H * hd;
    uint16_t *k_pairs_t = scratch;
    uint16_t *v_pairs =
        (uint16_t *)((char *)scratch + round_up_64((size_t)(B * Hkv * n_tiles) * tile_elements(hd) * sizeof(uint16_t)));
    pack_keys_values(k_pairs_t, v_pairs, k, v, B, T, Hkv, hd);
    const float scale_log2 = (float)(M_LOG2E / sqrt((double)hd));
    const int64_t n_tasks = B * H * n_tiles;
#pragma omp parallel if (n_tasks > 1 && B * H * T * T * hd > PARALLEL_MIN_WORK)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < n_tasks; task++) {
            /* the longest query tiles of each (b, h) first, as the float32 kernel */
            const int64_t tile_q = n_tiles - 1 - task % n_tiles, bh = task / n_tiles;
            const int64_t b = bh / H, h = bh % H, kv_head = h / group;
            const int64_t q0 = tile_q * TILE;
            const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
            const int64_t kv_tiles = (b * Hkv + kv_head) * n_tiles;
            if (tiles) configure_tiles(); /* oneDNN may have run on this thread since */
            forward_query_tile(tiles, out + (b * T + q0) * q_stride + h * hd, lse + (b * H + h) * T + q0,
                               q + (b * T + q0) * q_stride + h * hd, q_stride, k_pairs_t + kv_tiles * tile_elements(hd),
                               v_pairs + kv_tiles * tile_elements(hd), tile_q, nq, hd, scale_log2);
        }
        if (tiles) release_tiles();
    }
}

/* ---- backward ---- */

typedef struct backward_operands {
    uint16_t *q_rows, *d_out_rows;   /* [B,H,tiles][64, hd] */
    uint16_t *q_pairs, *d_out_pairs; /* [B,H,tiles][32, hd, 2] */
    uint16_t *k_pairs_t, *v_pairs_t; /* [B,Hkv,tiles][hd/2, 64, 2] */
    uint16_t *k_pairs;               /* [B,Hkv,tiles][32, hd, 2] */
    float *d_q_sums;                 /* [B,H,tiles][64, hd] */
    float *row_dot;                  /* D [B,H,T] */
} backward_operands;

static backward_operands carve_backward(void *scratch, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd) {
    const size_t q_side = round_up_64((size_t)(B * H * tiles_of(T)) * tile_elements(hd) * sizeof(uint16_t));
    const size_t kv_side = round_up_64((size_t)(B * Hkv * tiles_of(T)) * tile_elements(hd) * sizeof(uint16_t));
    const size_t d_q_sums = round_up_64((size_t)(B * H * tiles_of(T)) * tile_elements(hd) * sizeof(float));
    char *p = scratch;
    backward_operands o;
    o.q_rows = (uint16_t *)p;
    o.d_out_rows = (uint16_t *)(p += q_side);
    o.q_pairs = (uint16_t *)(p += q_side);
    o.d_out_pairs = (uint16_t *)(p += q_side);
    o.k_pairs_t = (uint16_t *)(p += q_side);
    o.v_pairs_t = (uint16_t *)(p += kv_side);
    o.k_pairs = (uint16_t *)(p += kv_side);
    o.d_q_sums = (float *)(p += kv_side);
    o.row_dot = (float *)(p + d_q_sums);
    return o;
}

/* row_dot [n_rows] = rowsum(out ∘ d_out) for n_rows rows of out (stride ld)
 * and of d_out_rounded [64, hd] bf16. (Its own function, not the body of the
 * parallel loop below: clang outlines OpenMP regions into functions without
 * the caller's target attribute.) */
TARGET_AVX512_BF16 static void row_dots(float *row_dot, const float *out, int64_t ld, const uint16_t *d_out_rounded,
                                        int n_rows, int hd) {
    for (int r = 0; r < n_rows; r++) {
        __m512 dot = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16)
            dot = _mm512_fmadd_ps(_mm512_loadu_ps(out + r * ld + d), widen16(d_out_rounded + r * hd + d), dot);
        row_dot[r] = _mm512_reduce_add_ps(dot);
    }
}

/* Every operand in its layout, and D = rowsum(d_out ∘ out). */
TARGET_AVX512_BF16 static void pack_backward(const backward_operands *o, const float *d_out, const float *q,
                                             const float *k, const float *v, const float *out, int64_t B, int64_t T,
                                             int64_t H, int64_t Hkv, int hd) {
    const int64_t n_tiles = tiles_of(T), q_stride = H * hd, kv_stride = Hkv * hd;
    const int64_t n_q_tasks = B * H * n_tiles, n_kv_tasks = B * Hkv * n_tiles;
#pragma omp parallel if (B * T * q_stride > PARALLEL_MIN_WORK / 16)
    {
#pragma omp for schedule(static) nowait
        for (int64_t task = 0; task < n_q_tasks; task++) {
            const int64_t tile = task % n_tiles, h = task / n_tiles % H, b = task / n_tiles / H;
            const int64_t q0 = tile * TILE;
            const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
            const int64_t offset = (b * T + q0) * q_stride + h * hd;
            const size_t at = (size_t)task * tile_elements(hd);
            pack_rows(o->q_rows + at, q + offset, q_stride, nq, hd);
            pack_rows(o->d_out_rows + at, d_out + offset, q_stride, nq, hd);
            pack_row_pairs(o->q_pairs + at, q + offset, q_stride, nq, hd);
            pack_row_pairs(o->d_out_pairs + at, d_out + offset, q_stride, nq, hd);
            /* D from the rounded d_out that dP = dO V^T reads: then the row
             * sums of dS = P ∘ (dP - D) vanish as the softmax's must (with the
             * float32 d_out they would carry its rounding error, ~1e-3) */
            row_dots(o->row_dot + (b * H + h) * T + q0, out + offset, q_stride, o->d_out_rows + at, nq, hd);
        }
#pragma omp for schedule(static)
        for (int64_t task = 0; task < n_kv_tasks; task++) {
            const int64_t tile = task % n_tiles, kv_head = task / n_tiles % Hkv, b = task / n_tiles / Hkv;
            const int64_t k0 = tile * TILE;
            const int nk = (int)(T - k0 < TILE ? T - k0 : TILE);
            const int64_t offset = (b * T + k0) * kv_stride + kv_head * hd;
            const size_t at = (size_t)task * tile_elements(hd);
            pack_transposed_pairs(o->k_pairs_t + at, k + offset, kv_stride, nk, hd);
            pack_transposed_pairs(o->v_pairs_t + at, v + offset, kv_stride, nk, hd);
            pack_row_pairs(o->k_pairs + at, k + offset, kv_stride, nk, hd);
        }
    }
}

/* dst rows (stride ld) = (accumulate ? dst : 0) + sums [n_rows, hd]. */
TARGET_AVX512_BF16 static void write_rows(float *dst, int64_t ld, int accumulate, const float *sums, int n_rows,
                                          int hd) {
    for (int r = 0; r < n_rows; r++)
        for (int d = 0; d < hd; d += 16) {
            const __m512 base = accumulate ? _mm512_loadu_ps(dst + r * ld + d) : _mm512_setzero_ps();
            _mm512_storeu_ps(dst + r * ld + d, _mm512_add_ps(base, _mm512_loadu_ps(sums + r * hd + d)));
        }
}

/* One (b, kv head): every key tile, every query head of the group, every
 * query tile at or after the key tile (as the float32 kernel). */
TARGET_AMX static void backward_kv_head(int tiles, const backward_operands *o, float *d_q, int accumulate_q, float *d_k,
                                        int accumulate_k, float *d_v, int accumulate_v, const float *lse, int64_t b,
                                        int64_t kv_head, int64_t T, int64_t H, int64_t Hkv, int hd) {
    const int64_t n_tiles = tiles_of(T), group = H / Hkv, q_stride = H * hd, kv_stride = Hkv * hd;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const __m512 scale_log2 = _mm512_set1_ps((float)(M_LOG2E / sqrt((double)hd)));
    _Alignas(64) float probs[TILE * TILE];                          /* P [64 queries, 64 keys] */
    _Alignas(64) float dscores[TILE * TILE];                        /* dP, then dS [64, 64] */
    _Alignas(64) uint16_t probs_t[TILE * TILE];                     /* P^T bf16 */
    _Alignas(64) uint16_t ds_t[TILE * TILE];                        /* dS^T bf16 */
    _Alignas(64) uint16_t ds_rows[TILE * TILE];                     /* dS bf16 */
    _Alignas(64) float dk_acc[TILE * K_ATTENTION_AMX_MAX_HEAD_DIM]; /* [64 keys, hd] */
    _Alignas(64) float dv_acc[TILE * K_ATTENTION_AMX_MAX_HEAD_DIM]; /* [64 keys, hd] */
    const size_t tile_size = tile_elements(hd);

    for (int64_t tile_k = 0; tile_k < n_tiles; tile_k++) {
        const int64_t k0 = tile_k * TILE;
        const int nk = (int)(T - k0 < TILE ? T - k0 : TILE);
        const size_t kv_at = (size_t)((b * Hkv + kv_head) * n_tiles + tile_k) * tile_size;
        memset(dk_acc, 0, (size_t)TILE * hd * sizeof(float));
        memset(dv_acc, 0, (size_t)TILE * hd * sizeof(float));
        for (int64_t h = kv_head * group; h < (kv_head + 1) * group; h++)
            for (int64_t tile_q = tile_k; tile_q < n_tiles; tile_q++) {
                const int64_t q0 = tile_q * TILE;
                const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
                const size_t q_at = (size_t)((b * H + h) * n_tiles + tile_q) * tile_size;
                const int diagonal = tile_q == tile_k;
                const tile_part scores_part = diagonal ? BLOCKS_ON_OR_BELOW : WHOLE;
                product(tiles, probs, TILE, 0, o->q_rows + q_at, hd, o->k_pairs_t + kv_at, 2 * TILE, TILE, hd,
                        scores_part);
                if (d_q || d_k)
                    product(tiles, dscores, TILE, 0, o->d_out_rows + q_at, hd, o->v_pairs_t + kv_at, 2 * TILE, TILE, hd,
                            scores_part);
                /* P = exp(S - lse), dS = P ∘ (dP - D) · scale, both 0 where masked
                 * and on rows past T (stale numbers there are only ever masked) */
                for (int r = 0; r < TILE; r++) {
                    const int limit = r >= nq ? 0 : diagonal ? r + 1 : TILE;
                    const float lse_log2 = r < nq ? lse[(b * H + h) * T + q0 + r] * (float)M_LOG2E : 0.0f;
                    const float dot = r < nq ? o->row_dot[(b * H + h) * T + q0 + r] : 0.0f;
                    for (int c = 0; c < TILE; c += 16) {
                        const __mmask16 visible = lanes_before(c, limit);
                        const __m512 s = _mm512_maskz_loadu_ps(visible, probs + r * TILE + c);
                        const __m512 p = _mm512_maskz_mov_ps(
                            visible, exp2_nonpositive(_mm512_fmsub_ps(s, scale_log2, _mm512_set1_ps(lse_log2))));
                        _mm512_storeu_ps(probs + r * TILE + c, p);
                        if (d_q || d_k) {
                            const __m512 dp = _mm512_maskz_loadu_ps(visible, dscores + r * TILE + c);
                            const __m512 ds =
                                _mm512_maskz_mul_ps(visible, _mm512_mul_ps(p, _mm512_sub_ps(dp, _mm512_set1_ps(dot))),
                                                    _mm512_set1_ps(scale));
                            _mm512_storeu_ps(dscores + r * TILE + c, ds);
                        }
                    }
                    if (d_q)
                        for (int c = 0; c < TILE; c += 32)
                            _mm512_storeu_si512(ds_rows + r * TILE + c, round32(dscores + r * TILE + c));
                }
                const tile_part keys_part = diagonal ? SUM_FROM_ROW : WHOLE;
                if (d_v) {
                    transpose_rounded(probs_t, probs);
                    COMPILER_BARRIER();
                    product(tiles, dv_acc, hd, 1, probs_t, TILE, o->d_out_pairs + q_at, 2 * hd, hd, TILE, keys_part);
                }
                if (d_k) {
                    transpose_rounded(ds_t, dscores);
                    COMPILER_BARRIER();
                    product(tiles, dk_acc, hd, 1, ds_t, TILE, o->q_pairs + q_at, 2 * hd, hd, TILE, keys_part);
                }
                if (d_q) {
                    COMPILER_BARRIER();
                    product(tiles, o->d_q_sums + q_at, hd, tile_k > 0, ds_rows, TILE, o->k_pairs + kv_at, 2 * hd, hd,
                            TILE, diagonal ? SUM_UP_TO_ROW : WHOLE);
                }
            }
        const int64_t row = (b * T + k0) * kv_stride + kv_head * hd;
        if (d_k) write_rows(d_k + row, kv_stride, accumulate_k, dk_acc, nk, hd);
        if (d_v) write_rows(d_v + row, kv_stride, accumulate_v, dv_acc, nk, hd);
    }
    if (d_q)
        for (int64_t h = kv_head * group; h < (kv_head + 1) * group; h++)
            for (int64_t tile_q = 0; tile_q < n_tiles; tile_q++) {
                const int64_t q0 = tile_q * TILE;
                const int nq = (int)(T - q0 < TILE ? T - q0 : TILE);
                write_rows(d_q + (b * T + q0) * q_stride + h * hd, q_stride, accumulate_q,
                           o->d_q_sums + (size_t)((b * H + h) * n_tiles + tile_q) * tile_size, nq, hd);
            }
}

TARGET_AMX static void backward_amx(int tiles, float *d_q, int accumulate_q, float *d_k, int accumulate_k, float *d_v,
                                    int accumulate_v, const float *d_out, const float *q, const float *k,
                                    const float *v, const float *out, const float *lse, int64_t B, int64_t T, int64_t H,
                                    int64_t Hkv, int hd, void *scratch) {
    const backward_operands o = carve_backward(scratch, B, T, H, Hkv, hd);
    pack_backward(&o, d_out, q, k, v, out, B, T, H, Hkv, hd);
    const int64_t n_tasks = B * Hkv;
#pragma omp parallel if (n_tasks > 1 && B * H * T * T * hd > PARALLEL_MIN_WORK)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < n_tasks; task++) {
            if (tiles) configure_tiles();
            backward_kv_head(tiles, &o, d_q, accumulate_q, d_k, accumulate_k, d_v, accumulate_v, lse, task / Hkv,
                             task % Hkv, T, H, Hkv, hd);
        }
        if (tiles) release_tiles();
    }
}

#endif /* AMX_BUILD */

void k_attention_amx_forward(k_bf16_attention_engine engine, float *out, float *lse, const float *q, const float *k,
                             const float *v, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t head_dim,
                             void *scratch) {
    if (B <= 0 || T <= 0) return;
#if AMX_BUILD
    if (engine != K_BF16_ATTENTION_FP32 && k_bf16_attention_available(engine) &&
        k_attention_amx_serves(H, Hkv, head_dim)) {
        forward_amx(engine == K_BF16_ATTENTION_AMX, out, lse, q, k, v, B, T, H, Hkv, (int)head_dim, scratch);
        return;
    }
#else
    (void)engine, (void)q, (void)k, (void)v, (void)Hkv, (void)scratch;
#endif
    /* callers check first; a wrong call is loud, never silently wrong */
    for (int64_t i = 0; i < B * T * H * head_dim; i++)
        out[i] = NAN;
    for (int64_t i = 0; i < B * H * T; i++)
        lse[i] = NAN;
}

void k_attention_amx_backward(k_bf16_attention_engine engine, float *d_q, int accumulate_q, float *d_k,
                              int accumulate_k, float *d_v, int accumulate_v, const float *d_out, const float *q,
                              const float *k, const float *v, const float *out, const float *lse, int64_t B, int64_t T,
                              int64_t H, int64_t Hkv, int64_t head_dim, void *scratch) {
    if (B <= 0 || T <= 0 || (!d_q && !d_k && !d_v)) return;
#if AMX_BUILD
    if (engine != K_BF16_ATTENTION_FP32 && k_bf16_attention_available(engine) &&
        k_attention_amx_serves(H, Hkv, head_dim)) {
        backward_amx(engine == K_BF16_ATTENTION_AMX, d_q, accumulate_q, d_k, accumulate_k, d_v, accumulate_v, d_out, q,
                     k, v, out, lse, B, T, H, Hkv, (int)head_dim, scratch);
        return;
    }
#else
    (void)engine, (void)accumulate_q, (void)accumulate_k, (void)accumulate_v, (void)d_out, (void)q, (void)k, (void)v,
        (void)out, (void)lse, (void)scratch;
#endif
    const int64_t hd = head_dim > 0 ? head_dim : 0;
    for (int64_t i = 0; d_q && i < B * T * H * hd; i++)
        d_q[i] = NAN;
    for (int64_t i = 0; d_k && i < B * T * Hkv * hd; i++)
        d_k[i] = NAN;
    for (int64_t i = 0; d_v && i < B * T * Hkv * hd; i++)
        d_v[i] = NAN;
}
