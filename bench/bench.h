/* Benchmark suites behind `dbranch bench <what>`. Each parses its own options
 * (argv after the suite name), prints a table (or JSON) and returns an exit code. */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

int bench_kernels_main(int argc, char **argv);   /* bench/bench_kernels.c */
int bench_decode_main(int argc, char **argv);    /* bench/bench_decode.c */
int bench_train_main(int argc, char **argv);     /* bench/bench_train.c */
int bench_allreduce_main(int argc, char **argv); /* bench/bench_allreduce.c (MPI builds, under mpirun) */

#endif
