/* The decode-only multi-row GEMV (eval/matvec.h) against naive double loops,
 * on shapes that exercise every tail (K % 16, N % 4, odd M). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "eval/matvec.h"

static void check_matvec(int64_t M, int64_t K, int64_t N, int with_bias) {
    dt_rng rng;
    dt_rng_seed(&rng, (uint64_t)(M * 1000003 + K * 1009 + N));
    float *in = malloc((size_t)(M * K) * sizeof(float)), *w = malloc((size_t)(N * K) * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float)), *out = malloc((size_t)(M * N) * sizeof(float));
    dt_rng_fill_normal(&rng, in, M * K, 1.0f);
    dt_rng_fill_normal(&rng, w, N * K, 1.0f);
    dt_rng_fill_normal(&rng, bias, N, 1.0f);
    eval_matvec(out, in, w, with_bias ? bias : NULL, M, K, N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double want = with_bias ? bias[n] : 0.0, magnitude = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                want += (double)in[m * K + k] * w[n * K + k];
                magnitude += fabs((double)in[m * K + k] * w[n * K + k]);
            }
            cr_assert(fabs(out[m * N + n] - want) <= 1e-5 * magnitude + 1e-6,
                      "M=%lld K=%lld N=%lld out[%lld,%lld] = %g, want %g", (long long)M, (long long)K, (long long)N,
                      (long long)m, (long long)n, out[m * N + n], want);
        }
    free(in);
    free(w);
    free(bias);
    free(out);
}

Test(matvec, tails_and_rows) {
    const int64_t Ms[] = {1, 2, 3, 4}, Ks[] = {1, 7, 16, 17, 100}, Ns[] = {1, 3, 4, 5, 33};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++) check_matvec(Ms[a], Ks[b], Ns[c], (a + b + c) % 2);
}

Test(matvec, parallel_sizes) { /* large enough for the OpenMP path */
    check_matvec(1, 768, 515, 1);
    check_matvec(2, 300, 1031, 0);
}

/* A batch equals its jobs run one by one (mixed M, N not multiple of 4, bias or not). */
Test(matvec, batch_equals_separate_products) {
    enum { K = 200 };
    const int64_t Ns[3] = {301, 64, 7}, Ms[3] = {2, 1, 2};
    dt_rng rng;
    dt_rng_seed(&rng, 77);
    float *in = malloc(2 * K * sizeof(float)), *bias = malloc(301 * sizeof(float));
    dt_rng_fill_normal(&rng, in, 2 * K, 1.0f);
    dt_rng_fill_normal(&rng, bias, 301, 1.0f);
    eval_matvec_job jobs[3];
    float *weights[3], *batched[3], *single[3];
    for (int j = 0; j < 3; j++) {
        weights[j] = malloc((size_t)(Ns[j] * K) * sizeof(float));
        batched[j] = malloc((size_t)(2 * Ns[j]) * sizeof(float));
        single[j] = malloc((size_t)(2 * Ns[j]) * sizeof(float));
        dt_rng_fill_normal(&rng, weights[j], Ns[j] * K, 1.0f);
        jobs[j] = (eval_matvec_job){batched[j], in, weights[j], j == 1 ? NULL : bias, Ms[j], K, Ns[j]};
        eval_matvec(single[j], in, weights[j], j == 1 ? NULL : bias, Ms[j], K, Ns[j]);
    }
    eval_matvec_batch(jobs, 3);
    for (int j = 0; j < 3; j++) {
        cr_expect_arr_eq(batched[j], single[j], (size_t)(Ms[j] * Ns[j]) * sizeof(float), "job %d", j);
        free(weights[j]);
        free(batched[j]);
        free(single[j]);
    }
    free(in);
    free(bias);
}
