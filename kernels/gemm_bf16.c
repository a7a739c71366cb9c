/* bfloat16 matrix products (gemm_bf16.h): the widen engine over k_gemm and
 * the oneDNN engine over cached bf16 matmul primitives.
 *
 * Hot-path memory: each thread keeps grow-only scratch for converted
 * operands and a small cache of oneDNN primitives keyed by the product's
 * shape, strides and scalars, so after the first step of a training run
 * nothing is allocated (a training step has a dozen or so distinct shapes). */
#include "kernels/gemm_bf16.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/type_traits.h"

/* Conversions of fewer elements than this run on the calling thread. */
#define CONVERT_PARALLEL_MIN 65536
/* oneDNN primitives each thread keeps (round-robin replacement). */
#define PRIMITIVE_CACHE_SIZE 48

static inline int convert_in_parallel(int64_t n) { return n >= CONVERT_PARALLEL_MIN && !omp_in_parallel(); }

/* Threaded over spans of CONVERT_PARALLEL_MIN: as one `omp parallel for simd`
 * loop, GCC 12 emitted scalar code for the path that runs when the region is
 * not parallel (inside the row-split training step, always), one element per
 * iteration, which a bf16 char step profiled at about twice narrow_rows'
 * cost per element. */
void k_bf16_round(uint16_t *dst, const float *src, int64_t n) {
    const int64_t n_spans = (n + CONVERT_PARALLEL_MIN - 1) / CONVERT_PARALLEL_MIN;
#pragma omp parallel for schedule(static) if (convert_in_parallel(n))
    for (int64_t span = 0; span < n_spans; span++) {
        const int64_t begin = span * CONVERT_PARALLEL_MIN;
        k_bf16_round_range(dst + begin, src + begin,
                           n - begin < CONVERT_PARALLEL_MIN ? n - begin : CONVERT_PARALLEL_MIN);
    }
}

/* dst [rows, cols] packed = src [rows, cols] (row stride ld) rounded to bf16. */
static void narrow_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (convert_in_parallel(rows * cols))
    for (int64_t r = 0; r < rows; r++)
        k_bf16_round_range(dst + r * cols, src + r * ld, cols);
}

/* dst [rows, cols] packed float32 = src rounded to bf16 and widened back:
 * src float32 (src_f32, row stride ld) or already bf16 (src_bf16). */
static void widen_rows(float *dst, const float *src_f32, const uint16_t *src_bf16, int64_t rows, int64_t cols,
                       int64_t ld) {
    uint32_t *d_bits = (uint32_t *)(void *)dst;
#pragma omp parallel for schedule(static) if (convert_in_parallel(rows * cols))
    for (int64_t r = 0; r < rows; r++) {
        uint32_t *d = d_bits + r * cols;
        if (src_bf16) {
            const uint16_t *s = src_bf16 + r * ld;
#pragma omp simd
            for (int64_t c = 0; c < cols; c++)
                d[c] = (uint32_t)s[c] << 16;
        } else {
            const uint32_t *s = (const uint32_t *)(const void *)(src_f32 + r * ld);
#pragma omp simd
            for (int64_t c = 0; c < cols; c++)
                d[c] = k_bf16_rounded_bits(s[c]);
        }
    }
}

/* ---- per-thread scratch: grow-only, 64-byte aligned ---- */

typedef struct scratch {
    void *data;
    size_t bytes;
} scratch;

static void *scratch_reserve(scratch *s, size_t bytes) {
    if (bytes <= s->bytes) return s->data;
    free(s->data);
    s->data = NULL;
    s->bytes = 0;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (posix_memalign(&s->data, 64, rounded) != 0) return NULL;
    s->bytes = rounded;
    return s->data;
}

static _Thread_local scratch scratch_a, scratch_b;

/* ---- engine choice ---- */

static int engine_forced = 0;
static k_bf16_gemm_engine forced_engine = K_BF16_GEMM_WIDEN;

/* Read once: cpuid traps to the hypervisor in a VM, and every product asks. */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static k_bf16_gemm_engine default_engine = K_BF16_GEMM_WIDEN;

static void choose_default(void) {
    const k_cpu_bf16 cpu = k_cpu_bf16_features();
    default_engine = (cpu.avx512_bf16 || cpu.amx_bf16) ? K_BF16_GEMM_ONEDNN : K_BF16_GEMM_WIDEN;
}

k_bf16_gemm_engine k_bf16_gemm_default(void) {
    pthread_once(&default_once, choose_default);
    return default_engine;
}

k_bf16_gemm_engine k_bf16_gemm_active(void) { return engine_forced ? forced_engine : k_bf16_gemm_default(); }

