/* dbranch compare: the final validation losses of finished runs, grouped by
 * arm and paired by seed against a reference arm (analysis/compare.h); this
 * file reads the arguments and prints the table or the JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/compare.h"
#include "cli/commands.h"
#include "train/provenance.h"
#include "train/run_config.h"

static void print_help(void) {
    printf("usage: dbranch compare [--reference ARM|RUN_DIR] [--arm-key KEY[,KEY...]] [--halfwidth PCT] [--json]\n"
           "                       RUN_DIR...\n"
           "       dbranch compare --differences FILE|- [--halfwidth H] [--json]\n"
           "       dbranch compare --scaling FILE|- [--reference ARM] [--json]\n"
           "\n"
           "Reads each run directory's provenance.json and log (written by dbranch train), takes the\n"
           "validation loss of its final eval, groups the runs into arms and pairs each arm with the\n"
           "reference arm by train.seed. Per arm: the pairs, the mean difference arm - reference\n"
           "(absolute and %% of the reference), its 95%% interval (Student t) and the two-sided paired\n"
           "t-test p-value. A key that a run's record lacks (one added to the configuration after\n"
           "the run) is read as its default, which is the behaviour before the key; one line on\n"
           "stderr names such keys.\n"
           "\n"
           "  --reference A   the reference arm: its label as printed, or one of its run directories\n"
           "                  (default: the arm of the first run given)\n"
           "  --arm-key K,..  arms by these config keys (section.key) only; default: every key but\n"
           "                  train.seed, out_dir, log_file, threads, print_every, checkpoint_every,\n"
           "                  keep_last, eval_every and save_trunk (they change no weight)\n"
           "  --halfwidth P   also the pairs that would make each arm's 95%% interval +-P%% of the\n"
           "                  reference mean wide at its measured sd (a plan: a few pairs' sd is rough)\n"
           "  --json          one JSON object on stdout instead of the table\n"
           "\n"
           "--differences reads paired differences computed elsewhere, one number per line (blank lines\n"
           "and lines starting with # skipped; - is stdin), and prints the same analysis of them: n,\n"
           "mean, sd, 95%% interval, t, p; --halfwidth H is then in the numbers' own unit. For\n"
           "differences of differences, such as one arm's per-seed gap in two series (an interaction).\n"
           "\n"
           "--scaling reads a data sweep's final losses, one point per line \"arm seed D loss\" (D the\n"
           "data budget, e.g. tokens per parameter; # comments), and fits L(D) = E + A D^-alpha per arm\n"
           "and seed (least squares; alpha searched in [0.005, 4]; at least 3 distinct D), then compares\n"
           "each arm's asymptote E with the reference arm's (default: the first arm), paired by seed and\n"
           "fitted on the D both have at that seed: each curve fitted alone, and the two of a seed\n"
           "fitted with one shared alpha. E is an extrapolation: with 4 D and 3 parameters a fit has\n"
           "one degree of freedom left.\n");
}

/* The keys of a default configuration of model family `family` (a record's
 * text; NULL: the default family) as a record gives them: the default
 * formatted as INI, written as a provenance record's config and read back, so
 * the values have the same text as a run's record. */
static dt_status read_defaults(const char *family, analysis_run *defaults) {
    memset(defaults, 0, sizeof *defaults);
    train_config cfg = train_config_default();
    /* A record without train.precision predates the key: its run was float32
     * (the default, auto, is decided per CPU when a run starts and recorded). */
    cfg.precision = TRAIN_PRECISION_FP32;
    if (family && train_config_set_key(&cfg, "model", "family", family) != DT_OK) return DT_ERR;
    size_t length = train_config_format(&cfg, NULL, 0);
    char *ini = malloc(length + 1), *record = NULL;
    size_t record_size = 0;
    FILE *f = ini ? open_memstream(&record, &record_size) : NULL;
    if (!f) {
        free(ini);
        return dt_errorf("compare: out of memory");
    }
    train_config_format(&cfg, ini, length + 1);
    train_provenance p;
    memset(&p, 0, sizeof p);
    p.config_text = ini;
    dt_status status = train_provenance_write(f, &p, "the defaults' record");
    if (fclose(f) != 0 && status == DT_OK) status = dt_errorf("compare: cannot write the defaults' record");
    if (status == DT_OK) status = analysis_config_parse(record, record_size, "the default configuration", defaults);
    free(record);
    free(ini);
    return status;
}

