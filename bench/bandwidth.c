/* The read-bandwidth probe (see bandwidth.h). Each thread sums one contiguous
 * slab with several independent vector accumulators, so the loop is limited
 * by loads, not by the latency of the additions. */
#include "bench/bandwidth.h"
#include "bench/timing.h"
#include "kernels/isa.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Sum of the first n - n % 64 floats of x with four zmm accumulators. */
static K_TARGET_AVX512 double slab_sum_avx512(const float *x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    return (double)_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Sum of x [n], one thread's share: AVX-512 where the active level has it
 * (kernels/isa.h), else the compiler's vectorisation of a plain loop. */
static double slab_sum(const float *x, int64_t n) {
    const int64_t whole = n - n % 64;
    double total = 0.0;
    if (k_isa_active() == K_ISA_AVX512)
        total = slab_sum_avx512(x, whole);
    else {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t j = 0; j < whole; j++)
            acc += x[j];
        total = acc;
    }
    for (int64_t i = whole; i < n; i++)
        total += x[i];
    return total;
}

double bench_bandwidth_sum(const float *x, int64_t n) {
    double total = 0.0;
#pragma omp parallel reduction(+ : total)
    {
        int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t begin = n * id / threads, end = n * (id + 1) / threads;
        total += slab_sum(x + begin, end - begin);
    }
    return total;
}

dt_status bench_read_probe_init(bench_read_probe *probe, int64_t bytes) {
    memset(probe, 0, sizeof *probe);
    if (bytes < 64 * 1024)
        return dt_errorf("bandwidth probe: need a buffer of >= 64 KiB (got %lld bytes)", (long long)bytes);
    int64_t n = bytes / (int64_t)sizeof(float);
    if (posix_memalign((void **)&probe->buffer, 64, (size_t)n * sizeof(float)) != 0) {
        probe->buffer = NULL;
        return dt_errorf("bandwidth probe: cannot allocate %lld bytes", (long long)bytes);
    }
    probe->n_floats = n;
    /* First touch with the same split as the reads. Small exact values: the sum is exact. */
    float *x = probe->buffer;
#pragma omp parallel
    {
        int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t begin = n * id / threads, end = n * (id + 1) / threads;
        for (int64_t i = begin; i < end; i++)
            x[i] = (float)(i & 7) * 0.125f;
    }
    return DT_OK;
}

double bench_read_probe_pass(bench_read_probe *probe) {
    double t0 = bench_now_seconds();
    probe->checksum = bench_bandwidth_sum(probe->buffer, probe->n_floats);
    double seconds = bench_now_seconds() - t0;
    if (probe->n_passes == 0 || seconds < probe->best_seconds) probe->best_seconds = seconds;
    probe->n_passes++;
    return (double)probe->n_floats * 4.0 / seconds * 1e-9;
}

void bench_read_probe_free(bench_read_probe *probe) {
    free(probe->buffer);
    memset(probe, 0, sizeof *probe);
}

dt_status bench_bandwidth_probe(int64_t bytes, int passes, bench_bandwidth *result) {
    if (passes < 1) return dt_errorf("bandwidth probe: need >= 1 pass (got %d)", passes);
    bench_read_probe probe;
    if (bench_read_probe_init(&probe, bytes) != DT_OK) return DT_ERR;
    double *gbps = malloc((size_t)passes * sizeof(double));
    if (!gbps) {
        bench_read_probe_free(&probe);
        return dt_errorf("bandwidth probe: out of memory");
    }
    for (int p = 0; p < passes; p++)
        gbps[p] = bench_read_probe_pass(&probe);
    qsort(gbps, (size_t)passes, sizeof(double), bench_compare_doubles);
    result->best_gbps = bench_read_probe_best_gbps(&probe);
    result->median_gbps = gbps[passes / 2];
    result->bytes = probe.n_floats * (int64_t)sizeof(float);
    result->passes = passes;
    result->threads = omp_get_max_threads();
    result->checksum = probe.checksum;
    free(gbps);
    bench_read_probe_free(&probe);
    return DT_OK;
}
