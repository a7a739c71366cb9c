/* The time limit's decision (stop before a step predicted to end past the
 * limit, counting the evaluation and checkpoints around it) and its duration
 * syntax (train/time_limit.h). The trainer's use of it is tested end to end
 * in test_train_loop.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/time_limit.h"

/* A limit of 100 s from t = 0 that has seen a 10 s step, a 5 s evaluation and a 2 s checkpoint. */
static train_time_limit seasoned_limit(void) {
    train_time_limit limit = train_time_limit_begin(100.0, 0.0);
    train_time_limit_saw_step(&limit, 10.0);
    train_time_limit_saw_eval(&limit, 5.0);
    train_time_limit_saw_save(&limit, 2.0);
    return limit;
}

Test(train_time_limit, no_limit_never_stops) {
    train_time_limit limit = train_time_limit_begin(0.0, 0.0);
    train_time_limit_saw_step(&limit, 10.0);
    cr_assert_not(train_time_limit_reached(&limit, 1e9, 1, 1));
}

Test(train_time_limit, the_first_step_always_runs) {
    train_time_limit limit = train_time_limit_begin(1.0, 0.0);
    cr_assert_not(train_time_limit_reached(&limit, 50.0, 1, 1), "no step ran yet: a run must be able to advance");
    train_time_limit_saw_step(&limit, 0.5);
    cr_assert(train_time_limit_reached(&limit, 50.0, 0, 0));
}

Test(train_time_limit, a_plain_step_counts_itself_and_the_stopping_checkpoint) {
    train_time_limit limit = seasoned_limit();
    /* now + step 10 + stopping checkpoint 2 against 100 */
    cr_assert_not(train_time_limit_reached(&limit, 88.0, 0, 0), "88 + 12 = 100 ends at the limit");
    cr_assert(train_time_limit_reached(&limit, 88.5, 0, 0), "88.5 + 12 ends past the limit");
}

Test(train_time_limit, an_evaluation_or_checkpoint_after_the_step_counts_too) {
    train_time_limit limit = seasoned_limit();
    cr_assert_not(train_time_limit_reached(&limit, 83.0, 1, 0), "83 + 10 + 5 + 2 = 100");
    cr_assert(train_time_limit_reached(&limit, 84.0, 1, 0), "84 + 10 + 5 + 2 = 101");
    cr_assert_not(train_time_limit_reached(&limit, 86.0, 0, 1), "86 + 10 + 2 + 2 = 100");
    cr_assert(train_time_limit_reached(&limit, 86.5, 0, 1));
    cr_assert(train_time_limit_reached(&limit, 82.0, 1, 1), "82 + 10 + 5 + 2 + 2 = 101");
}

Test(train_time_limit, the_latest_durations_are_the_predictions) {
    train_time_limit limit = seasoned_limit();
    train_time_limit_saw_step(&limit, 30.0); /* the machine got slower */
    cr_assert(train_time_limit_reached(&limit, 70.0, 0, 0), "70 + 30 + 2 = 102");
    cr_assert_not(train_time_limit_reached(&limit, 68.0, 0, 0));
    cr_assert_eq(limit.steps, 2);
}

Test(train_time_limit, the_limit_counts_from_its_start) {
    train_time_limit limit = train_time_limit_begin(100.0, 1000.0);
    train_time_limit_saw_step(&limit, 10.0);
    cr_assert_not(train_time_limit_reached(&limit, 1089.0, 0, 0));
    cr_assert(train_time_limit_reached(&limit, 1091.0, 0, 0));
}

Test(train_time_limit, durations_with_and_without_units) {
    static const struct {
        const char *text;
        double seconds;
    } cases[] = {{"5400", 5400.0}, {"90m", 5400.0}, {"1.5h", 5400.0}, {"45s", 45.0}, {"0.25", 0.25}, {"2e3s", 2000.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double seconds = -1.0;
        cr_assert_eq(train_time_limit_parse(cases[i].text, &seconds), DT_OK, "'%s': %s", cases[i].text,
                     dt_error_message());
        cr_assert_float_eq(seconds, cases[i].seconds, 1e-9, "'%s' gave %g s", cases[i].text, seconds);
    }
}

Test(train_time_limit, bad_durations_are_refused_with_the_text) {
    static const char *const bad[] = {"", "abc", "0", "0m", "-5m", "5x", "5 m", "m", "inf", "nan", "90min"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double seconds = 7.0;
        cr_assert_eq(train_time_limit_parse(bad[i], &seconds), DT_ERR, "'%s' was accepted", bad[i]);
        cr_assert_eq(seconds, 7.0, "'%s' changed the result", bad[i]);
        char quoted[32];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        cr_assert(strstr(dt_error_message(), quoted) != NULL, "'%s': %s", bad[i], dt_error_message());
    }
}
