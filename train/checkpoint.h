/* Training checkpoints (SPEC §5): the model (/config, /params, written by the
 * models layer), the optimizer state under /optim and the training state
 * under /train, in one HDF5 file.
 *
 *   /optim                attributes step, optimizer ("adamw" | "muon")
 *   /optim/m/<name>       AdamW first moment   (parameters AdamW updates)
 *   /optim/v/<name>       AdamW second moment
 *   /optim/muon/<name>    Muon momentum buffer (parameters Muon updates)
 *   /train                attributes step, tokens_seen, elapsed_seconds,
 *                         windows_drawn, loader_has_spare, loader_spare,
 *                         trainer_has_spare, trainer_spare, processes (of
 *                         the job that wrote it; absent: 1), config (the
 *                         resolved INI text of the run, for people to read)
 *   /train/run_config     the run keys as data: one attribute per key of
 *                         train/run_config_keys.def, named "section.key"
 *                         (int64, float64 or string, paths verbatim), and
 *                         `checksum` over them; with /config, what --resume
 *                         reads back (checkpoints without it, written before
 *                         it existed, fall back to parsing `config`)
 *   /train/loader_rng     uint64 [4] xoshiro state of the batch stream
 *   /train/trainer_rng    uint64 [4] xoshiro state of the trainer's own stream
 *   /train/spike_window   float64 [n, 2] the spike guard's window, and /train's
 *                         attribute skipped_updates (train.spike_zscore > 0 only;
 *                         train/spike_guard.h)
 *   /train/grad_norm_window float64 [n] the gradient-norm watch's window, and
 *                         /train's attributes grad_spikes, grad_spike_largest
 *                         (train/grad_spikes.h)
 *
 * Everything a resumed run needs to continue bit for bit is here. Files are
 * written to PATH.tmp and renamed over PATH, so a crash mid-write leaves the
 * previous checkpoint intact; a model with any non-finite weight is refused,
 * so a diverged run can never overwrite its last good checkpoint. */
#ifndef TRAIN_CHECKPOINT_H
#define TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "core/error.h"
#include "core/rng.h"
#include "models/model.h"
#include "optim/optim.h"
#include "train/run_config.h"

typedef struct train_state {
    int64_t step;           /* optimizer steps completed */
    int64_t tokens_seen;    /* training tokens consumed */
    double elapsed_seconds; /* training wall time so far (excludes time between stop and resume) */
    dt_rng loader_rng;      /* batch stream (data_loader.rng) */
    uint64_t windows_drawn; /* data_loader.windows_drawn */
    dt_rng trainer_rng;     /* the trainer's own stream (seeded from train.seed) */
    int64_t processes;      /* of the job that trained it (mpirun -n; 1 for one process) */
    /* written with /train when set (train/spike_guard.h) */
    const struct train_spike_guard *spike_guard;
    /* likewise (train/grad_spikes.h) */
    const struct train_grad_spikes *grad_spikes;
} train_state;

/* Writes the checkpoint (via PATH.tmp + rename); run: the resolved run configuration. */
dt_status train_checkpoint_save(const char *path, const model *m, const optimizer *opt, const train_state *state,
                                const train_config *run);

/* Reads /train. *config_text (may be NULL) receives a malloc'ed copy of the
 * stored configuration; the caller frees it. */
dt_status train_checkpoint_read_state(const char *path, train_state *state, char **config_text);

/* The run configuration stored in a checkpoint: the model from /config, the
 * run keys from /train/run_config (older checkpoints: from the `config` text).
 * Not validated (the caller applies overrides first). */
dt_status train_checkpoint_read_config(const char *path, train_config *cfg);

/* Fills an optimizer built over the checkpoint's model (same parameters, same
 * optimizer kind) with /optim; names, shapes and kind are checked. */
dt_status train_checkpoint_read_optim(const char *path, optimizer *opt);

/* Is every weight finite? *bad_name gets the first parameter that is not. */
int train_model_is_finite(const model *m, const char **bad_name);

#endif
