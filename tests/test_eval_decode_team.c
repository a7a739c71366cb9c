/* The decode step team (eval/team.h) on its own: products split over the team
 * by eval_team_matvec (claims of shrinking size, ranges that cross from one
 * job into the next, row counts that are not multiples of the 8-row blocks)
 * against naive double loops, with 1, 2 and 3 threads on a 2-core machine,
 * several stages in a row inside one team run, and serial / parallel stages
 * in between. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "eval/team.h"

enum { N_JOBS = 4, N_ROUNDS = 3 };

typedef struct team_case {
    eval_team team;
    eval_matvec_job jobs[N_JOBS];
    int64_t Ms[N_JOBS], Ks[N_JOBS], Ns[N_JOBS];
    float *in[N_JOBS], *weight[N_JOBS], *bias[N_JOBS], *out[N_JOBS][N_ROUNDS];
    int serial_runs;        /* serial bodies run (must be exactly N_ROUNDS) */
    int64_t items_done[64]; /* eval_team_for items: each must run once per round */
} team_case;

static void item_body(int64_t i, void *arg) {
    team_case *c = arg;
    c->items_done[i]++;
}

/* Every thread: N_ROUNDS times (one product stage over all jobs, one serial
 * stage, one parallel-for stage), each round into its own outputs. */
static void team_body(void *arg) {
    team_case *c = arg;
    for (int r = 0; r < N_ROUNDS; r++) {
        eval_matvec_job jobs[N_JOBS];
        memcpy(jobs, c->jobs, sizeof jobs);
        for (int j = 0; j < N_JOBS; j++)
            jobs[j].out = c->out[j][r];
        eval_team_matvec(&c->team, jobs, N_JOBS);
        EVAL_TEAM_SERIAL(&c->team) c->serial_runs++;
        eval_team_for(&c->team, 64, item_body, c);
    }
}

static void check_team(int threads, const int64_t *Ms, const int64_t *Ks, const int64_t *Ns, uint64_t seed) {
    team_case *c = calloc(1, sizeof *c);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    c->team.n_stages = 3 * N_ROUNDS;
    c->team.stages = aligned_alloc(64, (size_t)c->team.n_stages * sizeof(eval_team_stage));
    for (int j = 0; j < N_JOBS; j++) {
        int64_t M = Ms[j], K = Ks[j], N = Ns[j];
        c->in[j] = malloc((size_t)(M * K) * sizeof(float));
        c->weight[j] = malloc((size_t)(N * K) * sizeof(float));
        c->bias[j] = malloc((size_t)N * sizeof(float));
        dt_rng_fill_normal(&rng, c->in[j], M * K, 1.0f);
        dt_rng_fill_normal(&rng, c->weight[j], N * K, 1.0f);
        dt_rng_fill_normal(&rng, c->bias[j], N, 1.0f);
        for (int r = 0; r < N_ROUNDS; r++) {
            c->out[j][r] = malloc((size_t)(M * N) * sizeof(float));
            for (int64_t i = 0; i < M * N; i++)
                c->out[j][r][i] = NAN; /* every element must be written */
        }
        c->jobs[j] = (eval_matvec_job){NULL, c->in[j], c->weight[j], j % 2 ? c->bias[j] : NULL, M, K, N, DT_F32};
    }
    eval_team_run(&c->team, threads, team_body, c);

    cr_expect_eq(atomic_load(&c->team.overflow), 0, "threads %d: stage overflow", threads);
    cr_expect_eq(c->serial_runs, N_ROUNDS, "threads %d: %d serial bodies run", threads, c->serial_runs);
    for (int i = 0; i < 64; i++)
        cr_expect_eq(c->items_done[i], N_ROUNDS, "threads %d: item %d ran %lld times", threads, i,
                     (long long)c->items_done[i]);
    for (int j = 0; j < N_JOBS; j++) {
        int64_t M = Ms[j], K = Ks[j], N = Ns[j];
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double want = j % 2 ? c->bias[j][n] : 0.0, magnitude = fabs(want);
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)c->in[j][m * K + k] * c->weight[j][n * K + k];
                    want += p;
                    magnitude += fabs(p);
                }
                for (int r = 0; r < N_ROUNDS; r++) {
                    float got = c->out[j][r][m * N + n];
                    cr_assert(fabs(got - want) <= 1e-5 * magnitude + 1e-6,
                              "threads %d job %d (M=%lld K=%lld N=%lld) round %d out[%lld,%lld] = %g, want %g", threads,
                              j, (long long)M, (long long)K, (long long)N, r, (long long)m, (long long)n, got, want);
                }
            }
    }
    for (int j = 0; j < N_JOBS; j++) {
        free(c->in[j]);
        free(c->weight[j]);
        free(c->bias[j]);
        for (int r = 0; r < N_ROUNDS; r++)
            free(c->out[j][r]);
    }
    free(c->team.stages);
    free(c);
}

/* K 288: claims shrink from 8 blocks to 1-2 at the end of a stage; N not a
 * multiple of 8 (a claim ends inside a job or crosses into the next). */
Test(decode_team, products_small_rows) {
    const int64_t Ms[N_JOBS] = {1, 2, 1, 2}, Ks[N_JOBS] = {288, 288, 288, 288}, Ns[N_JOBS] = {288, 37, 770, 3};
    for (int threads = 1; threads <= 3; threads++)
        check_team(threads, Ms, Ks, Ns, 100 + (uint64_t)threads);
}

/* Wide rows (one block is more than the minimum claim) and narrow ones (the
 * minimum claim is the whole 64-row cap), mixed in one stage. */
Test(decode_team, products_mixed_widths) {
    const int64_t Ms[N_JOBS] = {2, 1, 1, 2}, Ks[N_JOBS] = {2050, 17, 768, 5}, Ns[N_JOBS] = {61, 129, 200, 1};
    for (int threads = 1; threads <= 3; threads++)
        check_team(threads, Ms, Ks, Ns, 200 + (uint64_t)threads);
}
