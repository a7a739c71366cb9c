/* WSD trunks: one constant-rate run, many decays.
 *
 * Under the wsd schedule every step before the decay runs at the peak rate
 * whatever the budget, so two runs that differ only in train.tokens are the
 * same run, bit for bit, until the shorter one starts decaying (the data
 * order does not depend on the budget either). With train.save_trunk = 1 a
 * run writes OUT/trunk.h5, a full checkpoint taken after its last
 * constant-rate step; `dbranch train --resume OUT/trunk.h5 --tokens N` with a
 * larger N then continues it into the run a fresh start with budget N would
 * have trained, skipping the shared part (a data sweep at D, 2D, 4D ... pays
 * each constant phase once). The checks below say when a continuation is
 * not such a run. */
#ifndef TRAIN_TRUNK_H
#define TRAIN_TRUNK_H

#include <stdint.h>

#include "optim/schedule.h"
#include "train/run_config.h"

/* The learning-rate schedule a run of this config trains on. */
optim_schedule train_config_schedule(const train_config *cfg);

/* The step count at which a run of cfg writes its trunk (the wsd decay's
 * first step, so the state holds steps 0 .. start - 1); -1 when it writes
 * none (save_trunk off, another schedule, or a warm-up that fills the run). */
int64_t train_trunk_step(const train_config *cfg);

/* The first of steps 0 .. steps - 1 that a run of `a` and a run of `b` train
 * differently as far as the budget can tell them apart (either optimizer
 * group's learning rate, or the latent-feedback phase); -1 when there is
 * none, i.e. a checkpoint of `a` at `steps` is a state of `b`'s run too. */
int64_t train_schedule_first_difference(const train_config *a, const train_config *b, int64_t steps);

#endif
