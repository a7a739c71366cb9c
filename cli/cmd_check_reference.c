/* dbranch check-reference: compare a model against a reference file (SPEC §5). */
#include <stdio.h>

#include "cli/commands.h"

int cmd_check_reference(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch check-reference: not implemented yet\n");
    return 2;
}
