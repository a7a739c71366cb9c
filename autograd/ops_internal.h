/* Helpers shared by the autograd/ops_*.c files (not part of the public API):
 * input validation with one-line messages naming the op and the shapes, and
 * alias headers for ops that return views of existing data. */
#ifndef AG_OPS_INTERNAL_H
#define AG_OPS_INTERNAL_H

#include <stdint.h>

#include "autograd/tape.h"
#include "core/error.h"
#include "core/tensor.h"

/* Formats "[2, 8, 40]" into a caller buffer (printing helper for messages). */
#define AG_SHAPE_BUF 64

/* "op: shapes [..] and [..] <why>" */
static inline dt_tensor *ag_fail_shapes(const char *op, const dt_tensor *a, const dt_tensor *b, const char *why) {
    char sa[AG_SHAPE_BUF], sb[AG_SHAPE_BUF];
    dt_errorf("%s: shapes %s and %s %s", op, dt_shape_str(a, sa, sizeof sa), dt_shape_str(b, sb, sizeof sb), why);
    return NULL;
}

/* "op: name has shape [..] <why>" */
static inline dt_tensor *ag_fail_shape(const char *op, const char *name, const dt_tensor *t, const char *why) {
    char s[AG_SHAPE_BUF];
    dt_errorf("%s: %s has shape %s %s", op, name, dt_shape_str(t, s, sizeof s), why);
    return NULL;
}

/* Returns 1 when t is float32; records "op: name must be float32" otherwise. */
static inline int ag_check_f32(const char *op, const char *name, const dt_tensor *t) {
    if (t->dtype == DT_F32) return 1;
    dt_errorf("%s: %s must be float32 (got int32)", op, name);
    return 0;
}

static inline int ag_check_i32(const char *op, const char *name, const dt_tensor *t) {
    if (t->dtype == DT_I32) return 1;
    dt_errorf("%s: %s must be int32 (got float32)", op, name);
    return 0;
}

/* Checks every id of an int32 tensor lies in [0, limit); the message names the
 * first bad id and its flat position. */
static inline int ag_check_ids(const char *op, const char *name, const dt_tensor *ids, int64_t limit) {
    const int32_t *id = dt_i32(ids);
    for (int64_t i = 0; i < ids->size; i++) {
        if (id[i] < 0 || id[i] >= limit) {
            dt_errorf("%s: %s[%lld] = %d is outside [0, %lld)", op, name, (long long)i, (int)id[i], (long long)limit);
            return 0;
        }
    }
    return 1;
}

/* Output shape = x's shape with the last dim replaced by `last`. */
static inline dt_tensor *ag_tensor_like_rows(ag_ctx *ctx, const dt_tensor *x, int64_t last) {
    int64_t shape[DT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        shape[i] = x->shape[i];
    shape[x->ndim - 1] = last;
    return ag_tensor(ctx, x->dtype, x->ndim, shape);
}

static inline dt_tensor *ag_tensor_like(ag_ctx *ctx, const dt_tensor *x) {
    return ag_tensor(ctx, x->dtype, x->ndim, x->shape);
}

/* An arena header over existing data (reshape, detach): no copy. */
static inline dt_tensor *ag_alias(ag_ctx *ctx, const dt_tensor *x, int ndim, const int64_t *shape) {
    dt_tensor *t = ag_scratch(ctx, sizeof *t);
    if (!t) return NULL;
    if (dt_tensor_init(t, x->dtype, ndim, shape, x->data) != DT_OK) return NULL;
    return t;
}

#endif
