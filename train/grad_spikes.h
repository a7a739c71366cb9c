/* A watch on the gradient norm, always on and changing nothing: a step whose
 * norm exceeds TRAIN_GRAD_SPIKE_FACTOR times the median of the
 * TRAIN_GRAD_SPIKE_WINDOW steps before it is a spike. Each evaluation record
 * carries the spikes since the previous one (the log's "grad_spikes" and
 * "grad_spike_largest", the largest norm / median ratio), and the progress
 * stream gets one warning line when there were any: runs at too high a
 * learning rate showed them by the dozen, 15-130x the median, long before
 * their final loss did (experiments/noise/README.md). The spike guard
 * (train.spike_zscore, train/spike_guard.h) is what skips such updates.
 *
 * The window and the counts live in the checkpoint, so a resumed run reports
 * what the uninterrupted run reports:
 *   /train/grad_norm_window   float64 [n] the last n <= window norms, oldest first
 *   /train                    attributes grad_spikes, grad_spike_largest
 * A checkpoint without them resumes with an empty window and no spikes. */
#ifndef TRAIN_GRAD_SPIKES_H
#define TRAIN_GRAD_SPIKES_H

#include <hdf5.h>
#include <stdint.h>

#include "core/error.h"

enum { TRAIN_GRAD_SPIKE_WINDOW = 50, TRAIN_GRAD_SPIKE_FACTOR = 10 };

typedef struct train_grad_spikes {
    double norms[TRAIN_GRAD_SPIKE_WINDOW]; /* ring of the last count norms */
    int count, next;
    int64_t spikes; /* since the last report */
    double largest; /* largest norm / median among them (0: none) */
} train_grad_spikes;

/* After each step (skipped updates included: the norm was seen). */
void train_grad_spikes_record(train_grad_spikes *w, double grad_norm);
/* The counts since the last report, then zeroed. */
void train_grad_spikes_take(train_grad_spikes *w, int64_t *spikes, double *largest);

dt_status train_grad_spikes_write(hid_t train_group, const train_grad_spikes *w);
/* From checkpoint path's /train (see above for files without them). */
dt_status train_grad_spikes_read(const char *path, train_grad_spikes *w);

#endif
