/* The list of tensors an export writes, and the layout changes the formats
 * need (transpose, RoPE row order, concatenation). See export_tensors.h. */
#include "interop/export_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void interop_tensors_free(interop_tensors *list) {
    for (int i = 0; i < list->count; i++)
        if (list->items[i].owned) free(list->items[i].data);
    free(list->items);
    memset(list, 0, sizeof *list);
}

/* A new entry with its name and shape; data is filled by the caller. */
static interop_tensor *push(interop_tensors *list, const char *name, int ndim, const int64_t *shape) {
    if (list->count == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 64;
        interop_tensor *items = realloc(list->items, (size_t)capacity * sizeof *items);
        if (!items) {
            dt_errorf("out of memory listing tensors");
            return NULL;
        }
        list->items = items;
        list->capacity = capacity;
    }
    interop_tensor *t = &list->items[list->count];
    memset(t, 0, sizeof *t);
    if (snprintf(t->name, sizeof t->name, "%s", name) >= (int)sizeof t->name) {
        dt_errorf("tensor name '%s' is too long", name);
        return NULL;
    }
    t->ndim = ndim;
    t->size = 1;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        t->size *= shape[d];
    }
    list->count++;
    return t;
}

static float *owned_data(interop_tensors *list, interop_tensor *t) {
    t->data = malloc((size_t)t->size * sizeof(float));
    if (!t->data) {
        list->count--;
        dt_errorf("out of memory copying tensor '%s'", t->name);
        return NULL;
    }
    t->owned = 1;
    return t->data;
}

dt_status interop_add(interop_tensors *list, const char *name, const dt_tensor *t) {
    interop_tensor *out = push(list, name, t->ndim, t->shape);
    if (!out) return DT_ERR;
    out->data = dt_f32(t);
    return DT_OK;
}

dt_status interop_add_view(interop_tensors *list, const char *name, float *data, int ndim, const int64_t *shape) {
    interop_tensor *out = push(list, name, ndim, shape);
    if (!out) return DT_ERR;
    out->data = data;
    return DT_OK;
}

dt_status interop_add_transposed(interop_tensors *list, const char *name, const dt_tensor *t) {
    if (t->ndim != 2) return dt_errorf("cannot transpose '%s': not a matrix", name);
    const int64_t rows = t->shape[0], cols = t->shape[1];
    interop_tensor *out = push(list, name, 2, (const int64_t[]){cols, rows});
    if (!out) return DT_ERR;
    float *dst = owned_data(list, out);
    if (!dst) return DT_ERR;
    const float *src = dt_f32(t); /* src [rows, cols], dst [cols, rows] */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * cols + c];
    return DT_OK;
}

dt_status interop_add_half_split(interop_tensors *list, const char *name, const dt_tensor *t, int64_t heads) {
    if (t->ndim != 2 || heads <= 0 || t->shape[0] % (2 * heads) != 0)
        return dt_errorf("cannot reorder the RoPE rows of '%s': %lld rows are not %lld heads of even width", name,
                         (long long)t->shape[0], (long long)heads);
    interop_tensor *out = push(list, name, 2, t->shape);
    if (!out) return DT_ERR;
    float *dst = owned_data(list, out);
    if (!dst) return DT_ERR;
    const int64_t cols = t->shape[1], hd = t->shape[0] / heads, half = hd / 2;
    const float *src = dt_f32(t); /* [heads*hd, cols] both */
    for (int64_t h = 0; h < heads; h++)
        for (int64_t c = 0; c < 2; c++)
            for (int64_t j = 0; j < half; j++)
                memcpy(dst + (h * hd + c * half + j) * cols, src + (h * hd + 2 * j + c) * cols,
                       (size_t)cols * sizeof(float));
    return DT_OK;
}

dt_status interop_interleave_rows(float *rows, int64_t n_rows, int64_t cols, int64_t heads) {
    const int64_t hd = n_rows / heads, half = hd / 2;
    float *head = malloc((size_t)(hd * cols) * sizeof *head);
    if (!head) return dt_errorf("out of memory reordering RoPE rows");
    for (int64_t h = 0; h < heads; h++) {
        float *block = rows + h * hd * cols; /* [hd, cols], half-split order */
        memcpy(head, block, (size_t)(hd * cols) * sizeof *head);
        for (int64_t c = 0; c < 2; c++)
            for (int64_t j = 0; j < half; j++)
                memcpy(block + (2 * j + c) * cols, head + (c * half + j) * cols, (size_t)cols * sizeof(float));
    }
    free(head);
    return DT_OK;
}

dt_status interop_add_concat(interop_tensors *list, const char *name, const dt_tensor *const *parts, int n_parts,
                             int transpose) {
    const dt_tensor *first = parts[0];
    int64_t rows = 0, inner = first->size / first->shape[0];
    for (int p = 0; p < n_parts; p++) {
        if (parts[p]->ndim != first->ndim || parts[p]->size / parts[p]->shape[0] != inner)
            return dt_errorf("cannot concatenate the parts of '%s': their shapes differ", name);
        rows += parts[p]->shape[0];
    }
    if (transpose && first->ndim != 2) return dt_errorf("cannot transpose '%s': not a matrix", name);
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    shape[0] = rows;
    if (transpose) shape[0] = inner, shape[1] = rows;
    interop_tensor *out = push(list, name, first->ndim, shape);
    if (!out) return DT_ERR;
    float *dst = owned_data(list, out);
    if (!dst) return DT_ERR;
    int64_t row0 = 0;
    for (int p = 0; p < n_parts; p++) {
        const float *src = dt_f32(parts[p]); /* [rows_p, inner] */
        const int64_t rows_p = parts[p]->shape[0];
        if (!transpose) {
            memcpy(dst + row0 * inner, src, (size_t)(rows_p * inner) * sizeof(float));
        } else { /* dst [inner, rows] */
            for (int64_t r = 0; r < rows_p; r++)
                for (int64_t c = 0; c < inner; c++)
                    dst[c * rows + row0 + r] = src[r * inner + c];
        }
        row0 += rows_p;
    }
    return DT_OK;
}

const interop_tensor *interop_find(const interop_tensors *list, const char *name) {
    for (int i = 0; i < list->count; i++)
        if (!strcmp(list->items[i].name, name)) return &list->items[i];
    return NULL;
}
