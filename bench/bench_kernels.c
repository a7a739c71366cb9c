/* dbranch bench kernels: GFLOP/s of the GEMM wrapper (k_gemm) beside raw BLIS
 * on the linear-layer shapes of a small transformer, and of the flash-style
 * attention kernels, at 1 and 2 threads (or the count given).
 *
 * Why both GEMM columns: k_gemm must cost nothing over calling BLIS directly
 * (ratio ~1.00). Why attention beside GEMM: GEMM is the machine's practical
 * matrix-product speed, and attention is judged against it (the target is
 * forward+backward at >= 0.3 of the 2-thread GEMM figure).
 *
 * Each figure is the median of --repeat timed runs after one warm-up run.
 * FLOPs: GEMM 2*M*N*K; attention 4*T*T*hd per (b, head) forward (q·k and p·v,
 * 2 FLOPs per multiply-add), halved for the causal mask, backward twice that. */
/* blis.h is not a system header here: silence its unused static helpers and
 * range checks, just for the include (as kernels/gemm.c does). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/timing.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm.h"

typedef struct {
    const char *layer; /* which linear map of a block, and which of its products */
    int trans_a, trans_b;
    int64_t M, N, K;
    float beta; /* 0 for the forward product, 1 for the accumulating backward ones */
} gemm_case;

/* 4096 tokens (e.g. B=16, T=256) of a C=384 model: qkv 384->1152, fc 384->1536,
 * proj 1536->384; for each, y = x W^T (NT), d_x += d_y W (NN), d_W += d_y^T x (TN). */
static const gemm_case gemm_cases[] = {
    {"qkv   forward  y=xW^T", 0, 1, 4096, 1152, 384, 0.0f},   {"qkv   backward dx=dyW", 0, 0, 4096, 384, 1152, 1.0f},
    {"qkv   backward dW=dy^Tx", 1, 0, 1152, 384, 4096, 1.0f}, {"fc    forward  y=xW^T", 0, 1, 4096, 1536, 384, 0.0f},
    {"fc    backward dx=dyW", 0, 0, 4096, 384, 1536, 1.0f},   {"fc    backward dW=dy^Tx", 1, 0, 1536, 384, 4096, 1.0f},
    {"proj  forward  y=xW^T", 0, 1, 4096, 384, 1536, 0.0f},   {"proj  backward dx=dyW", 0, 0, 4096, 1536, 384, 1.0f},
    {"proj  backward dW=dy^Tx", 1, 0, 384, 1536, 4096, 1.0f},
};
enum { N_GEMM_CASES = (int)(sizeof gemm_cases / sizeof gemm_cases[0]) };

typedef struct {
    const char *name;
    int64_t B, T, H, Hkv, head_dim;
} attention_case;

static const attention_case attention_cases[] = {
    {"MHA B=16 T=256 H=6 Hkv=6 hd=64", 16, 256, 6, 6, 64},
    {"GQA B=16 T=256 H=6 Hkv=2 hd=64", 16, 256, 6, 2, 64},
};
enum { N_ATTENTION_CASES = (int)(sizeof attention_cases / sizeof attention_cases[0]) };

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch bench kernels [--threads N] [--repeat R]\n\n"
                 "GFLOP/s of k_gemm beside raw bli_sgemm (M=4096 linear-layer shapes, every\n"
                 "transpose case of linear forward/backward), and of attention forward, backward\n"
                 "and forward+backward (B=16, T=256, H=6, hd=64; MHA and GQA).\n\n"
                 "  --threads N   run at N threads only (default: 1 and 2)\n"
                 "  --repeat R    timed runs per figure, median reported (default 5)\n");
}

static int parse_positive(const char *option, const char *text, int *value) {
    char *end = NULL;
    long parsed = text ? strtol(text, &end, 10) : 0;
    if (!text || *end != '\0' || parsed < 1 || parsed > 1024) {
        fprintf(stderr, "dbranch bench kernels: %s needs a whole number in 1..1024, got '%s'\n", option,
                text ? text : "(nothing)");
        return 0;
    }
    *value = (int)parsed;
    return 1;
}

/* ---------------------------------------------------------------- GEMM */

typedef struct {
    float *A, *B, *C; /* large enough for every case */
} gemm_buffers;

