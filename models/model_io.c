/* Model files (SPEC §5): the root `format` attributes, /config (every key of
 * SPEC §4 as an attribute) and /params (one float32 dataset per parameter).
 *
 * Reading is strict, because a silently mis-loaded model wastes a training
 * run: every key must be present, every parameter of the config must be there
 * with its exact shape and a float type, and a dataset the config does not
 * explain is an error. Errors name the file and the key or dataset. */
#include "models/model_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "models/model_budget.h"

/* FNV-1a, 64-bit: simple, dependency-free, and every flipped bit changes it. */
uint64_t model_checksum(const void *data, size_t bytes) {
    const unsigned char *p = data;
    uint64_t hash = 14695981039346656037ULL;
    for (size_t i = 0; i < bytes; i++) {
        hash ^= p[i];
        hash *= 1099511628211ULL;
    }
    return hash;
}

dt_status model_h5_attach_checksum(hid_t loc, const char *dataset, const void *data, size_t bytes) {
    hid_t dset = H5Dopen2(loc, dataset, H5P_DEFAULT);
    if (dset < 0) return dt_errorf("cannot open dataset '%s' to attach its checksum", dataset);
    dt_status status = h5_write_attr_int(dset, "checksum", (int64_t)model_checksum(data, bytes));
    H5Dclose(dset);
    return status == DT_OK ? DT_OK : dt_error_context("%s", dataset);
}

dt_status model_h5_verify_checksum(hid_t loc, const char *dataset, const void *data, size_t bytes) {
    hid_t dset = H5Dopen2(loc, dataset, H5P_DEFAULT);
    if (dset < 0) return dt_errorf("cannot open dataset '%s' to verify its checksum", dataset);
    dt_status status = DT_OK;
    if (h5_has_attr(dset, "checksum")) {
        int64_t stored = 0;
        if (h5_read_attr_int(dset, "checksum", &stored) != DT_OK)
            status = dt_error_context("%s", dataset);
        else if ((uint64_t)stored != model_checksum(data, bytes))
            status = dt_errorf("dataset '%s' does not match its checksum (the file is corrupted)", dataset);
    }
    H5Dclose(dset);
    return status;
}

static const char *const checkpoint_format = "dbranch-checkpoint";
enum { CHECKPOINT_FORMAT_VERSION = 1 };

dt_status model_write_h5(const model *m, hid_t file) {
    if (h5_write_attr_string(file, "format", checkpoint_format) != DT_OK ||
        h5_write_attr_int(file, "format_version", CHECKPOINT_FORMAT_VERSION) != DT_OK)
        return DT_ERR;

    hid_t config = -1, params = -1;
    if (h5_group(file, "config", &config) != DT_OK) return DT_ERR;
    dt_status status = DT_OK;
    for (int i = 0; i < model_config_key_count() && status == DT_OK; i++) {
        const char *key = model_config_key(i);
        char text[MODEL_TEXT_MAX];
        status = model_config_get(&m->config, key, text, sizeof text);
        if (status != DT_OK) break;
        status = model_h5_write_attr_text(config, key, model_config_key_kind(i), text);
    }
    H5Gclose(config);
    if (status != DT_OK) return dt_error_context("/config");

    if (h5_group(file, "params", &params) != DT_OK) return DT_ERR;
    for (int i = 0; i < m->n_params && status == DT_OK; i++) {
        const dt_tensor *t = m->params[i].tensor;
        status = h5_write_f32(params, m->params[i].name, dt_f32(t), t->ndim, t->shape);
        if (status == DT_OK)
            status = model_h5_attach_checksum(params, m->params[i].name, dt_f32(t), (size_t)t->size * sizeof(float));
    }
    H5Gclose(params);
    return status == DT_OK ? DT_OK : dt_error_context("/params");
}

dt_status model_h5_write_attr_text(hid_t loc, const char *name, model_key_kind kind, const char *text) {
    switch (kind) {
    case MODEL_KEY_INT:
        return h5_write_attr_int(loc, name, strtoll(text, NULL, 10));
    case MODEL_KEY_REAL:
        return h5_write_attr_double(loc, name, strtod(text, NULL));
    case MODEL_KEY_WORD:
        return h5_write_attr_string(loc, name, text);
    }
    return dt_errorf("attribute '%s': unknown kind", name);
}

