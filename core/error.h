/* Error values with messages.
 *
 * Library code never prints or exits: a failing function returns DT_ERR (or
 * NULL) after recording a one-line message with dt_errorf(); the one place that
 * reports to the user (the CLI) reads it with dt_error_message(). The message
 * lives in thread-local storage so OpenMP workers cannot clobber each other. */
#ifndef DT_ERROR_H
#define DT_ERROR_H

typedef enum { DT_OK = 0, DT_ERR = -1 } dt_status;

/* Records a printf-style message and returns DT_ERR, so callers can write
 * `return dt_errorf("...")`. */
dt_status dt_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prepends "context: " to the current message (e.g. a file name). */
dt_status dt_error_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

const char *dt_error_message(void);
void dt_error_clear(void);

#endif
