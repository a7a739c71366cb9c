/* dbranch compare --scaling: power laws L(D) = E + A D^-alpha fitted per arm
 * and seed to final losses at several data budgets D (a data sweep), and the
 * arms' asymptotes E compared with the reference arm's, paired by seed and
 * fitted on the D both have (analysis/scaling_fit.h, analysis/stats.h). The
 * input is a text table, one point a line: "arm seed D loss". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/scaling_fit.h"
#include "analysis/stats.h"
#include "cli/commands.h"

enum { ARM_NAME_MAX = 64 };

typedef struct scaling_point {
    char arm[ARM_NAME_MAX + 1]; /* the size parse_point scans into, so the copy provably fits */
    long seed;
    double d, loss;
} scaling_point;

typedef struct scaling_table {
    scaling_point *points;
    int n, capacity;
} scaling_table;

/* One "arm seed D loss" line into table; DT_ERR naming path and line. */
static dt_status parse_point(const char *path, int line_number, char *text, scaling_table *table) {
    char arm[ARM_NAME_MAX + 1], seed_text[64], d_text[64], loss_text[64], extra[2];
    const int fields = sscanf(text, "%64s %63s %63s %63s %1s", arm, seed_text, d_text, loss_text, extra);
    text[strcspn(text, "\r\n")] = '\0';
    if (fields != 4 || strlen(arm) >= ARM_NAME_MAX)
        return dt_errorf("%s line %d: '%s' is not \"arm seed D loss\"", path, line_number, text);
    if (strpbrk(arm, "\"\\")) /* arms are printed into JSON strings as they are */
        return dt_errorf("%s line %d: arm '%s' holds a quote or a backslash", path, line_number, arm);
    char *end = NULL;
    const long seed = strtol(seed_text, &end, 10);
    if (*end) return dt_errorf("%s line %d: seed '%s' is not an integer", path, line_number, seed_text);
    const double d = strtod(d_text, &end);
    if (*end || !(d > 0) || !isfinite(d))
        return dt_errorf("%s line %d: D '%s' is not a positive number", path, line_number, d_text);
    const double loss = strtod(loss_text, &end);
    if (*end || !isfinite(loss))
        return dt_errorf("%s line %d: loss '%s' is not a finite number", path, line_number, loss_text);
    for (int i = 0; i < table->n; i++) {
        const scaling_point *p = &table->points[i];
        if (!strcmp(p->arm, arm) && p->seed == seed && p->d == d)
            return dt_errorf("%s line %d: arm %s seed %ld at D %s is given twice", path, line_number, arm, seed,
                             d_text);
    }
    if (table->n == table->capacity) {
        const int capacity = table->capacity ? 2 * table->capacity : 64;
        scaling_point *grown = realloc(table->points, (size_t)capacity * sizeof *grown);
        if (!grown) return dt_errorf("out of memory");
        table->points = grown;
        table->capacity = capacity;
    }
    scaling_point *p = &table->points[table->n++];
    snprintf(p->arm, sizeof p->arm, "%s", arm);
    p->seed = seed;
    p->d = d;
    p->loss = loss;
    return DT_OK;
}

static dt_status read_table(const char *path, scaling_table *table) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) return dt_errorf("cannot read %s", path);
    char line[512];
    int line_number = 0;
    dt_status status = DT_OK;
    while (status == DT_OK && fgets(line, sizeof line, f)) {
        line_number++;
        char *text = line;
        while (*text == ' ' || *text == '\t')
            text++;
        if (*text == '\n' || *text == '\r' || *text == '\0' || *text == '#') continue;
        status = parse_point(path, line_number, text, table);
    }
    if (f != stdin) fclose(f);
    if (status == DT_OK && table->n == 0) status = dt_errorf("%s holds no point (lines \"arm seed D loss\")", path);
    return status;
}

/* The distinct arms in order of first appearance (pointers into the table). */
static int list_arms(const scaling_table *table, const char **arms) {
    int n_arms = 0;
    for (int i = 0; i < table->n; i++) {
        int seen = 0;
        for (int a = 0; a < n_arms && !seen; a++)
            seen = !strcmp(arms[a], table->points[i].arm);
        if (!seen) arms[n_arms++] = table->points[i].arm;
    }
    return n_arms;
}

/* The distinct seeds of arm, in order of first appearance. */
static int list_seeds(const scaling_table *table, const char *arm, long *seeds) {
    int n_seeds = 0;
    for (int i = 0; i < table->n; i++) {
        if (strcmp(table->points[i].arm, arm)) continue;
        int seen = 0;
        for (int s = 0; s < n_seeds && !seen; s++)
            seen = seeds[s] == table->points[i].seed;
        if (!seen) seeds[n_seeds++] = table->points[i].seed;
    }
    return n_seeds;
}