const char *k_bf16_gemm_name(k_bf16_gemm_engine engine) { return engine == K_BF16_GEMM_ONEDNN ? "onednn" : "widen"; }

dt_status k_bf16_gemm_parse(const char *name, k_bf16_gemm_engine *engine) {
    if (!strcmp(name, "onednn"))
        *engine = K_BF16_GEMM_ONEDNN;
    else if (!strcmp(name, "widen"))
        *engine = K_BF16_GEMM_WIDEN;
    else
        return dt_errorf("bf16 GEMM engine '%s' must be onednn|widen", name);
    return DT_OK;
}

/* ---- oneDNN ---- */

static pthread_once_t onednn_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t onednn_engine = NULL;
static const char *onednn_kernel = "unavailable"; /* a static string of oneDNN's, or ours */
static char onednn_kernel_text[64];

/* The primitive, its memory objects and the key it was built for. */
typedef struct cached_product {
    int used, failed; /* failed: oneDNN refused this shape (the product then widens) */
    int trans_a, trans_b, has_bias;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    dnnl_primitive_t primitive;
    dnnl_memory_t a, b, c, bias;
} cached_product;

typedef struct product_cache {
    cached_product entries[PRIMITIVE_CACHE_SIZE];
    int next_victim;
    dnnl_stream_t stream; /* streams are not shared between threads */
} product_cache;

static _Thread_local product_cache *thread_cache = NULL;

/* Releases p's oneDNN objects; its key stays. */
static void release_product(cached_product *p) {
    if (p->primitive) dnnl_primitive_destroy(p->primitive);
    if (p->a) dnnl_memory_destroy(p->a);
    if (p->b) dnnl_memory_destroy(p->b);
    if (p->c) dnnl_memory_destroy(p->c);
    if (p->bias) dnnl_memory_destroy(p->bias);
    p->primitive = NULL;
    p->a = p->b = p->c = p->bias = NULL;
}

/* op(X) [rows, cols] of a row-major X with row stride ld, transposed or not,
 * as a oneDNN descriptor: a transpose is just swapped strides. */
static dnnl_status_t operand_desc(dnnl_memory_desc_t *desc, dnnl_data_type_t type, int64_t rows, int64_t cols,
                                  int64_t ld, int transposed) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
    return dnnl_memory_desc_init_by_strides(desc, 2, dims, type, strides);
}

/* Builds p for the key already in it; p->failed on any refusal. */
static void build_product(cached_product *p) {
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_matmul_desc_t matmul;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post_ops = NULL;
    dnnl_primitive_desc_t desc = NULL;
    p->failed = 1;
    if (operand_desc(&a, dnnl_bf16, p->M, p->K, p->lda, p->trans_a) != dnnl_success ||
        operand_desc(&b, dnnl_bf16, p->K, p->N, p->ldb, p->trans_b) != dnnl_success ||
        operand_desc(&c, dnnl_f32, p->M, p->N, p->ldc, 0) != dnnl_success ||
        (p->has_bias && operand_desc(&bias, dnnl_f32, 1, p->N, p->N, 0) != dnnl_success) ||
        dnnl_matmul_desc_init(&matmul, &a, &b, p->has_bias ? &bias : NULL, &c) != dnnl_success ||
        dnnl_primitive_attr_create(&attr))
        return;
    int ok = 1;
    if (p->alpha != 1.0f) ok = ok && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha) == dnnl_success;
    if (p->beta != 0.0f) {
        ok = ok && dnnl_post_ops_create(&post_ops) == dnnl_success &&
             dnnl_post_ops_append_sum(post_ops, p->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, post_ops) == dnnl_success;
    }
    ok = ok && dnnl_primitive_desc_create(&desc, &matmul, attr, onednn_engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&p->primitive, desc) == dnnl_success &&
         dnnl_memory_create(&p->a, &a, onednn_engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&p->b, &b, onednn_engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&p->c, &c, onednn_engine, DNNL_MEMORY_NONE) == dnnl_success &&
         (!p->has_bias || dnnl_memory_create(&p->bias, &bias, onednn_engine, DNNL_MEMORY_NONE) == dnnl_success);
    if (desc) dnnl_primitive_desc_destroy(desc);
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        release_product(p); /* failed stays set: this key widens from now on, without asking oneDNN again */
        return;
    }
    p->failed = 0;
}

