/* Thread-local error message storage for dt_status returns. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { DT_ERROR_CAPACITY = 1024 };
static _Thread_local char error_message[DT_ERROR_CAPACITY];

/* One line, always: a message may quote a file's contents (a tokenizer name,
 * a config value) and a newline or other control byte there would break the
 * "one clear line" promise; each becomes '?' (found by tests/fuzz). */
static void one_line(char *text) {
    for (unsigned char *p = (unsigned char *)text; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
}

dt_status dt_errorf(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, args);
    va_end(args);
    one_line(error_message);
    return DT_ERR;
}

dt_status dt_error_context(const char *fmt, ...) {
    char prefix[DT_ERROR_CAPACITY];
    char previous[DT_ERROR_CAPACITY];
    va_list args;
    va_start(args, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, args);
    va_end(args);
    memcpy(previous, error_message, sizeof previous);
    /* Truncation of an over-long message is acceptable: it stays one line. */
    size_t n = strlen(prefix);
    if (n > DT_ERROR_CAPACITY - 3) n = DT_ERROR_CAPACITY - 3;
    memcpy(error_message, prefix, n);
    memcpy(error_message + n, ": ", 2);
    size_t rest = strnlen(previous, DT_ERROR_CAPACITY - 1 - n - 2);
    memcpy(error_message + n + 2, previous, rest);
    error_message[n + 2 + rest] = '\0';
    one_line(error_message);
    return DT_ERR;
}

const char *dt_error_message(void) { return error_message[0] ? error_message : "unknown error"; }

void dt_error_clear(void) { error_message[0] = '\0'; }
