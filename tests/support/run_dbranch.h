/* Runs the dbranch binary under test (env DBRANCH_BINARY, set by ctest) and
 * captures what it prints, for the CLI tests. */
#ifndef TESTS_SUPPORT_RUN_DBRANCH_H
#define TESTS_SUPPORT_RUN_DBRANCH_H

/* The whole file at path as a NUL-terminated string (at most 64 KiB; caller
 * frees); fails the test when it cannot be read. */
char *test_slurp(const char *path);

/* Runs `[env] dbranch ARGS` through the shell (env: assignments such as
 * "OMP_NUM_THREADS=1", or NULL); *out and *err get its stdout and stderr
 * (caller frees). Returns its exit code, -1 when it did not exit. */
int test_run_dbranch(const char *env, const char *args, char **out, char **err);

#endif
