/* Power-law fits L(D) = E + A D^-alpha (analysis/scaling_fit.h) and
 * `dbranch compare --scaling` on points generated from chosen laws, so the
 * expected E, A and alpha are the generating values and the expected
 * asymptote differences are worked out from them here, not read from the
 * code. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/scaling_fit.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "test_analysis_util.h"

static char work_dir[128];
static void setup(void) { test_scratch_dir(work_dir, sizeof work_dir, "scaling_fit"); }
static void teardown(void) { test_remove_dir(work_dir); }
TestSuite(analysis_scaling_fit, .init = setup, .fini = teardown);

static double law(double E, double A, double alpha, double d) { return E + A * pow(d, -alpha); }

Test(analysis_scaling_fit, recovers_the_generating_law) {
    const double d[] = {10, 20, 40, 80, 160};
    double loss[5];
    for (int i = 0; i < 5; i++)
        loss[i] = law(1.9, 2.8, 0.7, d[i]);
    analysis_power_law fit;
    cr_assert_eq(analysis_fit_power_law(d, loss, 5, &fit), DT_OK, "%s", dt_error_message());
    assert_close(fit.E, 1.9, 1e-7);
    assert_close(fit.A, 2.8, 1e-6);
    assert_close(fit.alpha, 0.7, 1e-7);
    cr_assert(fit.rms < 1e-9 && fit.points == 5 && !fit.alpha_at_bound, "rms %g", fit.rms);
    /* three distinct D: three parameters, so the law through them exactly */
    cr_assert_eq(analysis_fit_power_law(d + 1, loss + 1, 3, &fit), DT_OK, "%s", dt_error_message());
    assert_close(fit.E, 1.9, 1e-6);
    assert_close(fit.alpha, 0.7, 1e-6);
}

/* Two seeds a constant apart (+-delta about the law at every D): the least
 * squares of all points is the law through their means, rms delta. */
Test(analysis_scaling_fit, seeds_at_the_same_d_fit_their_mean) {
    const double delta = 0.01, ds[] = {10, 20, 40, 80};
    double d[8], loss[8];
    for (int i = 0; i < 4; i++) {
        d[2 * i] = d[2 * i + 1] = ds[i];
        loss[2 * i] = law(2.1, 3.0, 0.55, ds[i]) + delta;
        loss[2 * i + 1] = law(2.1, 3.0, 0.55, ds[i]) - delta;
    }
    analysis_power_law fit;
    cr_assert_eq(analysis_fit_power_law(d, loss, 8, &fit), DT_OK, "%s", dt_error_message());
    assert_close(fit.E, 2.1, 1e-7);
    assert_close(fit.alpha, 0.55, 1e-7);
    assert_close(fit.rms, delta, 1e-9);
}

/* A loss falling linearly in D is no saturating power law: the search runs
 * to its smallest alpha, and the fit says E is not determined. */
Test(analysis_scaling_fit, a_law_the_points_do_not_pin_is_flagged) {
    const double d[] = {10, 20, 40, 80};
    double loss[4];
    for (int i = 0; i < 4; i++)
        loss[i] = 3.0 - 0.01 * d[i];
    analysis_power_law fit;
    cr_assert_eq(analysis_fit_power_law(d, loss, 4, &fit), DT_OK, "%s", dt_error_message());
    cr_assert(fit.alpha_at_bound, "alpha %g", fit.alpha);
    assert_close(fit.alpha, ANALYSIS_ALPHA_MIN, 1e-12);
}

