/* dbranch eval: validation loss of a model on a dataset. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch eval: not implemented yet\n");
    return 2;
}
