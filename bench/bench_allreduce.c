/* dbranch bench allreduce: the time of the gradient sum of a data-parallel
 * step (comm->allreduce_f32 over one flat float buffer, core/comm.h), for
 * both train.reduce modes and a few buffer sizes, under `mpirun -n N`.
 *
 * Each repetition is barrier, sum, barrier, timed on rank 0 (the second
 * barrier makes the figure the time until every rank has the sum; a barrier
 * costs microseconds, the sums milliseconds). Reported per size and mode:
 * the median time, milliseconds per MB of buffer, and the "bus bandwidth"
 * 2 (N - 1) / N x bytes / time, the bytes each rank sends and receives in a
 * ring allreduce per second of it: the figure to set beside a link's
 * bandwidth when extrapolating to more machines (docs/MPI.md). The fastest
 * repetition and rank 0's CPU time are printed beside the median: on a
 * loaded machine a process waits for a core, and those say how much of the
 * wall time was that wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "bench/timing.h"
#include "core/comm.h"

enum { MAX_SIZES = 16 };

#ifdef DBRANCH_MPI
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

static void usage(FILE *out) {
    fprintf(out, "usage: mpirun -n N dbranch bench allreduce [--mb LIST] [--reps R] [--json]\n\n"
                 "Times the in-place sum over the processes of one float buffer (the gradient sum of a\n"
                 "data-parallel step) for train.reduce = ordered and fast: median of R repetitions (default\n"
                 "10) per size, ms per MB and the ring bus bandwidth 2(N-1)/N * bytes / time.\n"
                 "  --mb LIST   buffer sizes in MB (10^6 bytes), comma-separated (default 1,4,16,64)\n"
                 "  --json      one JSON object on stdout (rank 0)\n"
                 "Needs a build with -DDBRANCH_MPI=ON, under mpirun with at least 2 processes.\n");
}

static int fail(const char *message) {
    fprintf(stderr, "dbranch bench allreduce: %s\n", message);
    return 1;
}

#ifdef DBRANCH_MPI
/* "1,4,16" into mb[] (each in (0, 4096]); the count, or -1. */
static int parse_sizes(const char *text, double *mb) {
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || !(v > 0 && v <= 4096) || n == MAX_SIZES || (*end && *end != ',')) return -1;
        mb[n++] = v;
        p = *end ? end + 1 : end;
    }
    return n;
}
#endif

int bench_allreduce_main(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
#ifndef DBRANCH_MPI
    return fail("needs a build with -DDBRANCH_MPI=ON (run under mpirun -n N)");
#else
    double mb[MAX_SIZES] = {1, 4, 16, 64};
    int n_sizes = 4, json = 0;
    long reps = 10;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--mb") && v) {
            if ((n_sizes = parse_sizes(v, mb)) < 1) {
                fprintf(stderr, "dbranch bench allreduce: --mb %s: expected sizes in (0, 4096], comma-separated\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--reps") && v) {
            reps = strtol(v, &end, 10);
            if (*end || reps < 1 || reps > 100000) {
                fprintf(stderr, "dbranch bench allreduce: --reps %s: expected an integer in 1..100000\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "dbranch bench allreduce: %s option %s (try --help)\n", v ? "unknown" : "bad or incomplete",
                    a);
            return 2;
        }
    }
    if (!dt_comm_mpi_launched()) return fail("run it under mpirun -n N (N >= 2)");
    const dt_comm *comm = NULL;
    if (dt_comm_mpi_init(NULL, NULL, DT_COMM_REDUCE_ORDERED, &comm) != DT_OK) return fail(dt_error_message());
    int status = 0;
    double largest = 0;
    for (int s = 0; s < n_sizes; s++)
        if (mb[s] > largest) largest = mb[s];
    const int64_t max_n = (int64_t)(largest * 1e6 / sizeof(float));
    float *buffer = malloc((size_t)max_n * sizeof *buffer);
    double *times = malloc((size_t)reps * sizeof *times), *cpu = malloc((size_t)reps * sizeof *cpu);
    if (comm->size < 2 || !buffer || !times || !cpu) {
        dt_errorf("%s", comm->size < 2 ? "run it with at least 2 processes (mpirun -n 2)" : "out of memory");
        status = 1;
        goto done;
    }
    for (int64_t i = 0; i < max_n; i++)
        buffer[i] = (float)(i % 1000) * 1e-3f; /* sums stay finite over any number of repetitions */
    const double ring = 2.0 * (comm->size - 1) / comm->size;
    if (comm->rank == 0) {
        if (json)
            printf("{\"bench\": \"allreduce\", \"processes\": %d, \"reps\": %ld, \"results\": [", comm->size, reps);
        else
            printf("bench allreduce: %d processes, %ld repetitions (barrier, sum, barrier); rank 0's wall and CPU "
                   "time\n%8s %8s %10s %10s %10s %10s %12s\n",
                   comm->size, reps, "MB", "reduce", "median ms", "min ms", "cpu ms", "ms/MB", "bus GB/s");
    }
    for (int s = 0; s < n_sizes; s++)
        for (int mode = 0; mode < 2; mode++) {
            const int64_t n = (int64_t)(mb[s] * 1e6 / sizeof(float));
            const dt_comm_reduce reduce = mode ? DT_COMM_REDUCE_FAST : DT_COMM_REDUCE_ORDERED;
            dt_comm_mpi_set_reduce(reduce);
            /* One untimed sum: the buffers' pages and MPI's connections are in place. */
            if (comm->allreduce_f32(comm, buffer, n) != DT_OK) {
                status = 1;
                goto done;
            }
            for (long r = 0; r < reps; r++) {
                comm->barrier(comm);
                const double start = bench_now_seconds(), cpu_start = cpu_seconds();
                if (comm->allreduce_f32(comm, buffer, n) != DT_OK || comm->barrier(comm) != DT_OK) {
                    status = 1;
                    goto done;
                }
                times[r] = bench_now_seconds() - start;
                cpu[r] = cpu_seconds() - cpu_start;
            }
            const double seconds = bench_median_sort(times, reps), fastest = times[0]; /* sorted */
            const double cpu_ms = 1e3 * bench_median_sort(cpu, reps), bytes = (double)n * sizeof(float);
            if (comm->rank != 0) continue;
            if (json)
                printf("%s\n  {\"mb\": %.6g, \"reduce\": \"%s\", \"ms\": %.4f, \"min_ms\": %.4f, \"cpu_ms\": %.4f, "
                       "\"ms_per_mb\": %.4f, \"bus_gb_s\": %.4f}",
                       s || mode ? "," : "", bytes / 1e6, dt_comm_reduce_name(reduce), 1e3 * seconds, 1e3 * fastest,
                       cpu_ms, 1e3 * seconds / (bytes / 1e6), ring * bytes / seconds * 1e-9);
            else
                printf("%8.3g %8s %10.3f %10.3f %10.3f %10.3f %12.3f\n", bytes / 1e6, dt_comm_reduce_name(reduce),
                       1e3 * seconds, 1e3 * fastest, cpu_ms, 1e3 * seconds / (bytes / 1e6),
                       ring * bytes / seconds * 1e-9);
        }
    if (comm->rank == 0 && json) printf("\n]}\n");
done:
    if (status) {
        fail(dt_error_message());
        /* The other ranks may wait in a sum: take them down too. */
        if (comm->size > 1) {
            fflush(NULL);
            dt_comm_mpi_abort(status);
        }
    }
    free(buffer);
    free(times);
    free(cpu);
    dt_comm_mpi_finalize();
    return status;
#endif
}
