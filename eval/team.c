/* The decode step team (see team.h): stage counters, serial and parallel
 * stages, and the products of eval/matvec.h split over the team. */
#include "eval/team.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

/* A waiting thread spins this many pauses (~0.1 ms), then yields its core,
 * which is what lets a descheduled team mate (or another job) run. */
enum { SPINS_BEFORE_YIELD = 1000 };
/* Most rows of a weight matrix one claim of a team product takes: 64 rows of
 * a [*, 768] matrix are 196 KB, small enough to balance, large enough to stream. */
enum { MATVEC_CHUNK_ROWS = 64 };

static _Thread_local int in_team;      /* inside eval_team_run's region */
static _Thread_local int next_stage;   /* this thread's position in the stage sequence */
static _Thread_local int serial_stage; /* the serial stage this thread runs the body of */

typedef struct run_args {
    void (*body)(void *arg);
    void *arg;
} run_args;

void eval_team_run(eval_team *team, int n_threads, void (*body)(void *arg), void *arg) {
    /* Only the stages the previous run used can be non-zero; unknown (0) resets all. */
    int dirty = team->used_stages > 0 && team->used_stages <= team->n_stages ? team->used_stages : team->n_stages;
    for (int i = 0; i < dirty; i++) {
        atomic_store_explicit(&team->stages[i].claimed, 0, memory_order_relaxed);
        atomic_store_explicit(&team->stages[i].done, 0, memory_order_relaxed);
    }
    if (n_threads < 1) n_threads = 1;
    int used = 0;
#pragma omp parallel num_threads(n_threads)
    {
        in_team = 1;
        next_stage = 0;
        body(arg);
        in_team = 0;
        /* every thread walks the same sequence; the overflow case reuses the
         * last stage, which then also counts as used */
        if (omp_get_thread_num() == 0) used = next_stage < team->n_stages ? next_stage : team->n_stages;
    }
    team->used_stages = used;
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
        for (int64_t i = 0; i < n_items; i++)
            item(i, arg);
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

/* A team product hands out ranges of BLOCK_ROWS-row blocks, numbered across
 * the jobs (job j owns blocks [first_block[j], first_block[j+1])), claimed by
 * compare-and-swap on the stage's counter. A claim takes a quarter of each
 * thread's share of what is left, at most MATVEC_CHUNK_ROWS rows and at least
 * MIN_CHUNK_BYTES of weights: big claims while much is left (few atomics), small
 * ones at the end, so the threads finish a stage together. With fixed 64-row
 * chunks a stage ended with up to one chunk of imbalance (a [288, 768] matrix
 * in 5 chunks: 3 against 2); at the 15M-parameter llama2.c shape perf put
 * about 4% of a decode's samples in the wait at the end of product stages
 * (4.2% before, 3.4-4.6% with these claims: within the noise of the shared
 * machine). The cap keeps what a descheduled thread can hold up as small as
 * before. */
enum { BLOCK_ROWS = 8 };
static const int64_t MIN_CHUNK_BYTES = 16 * 1024;

typedef struct matvec_blocks {
    const eval_matvec_job *jobs;
    int n_jobs;
    int64_t first_block[EVAL_MATVEC_MAX_JOBS + 1];
} matvec_blocks;

/* Blocks [begin, end) of the numbering, on the calling thread. */
static void run_blocks(const matvec_blocks *blocks, int64_t begin, int64_t end) {
    for (int j = 0; j < blocks->n_jobs && begin < end; j++) {
        int64_t job_begin = blocks->first_block[j], job_end = blocks->first_block[j + 1];
        if (begin >= job_end) continue;
        int64_t stop = end < job_end ? end : job_end, n0 = (begin - job_begin) * BLOCK_ROWS;
        int64_t n1 = (stop - job_begin) * BLOCK_ROWS;
        if (n1 > blocks->jobs[j].N) n1 = blocks->jobs[j].N;
        eval_matvec_rows(&blocks->jobs[j], n0, n1 - n0);
        begin = stop;
    }
}

/* The claim loop of a team product stage: hands out ranges of n_blocks blocks
 * (block_bytes of weights each) as described above; run(begin, end, ctx) does a
 * range on the claiming thread. */
static void claim_blocks(eval_team *team, int n_blocks, int64_t block_bytes,
                         void (*run)(const void *ctx, int64_t begin, int64_t end), const void *ctx) {
    const int threads = omp_get_num_threads();
    const int max_claim = MATVEC_CHUNK_ROWS / BLOCK_ROWS;
    int min_claim = (int)(MIN_CHUNK_BYTES / (block_bytes > 0 ? block_bytes : 1));
    if (min_claim < 1) min_claim = 1;
    if (min_claim > max_claim) min_claim = max_claim;

    int index;
    eval_team_stage *stage = take_stage(team, &index);
    int begin = atomic_load_explicit(&stage->claimed, memory_order_relaxed);
    while (begin < n_blocks) {
        int size = (n_blocks - begin) / (4 * threads);
        size = size < min_claim ? min_claim : size > max_claim ? max_claim : size;
        if (size > n_blocks - begin) size = n_blocks - begin;
        /* on failure `begin` is reloaded with the current counter */
        if (!atomic_compare_exchange_weak_explicit(&stage->claimed, &begin, begin + size, memory_order_relaxed,
                                                   memory_order_relaxed))
            continue;
        run(ctx, begin, begin + size);
        atomic_fetch_add_explicit(&stage->done, size, memory_order_release);
        begin = atomic_load_explicit(&stage->claimed, memory_order_relaxed);
    }
    wait_until(&stage->done, n_blocks);
}

static void run_blocks_claim(const void *ctx, int64_t begin, int64_t end) { run_blocks(ctx, begin, end); }

void eval_team_matvec(eval_team *team, const eval_matvec_job *jobs, int n_jobs) {
    if (n_jobs <= 0) return;
    if (!in_team) {
        eval_matvec_batch(jobs, n_jobs);
        return;
    }
    matvec_blocks blocks = {.jobs = jobs, .n_jobs = n_jobs};
    int64_t widest = 0;
    blocks.first_block[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        blocks.first_block[j + 1] = blocks.first_block[j] + (jobs[j].N + BLOCK_ROWS - 1) / BLOCK_ROWS;
        if (jobs[j].K > widest) widest = jobs[j].K;
    }
    claim_blocks(team, (int)blocks.first_block[n_jobs], BLOCK_ROWS * widest * (int64_t)sizeof(float), run_blocks_claim,
                 &blocks);
}

typedef struct matvec_pair {
    const eval_matvec_job *first, *second;
    void (*epilogue)(int64_t n0, int64_t n1, void *arg);
    void *arg;
} matvec_pair;

/* Blocks [begin, end) of both products, then the epilogue on those rows. */
static void run_pair_blocks(const void *ctx, int64_t begin, int64_t end) {
    const matvec_pair *pair = ctx;
    int64_t n0 = begin * BLOCK_ROWS, n1 = end * BLOCK_ROWS;
    if (n1 > pair->first->N) n1 = pair->first->N;
    eval_matvec_rows(pair->first, n0, n1 - n0);
    eval_matvec_rows(pair->second, n0, n1 - n0);
    pair->epilogue(n0, n1, pair->arg);
}

void eval_team_matvec_pair(eval_team *team, const eval_matvec_job *first, const eval_matvec_job *second,
                           void (*epilogue)(int64_t n0, int64_t n1, void *arg), void *arg) {
    if (!in_team) {
        const eval_matvec_job jobs[2] = {*first, *second};
        eval_matvec_batch(jobs, 2);
        epilogue(0, first->N, arg);
        return;
    }
    matvec_pair pair = {first, second, epilogue, arg};
    int64_t widest = first->K > second->K ? first->K : second->K;
    claim_blocks(team, (int)((first->N + BLOCK_ROWS - 1) / BLOCK_ROWS),
                 2 * BLOCK_ROWS * widest * (int64_t)sizeof(float), run_pair_blocks, &pair);
}
