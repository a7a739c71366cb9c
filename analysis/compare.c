/* Arms, pairing by seed and the paired statistics (see compare.h). */
#include "analysis/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_run_only(const char *key) {
    const char *list = ANALYSIS_RUN_ONLY_KEYS;
    size_t n = strlen(key);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, key, n)) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* The keys that define arms: arm_keys, or the union of the runs' keys minus the run-only ones. */
typedef struct key_list {
    int n;
    const char **keys;
} key_list;

static dt_status collect_keys(const analysis_run *runs, int n_runs, const char *const *arm_keys, int n_arm_keys,
                              key_list *out) {
    int capacity = n_arm_keys;
    for (int r = 0; r < n_runs; r++)
        capacity += runs[r].n_keys;
    out->keys = calloc((size_t)capacity + 1, sizeof *out->keys);
    out->n = 0;
    if (!out->keys) return dt_errorf("compare: out of memory");
    if (n_arm_keys > 0) {
        for (int k = 0; k < n_arm_keys; k++) {
            for (int r = 0; r < n_runs; r++)
                if (!analysis_run_value(&runs[r], arm_keys[k]))
                    return dt_errorf("--arm-key %s: %s/provenance.json has no such key", arm_keys[k], runs[r].dir);
            out->keys[out->n++] = arm_keys[k];
        }
        return DT_OK;
    }
    for (int r = 0; r < n_runs; r++)
        for (int k = 0; k < runs[r].n_keys; k++) {
            const char *key = runs[r].keys[k];
            int seen = is_run_only(key);
            for (int i = 0; i < out->n && !seen; i++)
                seen = !strcmp(out->keys[i], key);
            if (!seen) out->keys[out->n++] = key;
        }
    return DT_OK;
}

/* Whether runs a and b agree on key (both lacking it counts as agreeing). */
static int same_value(const analysis_run *a, const analysis_run *b, const char *key) {
    const char *x = analysis_run_value(a, key), *y = analysis_run_value(b, key);
    return x && y ? !strcmp(x, y) : x == y;
}

static int same_arm(const analysis_run *a, const analysis_run *b, const key_list *keys) {
    for (int k = 0; k < keys->n; k++)
        if (!same_value(a, b, keys->keys[k])) return 0;
    return 1;
}

/* "k=v k=v" over the keys on which some arm differs from another. */
static dt_status make_labels(analysis_comparison *c, const analysis_run *runs, const key_list *keys,
                             int explicit_keys) {
    for (int a = 0; a < c->n_arms; a++) {
        const analysis_run *first = &runs[c->arms[a].runs[0]];
        size_t size = 16;
        for (int k = 0; k < keys->n; k++) {
            const char *v = analysis_run_value(first, keys->keys[k]);
            size += strlen(keys->keys[k]) + (v ? strlen(v) : 8) + 2;
        }
        char *label = malloc(size);
        if (!label) return dt_errorf("compare: out of memory");
        size_t used = 0;
        label[0] = '\0';
        for (int k = 0; k < keys->n; k++) {
            int differs = explicit_keys;
            for (int b = 0; b < c->n_arms && !differs; b++)
                differs = !same_value(first, &runs[c->arms[b].runs[0]], keys->keys[k]);
            if (!differs) continue;
            const char *v = analysis_run_value(first, keys->keys[k]);
            used += (size_t)snprintf(label + used, size - used, "%s%s=%s", used ? " " : "", keys->keys[k],
                                     v ? v : "(absent)");
        }
        if (!used) snprintf(label, size, "all runs");
        c->arms[a].label = label;
    }
    return DT_OK;
}

static int find_reference(const analysis_comparison *c, const analysis_run *runs, const char *reference) {
    if (!reference) return 0;
    for (int a = 0; a < c->n_arms; a++)
        if (!strcmp(c->arms[a].label, reference)) return a;
    size_t n = strlen(reference);
    while (n > 1 && reference[n - 1] == '/')
        n--;
    for (int a = 0; a < c->n_arms; a++)
        for (int i = 0; i < c->arms[a].n_runs; i++) {
            const char *dir = runs[c->arms[a].runs[i]].dir;
            size_t m = strlen(dir);
            while (m > 1 && dir[m - 1] == '/')
                m--;
            if (m == n && !strncmp(dir, reference, n)) return a;
        }
    return -1;
}

