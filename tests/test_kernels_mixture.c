/* Tests for the fused Decode-Branch mixture readout (kernels/mixture.h, SPEC §2).
 *
 * The reference is a naive double implementation written directly from the
 * SPEC: r = alpha p_y + (1 - alpha) q_y, nll = -log r (no log-space tricks,
 * no dropped terms: double has the range for the logits used here). The
 * backward is checked against central finite differences of that reference,
 * with alpha held at its unperturbed value where the gradient must not flow
 * through it (alpha_detach), and only logits_q differentiated for
 * detach_primary. Each setting of the clip is covered: alpha at the bounds,
 * fixed alpha, branch-only (alpha = 0) and alpha = 1 from a one-hot primary. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm.h"
#include "kernels/mixture.h"

#define FD_STEP 1e-5

static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}

static double *alloc_doubles(int64_t n) {
    double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert_not_null(x);
    return x;
}

/* |got - expected| <= rel * (|expected| + 0.1 * max|expected|) element by element. */
static void assert_close(const float *got, const double *expected, int64_t n, double rel, const char *what) {
    double max_abs = 0.0;
    for (int64_t i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs(expected[i]));
    for (int64_t i = 0; i < n; i++) {
        double tol = rel * (fabs(expected[i]) + 0.1 * max_abs) + 1e-30;
        cr_assert(fabs((double)got[i] - expected[i]) <= tol, "%s[%ld]: got %.9g expected %.9g (tol %.3g)", what,
                  (long)i, (double)got[i], expected[i], tol);
    }
}

/* softmax of a double row [V] into prob */
static void naive_softmax(double *prob, const double *x, int64_t V) {
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < V; j++)
        m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < V; j++) {
        prob[j] = exp(x[j] - m);
        sum += prob[j];
    }
    for (int64_t j = 0; j < V; j++)
        prob[j] /= sum;
}

/* Scratch for the reference: p and q of one row. */
typedef struct {
    double *p, *q;
} scratch_rows;

/* -log(alpha p_y + (1 - alpha) q_y) for one row; alpha = clip(sum p^2) unless
 * fixed_alpha is non-NULL. Reports alpha, S, p_y, q_y through the pointers (any may be NULL). */
static double naive_nll(scratch_rows *scratch, const double *lp, const double *lq, int32_t y, int64_t V,
                        double alpha_min, double alpha_max, const double *fixed_alpha, double *alpha_out,
                        double *collision_out) {
    naive_softmax(scratch->p, lp, V);
    naive_softmax(scratch->q, lq, V);
    double collision = 0.0;
    for (int64_t j = 0; j < V; j++)
        collision += scratch->p[j] * scratch->p[j];
    double alpha = fmin(fmax(collision, alpha_min), alpha_max);
    if (fixed_alpha) alpha = *fixed_alpha;
    if (alpha_out) *alpha_out = alpha;
    if (collision_out) *collision_out = collision;
    return -log(alpha * scratch->p[y] + (1.0 - alpha) * scratch->q[y]);
}

/* How a test fills the primary logits of row m. */
enum { PRIMARY_SPREAD, PRIMARY_ONE_HOT_HALF };

typedef struct {
    int64_t M, V;
    float alpha_min, alpha_max;
    int alpha_detach, detach_primary;
    int primary_kind;
    uint64_t seed;
    int64_t fd_stride; /* finite differences on every fd_stride-th column (and the target) */
} mixture_case;

/* Fills the logits: row m's primary has one "hot" logit raised by a bonus
 * growing with m, so its collision probability S ranges from near 1/V to near
 * 1 across the rows. With PRIMARY_ONE_HOT_HALF, even rows are one-hot-ish (the
 * hot logit 200 above the rest: p is exactly one-hot in float and S == 1). */
