/* An AVX-512 sgemm micro-kernel registered into BLIS.
 *
 * Why: Debian's BLIS 0.9.0 is built without the `skx` sub-configuration
 * (its library holds haswell, sandybridge, penryn and zen* kernels only), so
 * on an AVX-512 machine bli_arch_query_id() reports "haswell" and every
 * product runs the 256-bit 6x16 kernel: half the multiply-adds per
 * instruction the cores can issue. BLIS is built to be instantiated with
 * other micro-kernels, so we keep BLIS for everything else (blocking,
 * packing, the loops around the micro-kernel) and hand it a copy of its own
 * context with the single-precision gemm micro-kernel and block sizes
 * replaced. Measured on the training shapes (M = 768..4096, N, K = 128..1536,
 * one thread), the products ran 1.4-1.7x faster than through the haswell
 * kernel, and agree with it to float rounding.
 *
 * The micro-kernel computes a 24 x 16 tile of C: 24 zmm accumulators (one
 * 16-float vector per row), one vector of B and 24 broadcast elements of A
 * per step of the inner dimension (the broadcasts fold into the FMAs as
 * memory operands). A 12 x 32 tile (two vectors per row, half the broadcasts)
 * ran 10-15% slower on the training shapes: BLIS has no packing kernel for
 * 32-wide panels and falls back to an element-by-element copy, while 24- and
 * 16-wide panels have packing kernels. It prefers row-stored C (the row-major
 * layout k_gemm passes), so BLIS never transposes the problem for it. Edge
 * tiles (m < 24 or n < 16; BLIS pads the packed panels with zeros) and C with
 * a non-unit column stride go through a scalar write-back.
 *
 * Small products (an edge of C under 64) stay on BLIS's own "sup" path, which
 * skips packing and is faster there (k_gemm_ukernel_pays). */
#include "kernels/gemm_ukernel.h"

#include <pthread.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop

#include <immintrin.h>

#include "kernels/isa.h"
#include "kernels/transpose16.h"

/* Register block: MR rows x NR columns of C. */
#define UK_MR 24
#define UK_NR 16
/* Cache blocks (multiples of MR / NR): a KC x NR panel of B (16 KB) stays in
 * L1, an MC x KC block of A (480 KB) in L2, a KC x NC block of B in L3. */
#define UK_MC 480
#define UK_KC 256
#define UK_NC 3072

/* C [m,n] (row stride rs_c, column stride cs_c) = alpha * A·B + beta * C, with
 * A the packed MR x k micro-panel (a[p*MR + i]) and B the packed k x NR
 * micro-panel (b[p*NR + j]). beta == 0 never reads C. */
static K_TARGET_AVX512 void sgemm_avx512_24x16(dim_t m, dim_t n, dim_t k, float *restrict alpha, float *restrict a,
                                               float *restrict b, float *restrict beta, float *restrict c, inc_t rs_c,
                                               inc_t cs_c, auxinfo_t *restrict data, cntx_t *restrict cntx) {
    (void)data;
    (void)cntx;
    __m512 acc[UK_MR]; /* row i of the tile */
#pragma GCC unroll 32
    for (int i = 0; i < UK_MR; i++)
        acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (dim_t p = 0; p < k; p++) {
        const __m512 b_row = _mm512_loadu_ps(b);
#pragma GCC unroll 32
        for (int i = 0; i < UK_MR; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b_row, acc[i]);
        a += UK_MR;
        b += UK_NR;
    }
    const float alpha_value = *alpha, beta_value = *beta;
    const __m512 alpha_vec = _mm512_set1_ps(alpha_value), beta_vec = _mm512_set1_ps(beta_value);
    if (m == UK_MR && n == UK_NR && cs_c == 1) {
#pragma GCC unroll 32
        for (int i = 0; i < UK_MR; i++) {
            float *c_row = c + i * rs_c;
            __m512 value = _mm512_mul_ps(alpha_vec, acc[i]);
            if (beta_value != 0.0f) value = _mm512_fmadd_ps(beta_vec, _mm512_loadu_ps(c_row), value);
            _mm512_storeu_ps(c_row, value);
        }
        return;
    }
    float tile[UK_MR * UK_NR] __attribute__((aligned(64))); /* [MR, NR] */
#pragma GCC unroll 32
    for (int i = 0; i < UK_MR; i++)
        _mm512_store_ps(tile + i * UK_NR, acc[i]);
    for (dim_t i = 0; i < m; i++)
        for (dim_t j = 0; j < n; j++) {
            float *c_ij = c + i * rs_c + j * cs_c;
            *c_ij = alpha_value * tile[i * UK_NR + j] + (beta_value != 0.0f ? beta_value * *c_ij : 0.0f);
        }
}

/* ---- packing ----
 * BLIS copies each block of A into micro-panels of MR rows and each block of
 * B into micro-panels of NR columns, k-major: p[i + j*ldp] = kappa *
 * a[i*inca + j*lda] for the cdim <= mnr rows of the panel and j < n, zeros in
 * the rows past cdim and the columns n..n_max-1. Row-major operands make one
 * of the two strides 1: with inca == 1 a column of the panel is a contiguous
 * run (vector copies); with lda == 1 the panel is the transpose of contiguous
 * rows, done 16 x 16 in registers. BLIS's own packing kernels for these
 * widths gather element by element (they took a fifth to a third of a
 * training GEMM's time at K = 128). */

static inline K_TARGET_AVX512 __mmask16 lane_mask(int64_t lanes) {
    return lanes >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << lanes) - 1u);
}

