/* Learning-rate schedules at chosen steps against values worked out by hand
 * (the arithmetic is in the comments). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim/schedule.h"

#define assert_lr(schedule, step, want)                                                                                \
    do {                                                                                                               \
        double got_ = optim_schedule_lr(&(schedule), (step));                                                          \
        cr_assert(fabs(got_ - (want)) < 1e-12, "step %d: lr %.15g, want %.15g", (int)(step), got_, (double)(want));    \
    } while (0)

/* lr 1.0, floor 0.1, 10 warm-up steps of 110. */
Test(optim_schedule, cosine) {
    optim_schedule s = {.kind = SCHEDULE_COSINE, .lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110};
    assert_lr(s, 0, 0.1);                                /* 1/10 */
    assert_lr(s, 4, 0.5);                                /* 5/10 */
    assert_lr(s, 9, 1.0);                                /* 10/10 */
    assert_lr(s, 10, 1.0);                               /* progress 0: cos 0 = 1 */
    assert_lr(s, 60, 0.55);                              /* progress 1/2: 0.1 + 0.9 * 0.5 * (1 + 0) */
    assert_lr(s, 35, 0.1 + 0.9 * 0.5 * (1 + sqrt(0.5))); /* progress 1/4: cos(pi/4) */
    assert_lr(s, 85, 0.1 + 0.9 * 0.5 * (1 - sqrt(0.5))); /* progress 3/4 */
    assert_lr(s, 500, 0.1);                              /* past the end: the floor */
}

Test(optim_schedule, linear) {
    optim_schedule s = {.kind = SCHEDULE_LINEAR, .lr = 2.0, .min_lr = 0.0, .warmup_steps = 4, .total_steps = 104};
    assert_lr(s, 1, 1.0);    /* 2 * 2/4 */
    assert_lr(s, 4, 2.0);    /* progress 0 */
    assert_lr(s, 29, 1.5);   /* progress 25/100 */
    assert_lr(s, 103, 0.02); /* progress 99/100 */
}

/* 100 steps, decay over the last 20%: steps 80..99 fall linearly to the floor, the last one at it. */
Test(optim_schedule, warmup_stable_decay) {
    optim_schedule s = {
        .kind = SCHEDULE_WSD, .lr = 1.0, .min_lr = 0.2, .warmup_steps = 5, .total_steps = 100, .decay_fraction = 0.2};
    assert_lr(s, 0, 0.2);                   /* 1/5 */
    assert_lr(s, 5, 1.0);                   /* stable */
    assert_lr(s, 79, 1.0);                  /* last stable step */
    assert_lr(s, 80, 1.0 - 0.8 * 1.0 / 20); /* first decay step: progress 1/20 */
    assert_lr(s, 89, 1.0 - 0.8 * 10.0 / 20);
    assert_lr(s, 99, 0.2); /* final step at the floor */
}

/* decay_fraction 0.8 of 100 steps would start at step 20, inside the 50 warm-up
 * steps: the decay starts at 50 and spans the last 50 steps instead. */
Test(optim_schedule, wsd_decay_starts_after_warmup) {
    optim_schedule s = {
        .kind = SCHEDULE_WSD, .lr = 1.0, .min_lr = 0.0, .warmup_steps = 50, .total_steps = 100, .decay_fraction = 0.8};
    assert_lr(s, 49, 1.0);            /* the last warm-up step reaches the peak */
    assert_lr(s, 50, 1.0 - 1.0 / 50); /* first decay step */
    assert_lr(s, 74, 0.5);            /* 25/50 */
    assert_lr(s, 99, 0.0);
}

/* The decay's first step: 100 - ceil(0.2 * 100) = 80 (the first step below
 * the peak above), 50 when the warm-up would be cut (above), none for the
 * other kinds; and it never moves back as the budget grows (a trunk of a
 * shorter run is a state of a longer one). */
Test(optim_schedule, wsd_decay_start) {
    optim_schedule s = {
        .kind = SCHEDULE_WSD, .lr = 1.0, .min_lr = 0.2, .warmup_steps = 5, .total_steps = 100, .decay_fraction = 0.2};
    cr_assert_eq(optim_schedule_decay_start(&s), 80);
    cr_assert_lt(optim_schedule_lr(&s, 80), 1.0);
    cr_assert_eq(optim_schedule_lr(&s, 79), 1.0);
    s.warmup_steps = 50, s.decay_fraction = 0.8;
    cr_assert_eq(optim_schedule_decay_start(&s), 50);
    s.warmup_steps = 0, s.decay_fraction = 0.4;
    int64_t before = -1;
    for (s.total_steps = 1; s.total_steps < 500; s.total_steps++) {
        const int64_t start = optim_schedule_decay_start(&s);
        cr_assert_geq(start, before, "%lld steps: the decay starts at %lld, before %lld of a shorter run",
                      (long long)s.total_steps, (long long)start, (long long)before);
        before = start;
    }
    s.kind = SCHEDULE_COSINE;
    cr_assert_eq(optim_schedule_decay_start(&s), -1);
}

Test(optim_schedule, constant_and_no_warmup) {
    optim_schedule s = {.kind = SCHEDULE_CONSTANT, .lr = 3e-4, .min_lr = 0, .warmup_steps = 0, .total_steps = 10};
    assert_lr(s, 0, 3e-4);
    assert_lr(s, 9, 3e-4);
}

Test(optim_schedule, parse_words) {
    optim_schedule_kind kind;
    cr_assert_eq(optim_schedule_parse("wsd", &kind), DT_OK);
    cr_assert_eq(kind, SCHEDULE_WSD);
    cr_assert_str_eq(optim_schedule_name(SCHEDULE_COSINE), "cosine");
    cr_assert_eq(optim_schedule_parse("exponential", &kind), DT_ERR);
    cr_assert(strstr(dt_error_message(), "exponential") != NULL, "%s", dt_error_message());
}
