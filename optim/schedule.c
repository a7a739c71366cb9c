/* Learning-rate schedules (definitions in schedule.h). */
#include "optim/schedule.h"

#include <math.h>
#include <string.h>

/* WSD's decay: its first step and its length (< 1 when the warm-up fills the run). */
static void wsd_decay(const optim_schedule *s, int64_t *decay_start, int64_t *decay_steps) {
    *decay_steps = (int64_t)ceil(s->decay_fraction * (double)s->total_steps);
    if (*decay_steps < 1) *decay_steps = 1;
    *decay_start = s->total_steps - *decay_steps;
    if (*decay_start < s->warmup_steps) { /* the decay never cuts into the warm-up */
        *decay_start = s->warmup_steps;
        *decay_steps = s->total_steps - *decay_start;
    }
}

int64_t optim_schedule_decay_start(const optim_schedule *s) {
    if (s->kind != SCHEDULE_WSD) return -1;
    int64_t decay_start, decay_steps;
    wsd_decay(s, &decay_start, &decay_steps);
    return decay_start;
}

double optim_schedule_lr(const optim_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    switch (s->kind) {
    case SCHEDULE_CONSTANT:
        return s->lr;
    case SCHEDULE_WSD: {
        int64_t decay_start, decay_steps;
        wsd_decay(s, &decay_start, &decay_steps);
        if (decay_steps < 1) return s->min_lr;
        if (step < decay_start) return s->lr;
        double progress = (double)(step - decay_start + 1) / (double)decay_steps;
        if (progress > 1.0) progress = 1.0;
        return s->lr - (s->lr - s->min_lr) * progress;
    }
    case SCHEDULE_COSINE:
    case SCHEDULE_LINEAR: {
        int64_t decay_steps = s->total_steps - s->warmup_steps;
        if (decay_steps < 1) return s->min_lr;
        double progress = (double)(step - s->warmup_steps) / (double)decay_steps;
        if (progress > 1.0) progress = 1.0;
        if (s->kind == SCHEDULE_LINEAR) return s->lr - (s->lr - s->min_lr) * progress;
        return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
    }
    }
    return s->lr;
}

static const char *const schedule_names[] = {"cosine", "linear", "wsd", "constant"};

dt_status optim_schedule_parse(const char *word, optim_schedule_kind *kind) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(word, schedule_names[i])) {
            *kind = (optim_schedule_kind)i;
            return DT_OK;
        }
    return dt_errorf("schedule '%s' (must be cosine, linear, wsd or constant)", word);
}

const char *optim_schedule_name(optim_schedule_kind kind) { return (unsigned)kind < 4 ? schedule_names[kind] : "?"; }
