/* HDF5 helpers: one-line errors, shape checks, type conversion on read. */
#include "core/h5.h"
#include "core/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* HDF5 prints its error stack to stderr by default; we report our own line.
 *
 * H5dont_atexit: when H5Fclose fails to flush (a full disk), HDF5 1.10 frees
 * the file but leaves its id registered, and the library's exit-time cleanup
 * (H5_term_library -> H5F__close_cb) then closes that id again: a use after
 * free and a segfault after the error was reported. No id of ours is open at
 * that point (h5_write_file closes every one on every path); the process's
 * exit releases what HDF5 holds, so skipping its atexit cleanup loses nothing. */
static void silence_hdf5(void) {
    static int done = 0;
    if (!done) {
        H5dont_atexit();
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        done = 1;
    }
}

/* errno's text when the failed call left one, else the fallback. */
static const char *reason(int saved_errno, const char *fallback) {
    return saved_errno ? strerror(saved_errno) : fallback;
}

dt_status h5_open(const char *path, int writable, hid_t *file) {
    silence_hdf5();
    if (access(path, F_OK) != 0) return dt_errorf("%s: no such file", path);
    if (dt_check_input_file(path) != DT_OK) return DT_ERR;
    if (H5Fis_hdf5(path) <= 0) return dt_errorf("%s: not an HDF5 file (or truncated)", path);
    *file = H5Fopen(path, writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*file < 0) return dt_errorf("%s: cannot open as HDF5 (truncated or corrupted?)", path);
    return DT_OK;
}

dt_status h5_create(const char *path, hid_t *file) {
    silence_hdf5();
    /* HDF5 does not say why a create failed: try the open ourselves first. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return dt_errorf("%s: cannot create file (%s)", path, strerror(errno));
    close(fd);
    errno = 0;
    *file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (*file < 0) return dt_errorf("%s: cannot create file (%s)", path, reason(errno, "HDF5 refused it"));
    return DT_OK;
}

/* fsync a written file (and best effort its directory, so the rename is durable too). */
static dt_status sync_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int saved = errno;
        if (fd >= 0) close(fd);
        return dt_errorf("%s: cannot sync to disk (%s)", path, strerror(saved));
    }
    close(fd);
    return DT_OK;
}

static void sync_parent_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

dt_status h5_write_file(const char *path, h5_file_writer write, const void *ctx) {
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp) return dt_errorf("%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp", path);
    hid_t file = H5I_INVALID_HID;
    dt_status status = h5_create(tmp, &file);
    if (status == DT_OK) {
        errno = 0;
        status = write(file, ctx);
        int saved = errno;
        if (status != DT_OK && (saved == ENOSPC || saved == EDQUOT || saved == EIO || saved == EFBIG)) {
            char message[512]; /* HDF5 says only "cannot write dataset": add the cause */
            snprintf(message, sizeof message, "%s", dt_error_message());
            dt_errorf("%s (%s)", message, strerror(saved));
        }
        errno = 0;
        herr_t closed = H5Fclose(file); /* always closed, even after a failed write */
        saved = errno;
        if (status == DT_OK && closed < 0)
            status = dt_errorf("cannot write %s (%s)", tmp, reason(saved, "HDF5 could not flush it"));
    }
    if (status == DT_OK) status = sync_file(tmp);
    if (status == DT_OK && rename(tmp, path) != 0)
        status = dt_errorf("cannot rename %s to %s (%s)", tmp, path, strerror(errno));
    if (status == DT_OK) sync_parent_dir(path);
    if (status != DT_OK) {
        unlink(tmp); /* nothing partial, not even a 0-byte .tmp, stays behind */
        dt_error_context("%s", path);
    }
    free(tmp);
    return status;
}

dt_status h5_close(hid_t file, const char *path) {
    errno = 0;
    if (H5Fclose(file) < 0) return dt_errorf("%s: cannot write (%s)", path, reason(errno, "HDF5 could not flush it"));
    return DT_OK;
}

int h5_exists(hid_t loc, const char *path) {
    silence_hdf5();
    /* H5Lexists needs every intermediate link to exist: walk the path. */
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf; (p = strchr(p + 1, '/')) != NULL;) {
        *p = '\0';
        if (H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return 0;
        *p = '/';
    }
    return H5Lexists(loc, buf, H5P_DEFAULT) > 0;
}

dt_status h5_group(hid_t parent, const char *name, hid_t *group) {
    silence_hdf5();
    if (h5_exists(parent, name))
        *group = H5Gopen2(parent, name, H5P_DEFAULT);
    else
        *group = H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (*group < 0) return dt_errorf("cannot open or create group '%s'", name);
    return DT_OK;
}

static dt_status write_attr(hid_t loc, const char *name, hid_t type, const void *value) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = attr < 0 ? -1 : H5Awrite(attr, type, value);
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return rc < 0 ? dt_errorf("cannot write attribute '%s'", name) : DT_OK;
}

