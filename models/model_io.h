/* Model files (SPEC §5): /config attributes and /params datasets in HDF5.
 * Loading checks the format attribute and every name, shape and dtype against
 * the config, with errors naming the file and dataset. */
#ifndef MODEL_MODEL_IO_H
#define MODEL_MODEL_IO_H

#include <hdf5.h>

#include "models/model.h"

/* Write /config and /params into an open file (the training layer adds /optim and /train). */
dt_status model_write_h5(const model *m, hid_t file);
/* Read /config from an open file into *config (validated). */
dt_status model_read_config_h5(hid_t file, const char *path_for_errors, model_config *config);
/* Create *m from the file's /config and load its /params. */
dt_status model_read_h5(model *m, hid_t file, const char *path_for_errors);

/* Whole-file helpers: save writes PATH.tmp then renames it over PATH. */
dt_status model_save(const model *m, const char *path);
dt_status model_load(model *m, const char *path);

/* Checks the root attributes format = "dbranch-checkpoint" and format_version
 * of an open file (a token dataset or another HDF5 file is a clear error). */
dt_status model_check_format_h5(hid_t file, const char *path_for_errors);
/* Only the validated /config of a model file (no parameters are allocated). */
dt_status model_load_config(model_config *config, const char *path);

/* Integrity of written data: HDF5 checks its own metadata but not the bytes
 * of a dataset, so a flipped byte in a weight or optimizer moment would load
 * silently. Writers attach a 64-bit FNV-1a checksum of the dataset's bytes as
 * its attribute "checksum"; readers verify it when present (files written by
 * other tools, like the reference files, carry none and are read as they are).
 * Errors name the dataset; the caller adds the file. */
uint64_t model_checksum(const void *data, size_t bytes);

/* Config values as typed attributes (/config, /train/run_config): text in the
 * form model_config_get() gives, written as int64, float64 or a string; and
 * read back as that text whatever numeric type a writer used (int64, int32,
 * float64 of an integer value; reals exactly, "%.17g"). */
dt_status model_h5_write_attr_text(hid_t loc, const char *name, model_key_kind kind, const char *text);
dt_status model_h5_attr_as_text(hid_t loc, const char *name, char *text, size_t capacity);
dt_status model_h5_attach_checksum(hid_t loc, const char *dataset, const void *data, size_t bytes);
dt_status model_h5_verify_checksum(hid_t loc, const char *dataset, const void *data, size_t bytes);

#endif
