/* `dbranch bench decode --table llama`: the results as llama-bench prints
 * them (its markdown printer), so a dbranch row can sit beside llama.cpp's:
 *
 * | model | size | params | backend | threads | mode | test | t/s |
 * | llama 4.19M F32 branch | 16.00 MiB | 4.19 M | CPU | 2 | grouped | pp64 | 812.35 ± 10.20 |
 *
 * then "build: COMMIT (VERSION)" and a "cpu:" line. pp<N> is prompt
 * processing of N tokens (the prefill), tg<N> generating N tokens one at a
 * time; t/s is the mean ± sample sd, over the repetitions, of each
 * repetition's tokens / seconds (llama-bench's statistic). `mode` is the
 * column llama-bench lacks: baseline, grouped or un-grouped decode. */
#ifndef BENCH_LLAMA_TABLE_H
#define BENCH_LLAMA_TABLE_H

#include <stdint.h>
#include <stdio.h>

typedef struct bench_llama_row {
    const char *mode;
    char test[32];   /* "pp64", "tg32" */
    double mean, sd; /* tokens per second */
} bench_llama_row;

typedef struct bench_llama_header {
    char model[64];    /* "llama 4.19M F32 branch" */
    double size_bytes; /* the weights' bytes */
    int64_t params;
    int threads;
    const char *commit, *version, *cpu, *blis_version;
} bench_llama_header;

/* Mean and sample sd (0 for one repetition) of tokens / seconds[i], i < n. */
void bench_llama_rate(const double *seconds, int n, int64_t tokens, double *mean, double *sd);

void bench_llama_table_print(FILE *out, const bench_llama_header *header, const bench_llama_row *rows, int n_rows);

#endif