dt_status model_h5_attr_as_text(hid_t group, const char *key, char *text, size_t capacity) {
    hid_t attr = H5Aopen(group, key, H5P_DEFAULT);
    if (attr < 0) return dt_errorf("cannot open attribute '%s'", key);
    hid_t type = H5Aget_type(attr);
    H5T_class_t cls = H5Tget_class(type);
    H5Tclose(type);
    H5Aclose(attr);
    if (cls == H5T_STRING) return h5_read_attr_string(group, key, text, capacity);
    if (cls == H5T_INTEGER) {
        int64_t value = 0;
        if (h5_read_attr_int(group, key, &value) != DT_OK) return DT_ERR;
        snprintf(text, capacity, "%lld", (long long)value);
        return DT_OK;
    }
    if (cls == H5T_FLOAT) {
        double value = 0;
        if (h5_read_attr_double(group, key, &value) != DT_OK) return DT_ERR;
        snprintf(text, capacity, "%.17g", value); /* exact; an integer key rejects 12.5 */
        return DT_OK;
    }
    return dt_errorf("attribute '%s' is neither a number nor a string", key);
}

dt_status model_read_config_h5(hid_t file, const char *path_for_errors, model_config *config) {
    const char *path = path_for_errors ? path_for_errors : "(model file)";
    if (!h5_exists(file, "config")) return dt_errorf("%s: no /config group (not a model file?)", path);
    hid_t group = H5Gopen2(file, "config", H5P_DEFAULT);
    if (group < 0) return dt_errorf("%s: /config is not a group", path);

    /* Start from defaults and set every key: all keys must be present, so
     * the starting family does not matter. */
    model_config c = model_config_default(FAMILY_NANOGPT);
    dt_status status = DT_OK;
    for (int i = 0; i < model_config_key_count() && status == DT_OK; i++) {
        const char *key = model_config_key(i);
        char text[256];
        if (!h5_has_attr(group, key)) {
            /* Keys added after SPEC §4 (§6) load with their defaults from older files. */
            if (model_config_key_required(i)) status = dt_errorf("%s: /config is missing key '%s'", path, key);
        } else if (model_h5_attr_as_text(group, key, text, sizeof text) != DT_OK) {
            status = dt_error_context("%s: /config", path);
        } else if (model_config_set(&c, key, text) != DT_OK) {
            status = dt_error_context("%s: /config", path);
        }
    }
    H5Gclose(group);
    if (status != DT_OK) return status;
    if (model_config_validate(&c) != DT_OK) return dt_error_context("%s: /config", path);
    *config = c;
    return DT_OK;
}

/* Names of /params entries that the model does not have. */
typedef struct {
    const model *m;
    char unexpected[128];
} params_scan;

static herr_t find_unexpected(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    (void)group;
    (void)info;
    params_scan *scan = data;
    if (!model_find_param(scan->m, name)) {
        snprintf(scan->unexpected, sizeof scan->unexpected, "%s", name);
        return 1; /* stop at the first one */
    }
    return 0;
}

static dt_status read_param(hid_t params, const model_param *p, const char *path) {
    const dt_tensor *t = p->tensor;
    if (!h5_exists(params, p->name)) return dt_errorf("%s: missing dataset '/params/%s'", path, p->name);
    /* Only float data is a weight (float64 converts); integers are a different file's data. */
    hid_t dset = H5Dopen2(params, p->name, H5P_DEFAULT);
    if (dset < 0) return dt_errorf("%s: '/params/%s' is not a dataset", path, p->name);
    hid_t type = H5Dget_type(dset);
    H5T_class_t cls = H5Tget_class(type);
    H5Tclose(type);
    H5Dclose(dset);
    if (cls != H5T_FLOAT) return dt_errorf("%s: dataset '/params/%s' is not floating point", path, p->name);
    if (h5_read_f32(params, p->name, dt_f32(t), t->ndim, t->shape) != DT_OK ||
        model_h5_verify_checksum(params, p->name, dt_f32(t), (size_t)t->size * sizeof(float)) != DT_OK)
        return dt_error_context("%s: /params", path);
    return DT_OK;
}

/* Sums the values of every dataset directly under /params (H5Literate callback). */
static herr_t add_dataset_size(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    H5O_info_t object;
    if (H5Oget_info_by_name(group, name, &object, H5P_DEFAULT) < 0 || object.type != H5O_TYPE_DATASET) return 0;
    hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
    hid_t space = dset >= 0 ? H5Dget_space(dset) : -1;
    hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : 0;
    if (space >= 0) H5Sclose(space);
    if (dset >= 0) H5Dclose(dset);
    *(double *)data += n > 0 ? (double)n : 0.0;
    return 0;
}

/* Before anything is allocated: a /config describing far more parameters than
 * /params holds (vocab_size = 2^31 in a small file) would otherwise make the
 * loader allocate for it first; and the model must fit the memory budget. A
 * small excess (up to 2^20 values, 4 MiB) is let through so that the shape
 * check that follows can name the tensor that differs. */
