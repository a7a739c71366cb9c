/* Tensor headers, heap and arena construction, shape helpers. */
#include "core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status dt_tensor_init(dt_tensor *t, dt_dtype dtype, int ndim, const int64_t *shape, void *data) {
    if (ndim < 1 || ndim > DT_MAX_DIMS) return dt_errorf("tensor: %d dims (must be 1..%d)", ndim, DT_MAX_DIMS);
    if (dtype != DT_F32 && dtype != DT_I32 && dtype != DT_BF16)
        return dt_errorf("tensor: unknown dtype %d", (int)dtype);
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) return dt_errorf("tensor: dimension %d is %lld (must be positive)", i, (long long)shape[i]);
        t->shape[i] = shape[i];
        t->size *= shape[i];
    }
    t->data = data;
    return DT_OK;
}

dt_tensor *dt_tensor_new(dt_dtype dtype, int ndim, const int64_t *shape) {
    dt_tensor header = {0};
    if (dt_tensor_init(&header, dtype, ndim, shape, NULL) != DT_OK) return NULL;
    dt_tensor *t = malloc(sizeof *t);
    void *data = NULL;
    size_t bytes = (size_t)header.size * dt_dtype_bytes(dtype);
    if (!t || posix_memalign(&data, DT_ARENA_ALIGN, bytes) != 0) {
        free(t);
        dt_errorf("tensor: out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    memset(data, 0, bytes);
    *t = header;
    t->data = data;
    t->heap_owned = 1;
    return t;
}

dt_status dt_tensor_alloc_grad(dt_tensor *t) {
    if (t->dtype != DT_F32) return dt_errorf("tensor: gradient of a non-float tensor");
    if (t->grad) return DT_OK;
    void *grad = NULL;
    if (posix_memalign(&grad, DT_ARENA_ALIGN, (size_t)t->size * sizeof(float)) != 0)
        return dt_errorf("tensor: out of memory for a gradient of %lld floats", (long long)t->size);
    memset(grad, 0, (size_t)t->size * sizeof(float));
    t->grad = grad;
    return DT_OK;
}

void dt_tensor_free(dt_tensor *t) {
    if (!t) return;
    if (t->heap_owned) {
        free(t->data);
        free(t->grad);
    }
    free(t);
}

dt_tensor *dt_tensor_arena(dt_arena *arena, dt_dtype dtype, int ndim, const int64_t *shape) {
    dt_tensor header = {0};
    if (dt_tensor_init(&header, dtype, ndim, shape, NULL) != DT_OK) return NULL;
    dt_tensor *t = dt_arena_alloc(arena, sizeof *t);
    void *data = t ? dt_arena_alloc(arena, (size_t)header.size * dt_dtype_bytes(dtype)) : NULL;
    if (!data) return NULL;
    *t = header;
    t->data = data;
    return t;
}

int dt_same_shape(const dt_tensor *a, const dt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *dt_shape_str(const dt_tensor *t, char *buf, int buf_size) {
    int n = snprintf(buf, buf_size, "[");
    for (int i = 0; i < t->ndim && n < buf_size; i++)
        n += snprintf(buf + n, buf_size - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (n < buf_size) snprintf(buf + n, buf_size - n, "]");
    return buf;
}
