/* See run_dbranch.h. */
#include "run_dbranch.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SLURP_CAPACITY = 1 << 16 };

char *test_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot read %s", path);
    char *buf = calloc(SLURP_CAPACITY, 1);
    cr_assert(buf);
    size_t n = fread(buf, 1, SLURP_CAPACITY - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

int test_run_dbranch(const char *env, const char *args, char **out, char **err) {
    const char *binary = getenv("DBRANCH_BINARY");
    cr_assert(binary && access(binary, X_OK) == 0, "DBRANCH_BINARY (%s) is not built", binary ? binary : "unset");
    char out_path[96], err_path[96], cmd[4096];
    snprintf(out_path, sizeof out_path, "/tmp/dbranch_test_run_%d.out", (int)getpid());
    snprintf(err_path, sizeof err_path, "/tmp/dbranch_test_run_%d.err", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s '%s' %s >%s 2>%s", env ? env : "", binary, args, out_path, err_path);
    int status = system(cmd);
    *out = test_slurp(out_path);
    *err = test_slurp(err_path);
    remove(out_path);
    remove(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