static void run_gemm(const gemm_case *c, const gemm_buffers *buf, int raw) {
    /* row-major, tightly packed: lda is op(A)'s stored row length */
    const int64_t lda = c->trans_a ? c->M : c->K, ldb = c->trans_b ? c->K : c->N, ldc = c->N;
    if (!raw) {
        k_gemm(c->trans_a, c->trans_b, c->M, c->N, c->K, 1.0f, buf->A, lda, buf->B, ldb, c->beta, buf->C, ldc);
        return;
    }
    float alpha = 1.0f, beta = c->beta;
    bli_sgemm(c->trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, c->trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              (dim_t)c->M, (dim_t)c->N, (dim_t)c->K, &alpha, buf->A, (inc_t)lda, 1, buf->B, (inc_t)ldb, 1, &beta,
              buf->C, (inc_t)ldc, 1);
}

/* Median GFLOP/s of one case through the wrapper and through bli_sgemm.
 * The two alternate run by run, so a change in machine load (the cores are
 * shared) hits both alike and their ratio stays meaningful. */
static void time_gemm(const gemm_case *c, const gemm_buffers *buf, int repeat, double *wrapper_times, double *raw_times,
                      double *wrapper_rate, double *raw_rate) {
    run_gemm(c, buf, 0); /* warm-up: BLIS's packing buffers, page faults */
    run_gemm(c, buf, 1);
    for (int r = 0; r < repeat; r++) {
        double start = omp_get_wtime();
        run_gemm(c, buf, 0);
        wrapper_times[r] = omp_get_wtime() - start;
        start = omp_get_wtime();
        run_gemm(c, buf, 1);
        raw_times[r] = omp_get_wtime() - start;
    }
    const double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    *wrapper_rate = flops / bench_median_sort(wrapper_times, repeat) * 1e-9;
    *raw_rate = flops / bench_median_sort(raw_times, repeat) * 1e-9;
}

/* ----------------------------------------------------------- attention */

typedef struct {
    float *q, *k, *v, *out, *lse, *d_out, *d_q, *d_k, *d_v, *scratch;
    void *amx_scratch; /* NULL without a bf16 attention engine */
} attention_buffers;

typedef struct {
    double forward, backward, both; /* GFLOP/s */
} attention_rates;

/* One forward (+ backward) on the float32 kernels, or on the AMX bf16 ones. */
/* engine: K_BF16_ATTENTION_FP32 runs the float32 kernels */
static void attention_forward(const attention_case *c, const attention_buffers *buf, k_bf16_attention_engine engine) {
    if (engine != K_BF16_ATTENTION_FP32)
        k_attention_amx_forward(engine, buf->out, buf->lse, buf->q, buf->k, buf->v, c->B, c->T, c->H, c->Hkv,
                                c->head_dim, buf->amx_scratch);
    else
        k_attention_forward(buf->out, buf->lse, buf->q, buf->k, buf->v, c->B, c->T, c->H, c->Hkv, c->head_dim);
}
static void attention_backward(const attention_case *c, const attention_buffers *buf, k_bf16_attention_engine engine) {
    if (engine != K_BF16_ATTENTION_FP32)
        k_attention_amx_backward(engine, buf->d_q, 0, buf->d_k, 0, buf->d_v, 0, buf->d_out, buf->q, buf->k, buf->v,
                                 buf->out, buf->lse, c->B, c->T, c->H, c->Hkv, c->head_dim, buf->amx_scratch);
    else
        k_attention_backward(buf->d_q, buf->d_k, buf->d_v, buf->d_out, buf->q, buf->k, buf->v, buf->out, buf->lse, c->B,
                             c->T, c->H, c->Hkv, c->head_dim, buf->scratch);
}

