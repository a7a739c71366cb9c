/* Power-law fits of loss against data (see scaling_fit.h). */
#include "analysis/scaling_fit.h"

#include <math.h>

/* Grid points of the alpha search before the golden-section refinement:
 * fine enough that the sum of squares is unimodal between neighbours for
 * the smooth curves a sweep gives. */
enum { ALPHA_GRID = 800 };

/* Least squares of loss = E + A x with x = d^-alpha over n points: E, A and
 * the sum of squared residuals (returned). The points are centred first,
 * so a tiny x (a large d at a large alpha) loses no precision. */
static double linear_fit(const double *d, const double *loss, int n, double alpha, double *E, double *A) {
    double mean_x = 0, mean_y = 0;
    for (int i = 0; i < n; i++) {
        mean_x += pow(d[i], -alpha);
        mean_y += loss[i];
    }
    mean_x /= n;
    mean_y /= n;
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        const double dx = pow(d[i], -alpha) - mean_x;
        sxx += dx * dx;
        sxy += dx * (loss[i] - mean_y);
    }
    *A = sxx > 0 ? sxy / sxx : 0;
    *E = mean_y - *A * mean_x;
    double sse = 0;
    for (int i = 0; i < n; i++) {
        const double r = loss[i] - (*E + *A * pow(d[i], -alpha));
        sse += r * r;
    }
    return sse;
}

/* The summed squared residuals of every curve at one alpha, each its own E and A. */
static double total_sse(const double *const *d, const double *const *loss, const int *n, int n_curves, double alpha) {
    double sse = 0, E, A;
    for (int c = 0; c < n_curves; c++)
        sse += linear_fit(d[c], loss[c], n[c], alpha, &E, &A);
    return sse;
}

static int distinct_values(const double *v, int n) {
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = v[j] == v[i];
        distinct += !seen;
    }
    return distinct;
}

static dt_status check_points(const double *d, const double *loss, int n, int min_distinct, int curve) {
    for (int i = 0; i < n; i++) {
        if (!(d[i] > 0) || !isfinite(d[i]))
            return dt_errorf("power-law fit: curve %d point %d: D %g must be a positive number", curve + 1, i + 1,
                             d[i]);
        if (!isfinite(loss[i]))
            return dt_errorf("power-law fit: curve %d point %d: the loss is not a finite number", curve + 1, i + 1);
    }
    const int distinct = n > 0 ? distinct_values(d, n) : 0;
    if (distinct < min_distinct)
        return dt_errorf("power-law fit: curve %d has %d distinct D; E + A D^-alpha needs at least %d", curve + 1,
                         distinct, min_distinct);
    return DT_OK;
}

/* The alpha in [ANALYSIS_ALPHA_MIN, ANALYSIS_ALPHA_MAX] minimising the summed
 * squares; *at_bound when it is an end of the range. */
static double best_alpha(const double *const *d, const double *const *loss, const int *n, int n_curves, int *at_bound) {
    const double step = (ANALYSIS_ALPHA_MAX - ANALYSIS_ALPHA_MIN) / (ALPHA_GRID - 1);
    int best = 0;
    double best_sse = INFINITY;
    for (int k = 0; k < ALPHA_GRID; k++) {
        const double sse = total_sse(d, loss, n, n_curves, ANALYSIS_ALPHA_MIN + k * step);
        if (sse < best_sse) {
            best_sse = sse;
            best = k;
        }
    }
    *at_bound = best == 0 || best == ALPHA_GRID - 1;
    if (*at_bound) return ANALYSIS_ALPHA_MIN + best * step;
    /* Golden section between the best grid point's neighbours. */
    const double ratio = (sqrt(5.0) - 1) / 2;
    double lo = ANALYSIS_ALPHA_MIN + (best - 1) * step, hi = ANALYSIS_ALPHA_MIN + (best + 1) * step;
    double a = hi - ratio * (hi - lo), b = lo + ratio * (hi - lo);
    double fa = total_sse(d, loss, n, n_curves, a), fb = total_sse(d, loss, n, n_curves, b);
    for (int iteration = 0; iteration < 100 && hi - lo > 1e-12; iteration++) {
        if (fa < fb) {
            hi = b;
            b = a;
            fb = fa;
            a = hi - ratio * (hi - lo);
            fa = total_sse(d, loss, n, n_curves, a);
        } else {
            lo = a;
            a = b;
            fa = fb;
            b = lo + ratio * (hi - lo);
            fb = total_sse(d, loss, n, n_curves, b);
        }
    }
    return (lo + hi) / 2;
}

static void finish_fit(const double *d, const double *loss, int n, double alpha, int at_bound,
                       analysis_power_law *fit) {
    const double sse = linear_fit(d, loss, n, alpha, &fit->E, &fit->A);
    fit->alpha = alpha;
    fit->rms = sqrt(sse / n);
    fit->points = n;
    fit->alpha_at_bound = at_bound;
}

dt_status analysis_fit_power_law(const double *d, const double *loss, int n, analysis_power_law *fit) {
    if (check_points(d, loss, n, 3, 0) != DT_OK) return DT_ERR;
    int at_bound = 0;
    const double alpha = best_alpha(&d, &loss, &n, 1, &at_bound);
    finish_fit(d, loss, n, alpha, at_bound, fit);
    return DT_OK;
}

dt_status analysis_fit_power_law_shared(const double *const *d, const double *const *loss, const int *n, int n_curves,
                                        analysis_power_law *fits) {
    if (n_curves < 1) return dt_errorf("power-law fit: no curve given");
    int most_distinct = 0;
    for (int c = 0; c < n_curves; c++) {
        if (check_points(d[c], loss[c], n[c], 2, c) != DT_OK) return DT_ERR;
        const int distinct = distinct_values(d[c], n[c]);
        most_distinct = distinct > most_distinct ? distinct : most_distinct;
    }
    /* Two distinct D fit E + A D^-alpha exactly at every alpha: alpha needs a curve with a third. */
    if (most_distinct < 3) return dt_errorf("power-law fit: no curve has 3 distinct D, so alpha is not determined");
    int at_bound = 0;
    const double alpha = best_alpha(d, loss, n, n_curves, &at_bound);
    for (int c = 0; c < n_curves; c++)
        finish_fit(d[c], loss[c], n[c], alpha, at_bound, &fits[c]);
    return DT_OK;
}
