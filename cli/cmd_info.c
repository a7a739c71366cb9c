/* dbranch info: parameter counts, FLOPs and decode bytes of a model. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch info: not implemented yet\n");
    return 2;
}