/* One line naming the keys some records lack (lacking[k] runs, the first of
 * them runs[first[k]]), up to four of them, those some runs have and others
 * lack first: they are the ones that could have split arms. NULL when out of
 * memory. */
static char *defaults_note(const analysis_run *defaults, const int *lacking, const int *first, const analysis_run *runs,
                           int n_runs, int n_lacking) {
    size_t size = 256;
    for (int k = 0; k < defaults->n_keys; k++)
        if (lacking[k])
            size += strlen(defaults->keys[k]) + strlen(defaults->values[k]) + strlen(runs[first[k]].dir) + 64;
    char *line = malloc(size);
    if (!line) return NULL;
    size_t used = (size_t)snprintf(line, size,
                                   "dbranch compare: read as the default (the behaviour before the key was added), "
                                   "%d key%s that some records lack:",
                                   n_lacking, n_lacking > 1 ? "s" : "");
    int listed = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < defaults->n_keys && listed < 4; k++)
            if (lacking[k] && (lacking[k] < n_runs) == (pass == 0))
                used += (size_t)snprintf(line + used, size - used, "%s %s = %s (%d of %d runs, e.g. %s)",
                                         listed++ ? "," : "", defaults->keys[k], defaults->values[k], lacking[k],
                                         n_runs, runs[first[k]].dir);
    if (n_lacking > listed) snprintf(line + used, size - used, " and %d more", n_lacking - listed);
    return line;
}

/* Fills each run's record with the default of every key it lacks (a key added
 * after the run was recorded), at the defaults of the run's own model family
 * (a family sets some defaults of its own). *note: NULL, or defaults_note's
 * line, for stderr once the comparison is made. */
static dt_status fill_defaults(analysis_run *runs, int n_runs, char **note) {
    *note = NULL;
    enum { MAX_FAMILIES = 8 };
    analysis_run family_defaults[MAX_FAMILIES];
    const char *family_names[MAX_FAMILIES];
    int n_families = 0;
    analysis_run defaults; /* the first run's family's: the key list and the values the note names */
    dt_status status = read_defaults(analysis_run_value(&runs[0], "model.family"), &defaults);
    if (status != DT_OK) status = dt_error_context("%s", runs[0].dir);
    int *lacking = status == DT_OK ? calloc((size_t)defaults.n_keys + 1, sizeof *lacking) : NULL;
    int *first = status == DT_OK ? calloc((size_t)defaults.n_keys + 1, sizeof *first) : NULL;
    if (status == DT_OK && (!lacking || !first)) status = dt_errorf("compare: out of memory");
    for (int r = 0; r < n_runs && status == DT_OK; r++) {
        const char *family = analysis_run_value(&runs[r], "model.family");
        int which = 0;
        while (which < n_families && strcmp(family_names[which], family ? family : ""))
            which++;
        if (which == n_families) {
            if (n_families == MAX_FAMILIES) {
                status = dt_errorf("compare: runs of more than %d model families", MAX_FAMILIES);
                break;
            }
            if (read_defaults(family, &family_defaults[which]) != DT_OK) {
                analysis_run_free(&family_defaults[which]);
                status = dt_error_context("%s", runs[r].dir);
                break;
            }
            family_names[n_families++] = family ? family : "";
        }
        for (int k = 0; k < defaults.n_keys; k++)
            if (!analysis_run_value(&runs[r], defaults.keys[k]) && lacking[k]++ == 0) first[k] = r;
        int added;
        status = analysis_run_fill_defaults(&runs[r], &family_defaults[which], &added);
    }
    for (int i = 0; i < n_families; i++)
        analysis_run_free(&family_defaults[i]);
    int n_lacking = 0;
    for (int k = 0; k < defaults.n_keys && status == DT_OK; k++)
        n_lacking += lacking[k] > 0;
    if (status == DT_OK && n_lacking > 0 &&
        !(*note = defaults_note(&defaults, lacking, first, runs, n_runs, n_lacking)))
        status = dt_errorf("compare: out of memory");
    free(lacking);
    free(first);
    analysis_run_free(&defaults);
    return status;
}

