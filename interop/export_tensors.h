/* The tensors one export writes: a name in the target format, a row-major
 * shape and float32 data, either borrowed from the model (the same layout) or
 * owned (a transposed, permuted or concatenated copy). Every format writer
 * (safetensors, GGUF, llama2.c) serializes such a list, so the name maps and
 * the layout changes live in one place per format and the byte writers in
 * another. */
#ifndef INTEROP_EXPORT_TENSORS_H
#define INTEROP_EXPORT_TENSORS_H

#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

typedef struct interop_tensor {
    char name[128];
    int ndim;
    int64_t shape[DT_MAX_DIMS]; /* row-major, outermost first */
    int64_t size;
    float *data;
    int owned; /* data is malloc'ed by the list */
} interop_tensor;

typedef struct interop_tensors {
    interop_tensor *items;
    int count, capacity;
} interop_tensors;

void interop_tensors_free(interop_tensors *list);

/* The model's tensor as it is (shape and data borrowed). */
dt_status interop_add(interop_tensors *list, const char *name, const dt_tensor *t);
/* Borrowed data of the given shape (one expert's slice of [E, rows, cols]). */
dt_status interop_add_view(interop_tensors *list, const char *name, float *data, int ndim, const int64_t *shape);
/* A 2-D [rows, cols] tensor written as [cols, rows] (GPT-2's Conv1D stores [in, out]). */
dt_status interop_add_transposed(interop_tensors *list, const char *name, const dt_tensor *t);
/* Rows of a q or k weight [heads*hd, C] reordered per head from SPEC's
 * interleaved RoPE pairs (2j, 2j+1) to the half-split form (j, j + hd/2) of
 * HF's rotate_half: out row h*hd + c*hd/2 + j = in row h*hd + 2j + c. */
dt_status interop_add_half_split(interop_tensors *list, const char *name, const dt_tensor *t, int64_t heads);
/* The inverse reordering (half-split rows back to interleaved pairs), in place on
 * a [heads*hd, C] array; the importer's undo of interop_add_half_split. */
dt_status interop_interleave_rows(float *rows, int64_t n_rows, int64_t cols, int64_t heads);
/* Tensors of equal trailing shape stacked along their first dimension
 * (GPT-2's c_attn is q, k, v one after the other), optionally then transposed. */
dt_status interop_add_concat(interop_tensors *list, const char *name, const dt_tensor *const *parts, int n_parts,
                             int transpose);

/* The entry of that name, NULL when absent. */
const interop_tensor *interop_find(const interop_tensors *list, const char *name);

#endif
