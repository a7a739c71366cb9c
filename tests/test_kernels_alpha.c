/* The one alpha kernel (kernels/mixture.h: k_mixture_alpha_range, its OpenMP
 * wrapper k_mixture_alpha, and the alpha k_mixture_forward reports) against
 * a float64 computation, in particular near alpha = 1: a confident primary
 * with S = sum p^2 ~ 0.99997, where 1 - alpha (the branch's weight) is a tiny
 * difference of numbers near 1 (docs/DECISIONS.md "Mixture near alpha = 1").
 *
 * The formulas the decode engine and model_forward used before they called
 * this kernel (a float alpha, 1 - alpha formed from it) are kept here to show
 * the tolerance tells them apart: they miss 1 - alpha by ~1e-3 relative. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/mixture.h"

enum { V = 512, ROWS = 16 };

/* Row m [V]: noise, and one logit raised so that 1 - S ~ 3e-5 * (1 + m / ROWS). */
static void confident_rows(float *logits) {
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    dt_rng_fill_normal(&rng, logits, ROWS * V, 0.5f);
    for (int64_t m = 0; m < ROWS; m++) {
        float *x = logits + m * V;
        double rest = 0.0;
        for (int64_t j = 0; j < V; j++)
            if (j != 7) rest += exp((double)x[j]);
        /* 1 - S ~ 2 R / Z with R / Z = rest / exp(x7) */
        x[7] = (float)(log(rest) - log(1.5e-5 * (1.0 + (double)m / ROWS)));
    }
}

/* float64: S = sum p^2 of row x [V], and 1 - S. */
static void reference_collision(const float *x, double *collision, double *one_minus) {
    double max = -INFINITY, sum = 0.0, sum_sq = 0.0;
    for (int64_t j = 0; j < V; j++)
        max = fmax(max, (double)x[j]);
    for (int64_t j = 0; j < V; j++)
        sum += exp((double)x[j] - max);
    for (int64_t j = 0; j < V; j++) {
        double p = exp((double)x[j] - max) / sum;
        sum_sq += p * p;
    }
    *collision = sum_sq;
    *one_minus = 1.0 - sum_sq; /* ~1e-16 absolute: ~1e-11 relative at 3e-5 */
}

/* What eval/decode.c computed before (eval_mixture_alpha): expf terms, double sums, a float result. */
static float old_decode_alpha(const float *logits, double alpha_min, double alpha_max) {
    float max = logits[0];
    for (int64_t v = 1; v < V; v++)
        max = logits[v] > max ? logits[v] : max;
    double sum = 0.0, sum_sq = 0.0;
    for (int64_t v = 0; v < V; v++) {
        double e = (double)expf(logits[v] - max);
        sum += e;
        sum_sq += e * e;
    }
    double collision = sum_sq / (sum * sum);
    return (float)fmin(fmax(collision, alpha_min), alpha_max);
}

/* What models/model_forward.c's alpha_forward computed before: double exp, a float result. */
static float old_model_alpha(const float *row, double alpha_min, double alpha_max) {
    double max = row[0], sum = 0.0, sum_sq = 0.0;
    for (int64_t v = 1; v < V; v++)
        max = fmax(max, row[v]);
    for (int64_t v = 0; v < V; v++) {
        double e = exp(row[v] - max);
        sum += e;
        sum_sq += e * e;
    }
    return (float)fmin(fmax(sum_sq / (sum * sum), alpha_min), alpha_max);
}

