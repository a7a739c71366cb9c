/* dbranch generate: sample text from a model. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch generate: not implemented yet\n");
    return 2;
}
