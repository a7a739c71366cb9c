/* The decode step team: one OpenMP parallel region per decode step whose
 * threads walk the same sequence of stages and synchronise through per-stage
 * counters instead of barriers. Internal to eval/ (the decode engine).
 *
 * Why not one `omp parallel for` per matrix: a decode step is ~60 small
 * dependent stages, and every parallel region ends in a barrier that waits for
 * ALL threads. On a machine shared with other jobs a thread is often
 * descheduled for a whole time slice, and then every barrier costs one: we
 * measured 327 ms/token with 2 threads against 45 ms with 1 thread at load 10
 * on 2 cores. Here a stage's work items are claimed from an atomic counter by
 * whichever threads are running, and a thread only waits for items that were
 * actually claimed; a thread that has not been scheduled yet holds nothing up
 * (it later finds every stage done and falls through). Waiting spins briefly,
 * then yields the core.
 *
 * Rules for code run by a team (every thread runs the same code):
 *   - control flow may depend only on data written in completed stages and
 *     not overwritten later in the same step (a thread may lag behind by any
 *     number of stages in which it claimed nothing);
 *   - shared memory is written only inside eval_team_serial / item bodies;
 *   - all threads call the stage functions in the same order. */
#ifndef EVAL_TEAM_H
#define EVAL_TEAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "eval/matvec.h"

/* One stage's counters, on their own cache line. */
typedef struct eval_team_stage {
    atomic_int claimed; /* items handed out */
    atomic_int done;    /* items finished */
    char pad[64 - 2 * sizeof(atomic_int)];
} eval_team_stage;

typedef struct eval_team {
    eval_team_stage *stages; /* [n_stages], 64-byte aligned */
    int n_stages;
    /* stages the last run took, the only ones the next run must reset: a step
     * uses ~50 of the ~134 a session sizes at the 15M llama2.c shape. 0 (a
     * zeroed struct, or stages reallocated): unknown, the next run resets all. */
    int used_stages;
    atomic_int overflow; /* set when a step needed more stages than sized (a bug; tests check it) */
} eval_team;

/* Runs body(arg) on n_threads threads as one team (n_threads 1: the caller alone). */
void eval_team_run(eval_team *team, int n_threads, void (*body)(void *arg), void *arg);

/* Inside eval_team_run's body? (Outside, the functions below run everything on the caller.) */
int eval_team_active(void);
/* The thread that does the bookkeeping (counters): team thread 0, or the caller outside a team. */
int eval_team_leader(void);

/* A serial stage: returns 1 on the one thread that must run the body, which
 * then calls eval_team_serial_end(); the other threads get 0 after the body
 * has finished. Use through EVAL_TEAM_SERIAL. */
int eval_team_serial_begin(eval_team *team);
void eval_team_serial_end(eval_team *team);
#define EVAL_TEAM_SERIAL(team)                                                                                         \
    for (int serial_once_ = eval_team_serial_begin(team); serial_once_; eval_team_serial_end(team), serial_once_ = 0)

/* A parallel stage of n_items items: item(i, arg) for every i, spread over the
 * team; returns when all are done. */
void eval_team_for(eval_team *team, int64_t n_items, void (*item)(int64_t i, void *arg), void *arg);

/* The jobs' products (eval/matvec.h), split in chunks of rows over the team;
 * outside a team: eval_matvec_batch. */
void eval_team_matvec(eval_team *team, const eval_matvec_job *jobs, int n_jobs);

/* Two products with the same N and M (the W1 and W3 of a SwiGLU), handed out
 * together by rows: each claimed range [n0, n1) of rows computes both outputs
 * there, then calls epilogue(n0, n1, arg) on the same thread, so an
 * elementwise step that combines the two (silu(a) * b) needs no stage of its
 * own. The epilogue of a range must touch only that range. Outside a team:
 * both products (eval_matvec_batch), then epilogue(0, N, arg). */
void eval_team_matvec_pair(eval_team *team, const eval_matvec_job *first, const eval_matvec_job *second,
                           void (*epilogue)(int64_t n0, int64_t n1, void *arg), void *arg);

#endif
