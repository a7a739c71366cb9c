/* The read-bandwidth probe of `dbranch bench decode` (bench/bandwidth.h): its
 * parallel reduction against a direct sum, and a probe's checksum against the
 * closed form of the buffer it fills. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "bench/bandwidth.h"
#include "core/rng.h"

Test(bandwidth, sum_and_probe) {
    int64_t n = 1000003;
    float *x = malloc((size_t)n * sizeof(float));
    dt_rng rng;
    dt_rng_seed(&rng, 1);
    double want = 0.0, magnitude = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = dt_rng_uniform(&rng) - 0.25f;
        want += x[i];
        magnitude += fabs(x[i]);
    }
    double got = bench_bandwidth_sum(x, n);
    cr_expect(fabs(got - want) <= 1e-5 * magnitude, "sum %g vs %g", got, want);
    free(x);

    bench_bandwidth bw;
    cr_assert(bench_bandwidth_probe(1 << 20, 3, &bw) == DT_OK, "%s", dt_error_message());
    cr_expect(bw.best_gbps > 0.0 && isfinite(bw.best_gbps) && bw.best_gbps >= bw.median_gbps);
    /* the buffer holds (i & 7) / 8: every 8 floats sum to 3.5 */
    cr_expect(fabs(bw.checksum - (double)(1 << 18) / 8.0 * 3.5) < 1e-3, "checksum %g", bw.checksum);
    cr_expect_eq(bench_bandwidth_probe(100, 3, &bw), DT_ERR);
}