/* A number in JSON, null when it is not finite. */
static void json_number(const char *key, double value, int comma) {
    printf("%s\"%s\":", comma ? "," : "", key);
    if (isfinite(value))
        printf("%.9g", value);
    else
        printf("null");
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

enum { MAX_PLANNED_PAIRS = 10000 };

/* The pairs for a 95% half width of halfwidth_pct % of the reference mean at the arm's sd; -1 when unknown. */
static int planned_pairs(const analysis_arm *arm, double halfwidth_pct) {
    if (arm->paired.n < 2 || !(arm->reference_mean > 0)) return -1;
    return analysis_pairs_for_halfwidth(100 * arm->paired.sd / arm->reference_mean, halfwidth_pct, 0.95,
                                        MAX_PLANNED_PAIRS);
}

static void print_json(const analysis_comparison *c, const analysis_run *runs, double halfwidth_pct) {
    printf("{\"metric\":\"final_val_loss\",\"confidence\":0.95,\"reference\":");
    json_string(c->arms[c->reference].label);
    printf(",\"arms\":[");
    for (int a = 0; a < c->n_arms; a++) {
        const analysis_arm *arm = &c->arms[a];
        printf("%s{\"arm\":", a ? "," : "");
        json_string(arm->label);
        printf(",\"runs\":[");
        for (int i = 0; i < arm->n_runs; i++) {
            const analysis_run *r = &runs[arm->runs[i]];
            printf("%s{\"dir\":", i ? "," : "");
            json_string(r->dir);
            printf(",\"seed\":%lld", (long long)r->seed);
            json_number("final_val_loss", r->final_loss, 1);
            printf("}");
        }
        printf("]");
        json_number("mean_loss", arm->mean_loss, 1);
        printf(",\"pairs\":%d", arm->paired.n);
        json_number("reference_mean", arm->reference_mean, 1);
        json_number("mean_diff", arm->paired.mean, 1);
        json_number("mean_diff_pct", arm->mean_diff_pct, 1);
        json_number("sd_diff", arm->paired.sd, 1);
        json_number("ci95_low", arm->paired.low, 1);
        json_number("ci95_high", arm->paired.high, 1);
        json_number("t", arm->paired.t, 1);
        json_number("p", arm->paired.p, 1);
        if (halfwidth_pct > 0 && a != c->reference) {
            int n = planned_pairs(arm, halfwidth_pct);
            json_number("halfwidth_pct", halfwidth_pct, 1);
            printf(",\"pairs_for_halfwidth\":");
            if (n > 0)
                printf("%d", n);
            else
                printf("null");
        }
        printf("}");
    }
    printf("]}\n");
}

static void print_table(const analysis_comparison *c, double halfwidth_pct) {
    int width = 9;
    for (int a = 0; a < c->n_arms; a++) {
        int n = (int)strlen(c->arms[a].label);
        if (n > width) width = n;
    }
    const analysis_arm *ref = &c->arms[c->reference];
    printf("final validation loss, paired by seed against '%s' (%d runs, mean %.6f); diff = arm - reference\n",
           ref->label, ref->n_runs, ref->mean_loss);
    char planned_header[48] = "";
    if (halfwidth_pct > 0) snprintf(planned_header, sizeof planned_header, "  pairs for +-%g%%", halfwidth_pct);
    printf("%-*s  %4s  %5s  %10s  %12s  %8s  %-27s  %8s%s\n", width, "arm", "runs", "pairs", "mean loss", "mean diff",
           "diff %", "95% interval", "p", planned_header);
    for (int a = 0; a < c->n_arms; a++) {
        const analysis_arm *arm = &c->arms[a];
        printf("%-*s  %4d  %5d  %10.6f", width, arm->label, arm->n_runs, arm->paired.n, arm->mean_loss);
        if (a == c->reference) {
            printf("  %12s\n", "(reference)");
            continue;
        }
        if (arm->paired.n == 0) {
            printf("  no seed in common with the reference\n");
            continue;
        }
        printf("  %+12.6f  %+7.3f%%", arm->paired.mean, arm->mean_diff_pct);
        if (arm->paired.n < 2) {
            printf("  %-27s  %8s\n", "(needs 2 pairs)", "-");
            continue;
        }
        char interval[64];
        snprintf(interval, sizeof interval, "[%+.6f, %+.6f]", arm->paired.low, arm->paired.high);
        printf("  %-27s  %8.3g", interval, arm->paired.p);
        int n = halfwidth_pct > 0 ? planned_pairs(arm, halfwidth_pct) : 0;
        if (n > MAX_PLANNED_PAIRS)
            printf("  %*s>%d", (int)strlen(planned_header) - 2 - 6, "", MAX_PLANNED_PAIRS);
        else if (n > 0)
            printf("  %*d", (int)strlen(planned_header) - 2, n);
        printf("\n");
    }
}

/* --differences: the paired t analysis of numbers read from path ("-":
 * stdin), one per line. Returns the exit status. */
static int compare_differences(const char *path, int json, double halfwidth) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "dbranch compare: cannot read %s\n", path);
        return 1;
    }
    double *values = NULL;
    int n = 0, capacity = 0, line_number = 0, code = 0;
    char line[256];
    while (code == 0 && fgets(line, sizeof line, f)) {
        line_number++;
        char *text = line;
        while (*text == ' ' || *text == '\t')
            text++;
        if (*text == '\n' || *text == '\0' || *text == '#') continue;
        char *end = NULL;
        const double value = strtod(text, &end);
        while (end && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (end == text || *end || !isfinite(value)) {
            text[strcspn(text, "\r\n")] = '\0';
            fprintf(stderr, "dbranch compare: %s line %d: '%s' is not a number\n", path, line_number, text);
            code = 1;
        } else if (n == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            double *grown = realloc(values, (size_t)capacity * sizeof *values);
            if (!grown) {
                fprintf(stderr, "dbranch compare: out of memory\n");
                code = 1;
            } else {
                values = grown;
            }
        }
        if (code == 0) values[n++] = value;
    }
    if (f != stdin) fclose(f);
    if (code == 0 && n < 2) {
        fprintf(stderr, "dbranch compare: %s holds %d number%s; the analysis needs at least 2\n", path, n,
                n == 1 ? "" : "s");
        code = 1;
    }
    if (code == 0) {
        const analysis_paired d = analysis_paired_t(values, n, 0.95);
        const int planned = halfwidth > 0 ? analysis_pairs_for_halfwidth(d.sd, halfwidth, 0.95, MAX_PLANNED_PAIRS) : 0;
        if (json) {
            printf("{\"metric\":\"differences\",\"confidence\":0.95,\"n\":%d", n);
            json_number("mean", d.mean, 1);
            json_number("sd", d.sd, 1);
            json_number("ci95_low", d.low, 1);
            json_number("ci95_high", d.high, 1);
            json_number("t", d.t, 1);
            json_number("p", d.p, 1);
            if (halfwidth > 0) {
                json_number("halfwidth", halfwidth, 1);
                printf(",\"pairs_for_halfwidth\":");
                if (planned > 0 && planned <= MAX_PLANNED_PAIRS)
                    printf("%d", planned);
                else
                    printf("null");
            }
            printf("}\n");
        } else {
            printf("%d differences from %s: mean %+.6g, sd %.6g, 95%% interval [%+.6g, %+.6g], t %.3g, p %.3g\n", n,
                   path, d.mean, d.sd, d.low, d.high, d.t, d.p);
            if (halfwidth > 0 && planned > 0)
                printf("pairs for +-%g at this sd: %s%d\n", halfwidth, planned > MAX_PLANNED_PAIRS ? ">" : "",
                       planned > MAX_PLANNED_PAIRS ? MAX_PLANNED_PAIRS : planned);
        }
    }
    free(values);
    return code;
}

