/* Incomplete beta, Student's t and the paired t analysis (see stats.h). */
#include "analysis/stats.h"

#include <math.h>

/* The continued fraction of I_x(a, b) (Numerical Recipes' betacf, modified
 * Lentz), valid for x < (a + 1) / (a + b + 2). */
static double beta_fraction(double a, double b, double x) {
    const double tiny = 1e-300, eps = 1e-15;
    double qab = a + b, qap = a + 1, qam = a - 1;
    double c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 1000; m++) {
        int m2 = 2 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1) < eps) break;
    }
    return h;
}

double analysis_incomplete_beta(double a, double b, double x) {
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return NAN;
    if (x == 0) return 0;
    if (x == 1) return 1;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    /* The fraction converges fast on this side; the other side by symmetry. */
    if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
    return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

double analysis_student_t_cdf(double t, double df) {
    if (isnan(t) || !(df > 0)) return NAN;
    if (isinf(t)) return t > 0 ? 1 : 0;
    /* P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2). */
    double tail = 0.5 * analysis_incomplete_beta(df / 2, 0.5, df / (df + t * t));
    return t > 0 ? 1 - tail : tail;
}

double analysis_student_t_quantile(double p, double df) {
    if (!(p > 0) || !(p < 1) || !(df > 0)) return NAN;
    if (p == 0.5) return 0;
    double target = p > 0.5 ? p : 1 - p, low = 0, high = 1;
    while (analysis_student_t_cdf(high, df) < target && high < 1e300)
        high *= 2;
    for (int i = 0; i < 2000 && high - low > 1e-12 * (1 + high); i++) {
        double mid = 0.5 * (low + high);
        if (analysis_student_t_cdf(mid, df) < target)
            low = mid;
        else
            high = mid;
    }
    double t = 0.5 * (low + high);
    return p > 0.5 ? t : -t;
}

analysis_paired analysis_paired_t(const double *diff, int n, double level) {
    analysis_paired r = {.n = n, .mean = NAN, .sd = NAN, .t = NAN, .low = NAN, .high = NAN, .p = NAN};
    if (n < 1) return r;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += diff[i];
    r.mean = sum / n;
    if (n < 2) return r;
    double squares = 0;
    for (int i = 0; i < n; i++)
        squares += (diff[i] - r.mean) * (diff[i] - r.mean);
    r.sd = sqrt(squares / (n - 1));
    double se = r.sd / sqrt((double)n), df = n - 1;
    double half = analysis_student_t_quantile(0.5 + level / 2, df) * se;
    r.low = r.mean - half;
    r.high = r.mean + half;
    if (se == 0) {
        r.t = r.mean == 0 ? NAN : (r.mean > 0 ? INFINITY : -INFINITY);
        r.p = r.mean == 0 ? 1 : 0;
        return r;
    }
    r.t = r.mean / se;
    r.p = 2 * analysis_student_t_cdf(-fabs(r.t), df);
    return r;
}

/* The half width with n pairs at sd: t(0.5 + level / 2, n - 1) sd / sqrt(n). */
static double halfwidth_of(int n, double sd, double level) {
    return analysis_student_t_quantile(0.5 + level / 2, n - 1) * sd / sqrt((double)n);
}

int analysis_pairs_for_halfwidth(double sd, double halfwidth, double level, int max_pairs) {
    if (!(sd >= 0) || !(halfwidth > 0) || !(level > 0 && level < 1)) return -1;
    if (max_pairs < 2 || halfwidth_of(max_pairs, sd, level) > halfwidth) return max_pairs + 1;
    /* The half width falls as n grows (both t and 1/sqrt(n) do): bisect for the first n that reaches it. */
    int low = 1, high = max_pairs; /* halfwidth_of(high) <= halfwidth; low is below any answer */
    while (high - low > 1) {
        const int mid = low + (high - low) / 2;
        if (halfwidth_of(mid, sd, level) <= halfwidth)
            high = mid;
        else
            low = mid;
    }
    return high;
}
