/* dbranch train: train a model (baseline or Decode-Branch). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch train: not implemented yet\n");
    return 2;
}