static void fill_case(const mixture_case *c, dt_rng *rng, float *lp, float *lq, int32_t *targets) {
    for (int64_t m = 0; m < c->M; m++) {
        float bonus = (logf((float)c->V) + 6.0f) * (float)m / (float)(c->M > 1 ? c->M - 1 : 1);
        int one_hot = c->primary_kind == PRIMARY_ONE_HOT_HALF && m % 2 == 0;
        int64_t hot = (int64_t)dt_rng_below(rng, (uint64_t)c->V);
        for (int64_t j = 0; j < c->V; j++) {
            float u = 2.0f * dt_rng_uniform(rng) - 1.0f;
            lp[m * c->V + j] = one_hot ? (j == hot ? 200.0f : u) : 2.0f * u + (j == hot ? bonus : 0.0f);
            lq[m * c->V + j] = 3.0f * (2.0f * dt_rng_uniform(rng) - 1.0f);
        }
        /* one-hot rows: half aim at the hot token (p_y ~ 1), half elsewhere (p_y ~ e^-200) */
        targets[m] = one_hot && m % 4 == 0 ? (int32_t)hot : (int32_t)dt_rng_below(rng, (uint64_t)c->V);
    }
}

static void check_mixture(const mixture_case *c) {
    const int64_t M = c->M, V = c->V;
    dt_rng rng;
    dt_rng_seed(&rng, c->seed);
    float *lp = alloc_floats(M * V), *lq = alloc_floats(M * V), *d_lp = alloc_floats(M * V),
          *d_lq = alloc_floats(M * V);
    float *nll = alloc_floats(M), *alpha = alloc_floats(M), *ce_p = alloc_floats(M), *ce_q = alloc_floats(M);
    float *d_nll = alloc_floats(M);
    int32_t *targets = malloc((size_t)M * sizeof(int32_t));
    double *lpd = alloc_doubles(V), *lqd = alloc_doubles(V);
    double *e_lp = alloc_doubles(M * V), *e_lq = alloc_doubles(M * V);
    scratch_rows scratch = {alloc_doubles(V), alloc_doubles(V)};
    fill_case(c, &rng, lp, lq, targets);
    for (int64_t m = 0; m < M; m++)
        d_nll[m] = 0.25f + 1.5f * dt_rng_uniform(&rng);
    for (int64_t i = 0; i < M * V; i++) {
        d_lp[i] = 2.0f * dt_rng_uniform(&rng) - 1.0f; /* pre-filled: backward must add */
        d_lq[i] = 2.0f * dt_rng_uniform(&rng) - 1.0f;
    }

    k_mixture_forward(nll, alpha, ce_p, ce_q, lp, lq, targets, M, V, c->alpha_min, c->alpha_max);
    /* NULL ce outputs are allowed */
    float *nll_again = alloc_floats(M), *alpha_again = alloc_floats(M);
    k_mixture_forward(nll_again, alpha_again, NULL, NULL, lp, lq, targets, M, V, c->alpha_min, c->alpha_max);

    int below = 0, inside = 0, above = 0;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t j = 0; j < V; j++)
            lpd[j] = lp[m * V + j], lqd[j] = lq[m * V + j];
        int32_t y = targets[m];
        double e_alpha, collision;
        double e_nll = naive_nll(&scratch, lpd, lqd, y, V, c->alpha_min, c->alpha_max, NULL, &e_alpha, &collision);
        double e_ce_p = -log(scratch.p[y]), e_ce_q = -log(scratch.q[y]);
        cr_assert(fabs(nll[m] - e_nll) <= 1e-5 * fabs(e_nll) + 1e-6, "nll[%ld] %.9g vs %.9g (alpha %g)", (long)m,
                  (double)nll[m], e_nll, e_alpha);
        cr_assert(fabs(alpha[m] - e_alpha) <= 1e-6 * e_alpha + 1e-9, "alpha[%ld] %.9g vs %.9g", (long)m,
                  (double)alpha[m], e_alpha);
        cr_assert(fabs(ce_p[m] - e_ce_p) <= 1e-5 * fabs(e_ce_p) + 1e-6, "ce_p[%ld] %.9g vs %.9g", (long)m,
                  (double)ce_p[m], e_ce_p);
        cr_assert(fabs(ce_q[m] - e_ce_q) <= 1e-5 * fabs(e_ce_q) + 1e-6, "ce_q[%ld] %.9g vs %.9g", (long)m,
                  (double)ce_q[m], e_ce_q);
        cr_assert(nll_again[m] == nll[m] && alpha_again[m] == alpha[m]);
        /* finite differences must not straddle the clip's kinks */
        if (c->alpha_min < c->alpha_max && collision < 1.0) {
            cr_assert(fabs(collision - c->alpha_min) > 1e-4 && fabs(collision - c->alpha_max) > 1e-4,
                      "row %ld: S = %.9g too close to a clip bound for finite differences", (long)m, collision);
        }
        below += collision < c->alpha_min;
        inside += collision > c->alpha_min && collision < c->alpha_max;
        above += collision >= c->alpha_max;

        /* Alpha is a constant when detached, or when it sits at exactly 0 or 1. */
        int alpha_constant = c->alpha_detach || e_alpha == 0.0 || e_alpha == 1.0;
        for (int64_t j = 0; j < V; j++) {
            int probe = j % c->fd_stride == 0 || j == y;
            e_lp[m * V + j] = d_lp[m * V + j];
            e_lq[m * V + j] = d_lq[m * V + j];
            if (!probe) {
                e_lp[m * V + j] = NAN; /* not checked */
                e_lq[m * V + j] = NAN;
                continue;
            }
            for (int which = 0; which < 2; which++) {
                double *v = which == 0 ? &lpd[j] : &lqd[j], saved = *v;
                *v = saved + FD_STEP;
                double plus = naive_nll(&scratch, lpd, lqd, y, V, c->alpha_min, c->alpha_max,
                                        alpha_constant ? &e_alpha : NULL, NULL, NULL);
                *v = saved - FD_STEP;
                double minus = naive_nll(&scratch, lpd, lqd, y, V, c->alpha_min, c->alpha_max,
                                         alpha_constant ? &e_alpha : NULL, NULL, NULL);
                *v = saved;
                double gradient = d_nll[m] * (plus - minus) / (2.0 * FD_STEP);
                if (which == 0)
                    e_lp[m * V + j] += gradient;
                else
                    e_lq[m * V + j] += gradient;
            }
        }
    }
    /* The rows cover what the case is meant to exercise. */
    if (c->alpha_min < c->alpha_max) {
        cr_assert(below > 0 && inside > 0, "case must have rows clipped at alpha_min (%d) and inside (%d)", below,
                  inside);
        if (c->primary_kind == PRIMARY_ONE_HOT_HALF) cr_assert(above > 0, "case must have rows with alpha == 1");
    }

    float *d_lp_before = alloc_floats(M * V), *d_lp_saved = alloc_floats(M * V), *d_lq_saved = alloc_floats(M * V);
    for (int64_t i = 0; i < M * V; i++) {
        d_lp_before[i] = d_lp_saved[i] = d_lp[i];
        d_lq_saved[i] = d_lq[i];
    }
    k_mixture_backward(c->detach_primary ? NULL : d_lp, d_lq, d_nll, lp, lq, targets, M, V, c->alpha_min, c->alpha_max,
                       c->alpha_detach);
    /* From the row statistics the forward kept: the same outputs and gradients, bit for bit. */
    void *saved = malloc(k_mixture_saved_bytes(M));
    float *nll_saving = alloc_floats(M), *alpha_saving = alloc_floats(M);
    k_mixture_forward_saving(nll_saving, alpha_saving, NULL, NULL, lp, lq, targets, M, V, c->alpha_min, c->alpha_max,
                             saved);
    k_mixture_backward_saved(c->detach_primary ? NULL : d_lp_saved, d_lq_saved, d_nll, lp, lq, targets, M, V,
                             c->alpha_min, c->alpha_max, c->alpha_detach, saved);
    for (int64_t m = 0; m < M; m++)
        cr_assert(nll_saving[m] == nll[m] && alpha_saving[m] == alpha[m], "row %ld", (long)m);
    for (int64_t i = 0; i < M * V; i++)
        cr_assert(d_lp_saved[i] == d_lp[i] && d_lq_saved[i] == d_lq[i], "element %ld: saved statistics differ",
                  (long)i);
    free(saved), free(nll_saving), free(alpha_saving), free(d_lp_saved), free(d_lq_saved);

    /* Compare only the probed columns (NaN marks the others). */
    for (int64_t i = 0; i < M * V; i++) {
        if (isnan(e_lq[i])) {
            e_lp[i] = d_lp[i]; /* neutral: compared against itself */
            e_lq[i] = d_lq[i];
        }
    }
    assert_close(d_lq, e_lq, M * V, 1e-4, "d_logits_q");
    if (c->detach_primary) {
        for (int64_t i = 0; i < M * V; i++)
            cr_assert(d_lp[i] == d_lp_before[i], "d_logits_p touched when detached");
    } else {
        assert_close(d_lp, e_lp, M * V, 1e-4, "d_logits_p");
    }

    free(lp), free(lq), free(d_lp), free(d_lq), free(nll), free(alpha), free(ce_p), free(ce_q), free(d_nll);
    free(targets), free(lpd), free(lqd), free(e_lp), free(e_lq), free(scratch.p), free(scratch.q);
    free(nll_again), free(alpha_again), free(d_lp_before);
}

