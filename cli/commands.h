/* The dbranch subcommands. Each takes the arguments after its name and
 * returns the process exit code; errors are printed by the command as one line
 * "dbranch <cmd>: <message>" on stderr. */
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

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
/* prepare --from llmc|nanogpt (cli/cmd_prepare_tokens.c). */
int cmd_prepare_tokens(int argc, char **argv);

/* Shared helpers. */
int cli_wants_help(int argc, char **argv);
/* Prints "dbranch <cmd>: <dt_error_message()>" and returns 1. */
int cli_fail(const char *command);

#endif
