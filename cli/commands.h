/* The dbranch subcommands. Each takes the arguments after its name and
 * returns the process exit code; errors are printed by the command as one line
 * "dbranch <cmd>: <message>" on stderr. */
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

#include <stdint.h>

#include "core/comm.h"
#include "core/error.h"

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} cli_command;

int cmd_prepare(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_check_reference(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
/* prepare --from llmc|nanogpt (cli/cmd_prepare_tokens.c). */
int cmd_prepare_tokens(int argc, char **argv);
/* Prints "dbranch prepare: " + message_format (one %s: value) on one line; returns 1. */
int cli_prepare_fail(const char *message_format, const char *value);
/* compare --scaling FILE (cli/cmd_compare_scaling.c): power-law fits of a data
 * sweep's "arm seed D loss" lines; reference NULL: the first arm. */
int compare_scaling(const char *path, const char *reference, int json);
/* prepare --synthetic prefix-sum|two-hop (cli/cmd_prepare_synthetic.c). */
int cmd_prepare_synthetic(int argc, char **argv);

/* Shared helpers. */
int cli_wants_help(int argc, char **argv);
/* Prints "dbranch <cmd>: <dt_error_message()>" and returns 1. */
int cli_fail(const char *command);

/* cli/job.c. The job of processes this one is part of: under mpirun (a
 * build with -DDBRANCH_MPI=ON) the MPI communicator summing as `reduce`
 * says, else *comm = NULL (one process). */
dt_status cli_join_job(dt_comm_reduce reduce, const dt_comm **comm);
void cli_leave_job(const dt_comm *comm);
/* cli_fail, then, when other processes may be waiting on this one in a
 * collective call, the whole job taken down (MPI_Abort). */
int cli_fail_job(const char *command, const dt_comm *comm);

/* cli/args.c. A decimal integer in [min, max]; the error names the option. */
dt_status cli_parse_int(const char *option, const char *text, int64_t min, int64_t max, int64_t *out);
/* Options that take one value, seen so far on a command line. */
enum { CLI_MAX_OPTIONS = 32 };
typedef struct cli_seen {
    const char *options[CLI_MAX_OPTIONS];
    int n;
} cli_seen;
/* Records option; an error when it was already given. */
dt_status cli_once(cli_seen *seen, const char *option);
/* The "--name value" pair at argv[*i] (*i left on the value): an error for a
 * bare word, a missing value, or an option given twice (but `repeatable`,
 * when not NULL). */
dt_status cli_option_pair(int argc, char **argv, int *i, cli_seen *seen, const char *repeatable, const char **name,
                          const char **value);

#endif
