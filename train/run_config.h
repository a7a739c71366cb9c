/* The configuration of a training run: one INI file with sections [model]
 * (models/config_keys.def), [data] and [train] (train/run_config_keys.def),
 * read by the one config-file reader (models/config_file.h), then `--set
 * section.key=value` overrides (or `key=value` when only one section has that
 * key).
 *
 * Every key has a default (train_config_default), so a file lists only what
 * differs. Unknown sections and keys, unparsable values and missing files
 * are one-line errors naming the file, line, key and value. The resolved
 * configuration is written as INI text (train_config_format) at the start of
 * a run and into each checkpoint for people to read; what `--resume` reads
 * back is the checkpoint's data: /config and the /train/run_config attributes
 * (train/checkpoint.h), one per key of the table below, never re-parsed text
 * (a path holding " ;" would be cut at the INI comment). */
#ifndef TRAIN_RUN_CONFIG_H
#define TRAIN_RUN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "models/config.h"
#include "optim/optim.h"
#include "optim/schedule.h"

enum { TRAIN_PATH_MAX = 1024 };

typedef struct train_config {
    model_config model; /* [model] */

    /* [data] */
    char data_path[TRAIN_PATH_MAX]; /* token dataset (SPEC §5), required */

    /* [train] */
    int64_t batch_size;     /* B: windows per micro-batch */
    int64_t seq_len;        /* T: tokens per window (0: the model's block_size) */
    int64_t tokens;         /* budget: training tokens of the whole run (steps = tokens / (B*T*grad_accum)) */
    int64_t grad_accum;     /* micro-batches per optimizer step */
    double lr;              /* AdamW peak learning rate */
    double min_lr;          /* floor reached by the decay */
    int64_t warmup_steps;   /* -1: use warmup_fraction */
    double warmup_fraction; /* share of the steps spent warming up */
    optim_schedule_kind schedule;
    double decay_fraction; /* wsd: share of the steps spent decaying */
    double weight_decay;
    double beta1, beta2, eps;
    double grad_clip; /* global-norm clip; 0 disables */
    optim_kind optimizer;
    double muon_lr, muon_momentum, muon_weight_decay;
    int64_t seed;                   /* model init and batch order */
    int64_t threads;                /* 0: OpenMP's default */
    int64_t eval_every;             /* steps between validation evals (0: only at the end) */
    int64_t eval_windows;           /* validation windows per eval (0: the whole split) */
    int64_t checkpoint_every;       /* steps between checkpoints (0: only at the end) */
    int64_t print_every;            /* steps between plain progress lines when stdout is no TTY (0: about 50 per run) */
    char out_dir[TRAIN_PATH_MAX];   /* checkpoint.h5 and the log go here */
    char log_file[TRAIN_PATH_MAX];  /* JSON-lines log; relative paths are inside out_dir */
    char init_from[TRAIN_PATH_MAX]; /* "" or a checkpoint whose weights start the run (issue 17) */
} train_config;

train_config train_config_default(void);

/* Reads an INI file over cfg (start from train_config_default()). */
dt_status train_config_load(train_config *cfg, const char *path);
/* Same from text; origin names it in errors ("checkpoint run.h5"). */
dt_status train_config_parse_string(train_config *cfg, const char *text, const char *origin);
/* One override: "section.key=value" or "key=value" (the key must belong to one section only). */
dt_status train_config_set(train_config *cfg, const char *assignment);
/* One key of one section from its text value. */
dt_status train_config_set_key(train_config *cfg, const char *section, const char *key, const char *value);

/* Checks every value and the combinations (seq_len <= block_size, min_lr <=
 * lr, ...); fills seq_len = block_size when 0 and the model's neutral values. */
dt_status train_config_validate(train_config *cfg);

/* The whole configuration as INI text (every key). Returns the length it
 * needs (like snprintf); text may be NULL with capacity 0 to ask. */
size_t train_config_format(const train_config *cfg, char *text, size_t capacity);

/* The [data] and [train] keys in table order, for storing a run as data:
 * index 0..train_config_key_count()-1. The name is "section.key". Stored as
 * int64 (MODEL_KEY_INT), float64 (MODEL_KEY_REAL) or a string (MODEL_KEY_WORD:
 * paths verbatim, words). */
int train_config_key_count(void);
const char *train_config_key_name(int index);
model_key_kind train_config_key_kind(int index);
/* The value in a form train_config_set_stored reads back exactly. */
void train_config_get_stored(const train_config *cfg, int index, char *text, size_t capacity);
/* Sets key index from that form (paths verbatim: no trimming, no comments). */
dt_status train_config_set_stored(train_config *cfg, int index, const char *text);

/* Tokens per optimizer step (B * T * grad_accum) and the step count of the budget (at least 1). */
int64_t train_config_tokens_per_step(const train_config *cfg);
int64_t train_config_total_steps(const train_config *cfg);
/* Warm-up steps after resolving warmup_fraction. */
int64_t train_config_warmup_steps(const train_config *cfg);

#endif