/* The points of arm (one seed, or every seed when all_seeds) into d[], loss[]; their count. */
static int gather(const scaling_table *table, const char *arm, long seed, int all_seeds, double *d, double *loss) {
    int n = 0;
    for (int i = 0; i < table->n; i++) {
        const scaling_point *p = &table->points[i];
        if (strcmp(p->arm, arm) || (!all_seeds && p->seed != seed)) continue;
        d[n] = p->d;
        loss[n++] = p->loss;
    }
    return n;
}

static void print_fit(const char *arm, const char *seed, const analysis_power_law *fit, int json, int *first) {
    if (json) {
        printf("%s{\"arm\":\"%s\",\"seed\":\"%s\",\"points\":%d,\"E\":%.9g,\"A\":%.9g,\"alpha\":%.9g,\"rms\":%.9g,"
               "\"alpha_at_bound\":%s}",
               *first ? "" : ",", arm, seed, fit->points, fit->E, fit->A, fit->alpha, fit->rms,
               fit->alpha_at_bound ? "true" : "false");
        *first = 0;
    } else {
        /* rms in fixed point: a fit through 3 D has no residual, and %g printed its
         * rounding residue (1e-16 or so, different on another CPU) as if it were one. */
        printf("%-24s %6s %6d %10.6f %10.5g %7.4f %10.5f%s\n", arm, seed, fit->points, fit->E, fit->A, fit->alpha,
               fit->rms, fit->alpha_at_bound ? "  *" : "");
    }
}

/* The points of reference and arm at one seed and at the D both have, into
 * d_ref[], loss_ref[] and d_arm[], loss_arm[] (the same D at each index);
 * their count. A pair's two curves are fitted on the same D: while a sweep
 * is under way one arm often has a D the other has not yet, and an
 * asymptote extrapolated from 4 points set against one from 3 would
 * compare the points, not the arms. */
static int gather_common(const scaling_table *table, const char *reference, const char *arm, long seed, double *d_ref,
                         double *loss_ref, double *d_arm, double *loss_arm) {
    int n = 0;
    for (int i = 0; i < table->n; i++) {
        const scaling_point *r = &table->points[i];
        if (strcmp(r->arm, reference) || r->seed != seed) continue;
        for (int j = 0; j < table->n; j++) {
            const scaling_point *a = &table->points[j];
            if (strcmp(a->arm, arm) || a->seed != seed || a->d != r->d) continue;
            d_ref[n] = d_arm[n] = r->d;
            loss_ref[n] = r->loss;
            loss_arm[n++] = a->loss;
        }
    }
    return n;
}

/* Per seed of arm also fitted for the reference: the asymptotes' difference
 * in % of the reference's E, the two curves fitted on the D both have
 * (gather_common), each alone (shared = 0) or with one alpha (shared = 1).
 * Returns the pairs in diff[]. */
static int paired_asymptotes(const scaling_table *table, const char *reference, const char *arm, int shared,
                             double *d_ref, double *loss_ref, double *d_arm, double *loss_arm, long *seeds,
                             double *diff) {
    const int n_seeds = list_seeds(table, arm, seeds);
    int pairs = 0;
    for (int s = 0; s < n_seeds; s++) {
        const int n_common = gather_common(table, reference, arm, seeds[s], d_ref, loss_ref, d_arm, loss_arm);
        if (n_common == 0) continue;
        analysis_power_law fits[2];
        dt_status status;
        if (shared) {
            const double *d[2] = {d_ref, d_arm}, *loss[2] = {loss_ref, loss_arm};
            const int n[2] = {n_common, n_common};
            status = analysis_fit_power_law_shared(d, loss, n, 2, fits);
        } else {
            status = analysis_fit_power_law(d_ref, loss_ref, n_common, &fits[0]);
            if (status == DT_OK) status = analysis_fit_power_law(d_arm, loss_arm, n_common, &fits[1]);
        }
        dt_error_clear();
        if (status == DT_OK) diff[pairs++] = 100 * (fits[1].E - fits[0].E) / fits[0].E;
    }
    return pairs;
}