static attention_rates time_attention(const attention_case *c, const attention_buffers *buf,
                                      k_bf16_attention_engine engine, int repeat, double *times) {
    const double forward_flops = 4.0 * (double)c->T * (double)c->T * (double)c->head_dim * (double)(c->B * c->H) / 2.0;
    attention_rates rates;
    /* warm-up, and a valid out/lse for the backward runs */
    attention_forward(c, buf, engine);
    attention_backward(c, buf, engine);
    for (int pass = 0; pass < 3; pass++) {
        for (int r = 0; r < repeat; r++) {
            const double start = omp_get_wtime();
            if (pass != 1) attention_forward(c, buf, engine);
            if (pass != 0) attention_backward(c, buf, engine);
            times[r] = omp_get_wtime() - start;
        }
        const double seconds = bench_median_sort(times, repeat);
        if (pass == 0) rates.forward = forward_flops / seconds * 1e-9;
        if (pass == 1) rates.backward = 2.0 * forward_flops / seconds * 1e-9;
        if (pass == 2) rates.both = 3.0 * forward_flops / seconds * 1e-9;
    }
    return rates;
}

/* ---------------------------------------------------------------- main */

static float *bench_alloc(int64_t n, dt_rng *rng, int *ok) {
    float *x = aligned_alloc(64, (size_t)((n * (int64_t)sizeof(float) + 63) / 64 * 64));
    if (!x) {
        *ok = 0;
        return NULL;
    }
    dt_rng_fill_normal(rng, x, n, 0.5f);
    return x;
}

