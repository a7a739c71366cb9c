/* See run_dbranch.h. Test support code: it may malloc and fail the test. */
#include "run_dbranch.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { SLURP_CAPACITY = 1 << 16 };

/* The file's first 64 KiB as a string (caller frees), or NULL when it cannot be opened. */
static char *read_capped(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = calloc(SLURP_CAPACITY, 1);
    size_t n = text ? fread(text, 1, SLURP_CAPACITY - 1, f) : 0;
    if (text) text[n] = '\0';
    fclose(f);
    return text;
}

char *test_slurp(const char *path) {
    char *text = read_capped(path);
    cr_assert(text, "cannot read %s", path);
    return text;
}

const char *test_dbranch_binary(void) {
    const char *binary = getenv("DBRANCH_BINARY");
    cr_assert(binary && access(binary, X_OK) == 0, "DBRANCH_BINARY (%s) is not built (run through ctest)",
              binary ? binary : "unset");
    return binary;
}

int test_run_dbranch(const char *env, const char *args, char **out, char **err) {
    const char *binary = test_dbranch_binary();
    /* pid + a per-process count: calls in one test, and tests in other processes, never share a file. */
    static unsigned calls;
    unsigned call = calls++;
    char out_path[96], err_path[96], command[4096];
    snprintf(out_path, sizeof out_path, "/tmp/dbranch_test_run_%d_%u.out", (int)getpid(), call);
    snprintf(err_path, sizeof err_path, "/tmp/dbranch_test_run_%d_%u.err", (int)getpid(), call);
    int length =
        snprintf(command, sizeof command, "%s '%s' %s >%s 2>%s", env ? env : "", binary, args, out_path, err_path);
    cr_assert(length > 0 && (size_t)length < sizeof command, "command too long: dbranch %s", args);
    int status = system(command);
    /* Read both, remove both, then complain: a failed read leaves no file behind. */
    char *out_text = out ? read_capped(out_path) : NULL;
    char *err_text = err ? read_capped(err_path) : NULL;
    remove(out_path);
    remove(err_path);
    cr_assert(!out || out_text, "cannot read the stdout of: dbranch %s", args);
    cr_assert(!err || err_text, "cannot read the stderr of: dbranch %s", args);
    if (out) *out = out_text;
    if (err) *err = err_text;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void test_assert_one_line_error(const char *err, const char *prefix, const char *needle) {
    cr_assert(strncmp(err, prefix, strlen(prefix)) == 0, "stderr does not start with '%s': %s", prefix, err);
    cr_assert(strstr(err, needle) != NULL, "'%s' not in stderr: %s", needle, err);
    const char *newline = strchr(err, '\n');
    cr_assert(newline && newline[1] == '\0', "stderr is not exactly one line: %s", err);
}

double test_json_number(const char *json, const char *key) {
    char pattern[128];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(json, pattern);
    cr_assert(at, "no \"%s\" in: %s", key, json);
    return strtod(at + strlen(pattern), NULL);
}
