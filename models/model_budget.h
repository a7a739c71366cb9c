/* Resource budget: the bytes a model needs, computed from its configuration
 * alone, checked against the machine's memory before anything is allocated,
 * so `n_layer = 1000000` or `vocab_size = 100000000` is one clear line instead
 * of a kill by the kernel's OOM killer.
 *
 * The figures are lower bounds (activations and arenas come on top): the
 * parameters, their gradients and the RoPE table (what model_create
 * allocates), for training
 * the optimizer state (two float moments per parameter, AdamW's bound, which
 * also covers Muon) and one gradient copy per extra worker thread
 * (train/parallel_step.c), plus the weights' bf16 copies when training in
 * bf16, for decode the KV cache. */
#ifndef MODELS_MODEL_BUDGET_H
#define MODELS_MODEL_BUDGET_H

#include <stdint.h>

#include "core/error.h"
#include "models/config.h"

typedef enum {
    MODEL_USE_WEIGHTS,    /* parameters + gradients + RoPE table (model_create) */
    MODEL_USE_TRAIN,      /* + optimizer state + per-thread gradient copies */
    MODEL_USE_TRAIN_BF16, /* + the weights' bf16 copies (train.precision = bf16: 2 bytes per parameter) */
    MODEL_USE_DECODE,     /* + KV cache */
} model_use;

/* Bytes of the parameters (float32) the config describes; double, so no
 * config overflows it; INFINITY for an invalid config. Pure: allocates nothing. */
double model_config_param_bytes(const model_config *config);
/* Parameters the config describes (a double for the same reason). */
double model_config_param_count(const model_config *config);

/* Total bytes for a use. threads: training workers (<= 1: one); kv_positions:
 * cached positions for decode (<= 0: block_size), over kv_rows sequences. */
double model_budget_bytes(const model_config *config, model_use use, int64_t threads, int64_t kv_positions,
                          int64_t kv_rows);

/* The memory a model may use: physical memory (sysconf), lowered by
 * RLIMIT_AS when set and by the environment variable DBRANCH_MEMORY_LIMIT
 * (bytes; a documented cap for shared machines and tests). */
double model_budget_memory_limit(void);

/* DT_OK when model_budget_bytes fits model_budget_memory_limit; otherwise one
 * line naming the need, the limit and the config's sizes. */
dt_status model_budget_check(const model_config *config, model_use use, int64_t threads, int64_t kv_positions,
                             int64_t kv_rows);

#endif
