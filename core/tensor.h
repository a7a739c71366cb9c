/* A tensor: dtype, up to 4 dims, contiguous row-major data, and (for float32
 * tensors that take part in autograd) a gradient buffer of the same shape.
 *
 * Tensors do not own their memory decisions: parameters are created with
 * dt_tensor_new() (heap, live across steps), activations with
 * dt_tensor_arena() (per-step arena). The autograd layer fills `producer`. */
#ifndef DT_TENSOR_H
#define DT_TENSOR_H

#include <stdint.h>

#include "core/arena.h"
#include "core/error.h"

enum { DT_MAX_DIMS = 4 };

/* Element types. DT_BF16 is a storage type for weights (bfloat16: the top 16
 * bits of a float32); its arithmetic goes through kernels/type_traits.h. */
typedef enum { DT_F32 = 0, DT_I32 = 1, DT_BF16 = 2 } dt_dtype;

struct ag_node; /* defined by autograd/; core never looks inside */

typedef struct dt_tensor {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    int64_t size;             /* product of shape */
    void *data;               /* size elements, contiguous */
    float *grad;              /* size floats, or NULL while no gradient has flowed here */
    int requires_grad;        /* leaf parameters set this; ops propagate it */
    int heap_owned;           /* data (and grad) were malloc'ed by dt_tensor_new */
    struct ag_node *producer; /* op that produced it; NULL for leaves */
    /* A float32 parameter's bfloat16 copy (same layout; owned by the model,
     * refreshed once per step), which bf16 matrix products read; else NULL. */
    const uint16_t *bf16;
} dt_tensor;

static inline float *dt_f32(const dt_tensor *t) { return (float *)t->data; }
static inline int32_t *dt_i32(const dt_tensor *t) { return (int32_t *)t->data; }
static inline int64_t dt_cols(const dt_tensor *t) { return t->shape[t->ndim - 1]; }
static inline int64_t dt_rows(const dt_tensor *t) { return t->size / t->shape[t->ndim - 1]; }
static inline size_t dt_dtype_bytes(dt_dtype dtype) { return dtype == DT_BF16 ? 2 : 4; /* float32, int32: 4 */ }

/* Fills the header; checks 1 <= ndim <= 4 and positive dims. Does not touch data. */
dt_status dt_tensor_init(dt_tensor *t, dt_dtype dtype, int ndim, const int64_t *shape, void *data);

/* Heap tensor, zero-filled; NULL with an error message on bad shape or OOM. */
dt_tensor *dt_tensor_new(dt_dtype dtype, int ndim, const int64_t *shape);
/* Allocates (zeroed) t->grad on the heap for a dt_tensor_new tensor. */
dt_status dt_tensor_alloc_grad(dt_tensor *t);
void dt_tensor_free(dt_tensor *t);

/* Tensor header and data from the arena (data uninitialised). */
dt_tensor *dt_tensor_arena(dt_arena *arena, dt_dtype dtype, int ndim, const int64_t *shape);

int dt_same_shape(const dt_tensor *a, const dt_tensor *b);
/* "[2, 8, 40]" into buf; returns buf. */
const char *dt_shape_str(const dt_tensor *t, char *buf, int buf_size);

/* Convenience shape builders: DT_SHAPE(2, 8, 40) -> (const int64_t[]){2,8,40}, 3 */
#define DT_SHAPE(...)                                                                                                  \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }

#endif
