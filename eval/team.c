/* The decode step team (see team.h): stage counters, serial and parallel
 * stages, and the products of eval/matvec.h split over the team. */
#include "eval/team.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

/* A waiting thread spins this many pauses (~0.1 ms), then yields its core,
 * which is what lets a descheduled team mate (or another job) run. */
enum { SPINS_BEFORE_YIELD = 1000 };
/* Rows of a weight matrix per work item of a team product: 64 rows of a
 * [*, 768] matrix are 196 KB, small enough to balance, large enough to stream. */
enum { MATVEC_CHUNK_ROWS = 64 };

static _Thread_local int in_team;      /* inside eval_team_run's region */
static _Thread_local int next_stage;   /* this thread's position in the stage sequence */
static _Thread_local int serial_stage; /* the serial stage this thread runs the body of */

typedef struct run_args {
    void (*body)(void *arg);
    void *arg;
} run_args;

void eval_team_run(eval_team *team, int n_threads, void (*body)(void *arg), void *arg) {
    for (int i = 0; i < team->n_stages; i++) {
        atomic_store_explicit(&team->stages[i].claimed, 0, memory_order_relaxed);
        atomic_store_explicit(&team->stages[i].done, 0, memory_order_relaxed);
    }
    if (n_threads < 1) n_threads = 1;
#pragma omp parallel num_threads(n_threads)
    {
        in_team = 1;
        next_stage = 0;
        body(arg);
        in_team = 0;
    }
}

int eval_team_active(void) { return in_team; }

int eval_team_leader(void) { return !in_team || omp_get_thread_num() == 0; }

/* This thread's next stage; every thread takes the same sequence. */
static eval_team_stage *take_stage(eval_team *team, int *index) {
    if (next_stage >= team->n_stages) {
        /* Sized too small: cannot happen when the session sized the team
         * for its model (tests check). Reuse the last stage rather than run
         * off the array; results are then unreliable and flagged. */
        atomic_store_explicit(&team->overflow, 1, memory_order_relaxed);
        *index = team->n_stages - 1;
        return &team->stages[*index];
    }
    *index = next_stage++;
    return &team->stages[*index];
}

static void wait_until(atomic_int *counter, int target) {
    for (int spin = 0; atomic_load_explicit(counter, memory_order_acquire) < target; spin++) {
        if (spin < SPINS_BEFORE_YIELD)
            _mm_pause();
        else
            sched_yield();
    }
}

int eval_team_serial_begin(eval_team *team) {
    if (!in_team) return 1;
    int index;
    eval_team_stage *stage = take_stage(team, &index);
    if (atomic_fetch_add_explicit(&stage->claimed, 1, memory_order_relaxed) == 0) {
        serial_stage = index;
        return 1;
    }
    wait_until(&stage->done, 1);
    return 0;
}

void eval_team_serial_end(eval_team *team) {
    if (!in_team) return;
    atomic_store_explicit(&team->stages[serial_stage].done, 1, memory_order_release);
}

void eval_team_for(eval_team *team, int64_t n_items, void (*item)(int64_t i, void *arg), void *arg) {
    if (n_items <= 0) return;
    if (!in_team) {
        for (int64_t i = 0; i < n_items; i++) item(i, arg);
        return;
    }
    int index;
    eval_team_stage *stage = take_stage(team, &index);
    int i;
    while ((i = atomic_fetch_add_explicit(&stage->claimed, 1, memory_order_relaxed)) < n_items) {
        item(i, arg);
        atomic_fetch_add_explicit(&stage->done, 1, memory_order_release);
    }
    wait_until(&stage->done, (int)n_items);
}

/* Chunks of MATVEC_CHUNK_ROWS rows numbered across the jobs: job j owns
 * [first_chunk[j], first_chunk[j+1]). */
typedef struct matvec_chunks {
    const eval_matvec_job *jobs;
    int n_jobs;
    int64_t first_chunk[EVAL_MATVEC_MAX_JOBS + 1];
} matvec_chunks;

static void matvec_chunk(int64_t c, void *arg) {
    const matvec_chunks *chunks = arg;
    int j = 0;
    while (c >= chunks->first_chunk[j + 1]) j++;
    const eval_matvec_job *job = &chunks->jobs[j];
    int64_t n0 = (c - chunks->first_chunk[j]) * MATVEC_CHUNK_ROWS, left = job->N - n0;
    eval_matvec_rows(job, n0, left < MATVEC_CHUNK_ROWS ? left : MATVEC_CHUNK_ROWS);
}

void eval_team_matvec(eval_team *team, const eval_matvec_job *jobs, int n_jobs) {
    if (n_jobs <= 0) return;
    if (!in_team) {
        eval_matvec_batch(jobs, n_jobs);
        return;
    }
    matvec_chunks chunks = {.jobs = jobs, .n_jobs = n_jobs};
    chunks.first_chunk[0] = 0;
    for (int j = 0; j < n_jobs; j++)
        chunks.first_chunk[j + 1] = chunks.first_chunk[j] + (jobs[j].N + MATVEC_CHUNK_ROWS - 1) / MATVEC_CHUNK_ROWS;
    eval_team_for(team, chunks.first_chunk[n_jobs], matvec_chunk, &chunks);
}