/* One micro-panel of mnr (a multiple of 8, at most 32) rows; see above. */
static inline K_TARGET_AVX512 void pack_panel(int mnr, dim_t cdim, dim_t n, dim_t n_max, float kappa,
                                              const float *restrict a, inc_t inca, inc_t lda, float *restrict p,
                                              inc_t ldp) {
    const __m512 scale = _mm512_set1_ps(kappa);
    if (inca == 1) {
        for (dim_t j = 0; j < n; j++)
            for (int r0 = 0; r0 < mnr; r0 += 16) {
                const int64_t valid = cdim - r0 < 0 ? 0 : cdim - r0;
                __m512 v = _mm512_maskz_loadu_ps(lane_mask(valid), a + j * lda + r0);
                if (kappa != 1.0f) v = _mm512_mul_ps(v, scale);
                _mm512_mask_storeu_ps(p + j * ldp + r0, lane_mask(mnr - r0), v);
            }
    } else if (lda == 1) {
        for (int r0 = 0; r0 < mnr; r0 += 16) {
            const int64_t rows = cdim - r0 < 0 ? 0 : (cdim - r0 < 16 ? cdim - r0 : 16);
            const __mmask16 store = lane_mask(mnr - r0);
            for (dim_t j0 = 0; j0 < n; j0 += 16) {
                const int64_t cols = n - j0 < 16 ? n - j0 : 16;
                __m512 v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = i < rows ? _mm512_maskz_loadu_ps(lane_mask(cols), a + (r0 + i) * inca + j0)
                                    : _mm512_setzero_ps();
                k_transpose16(v);
                for (int64_t c = 0; c < cols; c++)
                    _mm512_mask_storeu_ps(p + (j0 + c) * ldp + r0, store,
                                          kappa != 1.0f ? _mm512_mul_ps(v[c], scale) : v[c]);
            }
        }
    } else {
        for (dim_t j = 0; j < n; j++) {
            for (dim_t i = 0; i < cdim; i++)
                p[j * ldp + i] = kappa * a[i * inca + j * lda];
            for (dim_t i = cdim; i < mnr; i++)
                p[j * ldp + i] = 0.0f;
        }
    }
    for (dim_t j = n; j < n_max; j++)
        for (int i = 0; i < mnr; i++)
            p[j * ldp + i] = 0.0f;
}

/* BLIS packm kernels for panels of UK_MR (A) and UK_NR (B) rows. */
static K_TARGET_AVX512 void spackm_mr(conj_t conja, pack_t schema, dim_t cdim, dim_t n, dim_t n_max,
                                      float *restrict kappa, float *restrict a, inc_t inca, inc_t lda,
                                      float *restrict p, inc_t ldp, cntx_t *restrict cntx) {
    (void)conja, (void)schema, (void)cntx; /* real data: no conjugation; one layout for both schemas */
    pack_panel(UK_MR, cdim, n, n_max, *kappa, a, inca, lda, p, ldp);
}

static K_TARGET_AVX512 void spackm_nr(conj_t conja, pack_t schema, dim_t cdim, dim_t n, dim_t n_max,
                                      float *restrict kappa, float *restrict a, inc_t inca, inc_t lda,
                                      float *restrict p, inc_t ldp, cntx_t *restrict cntx) {
    (void)conja, (void)schema, (void)cntx;
    pack_panel(UK_NR, cdim, n, n_max, *kappa, a, inca, lda, p, ldp);
}

static cntx_t avx512_context;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void set_float_blocksize(bszid_t id, dim_t size) {
    bli_blksz_set_def(size, BLIS_FLOAT, &avx512_context.blkszs[id]);
    bli_blksz_set_max(size, BLIS_FLOAT, &avx512_context.blkszs[id]);
}

/* A copy of BLIS's context for this machine with our float kernel, packing
 * kernels and blocks (the other types keep BLIS's own). */
static void build_context(void) {
    avx512_context = *bli_gks_query_cntx();
    bli_func_set_dt((void_fp)sgemm_avx512_24x16, BLIS_FLOAT, &avx512_context.l3_nat_ukrs[BLIS_GEMM_UKR]);
    bli_func_set_dt((void_fp)sgemm_avx512_24x16, BLIS_FLOAT, &avx512_context.l3_vir_ukrs[BLIS_GEMM_UKR]);
    bli_mbool_set_dt(TRUE, BLIS_FLOAT, &avx512_context.l3_nat_ukrs_prefs[BLIS_GEMM_UKR]); /* prefers row-stored C */
    set_float_blocksize(BLIS_MR, UK_MR);
    set_float_blocksize(BLIS_NR, UK_NR);
    set_float_blocksize(BLIS_MC, UK_MC);
    set_float_blocksize(BLIS_KC, UK_KC);
    set_float_blocksize(BLIS_NC, UK_NC);
    bli_func_set_dt((void_fp)spackm_mr, BLIS_FLOAT, &avx512_context.packm_kers[BLIS_PACKM_24XK_KER]);
    bli_func_set_dt((void_fp)spackm_nr, BLIS_FLOAT, &avx512_context.packm_kers[BLIS_PACKM_16XK_KER]);
}

/* The context with our micro-kernel where the active level is AVX-512;
 * NULL (BLIS's own context) elsewhere. */
void *k_gemm_ukernel_context(void) {
    if (k_isa_active() != K_ISA_AVX512) return NULL;
    pthread_once(&avx512_once, build_context);
    return &avx512_context;
}

int k_gemm_ukernel_pays(int64_t M, int64_t N, int64_t K) {
    return k_isa_active() == K_ISA_AVX512 && M >= 64 && N >= 64 && K >= 16;
}
