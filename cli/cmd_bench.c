/* dbranch bench <what>: dispatches to the benchmark suites. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

int cmd_bench(int argc, char **argv) {
    if (argc < 1 || cli_wants_help(1, argv)) {
        printf("usage: dbranch bench <kernels> [options]\n");
        return argc < 1 ? 2 : 0;
    }
    fprintf(stderr, "dbranch bench: unknown benchmark '%s'\n", argv[0]);
    return 2;
}