static dt_status check_params_fit_config(hid_t file, const model_config *config, const char *path) {
    double stored = 0.0;
    hid_t params = h5_exists(file, "params") ? H5Gopen2(file, "params", H5P_DEFAULT) : -1;
    if (params < 0) return dt_errorf("%s: no /params group", path);
    hsize_t index = 0;
    herr_t rc = H5Literate(params, H5_INDEX_NAME, H5_ITER_NATIVE, &index, add_dataset_size, &stored);
    H5Gclose(params);
    if (rc < 0) return dt_errorf("%s: cannot list /params", path);
    const double wanted = model_config_param_count(config);
    if (wanted > stored + (double)(1 << 20))
        return dt_errorf("%s: /config describes %.0f parameter values but /params holds only %.0f (the file's "
                         "/config does not match its /params)",
                         path, wanted, stored);
    if (model_budget_check(config, MODEL_USE_WEIGHTS, 1, 0, 0) != DT_OK) return dt_error_context("%s", path);
    return DT_OK;
}

/* A NaN or Inf weight is refused at load, naming the tensor: eval would
 * print "loss nan", generate would emit garbage, resume would train on it. */
static dt_status check_finite(const model_param *p, const char *path) {
    const float *x = dt_f32(p->tensor);
    for (int64_t i = 0; i < p->tensor->size; i++)
        if (!isfinite(x[i]))
            return dt_errorf("%s: /params/%s holds a non-finite value (%g at index %lld)", path, p->name, (double)x[i],
                             (long long)i);
    return DT_OK;
}

dt_status model_read_h5(model *m, hid_t file, const char *path_for_errors) {
    const char *path = path_for_errors ? path_for_errors : "(model file)";
    memset(m, 0, sizeof *m);
    model_config config;
    if (model_read_config_h5(file, path, &config) != DT_OK) return DT_ERR;
    if (check_params_fit_config(file, &config, path) != DT_OK) return DT_ERR;
    if (model_create(m, &config) != DT_OK) return dt_error_context("%s", path);

    dt_status status = DT_OK;
    hid_t params = -1;
    if (!h5_exists(file, "params") || (params = H5Gopen2(file, "params", H5P_DEFAULT)) < 0) {
        status = dt_errorf("%s: no /params group", path);
    } else {
        for (int i = 0; i < m->n_params && status == DT_OK; i++) {
            status = read_param(params, &m->params[i], path);
            if (status == DT_OK) status = check_finite(&m->params[i], path);
        }
        if (status == DT_OK) {
            params_scan scan = {m, {0}};
            hsize_t index = 0;
            if (H5Literate(params, H5_INDEX_NAME, H5_ITER_NATIVE, &index, find_unexpected, &scan) < 0)
                status = dt_errorf("%s: cannot list /params", path);
            else if (scan.unexpected[0])
                status = dt_errorf("%s: unexpected dataset '/params/%s' (not a parameter of this %s model's config)",
                                   path, scan.unexpected, model_family_name(config.family));
        }
        H5Gclose(params);
    }
    if (status != DT_OK) model_free(m);
    return status;
}

static dt_status write_model_file(hid_t file, const void *m) { return model_write_h5(m, file); }

/* Through core/h5's checked writer: PATH.tmp, fsync, rename; a crash mid-save never leaves a half-written PATH. */
dt_status model_save(const model *m, const char *path) { return h5_write_file(path, write_model_file, m); }

dt_status model_check_format_h5(hid_t file, const char *path_for_errors) {
    const char *path = path_for_errors ? path_for_errors : "(model file)";
    char format[128] = "";
    if (!h5_has_attr(file, "format")) return dt_errorf("%s: not a dbranch model (no 'format' attribute)", path);
    if (h5_read_attr_string(file, "format", format, sizeof format) != DT_OK) return dt_error_context("%s", path);
    if (strcmp(format, checkpoint_format) != 0)
        return dt_errorf("%s: format is '%s', expected '%s'%s", path, format, checkpoint_format,
                         !strcmp(format, "dbranch-tokens") ? " (this is a token dataset, not a model)" : "");
    int64_t version = 0;
    if (h5_read_attr_int(file, "format_version", &version) != DT_OK) return dt_error_context("%s", path);
    if (version != CHECKPOINT_FORMAT_VERSION)
        return dt_errorf("%s: format_version %lld is not supported (this dbranch reads version %d)", path,
                         (long long)version, CHECKPOINT_FORMAT_VERSION);
    return DT_OK;
}

dt_status model_load(model *m, const char *path) {
    memset(m, 0, sizeof *m);
    hid_t file;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    dt_status status = model_check_format_h5(file, path);
    if (status == DT_OK) status = model_read_h5(m, file, path);
    H5Fclose(file);
    return status;
}

dt_status model_load_config(model_config *config, const char *path) {
    hid_t file;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    dt_status status = model_check_format_h5(file, path);
    if (status == DT_OK) status = model_read_config_h5(file, path, config);
    H5Fclose(file);
    return status;
}
