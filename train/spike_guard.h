/* The loss / gradient spike guard (train.spike_zscore, train.spike_window):
 * a step whose objective or gradient norm lies more than spike_zscore sample
 * standard deviations above the mean of the last spike_window accepted steps
 * is taken without its update (the weights and optimizer state stay as they
 * were, the gradients are dropped, the batch is consumed and the schedule
 * moves on). Skips are counted (the log's skipped_updates). One-sided: a
 * sudden drop is no spike. The guard acts once its window is full (the first
 * spike_window steps always update) and not while the window is constant
 * (sd = 0 gives no z-score).
 *
 * The window lives in the checkpoint so a resumed run skips exactly what the
 * uninterrupted run skips:
 *   /train/spike_window    float64 [n, 2] (objective, grad_norm) of the last
 *                          n <= spike_window accepted steps, oldest first
 *   /train                 attribute skipped_updates
 * A checkpoint without them (written before the guard, or by a run with it
 * off) resumes with an empty window and no skips. */
#ifndef TRAIN_SPIKE_GUARD_H
#define TRAIN_SPIKE_GUARD_H

#include <hdf5.h>
#include <stdint.h>

#include "core/error.h"

typedef struct train_spike_guard {
    double zscore;                 /* threshold; 0: off */
    int64_t window;                /* capacity of the rings */
    int64_t count;                 /* values held (<= window) */
    int64_t next;                  /* ring slot of the next value */
    int64_t skipped;               /* updates skipped so far (over all segments of the run) */
    double *objective, *grad_norm; /* [window] rings of accepted steps */
} train_spike_guard;

/* zscore 0 allocates nothing (the guard is off). */
dt_status train_spike_guard_init(train_spike_guard *g, double zscore, int64_t window);
void train_spike_guard_free(train_spike_guard *g);

/* Whether this step's objective is a spike (skip its update). */
int train_spike_guard_objective_spike(const train_spike_guard *g, double objective);
/* The gradient norm above which this step is a spike: mean + zscore * sd of
 * the window, or 0 (no limit) while the guard is off, filling or flat. */
double train_spike_guard_norm_limit(const train_spike_guard *g);
/* After the step: an accepted step enters the window, a skipped one is counted. */
void train_spike_guard_record(train_spike_guard *g, double objective, double grad_norm, int skipped);

/* The window and the count into the checkpoint's /train group (nothing when off). */
dt_status train_spike_guard_write(hid_t train_group, const train_spike_guard *g);
/* Restores them from checkpoint path (see above for files without them);
 * a window stored longer than g's keeps its newest values. */
dt_status train_spike_guard_read(const char *path, train_spike_guard *g);

#endif
