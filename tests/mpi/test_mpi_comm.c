/* The Open MPI communicator (core/comm_mpi.c) under `mpirun -n N` (N >= 2):
 * a plain program, not a Criterion suite, because Criterion forks and MPI
 * initialises once per process. Run for both reduce modes (argv[1] =
 * ordered | fast); exits non-zero naming the first check that fails.
 *  - sums of float and double buffers equal the values worked out here
 *    (ordered: the left-to-right float sum over ranks, to the bit);
 *  - a buffer longer than one message piece is summed entirely;
 *  - broadcast copies rank 0's bytes; barrier returns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "mpi_check.h"

/* Rank r's value at element i: inexact sums, so the order shows from 3 ranks
 * on. One division of exact integers: no contraction can round it two ways. */
static float value_f32(int r, int64_t i) { return (float)((r + 1) * 1000 + i % 97) / 7.0f; }

int main(int argc, char **argv) {
    test_name = "test_mpi_comm";
    const int fast = argc > 1 && !strcmp(argv[1], "fast");
    const dt_comm *comm = NULL;
    if (dt_comm_mpi_init(&argc, &argv, fast ? DT_COMM_REDUCE_FAST : DT_COMM_REDUCE_ORDERED, &comm) != DT_OK) {
        fprintf(stderr, "%s\n", dt_error_message());
        return 1;
    }
    const int rank = comm->rank, size = comm->size;
    CHECK(size >= 2, "run under mpirun -n 2 or more (size %d)", size);

    /* 1.5 pieces of floats: the ordered sum's second message is partial. */
    const int64_t n = (int64_t)(3 << 20) / 2 + 5;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = value_f32(rank, i);
    CHECK(comm->allreduce_f32(comm, x, n) == DT_OK, "allreduce_f32: %s", dt_error_message());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = value_f32(0, i);
        for (int r = 1; r < size; r++)
            want += value_f32(r, i);
        if (fast ? fabsf(x[i] - want) > 1e-6f * fabsf(want) : x[i] != want) wrong++;
    }
    CHECK(wrong == 0, "rank %d: %lld of %lld float sums differ from the %s sum", rank, (long long)wrong, (long long)n,
          fast ? "exact" : "rank-ordered");

    double y[3] = {rank, 1.0, 0.5 * rank};
    CHECK(comm->allreduce_f64(comm, y, 3) == DT_OK, "allreduce_f64: %s", dt_error_message());
    const double ranks = (double)size * (size - 1) / 2;
    CHECK(y[0] == ranks && y[1] == size && y[2] == 0.5 * ranks, "rank %d: double sums %g %g %g", rank, y[0], y[1],
          y[2]);

    char text[32];
    snprintf(text, sizeof text, "from rank %d", rank);
    CHECK(comm->broadcast(comm, text, sizeof text, 0) == DT_OK, "broadcast: %s", dt_error_message());
    CHECK(!strcmp(text, "from rank 0"), "rank %d: broadcast gave '%s'", rank, text);
    CHECK(comm->barrier(comm) == DT_OK, "barrier: %s", dt_error_message());

    free(x);
    dt_comm_mpi_finalize();
    if (rank == 0 && !failures) printf("test_mpi_comm (%s, %d ranks): ok\n", fast ? "fast" : "ordered", size);
    return failures ? 1 : 0;
}
