/* WSD trunks (definitions in trunk.h). */
#include "train/trunk.h"

optim_schedule train_config_schedule(const train_config *c) {
    return (optim_schedule){
        .kind = c->schedule,
        .lr = c->lr,
        .min_lr = c->min_lr,
        .warmup_steps = train_config_warmup_steps(c),
        .total_steps = train_config_total_steps(c),
        .decay_fraction = c->decay_fraction,
    };
}

int64_t train_trunk_step(const train_config *c) {
    if (!c->save_trunk) return -1;
    const optim_schedule schedule = train_config_schedule(c);
    const int64_t start = optim_schedule_decay_start(&schedule);
    return start > 0 && start < schedule.total_steps ? start : -1;
}

int64_t train_schedule_first_difference(const train_config *a, const train_config *b, int64_t steps) {
    const optim_schedule sa = train_config_schedule(a), sb = train_config_schedule(b);
    for (int64_t step = 0; step < steps; step++) {
        const double lr_a = optim_schedule_lr(&sa, step), lr_b = optim_schedule_lr(&sb, step);
        /* Muon runs at muon_lr on the same shape (trainer_step) */
        if (lr_a != lr_b || a->muon_lr * lr_a / a->lr != b->muon_lr * lr_b / b->lr ||
            train_config_single_pass_step(a, step) != train_config_single_pass_step(b, step))
            return step;
    }
    return -1;
}