/* Creates the engine and reads which kernel a training-shaped product gets. */
static void onednn_start(void) {
    if (dnnl_engine_create(&onednn_engine, dnnl_cpu, 0) != dnnl_success) {
        onednn_engine = NULL;
        return;
    }
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t matmul;
    dnnl_primitive_desc_t desc = NULL;
    if (operand_desc(&a, dnnl_bf16, 256, 128, 128, 0) == dnnl_success &&
        operand_desc(&b, dnnl_bf16, 128, 256, 128, 1) == dnnl_success &&
        operand_desc(&c, dnnl_f32, 256, 256, 256, 0) == dnnl_success &&
        dnnl_matmul_desc_init(&matmul, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&desc, &matmul, NULL, onednn_engine, NULL) == dnnl_success) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(desc, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) {
            snprintf(onednn_kernel_text, sizeof onednn_kernel_text, "%s", impl);
            onednn_kernel = onednn_kernel_text;
        }
        dnnl_primitive_desc_destroy(desc);
    } else {
        if (desc) dnnl_primitive_desc_destroy(desc);
        dnnl_engine_destroy(onednn_engine);
        onednn_engine = NULL;
    }
}

static int onednn_available(void) {
    pthread_once(&onednn_once, onednn_start);
    return onednn_engine != NULL;
}

const char *k_bf16_gemm_onednn_kernel(void) { return onednn_available() ? onednn_kernel : "unavailable"; }

dt_status k_bf16_gemm_force(k_bf16_gemm_engine engine) {
    if (engine == K_BF16_GEMM_ONEDNN && !onednn_available())
        return dt_errorf("bf16 GEMM engine onednn: oneDNN cannot build a bf16 matmul on this CPU (use widen)");
    engine_forced = 1;
    forced_engine = engine;
    return DT_OK;
}

void k_bf16_gemm_reset(void) { engine_forced = 0; }

dt_status k_bf16_gemm_from_environment(void) {
    const char *name = getenv("DBRANCH_BF16_GEMM");
    if (!name || !*name) return DT_OK;
    k_bf16_gemm_engine engine;
    if (k_bf16_gemm_parse(name, &engine) != DT_OK || k_bf16_gemm_force(engine) != DT_OK)
        return dt_error_context("DBRANCH_BF16_GEMM");
    return DT_OK;
}

/* This thread's primitive for the key, built on a miss; NULL when oneDNN
 * refuses it (or memory runs out). */
static cached_product *cached_primitive(int trans_a, int trans_b, int has_bias, int64_t M, int64_t N, int64_t K,
                                        int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
    product_cache *cache = thread_cache;
    if (!cache) {
        cache = calloc(1, sizeof *cache);
        if (!cache) return NULL;
        if (dnnl_stream_create(&cache->stream, onednn_engine, dnnl_stream_default_flags) != dnnl_success) {
            free(cache);
            return NULL;
        }
        thread_cache = cache;
    }
    for (int i = 0; i < PRIMITIVE_CACHE_SIZE; i++) {
        cached_product *p = &cache->entries[i];
        if (p->used && p->trans_a == trans_a && p->trans_b == trans_b && p->has_bias == has_bias && p->M == M &&
            p->N == N && p->K == K && p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->alpha == alpha &&
            p->beta == beta)
            return p->failed ? NULL : p;
    }
    cached_product *p = &cache->entries[cache->next_victim];
    cache->next_victim = (cache->next_victim + 1) % PRIMITIVE_CACHE_SIZE;
    release_product(p);
    *p = (cached_product){.used = 1,
                          .trans_a = trans_a,
                          .trans_b = trans_b,
                          .has_bias = has_bias,
                          .M = M,
                          .N = N,
                          .K = K,
                          .lda = lda,
                          .ldb = ldb,
                          .ldc = ldc,
                          .alpha = alpha,
                          .beta = beta};
    build_product(p);
    return p->failed ? NULL : p;
}

/* The stored rows and columns of an operand that op() turns into [rows, cols]. */
static void stored_extent(int transposed, int64_t rows, int64_t cols, int64_t *stored_rows, int64_t *stored_cols) {
    *stored_rows = transposed ? cols : rows;
    *stored_cols = transposed ? rows : cols;
}

/* The bf16 operand for oneDNN: the copy given, or the float32 narrowed into
 * scratch (then packed: *ld becomes the stored column count). */
static const uint16_t *bf16_operand(scratch *s, const float *f32, const uint16_t *bf16, int64_t stored_rows,
                                    int64_t stored_cols, int64_t *ld) {
    if (bf16) return bf16;
    uint16_t *dst = scratch_reserve(s, (size_t)(stored_rows * stored_cols) * sizeof(uint16_t));
    if (!dst) return NULL;
    narrow_rows(dst, f32, stored_rows, stored_cols, *ld);
    *ld = stored_cols;
    return dst;
}

