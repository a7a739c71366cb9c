/* Writing and reading safetensors files (see safetensors.h). */
#include "interop/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop/file_util.h"

/* The JSON string of s (names and metadata are ours or a tool's: escape
 * quotes, backslashes and control bytes). */
static void put_json_string(interop_buffer *b, const char *s) {
    interop_buffer_append(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            interop_buffer_append(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            interop_buffer_append(b, esc, 6);
        } else {
            interop_buffer_append(b, (const char *)&c, 1);
        }
    }
    interop_buffer_append(b, "\"", 1);
}

dt_status interop_safetensors_write(const char *path, const interop_tensors *list, const char *const (*metadata)[2],
                                    int n_metadata) {
    interop_buffer h = {0};
    interop_buffer_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"");
    for (int i = 0; i < n_metadata; i++) {
        interop_buffer_append(&h, ",", 1);
        put_json_string(&h, metadata[i][0]);
        interop_buffer_append(&h, ":", 1);
        put_json_string(&h, metadata[i][1]);
    }
    interop_buffer_append(&h, "}", 1);
    uint64_t offset = 0;
    for (int i = 0; i < list->count; i++) {
        const interop_tensor *t = &list->items[i];
        interop_buffer_append(&h, ",", 1);
        put_json_string(&h, t->name);
        interop_buffer_printf(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++)
            interop_buffer_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        uint64_t bytes = (uint64_t)t->size * sizeof(float);
        interop_buffer_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                              (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    interop_buffer_append(&h, "}", 1);
    while (h.length % 8)
        interop_buffer_append(&h, " ", 1); /* data starts 8-byte aligned */
    if (h.failed) {
        interop_buffer_free(&h);
        return dt_errorf("%s: out of memory building the header", path);
    }

    interop_writer w;
    if (interop_writer_open(&w, path) != DT_OK) {
        interop_buffer_free(&h);
        return DT_ERR;
    }
    interop_write_u64(&w, h.length);
    interop_write(&w, h.data, h.length);
    for (int i = 0; i < list->count; i++)
        interop_write_f32s(&w, list->items[i].data, list->items[i].size);
    interop_buffer_free(&h);
    return interop_writer_close(&w);
}

void interop_safetensors_free(interop_safetensors *file) {
    interop_tensors_free(&file->tensors);
    json_free(&file->header);
}

const char *interop_safetensors_metadata(const interop_safetensors *file, const char *key) {
    const json_value *v = json_get(json_get(&file->header, "__metadata__"), key);
    return v && v->type == JSON_STRING ? v->string : NULL;
}

/* The dtypes a file may hold; import widens F16 and BF16 to float32 exactly. */
typedef enum { DTYPE_F32 = 0, DTYPE_F16 = 1, DTYPE_BF16 = 2 } stored_dtype;
static const char *const dtype_names[] = {"F32", "F16", "BF16"};
static const uint64_t dtype_bytes[] = {4, 2, 2};

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    float f;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24 */
        f = ldexpf((float)mantissa, -24);
        return sign ? -f : f;
    }
    uint32_t bits = exponent == 0x1F ? sign | 0x7F800000u | (mantissa << 13) /* inf, nan */
                                     : sign | ((exponent + 112) << 23) | (mantissa << 13);
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* n stored elements at src into dst as float32. */
static void widen(const unsigned char *src, stored_dtype dtype, float *dst, int64_t n) {
    if (dtype == DTYPE_F32) {
        interop_read_f32s(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = dtype == DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
}

/* One header entry into list (data not yet read): checks dtype, shape and offsets. */
static dt_status read_entry(const char *path, const char *name, const json_value *v, uint64_t body,
                            interop_tensors *list, uint64_t *begin, stored_dtype *dtype_out) {
    const json_value *dtype = json_get(v, "dtype"), *shape = json_get(v, "shape"),
                     *offsets = json_get(v, "data_offsets");
    if (!dtype || dtype->type != JSON_STRING || !shape || shape->type != JSON_ARRAY || !offsets ||
        offsets->type != JSON_ARRAY || offsets->length != 2)
        return dt_errorf("%s: tensor '%s': header entry needs dtype, shape and data_offsets [begin, end]", path, name);
    int kind = -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(dtype->string, dtype_names[k])) kind = k;
    if (kind < 0)
        return dt_errorf("%s: tensor '%s' has dtype %s (dbranch imports F32, F16 and BF16)", path, name, dtype->string);
    const uint64_t width = dtype_bytes[kind];
    if (shape->length > DT_MAX_DIMS)
        return dt_errorf("%s: tensor '%s' has %zu dimensions (at most %d)", path, name, shape->length, DT_MAX_DIMS);
    int64_t dims[DT_MAX_DIMS];
    uint64_t elements = 1;
    for (size_t d = 0; d < shape->length; d++) {
        const json_value *s = &shape->items[d];
        if (s->type != JSON_NUMBER || !s->number_is_integer || s->integer < 0 || s->integer > (1LL << 40))
            return dt_errorf("%s: tensor '%s' has a bad dimension in its shape", path, name);
        dims[d] = s->integer;
        elements *= (uint64_t)s->integer;
        if (elements > (1ULL << 40)) return dt_errorf("%s: tensor '%s' is too large", path, name);
    }
    const json_value *b = &offsets->items[0], *e = &offsets->items[1];
    if (b->type != JSON_NUMBER || !b->number_is_integer || e->type != JSON_NUMBER || !e->number_is_integer ||
        b->integer < 0 || e->integer < b->integer)
        return dt_errorf("%s: tensor '%s' has bad data_offsets", path, name);
    if ((uint64_t)(e->integer - b->integer) != elements * width)
        return dt_errorf("%s: tensor '%s': data_offsets span %lld bytes, its shape needs %llu", path, name,
                         (long long)(e->integer - b->integer), (unsigned long long)(elements * width));
    if ((uint64_t)e->integer > body)
        return dt_errorf("%s: tensor '%s' ends at byte %lld of a %llu-byte body (the file is truncated)", path, name,
                         (long long)e->integer, (unsigned long long)body);
    interop_tensor *t;
    if (list->count == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 64;
        interop_tensor *items = realloc(list->items, (size_t)capacity * sizeof *items);
        if (!items) return dt_errorf("%s: out of memory", path);
        list->items = items, list->capacity = capacity;
    }
    t = &list->items[list->count++];
    memset(t, 0, sizeof *t);
    if (snprintf(t->name, sizeof t->name, "%s", name) >= (int)sizeof t->name)
        return dt_errorf("%s: tensor name '%.40s...' is too long", path, name);
    t->ndim = (int)shape->length;
    memcpy(t->shape, dims, sizeof dims);
    t->size = (int64_t)elements;
    *begin = (uint64_t)b->integer;
    *dtype_out = (stored_dtype)kind;
    return DT_OK;
}

dt_status interop_safetensors_read(const char *path, interop_safetensors *file) {
    memset(file, 0, sizeof *file);
    unsigned char *bytes = NULL;
    size_t n = 0;
    if (interop_read_file(path, &bytes, &n) != DT_OK) return DT_ERR;
    dt_status status = DT_OK;
    uint64_t header_length = 0;
    for (int i = 7; i >= 0 && n >= 8; i--)
        header_length = header_length << 8 | bytes[i];
    if (n < 8) {
        status = dt_errorf("%s: %zu bytes, too short for the 8-byte header length", path, n);
    } else if (header_length > n - 8) {
        status = dt_errorf("%s: header length %llu is beyond the file (%zu bytes)", path,
                           (unsigned long long)header_length, n);
    } else if (json_parse((const char *)bytes + 8, (size_t)header_length, &file->header) != DT_OK) {
        status = dt_error_context("%s: header", path);
    } else if (file->header.type != JSON_OBJECT) {
        status = dt_errorf("%s: the header is not a JSON object", path);
    }
    const uint64_t body_start = 8 + header_length, body = n - body_start;
    uint64_t *begins = NULL;
    stored_dtype *dtypes = NULL;
    if (status == DT_OK && (!(begins = calloc(file->header.length + 1, sizeof *begins)) ||
                            !(dtypes = calloc(file->header.length + 1, sizeof *dtypes))))
        status = dt_errorf("%s: out of memory", path);
    for (size_t i = 0; i < file->header.length && status == DT_OK; i++) {
        if (!strcmp(file->header.keys[i], "__metadata__")) continue;
        status = read_entry(path, file->header.keys[i], &file->header.items[i], body, &file->tensors,
                            &begins[file->tensors.count], &dtypes[file->tensors.count]);
    }
    /* Tensors must tile the body: no overlap, no gaps, nothing after (the
     * format's own rule; a gap or an overlap is a damaged file). */
    uint64_t covered = 0;
    for (int i = 0; i < file->tensors.count && status == DT_OK; i++) {
        interop_tensor *t = &file->tensors.items[i];
        for (int j = 0; j < file->tensors.count && status == DT_OK; j++) {
            uint64_t bi = begins[i], ei = bi + (uint64_t)t->size * dtype_bytes[dtypes[i]], bj = begins[j];
            uint64_t ej = bj + (uint64_t)file->tensors.items[j].size * dtype_bytes[dtypes[j]];
            if (i != j && bi < ej && bj < ei && t->size && file->tensors.items[j].size)
                status = dt_errorf("%s: tensors '%s' and '%s' overlap in the body", path, t->name,
                                   file->tensors.items[j].name);
        }
        covered += (uint64_t)t->size * dtype_bytes[dtypes[i]];
    }
    if (status == DT_OK && covered != body)
        status = dt_errorf("%s: the body is %llu bytes, its tensors take %llu", path, (unsigned long long)body,
                           (unsigned long long)covered);
    for (int i = 0; i < file->tensors.count && status == DT_OK; i++) {
        interop_tensor *t = &file->tensors.items[i];
        t->data = malloc((size_t)(t->size ? t->size : 1) * sizeof(float));
        if (!t->data) {
            status = dt_errorf("%s: out of memory reading '%s'", path, t->name);
            break;
        }
        t->owned = 1;
        widen(bytes + body_start + begins[i], dtypes[i], t->data, t->size);
    }
    free(begins);
    free(dtypes);
    free(bytes);
    if (status != DT_OK) interop_safetensors_free(file);
    return status;
}
