/* The statistics behind `dbranch compare`: the regularized incomplete beta
 * function, Student's t distribution (CDF and quantile) built on it, and the
 * paired t analysis of per-seed differences that modded-nanogpt's records ask
 * for (mean difference, its 95% interval, a two-sided p-value). Written here
 * rather than taken from a library: dbranch links only Debian's C packages,
 * none of which has them. */
#ifndef ANALYSIS_STATS_H
#define ANALYSIS_STATS_H

/* I_x(a, b) for a, b > 0 and x in [0, 1] (continued fraction, Lentz's method;
 * about 1e-14 relative); NaN outside the domain. */
double analysis_incomplete_beta(double a, double b, double x);

/* P(T <= t) for Student's t with df > 0 degrees of freedom. */
double analysis_student_t_cdf(double t, double df);

/* The t with P(T <= t) = p, p in (0, 1) (bisection on the CDF to 1e-12). */
double analysis_student_t_quantile(double p, double df);

typedef struct analysis_paired {
    int n;            /* pairs */
    double mean;      /* mean of the differences */
    double sd;        /* their sample standard deviation (n - 1); NaN when n < 2 */
    double t;         /* mean / (sd / sqrt(n)); NaN when n < 2 or sd = 0 and mean = 0 */
    double low, high; /* the two-sided interval at the level asked for; NaN when n < 2 */
    double p;         /* two-sided p-value of mean = 0; NaN when n < 2 */
} analysis_paired;

/* The paired t analysis of diff[n] (differences arm - reference, one per
 * seed) at confidence level (0.95). With sd = 0 the interval is the mean
 * itself and p is 1 when the mean is 0, else 0. */
analysis_paired analysis_paired_t(const double *diff, int n, double level);

/* The fewest pairs n >= 2 whose interval at confidence level would have half
 * width <= halfwidth if the differences' sd were sd: t(0.5 + level / 2,
 * n - 1) sd / sqrt(n) <= halfwidth. A plan, not a promise: an sd measured on
 * few pairs is itself uncertain. max_pairs + 1 when even max_pairs fall
 * short; -1 for sd < 0, halfwidth <= 0 or a NaN. */
int analysis_pairs_for_halfwidth(double sd, double halfwidth, double level, int max_pairs);

#endif
