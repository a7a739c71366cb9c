/* Runs the dbranch binary under test (env DBRANCH_BINARY, set by ctest) and
 * captures what it prints, for the CLI tests; and the one check every CLI
 * test makes of a refused command: its stderr is one "dbranch CMD: ..." line.
 * Every helper here fails the calling test (cr_assert) when it cannot do its
 * job, with a message saying what went wrong. */
#ifndef TESTS_SUPPORT_RUN_DBRANCH_H
#define TESTS_SUPPORT_RUN_DBRANCH_H

/* The whole file at path as a NUL-terminated string (at most 64 KiB; caller
 * frees); fails the test when it cannot be read. */
char *test_slurp(const char *path);

/* Path of the dbranch binary (env DBRANCH_BINARY); fails the test when it is
 * unset or not executable. For tests that fork and exec it themselves (to
 * signal it mid-run); the others use test_run_dbranch. */
const char *test_dbranch_binary(void);

/* Runs `[env] dbranch ARGS` through the shell (env: assignments such as
 * "OMP_NUM_THREADS=1", or NULL; ARGS as typed on a command line, quoted where
 * needed); *out and *err get its stdout and stderr (caller frees); pass NULL
 * for a stream the test does not look at. Returns its exit code, -1 when it
 * did not exit. The capture files are unique to the call and removed. */
int test_run_dbranch(const char *env, const char *args, char **out, char **err);

/* Asserts the stderr of a refused command: it starts with prefix (e.g.
 * "dbranch train: "), contains needle and is exactly one line ending in '\n'. */
void test_assert_one_line_error(const char *err, const char *prefix, const char *needle);

/* The number after the first "\"key\": " in a JSON text the binary printed;
 * fails the test when the key is absent. */
double test_json_number(const char *json, const char *key);

#endif
