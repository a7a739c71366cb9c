/* Small HDF5 helpers shared by every layer that reads or writes files
 * (models, data, train). They turn HDF5's error stack into one-line dt_errorf
 * messages naming the file and the object, and never let HDF5 print. */
#ifndef DT_H5_H
#define DT_H5_H

#include <hdf5.h>
#include <stdint.h>

#include "core/error.h"

/* Opens read-only (or read-write); a missing, truncated or foreign file is an error naming it. */
dt_status h5_open(const char *path, int writable, hid_t *file);
/* Creates (truncating) a file; an error says why (strerror). Writers of whole
 * files use h5_write_file instead. */
dt_status h5_create(const char *path, hid_t *file);

/* The one checked path for every HDF5 file dbranch writes (checkpoints, model
 * files, token files): write(file, ctx) fills a new PATH.tmp, which is closed
 * (a failed flush is an error), fsync'ed and renamed over PATH, so PATH is
 * either the old file or the complete new one. Any failure removes PATH.tmp
 * (no 0-byte or partial .tmp is left) and is one line naming PATH and the
 * reason (errno's text: "No space left on device"). */
typedef dt_status (*h5_file_writer)(hid_t file, const void *ctx);
dt_status h5_write_file(const char *path, h5_file_writer write, const void *ctx);
/* Closes and reports an error if HDF5 could not flush the file. */
dt_status h5_close(hid_t file, const char *path);
/* Creates a group if absent; returns its id in *group (close with H5Gclose). */
dt_status h5_group(hid_t parent, const char *name, hid_t *group);
int h5_exists(hid_t loc, const char *path);

/* Attributes on an object (loc: file, group or dataset). */
dt_status h5_write_attr_int(hid_t loc, const char *name, int64_t value);
dt_status h5_write_attr_double(hid_t loc, const char *name, double value);
dt_status h5_write_attr_string(hid_t loc, const char *name, const char *value);
int h5_has_attr(hid_t loc, const char *name);
dt_status h5_read_attr_int(hid_t loc, const char *name, int64_t *value);
dt_status h5_read_attr_double(hid_t loc, const char *name, double *value);
dt_status h5_read_attr_string(hid_t loc, const char *name, char *value, size_t capacity);

/* Datasets. Shapes are checked: a dataset whose rank or dims differ from the
 * expected ones is an error naming it. Reads convert from the stored type
 * (float64 reference data reads as float32 or double). */
dt_status h5_write_f32(hid_t loc, const char *name, const float *data, int ndim, const int64_t *shape);
dt_status h5_write_f64(hid_t loc, const char *name, const double *data, int ndim, const int64_t *shape);
dt_status h5_write_i32(hid_t loc, const char *name, const int32_t *data, int ndim, const int64_t *shape);
dt_status h5_write_u64(hid_t loc, const char *name, const uint64_t *data, int ndim, const int64_t *shape);
/* Reads the dataset's rank and dims (up to 4). */
dt_status h5_dataset_shape(hid_t loc, const char *name, int *ndim, int64_t *shape);
dt_status h5_read_f32(hid_t loc, const char *name, float *data, int ndim, const int64_t *shape);
dt_status h5_read_f64(hid_t loc, const char *name, double *data, int ndim, const int64_t *shape);
dt_status h5_read_i32(hid_t loc, const char *name, int32_t *data, int ndim, const int64_t *shape);
dt_status h5_read_u64(hid_t loc, const char *name, uint64_t *data, int ndim, const int64_t *shape);
/* 0-d (scalar) float64 dataset. */
dt_status h5_read_scalar(hid_t loc, const char *name, double *value);
dt_status h5_write_scalar(hid_t loc, const char *name, double value);

#endif
