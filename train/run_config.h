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

#include "core/comm.h"
#include "core/error.h"
#include "kernels/attention_amx.h"
#include "models/config.h"
#include "models/feedback.h"
#include "optim/optim.h"
#include "optim/schedule.h"

enum { TRAIN_PATH_MAX = 1024 };

/* The run fields come from train/run_config_keys.def, one per key, in its
 * order (its help column says what each holds). */
#define TRAIN_FIELD_INT(field)       int64_t field;
#define TRAIN_FIELD_REAL(field)      double field;
#define TRAIN_FIELD_PATH(field)      char field[TRAIN_PATH_MAX];
#define TRAIN_FIELD_SCHEDULE(field)  optim_schedule_kind field;
#define TRAIN_FIELD_OPTIMIZER(field) optim_kind field;
#define TRAIN_FIELD_REDUCE(field)    dt_comm_reduce field;
#define TRAIN_FIELD_PASS_MIX(field)  train_pass_mix field;
#define TRAIN_FIELD_PRECISION(field) train_precision field;
#define TRAIN_FIELD_ATTENTION(field) train_bf16_attention field;

/* train.precision: the arithmetic of the matrix products (ag_ctx.bf16_products).
 * AUTO exists only between parsing and train_config_validate, which replaces
 * it by what this CPU runs fastest (train_precision_auto). */
typedef enum { TRAIN_PRECISION_FP32 = 0, TRAIN_PRECISION_BF16 = 1, TRAIN_PRECISION_AUTO = 2 } train_precision;
const char *train_precision_name(train_precision precision);
/* What precision = auto means on this CPU: bf16 where its bf16 units beat
 * float32 (AMX-BF16, or AVX512_BF16 at twice the FMA rate: AMD's) under
 * oneDNN and DBRANCH_ISA leaves AVX-512 on, else fp32; why (if not NULL)
 * gets the reason in a few words, for dbranch info --cpu. */
train_precision train_precision_auto(const char **why);

/* train.bf16_attention: the attention kernels under bf16 (ag_ctx.bf16_attention's values). */
typedef enum {
    TRAIN_BF16_ATTENTION_AUTO = 0,
    TRAIN_BF16_ATTENTION_AMX = 1,
    TRAIN_BF16_ATTENTION_FP32 = 2,
    TRAIN_BF16_ATTENTION_AVX512_BF16 = 3
} train_bf16_attention;
const char *train_bf16_attention_name(train_bf16_attention choice);

/* train.feedback_passes (SPEC §6.5): the distribution of the passes K a step
 * runs, "K:weight,..." with distinct K in 1..TRAIN_MAX_PASSES and positive
 * weights summing to 1 ("K" alone: always K). */
enum { TRAIN_MAX_PASSES = MODEL_FEEDBACK_MAX_PASSES, TRAIN_PASS_MIX_MAX = 8 };
typedef struct train_pass_mix {
    int n;
    int64_t passes[TRAIN_PASS_MIX_MAX];
    double weight[TRAIN_PASS_MIX_MAX];
} train_pass_mix;
/* The largest K of the mix. */
int64_t train_pass_mix_max(const train_pass_mix *mix);
/* K for a uniform draw r in [0, 1): the first entry whose cumulative weight exceeds r. */
int64_t train_pass_mix_pick(const train_pass_mix *mix, double r);

typedef struct train_config {
    model_config model; /* [model] */
#define RUN_KEY(section, name, field, kind, ...) TRAIN_FIELD_##kind(field)
#include "train/run_config_keys.def"
#undef RUN_KEY
} train_config;

train_config train_config_default(void);
/* Where the run's attention products run (kernels/attention_amx.h): fp32
 * unless precision = bf16; then the engine train.bf16_attention pins, or
 * under auto the CPU's default. */
k_bf16_attention_engine train_bf16_attention_engine(const train_config *c);
/* An error naming the key when the run pins an engine (precision = bf16 and
 * train.bf16_attention = amx or avx512_bf16) that this CPU cannot run. */
dt_status train_bf16_attention_check(const train_config *c);

/* Reads an INI file over cfg (start from train_config_default()). */
dt_status train_config_load(train_config *cfg, const char *path);
/* Same from text; origin names it in errors ("checkpoint run.h5"). */
dt_status train_config_parse_string(train_config *cfg, const char *text, const char *origin);
/* One override: "section.key=value" or "key=value" (the key must belong to one section only). */
dt_status train_config_set(train_config *cfg, const char *assignment);
/* One key of one section from its text value. */
dt_status train_config_set_key(train_config *cfg, const char *section, const char *key, const char *value);

/* Checks every value and the combinations (seq_len <= block_size, min_lr <=
 * lr, ...); fills seq_len = block_size when 0 and the model's neutral values,
 * and resolves precision = auto (so the config a run stores, and a resume
 * reads back, names the arithmetic it ran). */
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
/* One line for `dbranch info --keys`: "section.key  values; default 'd': meaning". */
void train_config_key_describe(int index, char *text, int capacity);
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
/* Whether step `step` (0-based) of a run of cfg trains with a single latent
 * feedback pass: always without model.feedback, else the first
 * feedback_start of the steps (SPEC §6.5). */
int train_config_single_pass_step(const train_config *cfg, int64_t step);

#endif
