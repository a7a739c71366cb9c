/* The statistics of `dbranch compare` against values that do not come from
 * the code: closed forms of the incomplete beta (I_x(a,1) = x^a, ...) and of
 * Student's t for 1, 2 and 3 degrees of freedom, and the two-sided 95% and
 * 99% critical values printed in every t table. */
#include <criterion/criterion.h>
#include <math.h>

#include "analysis/stats.h"
#include "test_analysis_util.h"

Test(analysis_stats, incomplete_beta_closed_forms) {
    const double xs[] = {0.01, 0.2, 0.5, 0.77, 0.999};
    for (int i = 0; i < 5; i++) {
        double x = xs[i];
        assert_close(analysis_incomplete_beta(1, 1, x), x, 1e-13);
        assert_close(analysis_incomplete_beta(3.5, 1, x), pow(x, 3.5), 1e-13);
        assert_close(analysis_incomplete_beta(1, 4, x), 1 - pow(1 - x, 4), 1e-13);
        assert_close(analysis_incomplete_beta(2, 2, x), 3 * x * x - 2 * x * x * x, 1e-13);
    }
    assert_close(analysis_incomplete_beta(7.25, 7.25, 0.5), 0.5, 1e-13); /* symmetry */
    assert_close(analysis_incomplete_beta(2, 3, 0), 0, 0);
    assert_close(analysis_incomplete_beta(2, 3, 1), 1, 0);
    cr_assert(isnan(analysis_incomplete_beta(0, 1, 0.5)) && isnan(analysis_incomplete_beta(1, 1, 1.5)));
}

Test(analysis_stats, t_cdf_closed_forms) {
    const double ts[] = {-30, -2.5, -0.3, 0, 0.7, 1.9, 12};
    for (int i = 0; i < 7; i++) {
        double t = ts[i];
        assert_close(analysis_student_t_cdf(t, 1), 0.5 + atan(t) / M_PI, 1e-13); /* Cauchy */
        assert_close(analysis_student_t_cdf(t, 2), 0.5 + t / (2 * sqrt(2 + t * t)), 1e-13);
        double u = t / sqrt(3);
        assert_close(analysis_student_t_cdf(t, 3), 0.5 + (u / (1 + u * u) + atan(u)) / M_PI, 1e-13);
    }
    /* Many degrees of freedom: the normal, Phi(1.959964) = 0.975. */
    assert_close(analysis_student_t_cdf(1.959963984540054, 1e7), 0.975, 1e-7);
}

/* Two-sided critical values t_{0.975, df} and t_{0.995, df} from the usual tables (6 decimals). */
Test(analysis_stats, t_quantiles_match_tables) {
    const struct {
        double df, p, t;
    } table[] = {{1, 0.975, 12.706205}, {2, 0.975, 4.302653}, {5, 0.975, 2.570582}, {10, 0.975, 2.228139},
                 {30, 0.975, 2.042272}, {4, 0.995, 4.604095}, {20, 0.95, 1.724718}, {9, 0.025, -2.262157}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        assert_close(analysis_student_t_quantile(table[i].p, table[i].df), table[i].t, 1e-6);
        assert_close(analysis_student_t_cdf(table[i].t, table[i].df), table[i].p, 1e-6);
    }
    /* df = 2 has a closed-form quantile: (2p - 1) / sqrt(2 p (1 - p)). */
    assert_close(analysis_student_t_quantile(0.9, 2), 0.8 / sqrt(2 * 0.9 * 0.1), 1e-10);
}

/* diffs -0.1, -0.05, -0.2: mean -0.35/3, deviations 1/60, 4/60, -5/60, so
 * sd^2 = (1 + 16 + 25) / 3600 / 2 = 42/7200; df = 2 closed forms for p and the quantile. */
Test(analysis_stats, paired_t_by_hand) {
    const double diff[] = {-0.1, -0.05, -0.2};
    analysis_paired r = analysis_paired_t(diff, 3, 0.95);
    double mean = -0.35 / 3, sd = sqrt(42.0 / 7200), se = sd / sqrt(3), t = mean / se;
    double t975 = 0.95 / sqrt(2 * 0.975 * 0.025);
    cr_assert_eq(r.n, 3);
    assert_close(r.mean, mean, 1e-15);
    assert_close(r.sd, sd, 1e-15);
    assert_close(r.t, t, 1e-12);
    assert_close(r.p, 1 - fabs(t) / sqrt(2 + t * t), 1e-12); /* 2 (1 - F(|t|)) for df = 2 */
    assert_close(r.low, mean - t975 * se, 1e-10);
    assert_close(r.high, mean + t975 * se, 1e-10);
}

Test(analysis_stats, paired_t_degenerate) {
    const double same[] = {0.25, 0.25, 0.25}, zero[] = {0, 0}, one[] = {0.5};
    analysis_paired r = analysis_paired_t(same, 3, 0.95);
    cr_assert(r.p == 0 && r.low == 0.25 && r.high == 0.25, "p %g [%g, %g]", r.p, r.low, r.high);
    r = analysis_paired_t(zero, 2, 0.95);
    cr_assert(r.p == 1, "p %g", r.p);
    r = analysis_paired_t(one, 1, 0.95);
    cr_assert(r.n == 1 && r.mean == 0.5 && isnan(r.p) && isnan(r.low));
}

/* Against printed t tables: t(0.975; 2, 3, 4) = 4.303, 3.182, 2.776, so at
 * sd 1 the 95% half widths of 3, 4, 5 pairs are 2.484, 1.591, 1.242. */
Test(analysis_stats, pairs_for_a_halfwidth) {
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 2.5, 0.95, 100), 3);
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 2.48, 0.95, 100), 4);
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 1.6, 0.95, 100), 4);
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 1.58, 0.95, 100), 5);
    cr_assert_eq(analysis_pairs_for_halfwidth(2.0, 3.2, 0.95, 100), 4); /* scales with sd */
    cr_assert_eq(analysis_pairs_for_halfwidth(0.0, 0.1, 0.95, 100), 2);
    /* about (1.96 / 0.1)^2 = 384 pairs: more than 100 */
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 0.1, 0.95, 100), 101);
    int n = analysis_pairs_for_halfwidth(1.0, 0.1, 0.95, 1000);
    cr_assert(n >= 385 && n <= 390, "%d", n);
    cr_assert_eq(analysis_pairs_for_halfwidth(-1.0, 1.0, 0.95, 100), -1);
    cr_assert_eq(analysis_pairs_for_halfwidth(1.0, 0.0, 0.95, 100), -1);
    cr_assert_eq(analysis_pairs_for_halfwidth(NAN, 1.0, 0.95, 100), -1);
}
