/* The clock and the statistics every benchmark suite shares: wall seconds
 * from the monotonic clock, and medians (the figure the project quotes). */
#ifndef BENCH_TIMING_H
#define BENCH_TIMING_H

#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC. */
double bench_now_seconds(void);

/* qsort comparator of doubles, ascending. */
int bench_compare_doubles(const void *a, const void *b);

/* The median of x [n], sorting x in place (n >= 1; NaN for n <= 0). */
double bench_median_sort(double *x, int64_t n);

#endif
