/* Byte-level helpers the format writers and readers share: a growable text
 * buffer (JSON headers), a file writer that goes through PATH.tmp and a
 * rename (so a failed export never leaves a half-written file under the real
 * name) with one sticky error, and reading a whole file. All formats here are
 * little-endian, like the hosts dbranch builds on (checked at compile time). */
#ifndef INTEROP_FILE_UTIL_H
#define INTEROP_FILE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "interop writes little-endian files with native stores"
#endif

typedef struct interop_buffer {
    char *data;
    size_t length, capacity;
    int failed; /* an allocation failed; the content is incomplete */
} interop_buffer;

void interop_buffer_append(interop_buffer *b, const void *bytes, size_t n);
void interop_buffer_printf(interop_buffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void interop_buffer_free(interop_buffer *b);

typedef struct interop_writer {
    FILE *f;
    char path[4096], tmp[4200];
    int failed;
    uint64_t offset; /* bytes written so far */
} interop_writer;

dt_status interop_writer_open(interop_writer *w, const char *path);
void interop_write(interop_writer *w, const void *bytes, size_t n);
void interop_write_u32(interop_writer *w, uint32_t v);
void interop_write_u64(interop_writer *w, uint64_t v);
void interop_write_i32(interop_writer *w, int32_t v);
void interop_write_f32(interop_writer *w, float v);
void interop_write_f32s(interop_writer *w, const float *v, int64_t n);
void interop_write_zeros(interop_writer *w, size_t n);
/* Closes, then renames PATH.tmp over PATH; an earlier write error is reported here, naming the file. */
dt_status interop_writer_close(interop_writer *w);

/* Creates the directory (one level) unless it exists. */
dt_status interop_make_dir(const char *path);

/* The whole file into *bytes (malloc'ed; caller frees). */
dt_status interop_read_file(const char *path, unsigned char **bytes, size_t *n);
void interop_read_f32s(const unsigned char *src, float *dst, int64_t n);

#endif
