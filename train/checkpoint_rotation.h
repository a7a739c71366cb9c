/* Checkpoint rotation (train.keep_last = N): besides OUT/checkpoint.h5, the
 * latest, the run keeps the N most recent numbered checkpoints
 * OUT/checkpoint-STEP.h5 (STEP zero-padded to 8 digits, so they sort by name
 * too); 0 keeps only checkpoint.h5, as before the key existed. */
#ifndef TRAIN_CHECKPOINT_ROTATION_H
#define TRAIN_CHECKPOINT_ROTATION_H

#include <stdint.h>

#include "core/error.h"

/* After checkpoint.h5 (latest) was written at step: gives it the numbered
 * name in dir too (a hard link, or a copy where links are refused; either
 * way PATH.tmp and a rename, so a crash leaves no half file under a final
 * name), then removes numbered checkpoints in dir beyond the keep_last most
 * recent steps. Nothing when keep_last is 0. */
dt_status train_checkpoint_rotate(const char *dir, const char *latest, int64_t step, int64_t keep_last);

#endif
