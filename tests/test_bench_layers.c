/* Only cli/ and bench/ print (docs/ARCHITECTURE.md): the product layers'
 * sources, with comments and string literals removed, name neither stdout
 * nor stderr and call none of printf, vprintf, puts, putchar or perror
 * (fprintf to a stream the caller handed in, as the training log does, is
 * fine). Reads the sources under env DBRANCH_SOURCE_DIR. The scanner is
 * checked on a snippet first, so the test cannot pass by finding nothing. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies src to dst with comments and string / character literals blanked. */
static void strip(const char *src, char *dst) {
    size_t i = 0, n = strlen(src);
    while (i < n) {
        if (src[i] == '/' && src[i + 1] == '*') {
            const char *end = strstr(src + i + 2, "*/");
            size_t stop = end ? (size_t)(end - src) + 2 : n;
            while (i < stop)
                dst[i] = src[i] == '\n' ? '\n' : ' ', i++;
        } else if (src[i] == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n')
                dst[i++] = ' ';
        } else if (src[i] == '"' || src[i] == '\'') {
            char quote = src[i];
            dst[i++] = ' ';
            while (i < n && src[i] != quote) {
                if (src[i] == '\\' && i + 1 < n) dst[i++] = ' ';
                dst[i++] = ' ';
            }
            if (i < n) dst[i++] = ' ';
        } else {
            dst[i] = src[i];
            i++;
        }
    }
    dst[n] = '\0';
}

/* The first forbidden name in code (whole identifiers only; the functions
 * only where called, so format(printf, ...) attributes pass), or NULL. */
static const char *forbidden(const char *code) {
    static const char *const names[] = {"stdout", "stderr", "printf", "vprintf", "puts", "putchar", "perror"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t len = strlen(names[k]);
        for (const char *p = strstr(code, names[k]); p; p = strstr(p + 1, names[k])) {
            int start = p == code || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
            int end = !(isalnum((unsigned char)p[len]) || p[len] == '_');
            const char *next = p + len;
            while (isspace((unsigned char)*next))
                next++;
            int used = k < 2 || *next == '(';
            if (start && end && used) return names[k];
        }
    }
    return NULL;
}

static const char *check_text(const char *text) {
    char *code = malloc(strlen(text) + 1);
    strip(text, code);
    const char *found = forbidden(code);
    free(code);
    return found;
}

Test(layers, scanner_finds_prints_in_code_only) {
    cr_expect_null(check_text("/* prints to stdout */ int x; // printf(\"hi\")\nconst char *s = \"stderr\";"));
    cr_expect_null(check_text("snprintf(buf, n, \"%d\", x); fprintf(log, \"x\"); dt_errorf(\"e\");"));
    cr_expect_str_eq(check_text("int main(void) { printf(\"%d\\n\", 1); }"), "printf");
    cr_expect_str_eq(check_text("fputs(\"x\", stderr);"), "stderr");
    cr_expect_str_eq(check_text("char c = '\"'; puts(s);"), "puts");
    cr_expect_null(check_text("void f(const char *fmt, ...) __attribute__((format(printf, 1, 2)));"));
}

Test(layers, product_layers_do_not_print) {
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    cr_assert(root != NULL, "DBRANCH_SOURCE_DIR is not set (run through ctest)");
    static const char *const layers[] = {"core", "kernels", "autograd", "models",   "optim",
                                         "data", "train",   "eval",     "analysis", "interop"};
    int files = 0;
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        char dir_path[1024];
        snprintf(dir_path, sizeof dir_path, "%s/%s", root, layers[l]);
        DIR *dir = opendir(dir_path);
        cr_assert(dir != NULL, "cannot open %s", dir_path);
        for (struct dirent *e; (e = readdir(dir));) {
            size_t len = strlen(e->d_name);
            if (len < 3 || (strcmp(e->d_name + len - 2, ".c") && strcmp(e->d_name + len - 2, ".h"))) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
            FILE *f = fopen(path, "rb");
            cr_assert(f != NULL, "cannot read %s", path);
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fseek(f, 0, SEEK_SET);
            char *text = malloc((size_t)size + 1);
            cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
            text[size] = '\0';
            fclose(f);
            const char *found = check_text(text);
            cr_expect_null(found, "%s/%s uses %s: only cli/ and bench/ print", layers[l], e->d_name, found);
            free(text);
            files++;
        }
        closedir(dir);
    }
    cr_expect_gt(files, 50, "only %d source files found under %s", files, root);
}
