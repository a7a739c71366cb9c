/* dbranch prepare: tokenize a corpus into a token dataset file. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_prepare(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch prepare: not implemented yet\n");
    return 2;
}
