/* A scratch directory per test under /tmp, and its removal: the setup and
 * teardown that the tests writing files (datasets, configs, checkpoints, the
 * CLI's outputs) share. Both fail the calling test (cr_assert) with a message
 * when they cannot do their job. */
#ifndef TESTS_SUPPORT_SCRATCH_H
#define TESTS_SUPPORT_SCRATCH_H

#include <stddef.h>

/* Creates a fresh directory /tmp/dbranch_NAME_XXXXXX (mkdtemp) and writes its
 * path into dir[size]. */
void test_scratch_dir(char *dir, size_t size, const char *name);

/* Removes dir and everything below it (`rm -rf`, without a shell). An empty
 * path or a directory that is already gone is not an error, so a teardown
 * after a failed setup reports the setup's failure, not its own. */
void test_remove_dir(const char *dir);

#endif
