/* dbranch bench decode (placeholder until the suite lands). */
#include <stdio.h>

#include "eval/bench.h"

int bench_decode_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dbranch bench decode: not implemented yet\n");
    return 2;
}
