/* CHECK for the MPI test programs (plain programs, no Criterion): prints a
 * failed check's message and counts it in `failures`; the program exits
 * non-zero when any failed. */
#ifndef TESTS_MPI_MPI_CHECK_H
#define TESTS_MPI_MPI_CHECK_H

#include <stdio.h>

static int failures = 0;
static const char *test_name = "test_mpi"; /* set by main to the program's name */

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s: ", test_name);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#endif
