/* The job a command's process belongs to (cli/commands.h: cli_join_job):
 * under mpirun, in a build with -DDBRANCH_MPI=ON, the Open MPI communicator;
 * otherwise one process. `train` and `eval` share it so both join, speak
 * (rank 0 alone) and fail (the whole job at once) the same way. */
#include <stdio.h>

#include "cli/commands.h"

dt_status cli_join_job(dt_comm_reduce reduce, const dt_comm **comm) {
    *comm = NULL;
#ifdef DBRANCH_MPI
    if (dt_comm_mpi_launched()) return dt_comm_mpi_init(NULL, NULL, reduce, comm);
#endif
    return DT_OK;
}

void cli_leave_job(const dt_comm *comm) {
#ifdef DBRANCH_MPI
    if (comm) dt_comm_mpi_finalize();
#endif
}

int cli_fail_job(const char *command, const dt_comm *comm) {
    const int code = cli_fail(command);
#ifdef DBRANCH_MPI
    /* The other processes may wait in a collective call: take them down too
     * (MPI_Abort; mpirun then exits non-zero), not leave them hanging. */
    if (comm && comm->size > 1) {
        fflush(NULL);
        dt_comm_mpi_abort(code);
    }
#endif
    return code;
}
