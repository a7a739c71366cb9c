/* Internal to kernels/: how an OpenMP wrapper hands its single-threaded core
 * a range. Each wrapper opens one parallel region and calls its core once
 * per thread on that thread's share; the shares are those of
 * schedule(static) (contiguous, in thread order), so a wrapper computes
 * exactly what its core computes on the whole range. */
#ifndef K_PARALLEL_H
#define K_PARALLEL_H

#include <omp.h>
#include <stdint.h>

/* The calling thread's share [*begin, *end) of n items (the whole range outside a parallel region). */
static inline void k_thread_share(int64_t n, int64_t *begin, int64_t *end) {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t base = n / threads, extra = n % threads;
    *begin = t * base + (t < extra ? t : extra);
    *end = *begin + base + (t < extra ? 1 : 0);
}

/* The body of a wrapper: one parallel region (when `parallel` holds) in which
 * every thread runs `call` on its share [i0, i1) of n items. */
#define K_FOR_SHARES(n, parallel, call)                                                                                \
    do {                                                                                                               \
        const int k_parallel_ = (parallel);                                                                            \
        const int64_t k_items_ = (n);                                                                                  \
        _Pragma("omp parallel if (k_parallel_)") {                                                                     \
            int64_t i0, i1;                                                                                            \
            k_thread_share(k_items_, &i0, &i1);                                                                        \
            call;                                                                                                      \
        }                                                                                                              \
    } while (0)

#endif