int cmd_compare(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    const char *reference = NULL, *arm_keys_text = NULL, *halfwidth_text = NULL, *differences = NULL, *scaling = NULL;
    int json = 0, n_dirs = 0;
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    if (!dirs) {
        fprintf(stderr, "dbranch compare: out of memory\n");
        return 1;
    }
    cli_seen seen = {0};
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--reference")     ? &reference
                            : !strcmp(argv[i], "--arm-key")     ? &arm_keys_text
                            : !strcmp(argv[i], "--halfwidth")   ? &halfwidth_text
                            : !strcmp(argv[i], "--differences") ? &differences
                            : !strcmp(argv[i], "--scaling")     ? &scaling
                                                                : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dbranch compare: %s needs a value\n", argv[i]);
                free(dirs);
                return 1;
            }
            if (cli_once(&seen, argv[i]) != DT_OK) {
                free(dirs);
                return cli_fail("compare");
            }
            *slot = argv[++i];
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "dbranch compare: unknown option '%s' (try dbranch compare --help)\n", argv[i]);
            free(dirs);
            return 1;
        } else {
            dirs[n_dirs++] = argv[i];
        }
    }
    if (differences && (n_dirs > 0 || reference || arm_keys_text)) {
        fprintf(stderr, "dbranch compare: --differences reads numbers, not runs: no run directories, --reference "
                        "or --arm-key with it\n");
        free(dirs);
        return 1;
    }
    if (scaling && (n_dirs > 0 || arm_keys_text || halfwidth_text || differences)) {
        fprintf(stderr, "dbranch compare: --scaling reads \"arm seed D loss\" lines, not runs: no run directories, "
                        "--arm-key, --halfwidth or --differences with it\n");
        free(dirs);
        return 1;
    }
    if (scaling) {
        free(dirs);
        return compare_scaling(scaling, reference, json);
    }
    if (n_dirs == 0 && !differences) {
        fprintf(stderr, "dbranch compare: no run directories given (try dbranch compare --help)\n");
        free(dirs);
        return 1;
    }
    double halfwidth_pct = 0;
    if (halfwidth_text) {
        char *end = NULL;
        halfwidth_pct = strtod(halfwidth_text, &end);
        if (end == halfwidth_text || *end || !(halfwidth_pct > 0) || !isfinite(halfwidth_pct)) {
            fprintf(stderr, "dbranch compare: --halfwidth '%s' must be a positive percentage (0.5 for +-0.5%%)\n",
                    halfwidth_text);
            free(dirs);
            return 1;
        }
    }
    if (differences) {
        free(dirs);
        return compare_differences(differences, json, halfwidth_pct);
    }
    /* --arm-key a,b,c: split in a copy. */
    char *keys_copy = arm_keys_text ? strdup(arm_keys_text) : NULL;
    const char **arm_keys = calloc((size_t)(arm_keys_text ? strlen(arm_keys_text) : 0) + 1, sizeof *arm_keys);
    int n_arm_keys = 0, code = 0;
    for (char *save = NULL, *key = keys_copy ? strtok_r(keys_copy, ",", &save) : NULL; key;
         key = strtok_r(NULL, ",", &save))
        arm_keys[n_arm_keys++] = key;
    if (arm_keys_text && n_arm_keys == 0) {
        fprintf(stderr, "dbranch compare: --arm-key '%s': no key given\n", arm_keys_text);
        code = 1;
    }
    analysis_run *runs = calloc((size_t)n_dirs, sizeof *runs);
    if (!runs || !arm_keys) {
        fprintf(stderr, "dbranch compare: out of memory\n");
        code = 1;
    }
    int n_read = 0;
    for (; code == 0 && n_read < n_dirs; n_read++)
        if (analysis_run_read(dirs[n_read], &runs[n_read]) != DT_OK) code = cli_fail("compare");
    char *note = NULL;
    if (code == 0 && fill_defaults(runs, n_dirs, &note) != DT_OK) code = cli_fail("compare");
    analysis_comparison comparison;
    if (code == 0) {
        if (analysis_compare(runs, n_dirs, arm_keys, n_arm_keys, reference, &comparison) != DT_OK) {
            code = cli_fail("compare");
        } else {
            if (note) fprintf(stderr, "%s\n", note);
            if (json)
                print_json(&comparison, runs, halfwidth_pct);
            else
                print_table(&comparison, halfwidth_pct);
            analysis_comparison_free(&comparison);
        }
    }
    for (int i = 0; runs && i < n_read; i++)
        analysis_run_free(&runs[i]);
    free(runs);
    free(note);
    free(arm_keys);
    free(keys_copy);
    free(dirs);
    return code;
}