/* M, V, and the column stride of the finite-difference probes (the widest
 * case probes every 4th column plus the target, to stay fast under ASan). */
static const int64_t SIZES[][3] = {{7, 7, 1}, {33, 33, 1}, {40, 130, 4}};

static void check_all_sizes(mixture_case c) {
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        c.M = SIZES[s][0];
        c.V = SIZES[s][1];
        c.fd_stride = SIZES[s][2];
        c.seed += 17;
        check_mixture(&c);
    }
}

/* Defaults (0.5, 1): rows clipped at 0.5 (no alpha gradient) and rows with
 * alpha = S (gradient through alpha). */
Test(kernels_mixture, default_clip_alpha_gradient) {
    check_all_sizes((mixture_case){.alpha_min = 0.5f, .alpha_max = 1.0f, .seed = 1});
}

Test(kernels_mixture, default_clip_alpha_detach) {
    check_all_sizes((mixture_case){.alpha_min = 0.5f, .alpha_max = 1.0f, .alpha_detach = 1, .seed = 2});
}

Test(kernels_mixture, default_clip_detach_primary) {
    check_all_sizes((mixture_case){.alpha_min = 0.5f, .alpha_max = 1.0f, .detach_primary = 1, .seed = 3});
}

/* A narrower window, so rows are clipped at both bounds. */
Test(kernels_mixture, clipped_at_both_bounds) {
    check_all_sizes((mixture_case){.alpha_min = 0.3f, .alpha_max = 0.7f, .seed = 4});
}

