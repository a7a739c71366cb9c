/* The byte-level helpers of file_util.h. */
#include "interop/file_util.h"
#include "core/input_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void interop_buffer_append(interop_buffer *b, const void *bytes, size_t n) {
    if (b->failed) return;
    if (b->length + n + 1 > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 4096;
        while (capacity < b->length + n + 1)
            capacity *= 2;
        char *data = realloc(b->data, capacity);
        if (!data) {
            b->failed = 1;
            return;
        }
        b->data = data, b->capacity = capacity;
    }
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
    b->data[b->length] = '\0';
}

void interop_buffer_printf(interop_buffer *b, const char *fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    if (n < 0 || n >= (int)sizeof text) {
        b->failed = 1;
        return;
    }
    interop_buffer_append(b, text, (size_t)n);
}

void interop_buffer_free(interop_buffer *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

dt_status interop_writer_open(interop_writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path)
        return dt_errorf("%s: path too long", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return dt_errorf("%s: cannot create: %s", w->tmp, strerror(errno));
    return DT_OK;
}

void interop_write(interop_writer *w, const void *bytes, size_t n) {
    if (w->failed || !n) return;
    if (fwrite(bytes, 1, n, w->f) != n) w->failed = errno ? errno : EIO;
    w->offset += n;
}

void interop_write_u32(interop_writer *w, uint32_t v) { interop_write(w, &v, sizeof v); }
void interop_write_u64(interop_writer *w, uint64_t v) { interop_write(w, &v, sizeof v); }
void interop_write_i32(interop_writer *w, int32_t v) { interop_write(w, &v, sizeof v); }
void interop_write_f32(interop_writer *w, float v) { interop_write(w, &v, sizeof v); }
void interop_write_f32s(interop_writer *w, const float *v, int64_t n) { interop_write(w, v, (size_t)n * sizeof *v); }

void interop_write_zeros(interop_writer *w, size_t n) {
    static const char zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        interop_write(w, zeros, k);
        n -= k;
    }
}

dt_status interop_writer_close(interop_writer *w) {
    int failed = w->failed;
    if (fclose(w->f) != 0 && !failed) failed = errno ? errno : EIO;
    w->f = NULL;
    if (failed) {
        remove(w->tmp);
        return dt_errorf("%s: write failed: %s", w->tmp, strerror(failed));
    }
    if (rename(w->tmp, w->path) != 0) {
        int e = errno;
        remove(w->tmp);
        return dt_errorf("%s: cannot rename %s over it: %s", w->path, w->tmp, strerror(e));
    }
    return DT_OK;
}

dt_status interop_read_file(const char *path, unsigned char **bytes, size_t *n) {
    *bytes = NULL, *n = 0;
    if (dt_check_input_file(path) != DT_OK) return DT_ERR;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf("%s: cannot open: %s", path, strerror(errno));
    size_t capacity = 1 << 16, length = 0;
    unsigned char *data = malloc(capacity);
    while (data) {
        size_t got = fread(data + length, 1, capacity - length, f);
        length += got;
        if (length < capacity) break;
        unsigned char *bigger = realloc(data, capacity * 2);
        if (!bigger) {
            free(data);
            data = NULL;
            break;
        }
        data = bigger, capacity *= 2;
    }
    int error = ferror(f);
    fclose(f);
    if (!data) return dt_errorf("%s: out of memory reading it", path);
    if (error) {
        free(data);
        return dt_errorf("%s: read error", path);
    }
    *bytes = data, *n = length;
    return DT_OK;
}

void interop_read_f32s(const unsigned char *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }

dt_status interop_make_dir(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return S_ISDIR(st.st_mode) ? DT_OK : dt_errorf("%s: exists and is not a directory", path);
    if (mkdir(path, 0777) != 0) return dt_errorf("%s: cannot create the directory: %s", path, strerror(errno));
    return DT_OK;
}
