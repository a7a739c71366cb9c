/* One training run as `dbranch compare` sees it, read back from what
 * `dbranch train` wrote into its output directory: the provenance record
 * (RUN/provenance.json, train/provenance.h) for the resolved configuration,
 * and the JSON-lines log (train/log.h; RUN/log.jsonl, or the log_file the
 * configuration names) for the final validation loss. */
#ifndef ANALYSIS_RUN_RECORD_H
#define ANALYSIS_RUN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct analysis_run {
    char *dir;     /* the run directory as given */
    int n_keys;    /* the resolved configuration, "section.key" = value as text */
    char **keys;   /* [n_keys] */
    char **values; /* [n_keys]; numbers in their shortest exact form */
    int64_t seed;  /* train.seed */
    int64_t total_steps;
    double final_loss; /* the validation loss of the eval record at step total_steps */
} analysis_run;

/* Reads run directory dir. Refused, naming the file (and line): a missing or
 * malformed provenance.json or log line, a record without train.seed, a log
 * without an eval at the run's last step (the run did not finish). */
dt_status analysis_run_read(const char *dir, analysis_run *run);
void analysis_run_free(analysis_run *run);

/* Reads the "config" object of the provenance record in text[n] (name: the
 * record's name in errors) into run's keys and values, and nothing else (no
 * seed, no log): `dbranch compare` reads the current defaults this way, from
 * the record of a default configuration. */
dt_status analysis_config_parse(const char *text, size_t n, const char *name, analysis_run *run);

/* Gives run every key of defaults that its record lacks, at the default's
 * value; *added counts them. A record lacks a key that was added to the
 * configuration after the run: new keys default to the behaviour before them
 * (docs/DECISIONS.md, "compare and keys added later"), so the default is what
 * that run ran. */
dt_status analysis_run_fill_defaults(analysis_run *run, const analysis_run *defaults, int *added);

/* The value of "section.key", or NULL when the run's configuration lacks it. */
const char *analysis_run_value(const analysis_run *run, const char *key);

#endif
