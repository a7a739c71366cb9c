/* The Open MPI communicator (comm.h), compiled only with -DDBRANCH_MPI=ON.
 *
 * `fast` sums are MPI_Allreduce in place. `ordered` sums go through rank 0:
 * it receives every other rank's buffer in rank order, piece by piece, adds
 * each into its own ((x0 + x1) + x2 ...), and broadcasts the result, so the
 * sum is the same float operations at every N and on every run (N - 1
 * messages into one process: fine for a few ranks; `fast` scales). The
 * receive buffer is allocated once, at init: a step allocates nothing. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"

/* Floats (or half as many doubles) per message of an ordered sum. */
enum { PIECE_BYTES = 4 << 20 };

typedef struct mpi_state {
    dt_comm_reduce reduce;
    void *piece; /* [PIECE_BYTES] rank 0's receive buffer (ordered sums) */
} mpi_state;

static mpi_state state;
static dt_comm world;

static dt_status mpi_error(int code, const char *call) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return dt_errorf("MPI: %s failed on rank %d of %d: %s", call, world.rank, world.size, text);
}

/* data [n] of `type` (element size `bytes`): rank 0 sums in rank order, then broadcasts. */
static dt_status ordered_sum(void *data, int64_t n, MPI_Datatype type, size_t bytes, int is_double) {
    const int64_t per_piece = (int64_t)(PIECE_BYTES / bytes);
    for (int64_t first = 0; first < n; first += per_piece) {
        const int count = (int)(n - first < per_piece ? n - first : per_piece);
        char *mine = (char *)data + (size_t)first * bytes;
        if (world.rank == 0) {
            for (int r = 1; r < world.size; r++) {
                const int code = MPI_Recv(state.piece, count, type, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Recv (ordered sum)");
                if (is_double) {
                    double *x = (double *)mine;
                    const double *y = state.piece;
                    for (int i = 0; i < count; i++)
                        x[i] += y[i];
                } else {
                    float *x = (float *)mine;
                    const float *y = state.piece;
                    for (int i = 0; i < count; i++)
                        x[i] += y[i];
                }
            }
        } else {
            const int code = MPI_Send(mine, count, type, 0, 0, MPI_COMM_WORLD);
            if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Send (ordered sum)");
        }
        const int code = MPI_Bcast(mine, count, type, 0, MPI_COMM_WORLD);
        if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Bcast (ordered sum)");
    }
    return DT_OK;
}

/* data [n] in place, MPI_Allreduce in pieces that fit an int count. */
static dt_status fast_sum(void *data, int64_t n, MPI_Datatype type, size_t bytes) {
    const int64_t per_piece = 1 << 30;
    for (int64_t first = 0; first < n; first += per_piece) {
        const int count = (int)(n - first < per_piece ? n - first : per_piece);
        const int code =
            MPI_Allreduce(MPI_IN_PLACE, (char *)data + (size_t)first * bytes, count, type, MPI_SUM, MPI_COMM_WORLD);
        if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Allreduce");
    }
    return DT_OK;
}

static dt_status mpi_allreduce_f32(const dt_comm *comm, float *data, int64_t n) {
    return state.reduce == DT_COMM_REDUCE_FAST ? fast_sum(data, n, MPI_FLOAT, sizeof *data)
                                               : ordered_sum(data, n, MPI_FLOAT, sizeof *data, 0);
}

static dt_status mpi_allreduce_f64(const dt_comm *comm, double *data, int64_t n) {
    return state.reduce == DT_COMM_REDUCE_FAST ? fast_sum(data, n, MPI_DOUBLE, sizeof *data)
                                               : ordered_sum(data, n, MPI_DOUBLE, sizeof *data, 1);
}

static dt_status mpi_broadcast(const dt_comm *comm, void *data, size_t bytes, int root) {
    for (size_t first = 0; first < bytes; first += (size_t)1 << 30) {
        const size_t rest = bytes - first;
        const int count = (int)(rest < ((size_t)1 << 30) ? rest : ((size_t)1 << 30));
        const int code = MPI_Bcast((char *)data + first, count, MPI_BYTE, root, MPI_COMM_WORLD);
        if (code != MPI_SUCCESS) return mpi_error(code, "MPI_Bcast");
    }
    return DT_OK;
}

static dt_status mpi_barrier(const dt_comm *comm) {
    const int code = MPI_Barrier(MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? DT_OK : mpi_error(code, "MPI_Barrier");
}

int dt_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL || getenv("PMIX_RANK") != NULL;
}

dt_status dt_comm_mpi_init(int *argc, char ***argv, dt_comm_reduce reduce, const dt_comm **comm) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return dt_errorf("MPI: MPI_Init_thread failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_FUNNELED) {
        MPI_Finalize();
        return dt_errorf("MPI: the library gives thread level %d, dbranch needs MPI_THREAD_FUNNELED", provided);
    }
    world = (dt_comm){.state = &state,
                      .allreduce_f32 = mpi_allreduce_f32,
                      .allreduce_f64 = mpi_allreduce_f64,
                      .broadcast = mpi_broadcast,
                      .barrier = mpi_barrier};
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    state.reduce = reduce;
    if (world.rank == 0 && world.size > 1 && !(state.piece = malloc(PIECE_BYTES))) {
        MPI_Finalize();
        return dt_errorf("MPI: out of memory for the ordered sum's buffer");
    }
    *comm = &world;
    return DT_OK;
}

void dt_comm_mpi_finalize(void) {
    MPI_Finalize();
    free(state.piece);
    state.piece = NULL;
}

void dt_comm_mpi_set_reduce(dt_comm_reduce reduce) { state.reduce = reduce; }

void dt_comm_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
