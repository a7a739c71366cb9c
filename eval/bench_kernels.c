/* dbranch bench kernels (placeholder until the suite lands). */
#include <stdio.h>

#include "eval/bench.h"

int bench_kernels_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch bench kernels: not implemented yet\n");
    return 2;
}