Test(kernels_mixture, fixed_alpha_half) {
    check_all_sizes((mixture_case){.alpha_min = 0.5f, .alpha_max = 0.5f, .seed = 5});
}

/* alpha = 0: the primary term is dropped; d_logits_p gets nothing. */
Test(kernels_mixture, branch_only_alpha_zero) {
    check_all_sizes((mixture_case){.alpha_min = 0.0f, .alpha_max = 0.0f, .seed = 6});
}

/* alpha = 1 from a one-hot primary (S == 1 at the upper bound): the branch term
 * is dropped, alpha is a constant, and nll is -log p_y even when p_y ~ e^-200. */
Test(kernels_mixture, alpha_one_from_one_hot_primary) {
    check_all_sizes(
        (mixture_case){.alpha_min = 0.5f, .alpha_max = 1.0f, .primary_kind = PRIMARY_ONE_HOT_HALF, .seed = 7});
}

Test(kernels_mixture, alpha_one_fixed) {
    check_all_sizes((mixture_case){.alpha_min = 1.0f, .alpha_max = 1.0f, .seed = 8});
}

/* alpha_min == alpha_max == S exactly (p = (1/2, 1/4, 1/4), S = 3/8): S sits
 * inside [min, max], yet alpha is fixed, so no gradient may flow through it. */
