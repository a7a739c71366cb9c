/* dbranch bench <suite>: dispatches to the benchmark suites in bench/. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/commands.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch bench <suite> [options]   (dbranch bench <suite> --help)\n\n"
                 "suites:\n"
                 "  kernels   GEMM wrapper vs raw BLIS, attention forward+backward (GFLOP/s)\n"
                 "  decode    baseline vs grouped vs un-grouped Decode-Branch decode\n"
                 "  train     training tokens/s, model FLOPs, MFU vs the GEMM rate, peak RSS (baseline vs branch);\n"
                 "            under mpirun, the data-parallel step over the processes\n"
                 "  allreduce the gradient sum over the processes, ms per MB (under mpirun -n N, MPI builds)\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[0], "kernels")) return bench_kernels_main(argc - 1, argv + 1);
    if (!strcmp(argv[0], "decode")) return bench_decode_main(argc - 1, argv + 1);
    if (!strcmp(argv[0], "train")) return bench_train_main(argc - 1, argv + 1);
    if (!strcmp(argv[0], "allreduce")) return bench_allreduce_main(argc - 1, argv + 1);
    fprintf(stderr, "dbranch bench: unknown suite '%s' (try dbranch bench --help)\n", argv[0]);
    return 2;
}
