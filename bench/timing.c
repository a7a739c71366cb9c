/* Shared benchmark clock and medians (timing.h). */
#include "bench/timing.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double bench_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median_sort(double *x, int64_t n) {
    if (n <= 0) return NAN;
    qsort(x, (size_t)n, sizeof *x, bench_compare_doubles);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}
