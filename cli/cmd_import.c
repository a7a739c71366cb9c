/* dbranch import: placeholder until interop/import_hf.c lands. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_import(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch import: not implemented yet\n");
    return 1;
}
