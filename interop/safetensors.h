/* safetensors files (HuggingFace): an 8-byte little-endian header length N,
 * N bytes of JSON (padded with spaces to a multiple of 8) mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]} relative to the
 * data block that follows, plus "__metadata__" (string to string).
 * dbranch writes F32; it reads F32, and F16 / BF16 widened exactly to F32
 * (public LLaMA checkpoints are BF16). */
#ifndef INTEROP_SAFETENSORS_H
#define INTEROP_SAFETENSORS_H

#include "interop/export_tensors.h"
#include "interop/json.h"

/* Writes the tensors in list order into one data block. metadata: n_metadata
 * key, value pairs (strings) besides "format": "pt", which is always written. */
dt_status interop_safetensors_write(const char *path, const interop_tensors *list, const char *const (*metadata)[2],
                                    int n_metadata);

/* A file read whole: its tensors (owned copies, in the header's order) and
 * its parsed header (for __metadata__). */
typedef struct interop_safetensors {
    interop_tensors tensors;
    json_value header;
} interop_safetensors;

/* Strict: a header length beyond the file, a header that is not JSON, a
 * dtype other than F32, F16 or BF16, offsets that do not match the shape, overlap or run
 * past the file, and a body of another size than the offsets say are errors
 * naming the file and the tensor. */
dt_status interop_safetensors_read(const char *path, interop_safetensors *file);
void interop_safetensors_free(interop_safetensors *file);
/* A __metadata__ value; NULL when absent. */
const char *interop_safetensors_metadata(const interop_safetensors *file, const char *key);

#endif