Test(kernels_alpha, near_one_matches_float64_from_every_entry_point) {
    float *logits = malloc(sizeof(float) * ROWS * V), *logits_q = malloc(sizeof(float) * ROWS * V);
    confident_rows(logits);
    dt_rng rng;
    dt_rng_seed(&rng, 12);
    dt_rng_fill_normal(&rng, logits_q, ROWS * V, 1.0f);
    float alpha_rows[ROWS], alpha_wrapper[ROWS], alpha_fused[ROWS], nll[ROWS];
    double one_minus[ROWS];
    int32_t targets[ROWS] = {0};
    k_mixture_alpha_range(alpha_rows, one_minus, logits, ROWS, V, 0.5f, 1.0f);
    k_set_threads(2);
    k_mixture_alpha(alpha_wrapper, logits, ROWS, V, 0.5f, 1.0f);
    k_mixture_forward(nll, alpha_fused, NULL, NULL, logits, logits_q, targets, ROWS, V, 0.5f, 1.0f);
    double worst_new = 0.0, worst_old_decode = 0.0, worst_old_model = 0.0;
    for (int64_t m = 0; m < ROWS; m++) {
        double S, one_minus_S;
        reference_collision(logits + m * V, &S, &one_minus_S);
        cr_assert(one_minus_S > 2e-5 && one_minus_S < 7e-5, "row %ld: 1 - S = %g, not the near-1 case", (long)m,
                  one_minus_S);
        cr_expect(fabs((double)alpha_rows[m] - S) <= 6e-8, "row %ld: alpha %.9g vs float64 %.12g", (long)m,
                  (double)alpha_rows[m], S);
        cr_expect_eq(alpha_wrapper[m], alpha_rows[m], "row %ld: the OpenMP wrapper differs from the core", (long)m);
        cr_expect_eq(alpha_fused[m], alpha_rows[m], "row %ld: k_mixture_forward's alpha differs", (long)m);
        worst_new = fmax(worst_new, fabs(one_minus[m] - one_minus_S) / one_minus_S);
        worst_old_decode =
            fmax(worst_old_decode,
                 fabs((1.0 - (double)old_decode_alpha(logits + m * V, 0.5, 1.0)) - one_minus_S) / one_minus_S);
        worst_old_model =
            fmax(worst_old_model,
                 fabs((1.0 - (double)old_model_alpha(logits + m * V, 0.5, 1.0)) - one_minus_S) / one_minus_S);
    }
    cr_expect(worst_new <= 1e-6, "1 - alpha off by %g relative (tolerance 1e-6)", worst_new);
    /* the tolerance is one the former entry points fail */
    cr_expect(worst_old_decode > 1e-4, "old decode formula: 1 - alpha off by only %g", worst_old_decode);
    cr_expect(worst_old_model > 1e-4, "old model formula: 1 - alpha off by only %g", worst_old_model);
    free(logits);
    free(logits_q);
}

/* Away from 1 and at the clip bounds: alpha and 1 - alpha against float64. */
Test(kernels_alpha, clip_bounds_and_ordinary_rows) {
    float *logits = malloc(sizeof(float) * ROWS * V);
    dt_rng rng;
    dt_rng_seed(&rng, 13);
    dt_rng_fill_normal(&rng, logits, ROWS * V, 1.0f);
    for (int64_t m = 0; m < ROWS; m++)
        logits[m * V + 3] += (float)m; /* S from ~1/V to near 1 */
    const float bounds[3][2] = {{0.0f, 1.0f}, {0.05f, 0.4f}, {0.3f, 0.3f}};
    for (int b = 0; b < 3; b++) {
        float alpha[ROWS];
        double one_minus[ROWS];
        k_mixture_alpha_range(alpha, one_minus, logits, ROWS, V, bounds[b][0], bounds[b][1]);
        for (int64_t m = 0; m < ROWS; m++) {
            double S, one_minus_S;
            reference_collision(logits + m * V, &S, &one_minus_S);
            double want = fmin(fmax(S, (double)bounds[b][0]), (double)bounds[b][1]);
            cr_expect(fabs((double)alpha[m] - want) <= 1e-6 * want + 1e-12, "bounds %d row %ld: %.9g vs %.9g", b,
                      (long)m, (double)alpha[m], want);
            cr_expect(fabs(one_minus[m] - (1.0 - want)) <= 1e-6 * (1.0 - want) + 1e-12,
                      "bounds %d row %ld: 1 - alpha %.9g vs %.9g", b, (long)m, one_minus[m], 1.0 - want);
        }
    }
    free(logits);
}