/* 1 when the product ran on oneDNN; 0 to widen instead. bias [N] or NULL
 * (with a bias, beta is 0: see k_gemm_bf16_bias). */
static int onednn_product(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                          const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16, int64_t ldb,
                          float beta, const float *bias, float *C, int64_t ldc) {
    if (!onednn_available()) return 0;
    int64_t a_rows, a_cols, b_rows, b_cols;
    stored_extent(trans_a, M, K, &a_rows, &a_cols);
    stored_extent(trans_b, K, N, &b_rows, &b_cols);
    const uint16_t *a = bf16_operand(&scratch_a, A, A_bf16, a_rows, a_cols, &lda);
    const uint16_t *b = bf16_operand(&scratch_b, B, B_bf16, b_rows, b_cols, &ldb);
    if (!a || !b) return 0;
    cached_product *p = cached_primitive(trans_a, trans_b, bias != NULL, M, N, K, lda, ldb, ldc, alpha, beta);
    if (!p) return 0;
    if (dnnl_memory_set_data_handle(p->a, (void *)a) != dnnl_success ||
        dnnl_memory_set_data_handle(p->b, (void *)b) != dnnl_success ||
        dnnl_memory_set_data_handle(p->c, C) != dnnl_success ||
        (bias && dnnl_memory_set_data_handle(p->bias, (void *)bias) != dnnl_success))
        return 0;
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}, {DNNL_ARG_BIAS, p->bias}};
    if (dnnl_primitive_execute(p->primitive, thread_cache->stream, bias ? 4 : 3, args) != dnnl_success) return 0;
    return dnnl_stream_wait(thread_cache->stream) == dnnl_success;
}

/* The widen engine: both operands rounded into packed float32 scratch, then k_gemm. */
static dt_status widened_product(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                                 const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16,
                                 int64_t ldb, float beta, float *C, int64_t ldc) {
    int64_t a_rows, a_cols, b_rows, b_cols;
    stored_extent(trans_a, M, K, &a_rows, &a_cols);
    stored_extent(trans_b, K, N, &b_rows, &b_cols);
    float *a = scratch_reserve(&scratch_a, (size_t)(a_rows * a_cols) * sizeof(float));
    float *b = scratch_reserve(&scratch_b, (size_t)(b_rows * b_cols) * sizeof(float));
    if (!a || !b)
        return dt_errorf("bf16 GEMM: out of memory for the operand scratch of a %lld x %lld x %lld product",
                         (long long)M, (long long)N, (long long)K);
    widen_rows(a, A_bf16 ? NULL : A, A_bf16, a_rows, a_cols, lda);
    widen_rows(b, B_bf16 ? NULL : B, B_bf16, b_rows, b_cols, ldb);
    k_gemm(trans_a, trans_b, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
    return DT_OK;
}

dt_status k_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return DT_OK;
    if (K <= 0 || alpha == 0.0f) {
        k_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); /* C = beta C; no operand is read */
        return DT_OK;
    }
    if (k_bf16_gemm_active() == K_BF16_GEMM_ONEDNN &&
        onednn_product(trans_a, trans_b, M, N, K, alpha, A, A_bf16, lda, B, B_bf16, ldb, beta, NULL, C, ldc))
        return DT_OK;
    /* the widen engine, or a shape oneDNN refused (the same numbers, its own sum order) */
    return widened_product(trans_a, trans_b, M, N, K, alpha, A, A_bf16, lda, B, B_bf16, ldb, beta, C, ldc);
}

dt_status k_gemm_bf16_bias(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                           const uint16_t *A_bf16, int64_t lda, const float *B, const uint16_t *B_bf16, int64_t ldb,
                           const float *bias, float *C, int64_t ldc) {
    if (!bias) return k_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, A_bf16, lda, B, B_bf16, ldb, 0.0f, C, ldc);
    if (M <= 0 || N <= 0) return DT_OK;
    if (K > 0 && alpha != 0.0f && k_bf16_gemm_active() == K_BF16_GEMM_ONEDNN &&
        onednn_product(trans_a, trans_b, M, N, K, alpha, A, A_bf16, lda, B, B_bf16, ldb, 0.0f, bias, C, ldc))
        return DT_OK;
    /* the bias as C's first value, then the product added: the float32 linear map's order */
    for (int64_t i = 0; i < M; i++)
        memcpy(C + i * ldc, bias, (size_t)N * sizeof(float));
    return k_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, A_bf16, lda, B, B_bf16, ldb, 1.0f, C, ldc);
}