/* Pairs arm with the reference by seed and fills its statistics. */
static dt_status pair_arm(analysis_arm *arm, const analysis_arm *ref, const analysis_run *runs) {
    double *diff = malloc(((size_t)ref->n_runs + 1) * sizeof *diff);
    if (!diff) return dt_errorf("compare: out of memory");
    int n = 0;
    double ref_sum = 0;
    for (int i = 0; i < ref->n_runs; i++) {
        const analysis_run *r = &runs[ref->runs[i]];
        for (int j = 0; j < arm->n_runs; j++) {
            const analysis_run *x = &runs[arm->runs[j]];
            if (x->seed != r->seed) continue;
            diff[n++] = x->final_loss - r->final_loss;
            ref_sum += r->final_loss;
        }
    }
    arm->paired = analysis_paired_t(diff, n, 0.95);
    arm->reference_mean = n > 0 ? ref_sum / n : NAN;
    arm->mean_diff_pct = n > 0 ? 100 * arm->paired.mean / arm->reference_mean : NAN;
    free(diff);
    return DT_OK;
}

dt_status analysis_compare(const analysis_run *runs, int n_runs, const char *const *arm_keys, int n_arm_keys,
                           const char *reference, analysis_comparison *out) {
    memset(out, 0, sizeof *out);
    if (n_runs < 1) return dt_errorf("compare: no runs given");
    key_list keys = {0};
    dt_status status = collect_keys(runs, n_runs, arm_keys, n_arm_keys, &keys);
    out->arms = calloc((size_t)n_runs, sizeof *out->arms);
    if (status == DT_OK && !out->arms) status = dt_errorf("compare: out of memory");
    for (int r = 0; r < n_runs && status == DT_OK; r++) {
        int a = 0;
        while (a < out->n_arms && !same_arm(&runs[out->arms[a].runs[0]], &runs[r], &keys))
            a++;
        analysis_arm *arm = &out->arms[a];
        if (a == out->n_arms) {
            out->n_arms++;
            arm->runs = calloc((size_t)n_runs, sizeof *arm->runs);
            if (!arm->runs) {
                status = dt_errorf("compare: out of memory");
                break;
            }
        }
        for (int i = 0; i < arm->n_runs; i++)
            if (runs[arm->runs[i]].seed == runs[r].seed) {
                status = dt_errorf("%s and %s: the same arm and seed (train.seed = %lld); give each run once",
                                   runs[arm->runs[i]].dir, runs[r].dir, (long long)runs[r].seed);
                break;
            }
        arm->runs[arm->n_runs++] = r;
    }
    if (status == DT_OK) status = make_labels(out, runs, &keys, n_arm_keys > 0);
    if (status == DT_OK) {
        out->reference = find_reference(out, runs, reference);
        if (out->reference < 0) {
            size_t size = 64;
            for (int a = 0; a < out->n_arms; a++)
                size += strlen(out->arms[a].label) + 4;
            char *names = malloc(size);
            if (names) {
                size_t used = 0;
                for (int a = 0; a < out->n_arms; a++)
                    used += (size_t)snprintf(names + used, size - used, "%s'%s'", a ? ", " : "", out->arms[a].label);
            }
            status = dt_errorf("--reference '%s': no arm has that label or run directory (arms: %s)", reference,
                               names ? names : "?");
            free(names);
        }
    }
    for (int a = 0; a < out->n_arms && status == DT_OK; a++) {
        analysis_arm *arm = &out->arms[a];
        double sum = 0;
        for (int i = 0; i < arm->n_runs; i++)
            sum += runs[arm->runs[i]].final_loss;
        arm->mean_loss = sum / arm->n_runs;
        status = pair_arm(arm, &out->arms[out->reference], runs);
    }
    free(keys.keys);
    if (status != DT_OK) analysis_comparison_free(out);
    return status;
}

void analysis_comparison_free(analysis_comparison *c) {
    for (int a = 0; a < c->n_arms; a++) {
        free(c->arms[a].label);
        free(c->arms[a].runs);
    }
    free(c->arms);
    memset(c, 0, sizeof *c);
}
