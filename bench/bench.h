/* Benchmark suites behind `dbranch bench <what>`. Each parses its own options
 * (argv after the suite name), prints a table (or JSON) and returns an exit code. */
#ifndef EVAL_BENCH_H
#define EVAL_BENCH_H

int bench_kernels_main(int argc, char **argv); /* eval/bench_kernels.c */
int bench_decode_main(int argc, char **argv);  /* eval/bench_decode.c */

#endif