Test(kernels_mixture, fixed_alpha_equal_to_collision_passes_no_alpha_gradient) {
    const float lp[3] = {(float)M_LN2, 0.0f, 0.0f}, lq[3] = {0.3f, -0.2f, 0.1f};
    const int32_t target = 1;
    const float d_nll = 1.0f;
    float nll, alpha, d_lp[3] = {0}, d_lq[3] = {0};
    k_mixture_forward(&nll, &alpha, NULL, NULL, lp, lq, &target, 1, 3, 0.375f, 0.375f);
    cr_assert(alpha == 0.375f, "alpha %.9g", (double)alpha);
    k_mixture_backward(d_lp, d_lq, &d_nll, lp, lq, &target, 1, 3, 0.375f, 0.375f, 0);
    double lpd[3] = {lp[0], lp[1], lp[2]}, lqd[3] = {lq[0], lq[1], lq[2]}, p[3], q[3];
    scratch_rows scratch = {p, q};
    const double fixed = 0.375;
    for (int j = 0; j < 3; j++) {
        double saved = lpd[j];
        lpd[j] = saved + FD_STEP;
        double plus = naive_nll(&scratch, lpd, lqd, target, 3, 0.375, 0.375, &fixed, NULL, NULL);
        lpd[j] = saved - FD_STEP;
        double minus = naive_nll(&scratch, lpd, lqd, target, 3, 0.375, 0.375, &fixed, NULL, NULL);
        lpd[j] = saved;
        double expected = (plus - minus) / (2.0 * FD_STEP);
        cr_assert(fabs(d_lp[j] - expected) <= 1e-5, "d_logits_p[%d] %.9g vs %.9g", j, (double)d_lp[j], expected);
    }
}

/* A vocabulary-sized row: forward to 1e-5 and the gradient on a sample of columns. */
Test(kernels_mixture, wide_vocabulary) {
    mixture_case c = {.M = 6, .V = 12007, .alpha_min = 0.05f, .alpha_max = 1.0f, .seed = 9, .fd_stride = 601};
    check_mixture(&c);
}

/* Row-parallel: identical bits for 1 and 2 threads. */
Test(kernels_mixture, thread_count_independent) {
    const int64_t M = 64, V = 1031;
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    mixture_case c = {.M = M, .V = V, .alpha_min = 0.5f, .alpha_max = 1.0f};
    float *lp = alloc_floats(M * V), *lq = alloc_floats(M * V), *d_nll = alloc_floats(M);
    int32_t *targets = malloc((size_t)M * sizeof(int32_t));
    fill_case(&c, &rng, lp, lq, targets);
    for (int64_t m = 0; m < M; m++)
        d_nll[m] = 1.0f / (float)M;
    float *nll[2], *alpha[2], *d_lp[2], *d_lq[2];
    for (int run = 0; run < 2; run++) {
        k_set_threads(run + 1);
        nll[run] = alloc_floats(M), alpha[run] = alloc_floats(M);
        d_lp[run] = calloc((size_t)(M * V), sizeof(float)), d_lq[run] = calloc((size_t)(M * V), sizeof(float));
        k_mixture_forward(nll[run], alpha[run], NULL, NULL, lp, lq, targets, M, V, 0.5f, 1.0f);
        k_mixture_backward(d_lp[run], d_lq[run], d_nll, lp, lq, targets, M, V, 0.5f, 1.0f, 0);
    }
    k_set_threads(2);
    for (int64_t m = 0; m < M; m++)
        cr_assert(nll[0][m] == nll[1][m] && alpha[0][m] == alpha[1][m]);
    for (int64_t i = 0; i < M * V; i++)
        cr_assert(d_lp[0][i] == d_lp[1][i] && d_lq[0][i] == d_lq[1][i]);
    for (int run = 0; run < 2; run++)
        free(nll[run]), free(alpha[run]), free(d_lp[run]), free(d_lq[run]);
    free(lp), free(lq), free(d_nll), free(targets);
}