int bench_kernels_main(int argc, char **argv) {
    int thread_counts[2] = {1, 2}, n_thread_counts = 2, repeat = 5;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!parse_positive("--threads", i + 1 < argc ? argv[++i] : NULL, &thread_counts[0])) return 2;
            n_thread_counts = 1;
        } else if (!strcmp(argv[i], "--repeat")) {
            if (!parse_positive("--repeat", i + 1 < argc ? argv[++i] : NULL, &repeat)) return 2;
        } else {
            fprintf(stderr, "dbranch bench kernels: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }

    dt_rng rng;
    dt_rng_seed(&rng, 1234);
    int ok = 1;
    int64_t gemm_a = 0, gemm_b = 0, gemm_c = 0;
    for (int i = 0; i < N_GEMM_CASES; i++) {
        const gemm_case *c = &gemm_cases[i];
        gemm_a = c->M * c->K > gemm_a ? c->M * c->K : gemm_a;
        gemm_b = c->K * c->N > gemm_b ? c->K * c->N : gemm_b;
        gemm_c = c->M * c->N > gemm_c ? c->M * c->N : gemm_c;
    }
    gemm_buffers gemm = {bench_alloc(gemm_a, &rng, &ok), bench_alloc(gemm_b, &rng, &ok),
                         bench_alloc(gemm_c, &rng, &ok)};
    int64_t q_floats = 0, kv_floats = 0, lse_floats = 0, scratch_floats = 0;
    size_t amx_bytes = 0;
    for (int i = 0; i < N_ATTENTION_CASES; i++) {
        const attention_case *c = &attention_cases[i];
        const int64_t nq = c->B * c->T * c->H * c->head_dim, nkv = c->B * c->T * c->Hkv * c->head_dim;
        const int64_t ns = k_attention_backward_scratch(c->B, c->T, c->H, c->Hkv, c->head_dim);
        q_floats = nq > q_floats ? nq : q_floats;
        kv_floats = nkv > kv_floats ? nkv : kv_floats;
        lse_floats = c->B * c->H * c->T > lse_floats ? c->B * c->H * c->T : lse_floats;
        scratch_floats = ns > scratch_floats ? ns : scratch_floats;
        const size_t forward_bytes = k_attention_amx_forward_scratch(c->B, c->T, c->Hkv, c->head_dim);
        const size_t backward_bytes = k_attention_amx_backward_scratch(c->B, c->T, c->H, c->Hkv, c->head_dim);
        amx_bytes = forward_bytes > amx_bytes ? forward_bytes : amx_bytes;
        amx_bytes = backward_bytes > amx_bytes ? backward_bytes : amx_bytes;
    }
    attention_buffers attn = {bench_alloc(q_floats, &rng, &ok),
                              bench_alloc(kv_floats, &rng, &ok),
                              bench_alloc(kv_floats, &rng, &ok),
                              bench_alloc(q_floats, &rng, &ok),
                              bench_alloc(lse_floats, &rng, &ok),
                              bench_alloc(q_floats, &rng, &ok),
                              bench_alloc(q_floats, &rng, &ok),
                              bench_alloc(kv_floats, &rng, &ok),
                              bench_alloc(kv_floats, &rng, &ok),
                              bench_alloc(scratch_floats, &rng, &ok),
                              NULL};
    /* the float32 kernels, then every bf16 engine this CPU runs */
    k_bf16_attention_engine engines[3] = {K_BF16_ATTENTION_FP32};
    int n_engines = 1;
    if (k_bf16_attention_available(K_BF16_ATTENTION_AMX)) engines[n_engines++] = K_BF16_ATTENTION_AMX;
    if (k_bf16_attention_available(K_BF16_ATTENTION_AVX512_BF16)) engines[n_engines++] = K_BF16_ATTENTION_AVX512_BF16;
    if (n_engines > 1 && !(attn.amx_scratch = aligned_alloc(64, (amx_bytes + 63) / 64 * 64))) ok = 0;
    double *times = malloc(2 * (size_t)repeat * sizeof(double));
    int status = 0;
    if (!ok || !times) {
        fprintf(stderr, "dbranch bench kernels: out of memory allocating the benchmark buffers\n");
        status = 1;
        goto done;
    }

    const int saved_threads = k_get_threads();
    printf("dbranch bench kernels: median of %d runs after a warm-up, GFLOP/s\n", repeat);
    for (int t = 0; t < n_thread_counts; t++) {
        const int threads = thread_counts[t];
        k_set_threads(threads);
        printf("\n== %d thread%s ==\n", threads, threads == 1 ? "" : "s");
        printf("%-26s %4s %5s %5s %5s %9s %9s %7s\n", "GEMM (M,N,K)", "op", "M", "N", "K", "k_gemm", "bli_sgemm",
               "ratio");
        double sum_wrapper = 0.0, sum_raw = 0.0;
        for (int i = 0; i < N_GEMM_CASES; i++) {
            const gemm_case *c = &gemm_cases[i];
            double wrapper, raw;
            time_gemm(c, &gemm, repeat, times, times + repeat, &wrapper, &raw);
            sum_wrapper += wrapper;
            sum_raw += raw;
            printf("%-26s %c%c   %5lld %5lld %5lld %9.1f %9.1f %7.3f\n", c->layer, c->trans_a ? 'T' : 'N',
                   c->trans_b ? 'T' : 'N', (long long)c->M, (long long)c->N, (long long)c->K, wrapper, raw,
                   wrapper / raw);
            fflush(stdout);
        }
        const double gemm_mean = sum_wrapper / N_GEMM_CASES;
        printf("%-26s %28s %9.1f %9.1f %7.3f\n", "mean", "", gemm_mean, sum_raw / N_GEMM_CASES, sum_wrapper / sum_raw);

        printf("\n%-50s %9s %9s %9s %12s\n", "attention (causal)", "forward", "backward", "fwd+bwd", "fwd+bwd/GEMM");
        for (int i = 0; i < N_ATTENTION_CASES; i++)
            for (int e = 0; e < n_engines; e++) {
                const attention_rates rates = time_attention(&attention_cases[i], &attn, engines[e], repeat, times);
                char name[64];
                snprintf(name, sizeof name, "%s%s%s", attention_cases[i].name, e ? " bf16 " : "",
                         e ? k_bf16_attention_name(engines[e]) : "");
                printf("%-50s %9.1f %9.1f %9.1f %12.3f\n", name, rates.forward, rates.backward, rates.both,
                       rates.both / gemm_mean);
                fflush(stdout);
            }
    }
    printf("\nratio: k_gemm / bli_sgemm per shape; fwd+bwd/GEMM: attention forward+backward\n"
           "GFLOP/s over the mean k_gemm GFLOP/s at the same thread count; bf16 amx, bf16 avx512_bf16:\n"
           "the attention of bf16 training on AMX tiles or on vdpbf16ps (kernels/attention_amx.h),\n"
           "each where the CPU has it.\n");
    k_set_threads(saved_threads);

done:
    free(gemm.A), free(gemm.B), free(gemm.C);
    free(attn.q), free(attn.k), free(attn.v), free(attn.out), free(attn.lse), free(attn.d_out);
    free(attn.d_q), free(attn.d_k), free(attn.d_v), free(attn.scratch), free(attn.amx_scratch);
    free(times);
    return status;
}
