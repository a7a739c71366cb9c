/* See scratch.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "scratch.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void test_scratch_dir(char *dir, size_t size, const char *name) {
    int length = snprintf(dir, size, "/tmp/dbranch_%s_XXXXXX", name);
    cr_assert(length > 0 && (size_t)length < size, "scratch dir name for '%s' does not fit in %zu bytes", name, size);
    cr_assert(mkdtemp(dir) != NULL, "cannot create %s: %s", dir, strerror(errno));
}

/* nftw callback: files and (children first, FTW_DEPTH) directories alike. */
static int remove_entry(const char *path, const struct stat *info, int type, struct FTW *where) { return remove(path); }

void test_remove_dir(const char *dir) {
    struct stat info;
    if (!dir || !dir[0] || (lstat(dir, &info) != 0 && errno == ENOENT)) return;
    cr_assert(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "could not remove %s: %s", dir, strerror(errno));
}