Test(analysis_scaling_fit, input_that_cannot_be_fitted_is_refused) {
    analysis_power_law fit;
    const double two_d[] = {10, 20, 20, 10}, loss[] = {3, 2.5, 2.4, 3.1};
    cr_assert_eq(analysis_fit_power_law(two_d, loss, 4, &fit), DT_ERR);
    cr_assert(strstr(dt_error_message(), "2 distinct D"), "%s", dt_error_message());
    const double nonpositive[] = {10, 0, 40};
    cr_assert_eq(analysis_fit_power_law(nonpositive, loss, 3, &fit), DT_ERR);
    cr_assert(strstr(dt_error_message(), "positive"), "%s", dt_error_message());
    const double d[] = {10, 20, 40}, nan_loss[] = {3, NAN, 2};
    cr_assert_eq(analysis_fit_power_law(d, nan_loss, 3, &fit), DT_ERR);
    cr_assert(strstr(dt_error_message(), "finite"), "%s", dt_error_message());
    /* shared alpha: two curves of 2 distinct D each leave alpha free */
    const double *ds[] = {two_d, two_d}, *losses[] = {loss, loss};
    const int n[] = {4, 4};
    analysis_power_law fits[2];
    cr_assert_eq(analysis_fit_power_law_shared(ds, losses, n, 2, fits), DT_ERR);
    cr_assert(strstr(dt_error_message(), "3 distinct D"), "%s", dt_error_message());
}

/* Two curves of one exponent, different E and A: the shared fit gives each
 * its own; a second curve of 2 D is enough beside one of 4. */
Test(analysis_scaling_fit, a_shared_exponent_keeps_each_curves_asymptote) {
    const double d1[] = {10, 20, 40, 80}, d2[] = {10, 80};
    double l1[4], l2[2];
    for (int i = 0; i < 4; i++)
        l1[i] = law(2.0, 3.0, 0.65, d1[i]);
    for (int i = 0; i < 2; i++)
        l2[i] = law(1.95, 2.5, 0.65, d2[i]);
    const double *d[] = {d1, d2}, *loss[] = {l1, l2};
    const int n[] = {4, 2};
    analysis_power_law fits[2];
    cr_assert_eq(analysis_fit_power_law_shared(d, loss, n, 2, fits), DT_OK, "%s", dt_error_message());
    assert_close(fits[0].alpha, 0.65, 1e-7);
    assert_close(fits[1].alpha, 0.65, 1e-7);
    assert_close(fits[0].E, 2.0, 1e-7);
    assert_close(fits[1].E, 1.95, 1e-7);
    assert_close(fits[1].A, 2.5, 1e-6);
    cr_assert(fits[0].points == 4 && fits[1].points == 2);
}

/* The number after "key": in text, searched from the first occurrence of anchor. */
static double value_after(const char *text, const char *anchor, const char *key) {
    const char *at = strstr(text, anchor);
    cr_assert_not_null(at, "no %s in %s", anchor, text);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    at = strstr(at, quoted);
    cr_assert_not_null(at, "no %s after %s in %s", key, anchor, text);
    return strtod(at + strlen(quoted), NULL);
}

/* Arms base and twin, seeds 1-3, D = 10-80: base seed s has E = 2.00 +
 * 0.01 s, twin E = base E - 0.04 - 0.01 s, one alpha (0.7), so both fits
 * (own and shared alpha) give each seed's asymptote gap
 * 100 (-0.04 - 0.01 s) / (2.00 + 0.01 s) %; base's pooled fit ("all") is
 * the law through the seeds' means, E 2.02, rms 0.01 sqrt(2/3). */
