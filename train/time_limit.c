/* The wall-time limit's predictions and its duration syntax (time_limit.h). */
#include "train/time_limit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

train_time_limit train_time_limit_begin(double limit_seconds, double now) {
    return (train_time_limit){.limit_seconds = limit_seconds, .start = now};
}

void train_time_limit_saw_step(train_time_limit *limit, double seconds) {
    limit->steps++;
    limit->step_seconds = seconds;
}

void train_time_limit_saw_eval(train_time_limit *limit, double seconds) { limit->eval_seconds = seconds; }

void train_time_limit_saw_save(train_time_limit *limit, double seconds) { limit->save_seconds = seconds; }

int train_time_limit_reached(const train_time_limit *limit, double now, int next_evaluates, int next_saves) {
    if (limit->limit_seconds <= 0.0 || limit->steps == 0) return 0;
    /* The stopping checkpoint is written whether or not the step runs, so it
     * is part of every prediction; a checkpoint due after the step is one
     * more write. */
    double predicted_end = now + limit->step_seconds + limit->save_seconds;
    if (next_evaluates) predicted_end += limit->eval_seconds;
    if (next_saves) predicted_end += limit->save_seconds;
    return predicted_end > limit->start + limit->limit_seconds;
}

dt_status train_time_limit_parse(const char *text, double *seconds) {
    char *end = NULL;
    const double value = text && *text ? strtod(text, &end) : NAN;
    double unit = 1.0;
    if (end && *end) {
        if (!strcmp(end, "s"))
            unit = 1.0;
        else if (!strcmp(end, "m"))
            unit = 60.0;
        else if (!strcmp(end, "h"))
            unit = 3600.0;
        else
            unit = NAN;
    }
    const double total = value * unit;
    if (!isfinite(total) || total <= 0.0)
        return dt_errorf("time limit '%s': expected a positive duration in seconds, or with a unit s, m or h "
                         "(5400, 90m, 1.5h)",
                         text ? text : "");
    *seconds = total;
    return DT_OK;
}