dt_status h5_write_attr_int(hid_t loc, const char *name, int64_t value) {
    return write_attr(loc, name, H5T_NATIVE_INT64, &value);
}

dt_status h5_write_attr_double(hid_t loc, const char *name, double value) {
    return write_attr(loc, name, H5T_NATIVE_DOUBLE, &value);
}

dt_status h5_write_attr_string(hid_t loc, const char *name, const char *value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value) > 0 ? strlen(value) : 1);
    H5Tset_strpad(type, H5T_STR_NULLTERM);
    dt_status rc = write_attr(loc, name, type, value);
    H5Tclose(type);
    return rc;
}

int h5_has_attr(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

static dt_status read_attr_numeric(hid_t loc, const char *name, hid_t mem_type, void *value) {
    if (H5Aexists(loc, name) <= 0) return dt_errorf("missing attribute '%s'", name);
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    if (attr < 0) return dt_errorf("cannot open attribute '%s'", name);
    hid_t type = H5Aget_type(attr);
    H5T_class_t cls = H5Tget_class(type);
    hid_t space = H5Aget_space(attr);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    herr_t rc = -1;
    if ((cls == H5T_INTEGER || cls == H5T_FLOAT) && n == 1) rc = H5Aread(attr, mem_type, value);
    H5Sclose(space);
    H5Tclose(type);
    H5Aclose(attr);
    if (rc < 0) return dt_errorf("attribute '%s' is not a single number", name);
    return DT_OK;
}

dt_status h5_read_attr_int(hid_t loc, const char *name, int64_t *value) {
    /* An integer attribute reads exactly (a 64-bit checksum does not survive a trip through double). */
    hid_t attr = H5Aexists(loc, name) > 0 ? H5Aopen(loc, name, H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t type = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    if (cls == H5T_INTEGER) return read_attr_numeric(loc, name, H5T_NATIVE_INT64, value);
    double as_double = 0;
    /* Read as double first so that 3.5 is rejected rather than truncated. */
    if (read_attr_numeric(loc, name, H5T_NATIVE_DOUBLE, &as_double) != DT_OK) return DT_ERR;
    /* Range first: converting a double outside int64 (or NaN) is undefined behaviour (found by tests/fuzz). */
    if (!(as_double >= -9223372036854775808.0 && as_double < 9223372036854775808.0))
        return dt_errorf("attribute '%s' = %g is not an integer in range", name, as_double);
    if (as_double != (double)(int64_t)as_double)
        return dt_errorf("attribute '%s' = %g is not an integer", name, as_double);
    return read_attr_numeric(loc, name, H5T_NATIVE_INT64, value);
}

dt_status h5_read_attr_double(hid_t loc, const char *name, double *value) {
    return read_attr_numeric(loc, name, H5T_NATIVE_DOUBLE, value);
}

dt_status h5_read_attr_string(hid_t loc, const char *name, char *value, size_t capacity) {
    if (H5Aexists(loc, name) <= 0) return dt_errorf("missing attribute '%s'", name);
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = H5Aget_type(attr);
    dt_status status = DT_OK;
    if (H5Tget_class(type) != H5T_STRING) {
        status = dt_errorf("attribute '%s' is not a string", name);
    } else if (H5Tis_variable_str(type) > 0) {
        char *text = NULL;
        hid_t mem = H5Tcopy(H5T_C_S1);
        H5Tset_size(mem, H5T_VARIABLE);
        H5Tset_cset(mem, H5Tget_cset(type)); /* HDF5 does not convert UTF-8 <-> ASCII (h5py writes UTF-8) */
        if (H5Aread(attr, mem, &text) < 0 || !text) {
            status = dt_errorf("cannot read attribute '%s'", name);
        } else {
            snprintf(value, capacity, "%s", text);
            H5free_memory(text);
        }
        H5Tclose(mem);
    } else {
        size_t size = H5Tget_size(type);
        char buf[4096];
        if (size >= sizeof buf) {
            status = dt_errorf("attribute '%s' is too long", name);
        } else {
            hid_t mem = H5Tcopy(H5T_C_S1);
            H5Tset_size(mem, size + 1);
            H5Tset_strpad(mem, H5T_STR_NULLTERM);
            H5Tset_cset(mem, H5Tget_cset(type));
            memset(buf, 0, sizeof buf);
            if (H5Aread(attr, mem, buf) < 0)
                status = dt_errorf("cannot read attribute '%s'", name);
            else
                snprintf(value, capacity, "%s", buf);
            H5Tclose(mem);
        }
    }
    H5Tclose(type);
    H5Aclose(attr);
    return status;
}

static dt_status write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *data, int ndim,
                               const int64_t *shape) {
    hsize_t dims[8];
    for (int i = 0; i < ndim; i++)
        dims[i] = (hsize_t)shape[i];
    if (h5_exists(loc, name)) H5Ldelete(loc, name, H5P_DEFAULT);
    hid_t space = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dset = H5Dcreate2(loc, name, file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = dset < 0 ? -1 : H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (dset >= 0) H5Dclose(dset);
    H5Pclose(lcpl);
    H5Sclose(space);
    return rc < 0 ? dt_errorf("cannot write dataset '%s'", name) : DT_OK;
}

dt_status h5_write_f32(hid_t loc, const char *name, const float *data, int ndim, const int64_t *shape) {
    return write_dataset(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, ndim, shape);
}

dt_status h5_write_f64(hid_t loc, const char *name, const double *data, int ndim, const int64_t *shape) {
    return write_dataset(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data, ndim, shape);
}

dt_status h5_write_i32(hid_t loc, const char *name, const int32_t *data, int ndim, const int64_t *shape) {
    return write_dataset(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, data, ndim, shape);
}

dt_status h5_write_u64(hid_t loc, const char *name, const uint64_t *data, int ndim, const int64_t *shape) {
    return write_dataset(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, data, ndim, shape);
}

dt_status h5_write_scalar(hid_t loc, const char *name, double value) {
    return write_dataset(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, 0, NULL);
}

dt_status h5_dataset_shape(hid_t loc, const char *name, int *ndim, int64_t *shape) {
    silence_hdf5();
    if (!h5_exists(loc, name)) return dt_errorf("missing dataset '%s'", name);
    hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT);
    if (dset < 0) return dt_errorf("'%s' is not a dataset", name);
    hid_t space = H5Dget_space(dset);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[32];
    dt_status status = DT_OK;
    if (rank < 0 || rank > 4) {
        status = dt_errorf("dataset '%s' has rank %d (at most 4 supported)", name, rank);
    } else {
        H5Sget_simple_extent_dims(space, dims, NULL);
        *ndim = rank;
        for (int i = 0; i < rank; i++)
            shape[i] = (int64_t)dims[i];
    }
    H5Sclose(space);
    H5Dclose(dset);
    return status;
}

static dt_status read_dataset(hid_t loc, const char *name, hid_t mem_type, H5T_class_t want_class, void *data, int ndim,
                              const int64_t *shape) {
    int found_ndim = 0;
    int64_t found[4] = {0};
    if (h5_dataset_shape(loc, name, &found_ndim, found) != DT_OK) return DT_ERR;
    int same = found_ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = found[i] == shape[i];
    if (!same) {
        char want[96], got[96];
        int n = snprintf(want, sizeof want, "[");
        for (int i = 0; i < ndim; i++)
            n += snprintf(want + n, sizeof want - n, i ? ", %lld" : "%lld", (long long)shape[i]);
        snprintf(want + n, sizeof want - n, "]");
        n = snprintf(got, sizeof got, "[");
        for (int i = 0; i < found_ndim; i++)
            n += snprintf(got + n, sizeof got - n, i ? ", %lld" : "%lld", (long long)found[i]);
        snprintf(got + n, sizeof got - n, "]");
        return dt_errorf("dataset '%s' has shape %s, expected %s", name, got, want);
    }
    hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT);
    hid_t type = H5Dget_type(dset);
    H5T_class_t cls = H5Tget_class(type);
    H5Tclose(type);
    dt_status status = DT_OK;
    if (cls != want_class && !(want_class == H5T_FLOAT && cls == H5T_INTEGER))
        status = dt_errorf("dataset '%s' has the wrong type (expected %s)", name,
                           want_class == H5T_FLOAT ? "float" : "integer");
    else if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        status = dt_errorf("cannot read dataset '%s' (truncated file?)", name);
    H5Dclose(dset);
    return status;
}

dt_status h5_read_f32(hid_t loc, const char *name, float *data, int ndim, const int64_t *shape) {
    return read_dataset(loc, name, H5T_NATIVE_FLOAT, H5T_FLOAT, data, ndim, shape);
}

dt_status h5_read_f64(hid_t loc, const char *name, double *data, int ndim, const int64_t *shape) {
    return read_dataset(loc, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, data, ndim, shape);
}

dt_status h5_read_i32(hid_t loc, const char *name, int32_t *data, int ndim, const int64_t *shape) {
    return read_dataset(loc, name, H5T_NATIVE_INT32, H5T_INTEGER, data, ndim, shape);
}

dt_status h5_read_u64(hid_t loc, const char *name, uint64_t *data, int ndim, const int64_t *shape) {
    return read_dataset(loc, name, H5T_NATIVE_UINT64, H5T_INTEGER, data, ndim, shape);
}

dt_status h5_read_scalar(hid_t loc, const char *name, double *value) {
    return read_dataset(loc, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, value, 0, NULL);
}