Test(analysis_scaling_fit, cli_compares_asymptotes_paired_by_seed) {
    char path[256], args[512];
    snprintf(path, sizeof path, "%s/sweep.txt", work_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "# arm seed D loss\n");
    const double ds[] = {10, 20, 40, 80};
    double gap[3], mean_gap = 0;
    for (int s = 1; s <= 3; s++) {
        const double e_base = 2.0 + 0.01 * s, e_twin = e_base - 0.04 - 0.01 * s;
        for (int i = 0; i < 4; i++) {
            fprintf(f, "twin %d %g %.12f\n", s, ds[i], law(e_twin, 2.8, 0.7, ds[i]));
            fprintf(f, "base %d %g %.12f\n", s, ds[i], law(e_base, 3.0, 0.7, ds[i]));
        }
        gap[s - 1] = 100 * (e_twin - e_base) / e_base;
        mean_gap += gap[s - 1] / 3;
    }
    fclose(f);
    snprintf(args, sizeof args, "compare --scaling '%s' --reference base --json", path);
    char *out = NULL, *err = NULL;
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert_float_eq(value_after(out, "\"arm\":\"base\",\"seed\":\"all\"", "E"), 2.02, 1e-7, "%s", out);
    cr_assert_float_eq(value_after(out, "\"arm\":\"base\",\"seed\":\"all\"", "rms"), 0.01 * sqrt(2.0 / 3), 1e-8, "%s",
                       out);
    cr_assert_float_eq(value_after(out, "\"arm\":\"twin\",\"seed\":\"2\"", "E"), 2.02 - 0.06, 1e-7, "%s", out);
    double sd = 0;
    for (int s = 0; s < 3; s++)
        sd += (gap[s] - mean_gap) * (gap[s] - mean_gap) / 2;
    sd = sqrt(sd);
    const char *modes[] = {"\"alpha\":\"own\"", "\"alpha\":\"shared\""};
    for (int m = 0; m < 2; m++) {
        cr_assert_eq(value_after(out, modes[m], "pairs"), 3, "%s", out);
        cr_assert_float_eq(value_after(out, modes[m], "mean_diff_pct"), mean_gap, 1e-5, "%s", out);
        cr_assert_float_eq(value_after(out, modes[m], "sd_pct"), sd, 1e-5, "%s", out);
        /* t(0.975; 2) = 4.302653 */
        cr_assert_float_eq(value_after(out, modes[m], "ci95_high_pct"), mean_gap + 4.302653 * sd / sqrt(3), 1e-4, "%s",
                           out);
    }
    free(out);
    free(err);

    /* The text table prints rms in fixed point: a seed's points lie on its
     * law, so its rms is rounding residue and reads 0.00000 (not 1e-16, which
     * differs from one CPU to another); the pooled fit's reads 0.00816. */
    snprintf(args, sizeof args, "compare --scaling '%s' --reference base", path);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, " 0.7000    0.00000\n"), "no exact fit's rms as 0.00000 in\n%s", out);
    cr_assert(strstr(out, "    0.00816\n"), "no pooled rms 0.00816 in\n%s", out);
    cr_assert_null(strstr(out, "e-1"), "an rms in exponent notation in\n%s", out);
    free(out);
    free(err);

    /* A D only the reference has (a sweep under way) stays out of the
     * paired fits: base gets a point at D = 160 off its law by +0.1, yet
     * every pair is fitted on D = 10-80 and the gaps are unchanged, while
     * base's own fits take the point. */
    f = fopen(path, "a");
    cr_assert_not_null(f);
    for (int s = 1; s <= 3; s++)
        fprintf(f, "base %d 160 %.12f\n", s, law(2.0 + 0.01 * s, 3.0, 0.7, 160) + 0.1);
    fclose(f);
    snprintf(args, sizeof args, "compare --scaling '%s' --reference base --json", path);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert_eq(value_after(out, "\"arm\":\"base\",\"seed\":\"1\"", "points"), 5, "%s", out);
    for (int m = 0; m < 2; m++) {
        cr_assert_eq(value_after(out, modes[m], "pairs"), 3, "%s", out);
        cr_assert_float_eq(value_after(out, modes[m], "mean_diff_pct"), mean_gap, 1e-5, "%s", out);
        cr_assert_float_eq(value_after(out, modes[m], "sd_pct"), sd, 1e-5, "%s", out);
    }
    free(out);
    free(err);

    /* the text table names the reference and both analyses */
    snprintf(args, sizeof args, "compare --scaling '%s'", path);
    cr_assert_eq(test_run_dbranch(NULL, args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "reference (twin)"), "the first arm is the default reference: %s", out);
    free(out);
    free(err);

    snprintf(args, sizeof args, "compare --scaling '%s' --reference base2", path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "'base2' is no arm");
    free(err);
    f = fopen(path, "a");
    cr_assert_not_null(f);
    fprintf(f, "base 1 160 two\n");
    fclose(f);
    snprintf(args, sizeof args, "compare --scaling '%s'", path);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "line 29: loss 'two' is not a finite number");
    free(err);
    snprintf(args, sizeof args, "compare --scaling '%s' '%s'", path, work_dir);
    cr_assert_eq(test_run_dbranch(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch compare: ", "--scaling");
    free(err);
}
