/* A wall-time limit for one invocation of training (dbranch train
 * --time-limit): the loop stops, writes its checkpoint and returns before it
 * would run past the limit, so a run longer than a sitting, a batch job's wall
 * time or a study's deadline ends resumable instead of killed mid-step.
 *
 * The decision is made before each step from what the invocation has seen:
 * the next step's time, plus an evaluation's when the step is followed by one
 * (eval_every, or the run's final evaluation), plus a checkpoint's when one is
 * due after it, plus the stopping checkpoint itself, each taken as the last
 * such event's measured duration. The first step of an invocation always runs:
 * a limit shorter than one step would otherwise never let a run advance. */
#ifndef TRAIN_TIME_LIMIT_H
#define TRAIN_TIME_LIMIT_H

#include "core/error.h"

typedef struct train_time_limit {
    double limit_seconds; /* <= 0: no limit */
    double start;         /* clock reading when the invocation's loop began */
    long long steps;      /* steps this invocation has run */
    double step_seconds;  /* the last step's duration (0 until one ran) */
    double eval_seconds;  /* the last evaluation's (0 until one ran) */
    double save_seconds;  /* the last checkpoint write's (0 until one ran) */
} train_time_limit;

/* A limit of limit_seconds (<= 0: none) counted from `now` (seconds, any monotonic clock). */
train_time_limit train_time_limit_begin(double limit_seconds, double now);

/* What happened, for the predictions: a step, an evaluation or a checkpoint write of `seconds`. */
void train_time_limit_saw_step(train_time_limit *limit, double seconds);
void train_time_limit_saw_eval(train_time_limit *limit, double seconds);
void train_time_limit_saw_save(train_time_limit *limit, double seconds);

/* 1 when the next step (with the evaluation and checkpoint that follow it when
 * next_evaluates / next_saves) and the stopping checkpoint after it would end
 * past the limit at clock reading `now`: stop before it. 0 without a limit and
 * before the invocation's first step. */
int train_time_limit_reached(const train_time_limit *limit, double now, int next_evaluates, int next_saves);

/* A duration: a positive number of seconds, with an optional unit s, m or h
 * ("5400", "90m", "1.5h"). On error *seconds is untouched and the message
 * quotes the text. */
dt_status train_time_limit_parse(const char *text, double *seconds);

#endif
