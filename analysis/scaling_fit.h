/* Saturating power laws of loss against data, L(D) = E + A D^-alpha: the
 * form data-scaling studies fit to read an asymptote E off a sweep (the
 * Decode-Branch paper compares its arms by fitted asymptotic losses). For a
 * fixed alpha the law is linear in E and A, so the fit is least squares in
 * closed form inside a one-dimensional search over alpha: a grid over
 * [ANALYSIS_ALPHA_MIN, ANALYSIS_ALPHA_MAX], then golden section around the
 * grid's best point. */
#ifndef ANALYSIS_SCALING_FIT_H
#define ANALYSIS_SCALING_FIT_H

#include "core/error.h"

#define ANALYSIS_ALPHA_MIN 0.005
#define ANALYSIS_ALPHA_MAX 4.0

typedef struct analysis_power_law {
    double E;           /* the asymptote: the loss as D grows without bound */
    double A;           /* the scale of the reducible part */
    double alpha;       /* its exponent */
    double rms;         /* root mean square residual over the points */
    int points;         /* points fitted */
    int alpha_at_bound; /* 1: the best alpha is an end of the search range, so the
                           points do not pin alpha and E is an extrapolation without
                           support (E at ANALYSIS_ALPHA_MIN runs off toward -inf) */
} analysis_power_law;

/* Fits L = E + A D^-alpha to the points (d[i], loss[i]), i < n: d > 0,
 * losses finite, at least 3 distinct d (three parameters; with exactly 3
 * the fit passes through them, rms 0). Several points may share a d
 * (several seeds). DT_ERR with a message for input that cannot be fitted. */
dt_status analysis_fit_power_law(const double *d, const double *loss, int n, analysis_power_law *fit);

/* The same law for n_curves curves with one alpha shared by all: curve c
 * (points d[c][i], loss[c][i], i < n[c]) keeps its own E and A in fits[c];
 * alpha minimises the squared residuals summed over the curves. Each curve
 * needs at least 2 distinct d and one curve at least 3 (two distinct d fit
 * the law exactly at every alpha, so only a third pins alpha). rms and
 * points are per curve; alpha and alpha_at_bound the same in every fits[c]. */
dt_status analysis_fit_power_law_shared(const double *const *d, const double *const *loss, const int *n, int n_curves,
                                        analysis_power_law *fits);

#endif
