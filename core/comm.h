/* The communicator: the seam between the data-parallel step and whatever
 * connects the processes of one training job (SQLite's sqlite3_vfs pattern:
 * a struct of function pointers that callers go through, so a backend plugs
 * in without touching them).
 *
 * One process today (dt_comm_single: rank 0 of 1, every call a no-op); the
 * Open MPI backend of issue 15 fills the same table. The trainer calls it at
 * four places: the update pass's in-place sum of the one flat gradient buffer
 * (optim/optim.h), the MoE balance fractions before the backward and the
 * evaluation loss sums (train/parallel_step.c, train/trainer.c), and the
 * broadcast of rank 0's weights at the start of a run.
 *
 * Calls are collective (every rank makes the same calls in the same order)
 * and are made by the process's main thread, outside or on the master thread
 * of an OpenMP region (MPI_THREAD_FUNNELED is enough). A backend error comes
 * back as DT_ERR after dt_errorf(). */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct dt_comm dt_comm;

struct dt_comm {
    int rank;    /* 0 .. size - 1 */
    int size;    /* processes in the job */
    void *state; /* the backend's own (NULL for the single process) */
    /* data [n]: every rank's data replaced by the sum over ranks. */
    dt_status (*allreduce_f32)(const dt_comm *comm, float *data, int64_t n);
    dt_status (*allreduce_f64)(const dt_comm *comm, double *data, int64_t n);
    /* data [bytes]: root's bytes copied to every rank. */
    dt_status (*broadcast)(const dt_comm *comm, void *data, size_t bytes, int root);
    dt_status (*barrier)(const dt_comm *comm);
};

/* The one-process communicator: rank 0, size 1, every operation the identity. */
const dt_comm *dt_comm_single(void);

/* How a job of several processes sums (train.reduce): `ordered` (rank 0
 * adds the ranks' buffers in rank order, ((x0 + x1) + x2) + ..., and
 * broadcasts the result: the same bits for every rank, every run and, with
 * power-of-two row splits, every N) or `fast` (MPI_Allreduce: deterministic
 * for a given N, not across N). One process: the two are the same. Declared
 * in every build, so a config naming it runs without MPI too. */
typedef enum { DT_COMM_REDUCE_ORDERED = 0, DT_COMM_REDUCE_FAST = 1 } dt_comm_reduce;

/* "ordered" | "fast"; parse returns DT_ERR (no message) on another word. */
const char *dt_comm_reduce_name(dt_comm_reduce reduce);
dt_status dt_comm_reduce_parse(const char *text, dt_comm_reduce *out);

#ifdef DBRANCH_MPI
/* The Open MPI backend (core/comm_mpi.c, built with -DDBRANCH_MPI=ON) over
 * MPI_COMM_WORLD, summing as `reduce` says. */

/* Is this process one of an mpirun job (Open MPI's or PMI's environment)? */
int dt_comm_mpi_launched(void);
/* MPI_Init_thread (MPI_THREAD_FUNNELED) and the communicator; errors come
 * back as messages (MPI_ERRORS_RETURN), not aborts. */
dt_status dt_comm_mpi_init(int *argc, char ***argv, dt_comm_reduce reduce, const dt_comm **comm);
void dt_comm_mpi_finalize(void);
/* Switches how later sums are made (bench allreduce times both modes). */
void dt_comm_mpi_set_reduce(dt_comm_reduce reduce);
/* Takes the whole job down (MPI_Abort): for a rank that fails while the
 * others wait in a collective call. */
void dt_comm_mpi_abort(int code);
#endif

#endif
