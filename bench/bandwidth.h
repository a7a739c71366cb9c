/* STREAM-style read-bandwidth probe: the yardstick for decode, which is bound
 * by how fast weights stream from memory. Sums a float buffer much larger than
 * the last-level cache with OpenMP over the current thread count; the best of
 * several passes is the machine's attainable read bandwidth.
 *
 * Two ways to use it: bench_bandwidth_probe() runs N passes back to back; the
 * bench_read_probe object lets a benchmark interleave single passes with the
 * work it measures, so a shared machine's quiet and busy moments hit the
 * yardstick and the measurement alike. */
#ifndef BENCH_BANDWIDTH_H
#define BENCH_BANDWIDTH_H

#include <stdint.h>

#include "core/error.h"

enum { BENCH_BANDWIDTH_DEFAULT_MIB = 512 };

typedef struct bench_bandwidth {
    double best_gbps;   /* 1e9 bytes per second, fastest pass */
    double median_gbps; /* median pass */
    int64_t bytes;      /* buffer size */
    int passes;
    int threads;
    double checksum; /* the sum (keeps the reads from being optimised away; tests check it) */
} bench_bandwidth;

/* Reads a buffer of `bytes` bytes `passes` times (the buffer is allocated,
 * filled in parallel so its pages are spread like the readers, and freed). */
dt_status bench_bandwidth_probe(int64_t bytes, int passes, bench_bandwidth *result);

/* A probe buffer kept across passes. */
typedef struct bench_read_probe {
    float *buffer; /* [n_floats], element i = (i & 7) / 8 */
    int64_t n_floats;
    int n_passes;
    double best_seconds; /* fastest pass so far */
    double checksum;     /* sum of the last pass */
} bench_read_probe;

dt_status bench_read_probe_init(bench_read_probe *probe, int64_t bytes);
/* One timed pass; returns its GB/s. */
double bench_read_probe_pass(bench_read_probe *probe);
static inline double bench_read_probe_best_gbps(const bench_read_probe *probe) {
    return probe->n_passes ? (double)probe->n_floats * 4.0 / probe->best_seconds * 1e-9 : 0.0;
}
void bench_read_probe_free(bench_read_probe *probe);

/* Sum of x [n] with the probe's parallel reduction (exposed for tests). */
double bench_bandwidth_sum(const float *x, int64_t n);

#endif
