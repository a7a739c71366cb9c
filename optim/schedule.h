/* Learning-rate schedules: linear warm-up, then cosine or linear decay to a
 * floor, or warm-up-stable-decay (WSD).
 *
 * Steps count from 0; the run has total_steps steps (0 .. total_steps - 1).
 *   warm-up  (step < warmup_steps):  lr * (step + 1) / warmup_steps
 *   cosine:  min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * progress))
 *   linear:  lr - (lr - min_lr) * progress
 *       with progress = (step - warmup_steps) / (total_steps - warmup_steps) in [0, 1)
 *   wsd:     lr until the last decay_steps = ceil(decay_fraction * total_steps)
 *            steps, then linear to min_lr with
 *            progress = (step - (total_steps - decay_steps) + 1) / decay_steps,
 *            so the final step runs at exactly min_lr (WSD's point is the
 *            annealed end state); a decay longer than the steps after
 *            warm-up starts where the warm-up ends instead (no step of the
 *            warm-up is cut short, no jump down at its end).
 *   constant: lr after warm-up.
 * The first warm-up step is not zero (llm.c's convention), and cosine/linear
 * approach min_lr as the run ends. */
#ifndef OPTIM_SCHEDULE_H
#define OPTIM_SCHEDULE_H

#include <stdint.h>

#include "core/error.h"

typedef enum { SCHEDULE_COSINE = 0, SCHEDULE_LINEAR = 1, SCHEDULE_WSD = 2, SCHEDULE_CONSTANT = 3 } optim_schedule_kind;

typedef struct optim_schedule {
    optim_schedule_kind kind;
    double lr;     /* peak */
    double min_lr; /* floor reached by the decay */
    int64_t warmup_steps;
    int64_t total_steps;
    double decay_fraction; /* wsd: share of total_steps spent decaying, in (0, 1] */
} optim_schedule;

/* The learning rate of step `step` (0-based). */
double optim_schedule_lr(const optim_schedule *schedule, int64_t step);

/* wsd: the first step of the decay (the steps before it run at lr once the
 * warm-up is over), a non-decreasing function of total_steps; -1 for the
 * other kinds. */
int64_t optim_schedule_decay_start(const optim_schedule *schedule);

/* "cosine" | "linear" | "wsd" | "constant"; an unknown word is an error naming it. */
dt_status optim_schedule_parse(const char *word, optim_schedule_kind *kind);
const char *optim_schedule_name(optim_schedule_kind kind);

#endif