static void print_paired(const char *arm, const char *what, const double *diff, int pairs, int json, int *first) {
    const analysis_paired p = analysis_paired_t(diff, pairs, 0.95);
    if (json) {
        printf("%s{\"arm\":\"%s\",\"alpha\":\"%s\",\"pairs\":%d", *first ? "" : ",", arm, what, pairs);
        const char *keys[] = {"mean_diff_pct", "sd_pct", "ci95_low_pct", "ci95_high_pct", "p"};
        const double values[] = {p.mean, p.sd, p.low, p.high, p.p};
        for (int k = 0; k < 5; k++) {
            if (isfinite(values[k]))
                printf(",\"%s\":%.9g", keys[k], values[k]);
            else
                printf(",\"%s\":null", keys[k]);
        }
        printf("}");
        *first = 0;
    } else if (pairs < 2) {
        printf("%-24s %s: %d pair%s, no interval\n", arm, what, pairs, pairs == 1 ? "" : "s");
    } else {
        printf("%-24s %s: %d pairs, mean %+.2f%%, sd %.2f%%, 95%% interval [%+.2f, %+.2f]%%, p %.3g\n", arm, what,
               pairs, p.mean, p.sd, p.low, p.high, p.p);
    }
}

int compare_scaling(const char *path, const char *reference, int json) {
    scaling_table table = {0};
    if (read_table(path, &table) != DT_OK) {
        free(table.points);
        return cli_fail("compare");
    }
    const int n = table.n;
    const char **arms = calloc((size_t)n, sizeof *arms);
    long *seeds = calloc((size_t)n, sizeof *seeds);
    double *buffer = calloc((size_t)4 * n, sizeof *buffer);
    double *diff = calloc((size_t)n, sizeof *diff);
    if (!arms || !seeds || !buffer || !diff) {
        free(arms), free(seeds), free(buffer), free(diff), free(table.points);
        fprintf(stderr, "dbranch compare: out of memory\n");
        return 1;
    }
    double *d = buffer, *loss = buffer + n, *d_arm = buffer + 2 * n, *loss_arm = buffer + 3 * n;
    const int n_arms = list_arms(&table, arms);
    int reference_arm = 0, code = 0;
    if (reference) {
        for (reference_arm = 0; reference_arm < n_arms && strcmp(arms[reference_arm], reference); reference_arm++) {
        }
        if (reference_arm == n_arms) {
            fprintf(stderr, "dbranch compare: --reference '%s' is no arm of %s\n", reference, path);
            code = 1;
        }
    }
    if (code == 0) {
        int first = 1;
        if (json)
            printf("{\"metric\":\"power_law\",\"law\":\"E + A D^-alpha\",\"reference\":\"%s\",\"fits\":[",
                   arms[reference_arm]);
        else
            printf("power laws L(D) = E + A D^-alpha fitted to %s (%d points); per arm and seed, and \"all\": every "
                   "seed's points in one fit\n%-24s %6s %6s %10s %10s %7s %10s\n",
                   path, n, "arm", "seed", "points", "E", "A", "alpha", "rms");
        int any_at_bound = 0;
        for (int a = 0; a < n_arms; a++) {
            const int n_seeds = list_seeds(&table, arms[a], seeds);
            for (int s = 0; s <= n_seeds; s++) {
                const int all = s == n_seeds;
                if (all && n_seeds < 2) continue;
                char seed_text[32] = "all";
                if (!all) snprintf(seed_text, sizeof seed_text, "%ld", seeds[s]);
                const int points = gather(&table, arms[a], all ? 0 : seeds[s], all, d, loss);
                analysis_power_law fit;
                if (analysis_fit_power_law(d, loss, points, &fit) == DT_OK) {
                    print_fit(arms[a], seed_text, &fit, json, &first);
                    any_at_bound |= fit.alpha_at_bound;
                } else if (!json) {
                    printf("%-24s %6s %6d (not fitted: %s)\n", arms[a], seed_text, points, dt_error_message());
                }
                dt_error_clear();
            }
        }
        if (json) {
            printf("],\"asymptote_vs_reference\":[");
        } else {
            if (any_at_bound)
                printf("* alpha at an end of its search range [%g, %g]: the points do not pin it, and E is not "
                       "determined\n",
                       ANALYSIS_ALPHA_MIN, ANALYSIS_ALPHA_MAX);
            printf("\nasymptote E, arm - reference (%s), in %% of the reference's E, paired by seed:\n",
                   arms[reference_arm]);
        }
        first = 1;
        for (int a = 0; a < n_arms; a++) {
            if (a == reference_arm) continue;
            for (int shared = 0; shared <= 1; shared++) {
                const int pairs = paired_asymptotes(&table, arms[reference_arm], arms[a], shared, d, loss, d_arm,
                                                    loss_arm, seeds, diff);
                print_paired(arms[a], shared ? "shared" : "own", diff, pairs, json, &first);
            }
        }
        if (json)
            printf("]}\n");
        else
            printf("(each seed's arm and reference curves fitted on the D both have; own: each alone; shared: the "
                   "two with one alpha, so their gap is not an extrapolation of two exponents)\n");
    }
    free(arms), free(seeds), free(buffer), free(diff), free(table.points);
    return code;
}
