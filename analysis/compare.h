/* `dbranch compare`: runs grouped into arms and paired by seed against a
 * reference arm, the way modded-nanogpt's records compare a change with its
 * baseline (same seeds, paired differences of the final validation loss).
 *
 * An arm is the runs whose configurations agree on every key except the ones
 * that only name or pace a run (ANALYSIS_RUN_ONLY_KEYS: the seed, the output
 * directory and log file, threads, the progress, checkpoint and evaluation
 * cadences, which change no weight), or, when the caller
 * lists keys (--arm-key), on those keys. An arm's label is the keys that tell
 * the arms apart, "section.key=value" joined by spaces ("all runs" when there
 * is one arm). Each arm's runs are paired with the reference arm's by
 * train.seed: difference = arm - reference, so a negative mean is a lower
 * (better) loss. */
#ifndef ANALYSIS_COMPARE_H
#define ANALYSIS_COMPARE_H

#include "analysis/run_record.h"
#include "analysis/stats.h"

/* Keys left out of the default arm identity, comma-separated. */
#define ANALYSIS_RUN_ONLY_KEYS                                                                                         \
    "train.seed,train.out_dir,train.log_file,train.threads,train.print_every,train.checkpoint_every,train.keep_last,"  \
    "train.eval_every,train.save_trunk"

typedef struct analysis_arm {
    char *label;
    int n_runs;
    int *runs;        /* indices into the runs given, in their order */
    double mean_loss; /* over the arm's runs */
    /* against the reference arm (for the reference itself: n = its runs, differences 0) */
    double reference_mean;  /* the reference's mean loss over the paired seeds */
    analysis_paired paired; /* of the per-seed differences arm - reference */
    double mean_diff_pct;   /* 100 * paired.mean / reference_mean */
} analysis_arm;

typedef struct analysis_comparison {
    int n_arms;
    analysis_arm *arms; /* in the order their first run was given */
    int reference;      /* index into arms */
} analysis_comparison;

/* Groups runs[n_runs] into arms (by every key but the run-only ones, or by
 * arm_keys[n_arm_keys] when n_arm_keys > 0) and pairs each arm with the
 * reference: the arm whose label is `reference`, or that holds the run
 * directory `reference`, or (NULL) the first run's arm. Errors: two runs of
 * one arm with the same seed, an arm key a run lacks, an unknown reference. */
dt_status analysis_compare(const analysis_run *runs, int n_runs, const char *const *arm_keys, int n_arm_keys,
                           const char *reference, analysis_comparison *out);
void analysis_comparison_free(analysis_comparison *c);

#endif
