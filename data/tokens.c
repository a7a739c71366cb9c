/* Token dataset files (SPEC §5; data/tokens.h).
 *
 * Layout: root attributes format = "dbranch-tokens", tokenizer, vocab_size,
 * source; contiguous 1-D datasets /train and /val (uint16 when
 * vocab_size <= 65536, else uint32); BPE merges under /tokenizer. Files are
 * written to PATH.tmp and renamed, so a crash never leaves a half-written PATH.
 * Reads are hyperslabs of [start, start + count): the loader never holds a
 * split in memory, and every token read is checked against vocab_size. */
#include "data/tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"

static const char *const split_names[2] = {"/train", "/val"};

static dt_status check_tokens(const int32_t *tokens, int64_t n, int64_t vocab_size, const char *split) {
    if (n < 0 || (n > 0 && !tokens)) return dt_errorf("%s: bad token array (%lld tokens)", split, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab_size)
            return dt_errorf("%s: token %d at position %lld is outside the vocabulary [0, %lld)", split, tokens[i],
                             (long long)i, (long long)vocab_size);
    return DT_OK;
}

static dt_status write_split(hid_t file, const char *name, const int32_t *tokens, int64_t n, hid_t file_type) {
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dataset = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    static const int32_t empty[1] = {0}; /* HDF5 wants a buffer even for 0 tokens */
    herr_t rc =
        dataset < 0 ? -1 : H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, n ? tokens : empty);
    if (dataset >= 0) H5Dclose(dataset);
    H5Sclose(space);
    return rc < 0 ? dt_errorf("cannot write dataset '%s' (%lld tokens)", name, (long long)n) : DT_OK;
}

typedef struct token_file_parts {
    const data_tokenizer *tok;
    const int32_t *train;
    int64_t n_train;
    const int32_t *val;
    int64_t n_val;
    const char *source;
    int64_t record_len;       /* 0: streams */
    const int32_t *answer[2]; /* record files: the answer marks of each split */
} token_file_parts;

static const char *const answer_names[2] = {"/train_answer", "/val_answer"};

static dt_status write_token_file(hid_t file, const void *ctx) {
    const token_file_parts *p = ctx;
    hid_t file_type = p->tok->vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    dt_status status = h5_write_attr_string(file, "format", "dbranch-tokens");
    if (status == DT_OK) status = data_tokenizer_write_h5(p->tok, file);
    if (status == DT_OK)
        status = h5_write_attr_string(file, "source", p->source && p->source[0] ? p->source : "unknown");
    if (status == DT_OK) status = write_split(file, "/train", p->train, p->n_train, file_type);
    if (status == DT_OK) status = write_split(file, "/val", p->val, p->n_val, file_type);
    if (status == DT_OK && p->record_len) status = h5_write_attr_int(file, "record_len", p->record_len);
    for (int s = 0; s < 2 && status == DT_OK && p->record_len; s++) {
        int64_t shape[1] = {s ? p->n_val : p->n_train};
        status = h5_write_i32(file, answer_names[s], p->answer[s], 1, shape);
    }
    return status;
}

dt_status data_tokens_write(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                            const int32_t *val, int64_t n_val, const char *source) {
    if (!tok || !tok->token_length) return dt_errorf("%s: tokenizer is not initialised", path);
    if (strlen(path) >= 4096) return dt_errorf("token file path is too long (%zu bytes)", strlen(path));
    if (check_tokens(train, n_train, tok->vocab_size, "/train") != DT_OK ||
        check_tokens(val, n_val, tok->vocab_size, "/val") != DT_OK)
        return dt_error_context("%s", path);

    const token_file_parts parts = {tok, train, n_train, val, n_val, source, 0, {NULL, NULL}};
    return h5_write_file(path, write_token_file, &parts);
}

dt_status data_tokens_write_records(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                                    const int32_t *val, int64_t n_val, const char *source, int64_t record_len,
                                    const int32_t *train_answer, const int32_t *val_answer) {
    if (!tok || !tok->token_length) return dt_errorf("%s: tokenizer is not initialised", path);
    if (record_len < 2 || n_train % record_len || n_val % record_len || !train_answer || !val_answer)
        return dt_errorf("%s: splits of %lld and %lld tokens are not whole records of %lld tokens with answer marks",
                         path, (long long)n_train, (long long)n_val, (long long)record_len);
    if (check_tokens(train, n_train, tok->vocab_size, "/train") != DT_OK ||
        check_tokens(val, n_val, tok->vocab_size, "/val") != DT_OK)
        return dt_error_context("%s", path);
    const token_file_parts parts = {tok, train, n_train, val, n_val, source, record_len, {train_answer, val_answer}};
    return h5_write_file(path, write_token_file, &parts);
}

/* A record file's record_len and answer datasets, checked against the splits. */
static dt_status open_records(data_tokens *tokens) {
    tokens->record_len = 0;
    if (h5_has_attr(tokens->file, "record_len")) {
        if (h5_read_attr_int(tokens->file, "record_len", &tokens->record_len) != DT_OK) return DT_ERR;
        const int64_t R = tokens->record_len;
        if (R < 2) return dt_errorf("attribute record_len = %lld must be >= 2", (long long)R);
        for (int s = 0; s < 2; s++)
            if (tokens->split_length[s] % R)
                return dt_errorf("%s holds %lld tokens, not a whole number of records of record_len = %lld",
                                 split_names[s], (long long)tokens->split_length[s], (long long)R);
    }
    for (int s = 0; s < 2; s++) {
        tokens->has_answer[s] = h5_exists(tokens->file, answer_names[s]);
        if (!tokens->has_answer[s]) continue;
        int ndim = 0;
        int64_t shape[4] = {0};
        if (h5_dataset_shape(tokens->file, answer_names[s], &ndim, shape) != DT_OK) return DT_ERR;
        if (ndim != 1 || shape[0] != tokens->split_length[s])
            return dt_errorf("dataset '%s' must be 1-D of %lld marks, one per token of %s", answer_names[s],
                             (long long)tokens->split_length[s], split_names[s]);
    }
    return DT_OK;
}

dt_status data_tokens_read_answers(data_tokens *tokens, data_split split, int32_t **answer) {
    *answer = NULL;
    if (split != SPLIT_TRAIN && split != SPLIT_VAL) return dt_errorf("%s: unknown split %d", tokens->path, (int)split);
    if (!tokens->has_answer[split])
        return dt_errorf("%s has no %s dataset (answer marks come with record files: dbranch prepare --synthetic)",
                         tokens->path, answer_names[split]);
    int64_t n = tokens->split_length[split];
    int32_t *marks = malloc((size_t)(n ? n : 1) * sizeof *marks);
    if (!marks) return dt_errorf("%s: out of memory for %lld answer marks", tokens->path, (long long)n);
    int64_t shape[1] = {n};
    if (h5_read_i32(tokens->file, answer_names[split], marks, 1, shape) != DT_OK) {
        free(marks);
        return dt_error_context("%s", tokens->path);
    }
    for (int64_t i = 0; i < n; i++)
        if (marks[i] != 0 && marks[i] != 1) {
            const int32_t bad = marks[i];
            free(marks);
            return dt_errorf("%s: %s[%lld] = %d (answer marks are 0 or 1)", tokens->path, answer_names[split],
                             (long long)i, bad);
        }
    *answer = marks;
    return DT_OK;
}

void data_tokens_close(data_tokens *tokens) {
    if (!tokens) return;
    for (int s = 0; s < 2; s++)
        if (tokens->split_dataset[s] > 0) H5Dclose(tokens->split_dataset[s]);
    if (tokens->file > 0) H5Fclose(tokens->file);
    data_tokenizer_free(&tokens->tokenizer);
    memset(tokens, 0, sizeof *tokens);
    tokens->file = tokens->split_dataset[0] = tokens->split_dataset[1] = H5I_INVALID_HID;
}

/* Opens /train or /val and checks it is a 1-D unsigned integer dataset of at most 32 bits. */
static dt_status open_split(data_tokens *tokens, int s) {
    const char *name = split_names[s];
    if (!h5_exists(tokens->file, name)) return dt_errorf("missing dataset '%s'", name);
    hid_t dataset = H5Dopen2(tokens->file, name, H5P_DEFAULT);
    if (dataset < 0) return dt_errorf("'%s' is not a dataset", name);
    tokens->split_dataset[s] = dataset;
    hid_t type = H5Dget_type(dataset);
    size_t size = type >= 0 ? H5Tget_size(type) : 0;
    int ok = type >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_NONE && size <= 4;
    if (type >= 0) H5Tclose(type);
    if (!ok) return dt_errorf("dataset '%s' must hold unsigned integers of at most 32 bits", name);
    /* Reads use the native type of this width; uint8 (which we never write) is converted to uint16. */
    tokens->split_token_size[s] = size <= 2 ? 2 : 4;
    hid_t space = H5Dget_space(dataset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t dims[1] = {0};
    if (rank == 1) H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0) H5Sclose(space);
    if (rank != 1) return dt_errorf("dataset '%s' has rank %d, expected 1", name, rank);
    tokens->split_length[s] = (int64_t)dims[0];
    return DT_OK;
}

static dt_status scan_splits(data_tokens *tokens);

dt_status data_tokens_open(data_tokens *tokens, const char *path) {
    memset(tokens, 0, sizeof *tokens);
    tokens->file = tokens->split_dataset[0] = tokens->split_dataset[1] = H5I_INVALID_HID;
    if (strlen(path) >= sizeof tokens->path) return dt_errorf("token file path is too long (%zu bytes)", strlen(path));
    snprintf(tokens->path, sizeof tokens->path, "%s", path);
    if (h5_open(path, 0, &tokens->file) != DT_OK) return DT_ERR; /* the message names the file */

    char format[256];
    dt_status status = DT_OK;
    if (!h5_has_attr(tokens->file, "format"))
        status = dt_errorf("not a token dataset (no 'format' attribute)");
    else if (h5_read_attr_string(tokens->file, "format", format, sizeof format) != DT_OK)
        status = DT_ERR;
    else if (strcmp(format, "dbranch-tokens") != 0)
        status = dt_errorf("format is '%s', expected 'dbranch-tokens'", format);
    if (status != DT_OK) {
        data_tokens_close(tokens);
        return dt_error_context("%s", path);
    }
    if (data_tokenizer_read_h5(&tokens->tokenizer, tokens->file, path) != DT_OK) { /* names the file itself */
        data_tokens_close(tokens);
        return DT_ERR;
    }
    tokens->vocab_size = tokens->tokenizer.vocab_size;
    for (int s = 0; s < 2 && status == DT_OK; s++)
        status = open_split(tokens, s);
    if (status == DT_OK) status = open_records(tokens);
    if (status != DT_OK) {
        data_tokens_close(tokens);
        return dt_error_context("%s", path);
    }
    if (scan_splits(tokens) != DT_OK) { /* names the file itself */
        data_tokens_close(tokens);
        return DT_ERR;
    }
    return DT_OK;
}

/* out[count] = split[start .. start + count) as stored (uint32 values in int32 slots), unchecked. */
static dt_status read_raw(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out) {
    if (split != SPLIT_TRAIN && split != SPLIT_VAL) return dt_errorf("%s: unknown split %d", tokens->path, (int)split);
    const char *name = split_names[split];
    int64_t length = tokens->split_length[split];
    if (tokens->split_dataset[split] <= 0) return dt_errorf("%s: token file is not open", tokens->path);
    if (start < 0 || count < 0 || start > length || count > length - start)
        return dt_errorf("%s: read of %s[%lld, %lld) is outside the split of %lld tokens", tokens->path, name,
                         (long long)start, (long long)(start + count), (long long)length);
    if (count == 0) return DT_OK;
    hid_t dataset = tokens->split_dataset[split];
    hid_t file_space = H5Dget_space(dataset);
    hsize_t offset[1] = {(hsize_t)start}, extent[1] = {(hsize_t)count};
    hid_t memory_space = H5Screate_simple(1, extent, NULL);
    /* Reading the stored width (no type conversion) is ~20x faster per window than
     * converting to int32 inside HDF5, which sets up a conversion buffer on every call. */
    int narrow = tokens->split_token_size[split] == 2;
    hid_t memory_type = narrow ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
    herr_t rc = file_space < 0 || memory_space < 0
                    ? -1
                    : H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, NULL, extent, NULL);
    if (rc >= 0) rc = H5Dread(dataset, memory_type, memory_space, file_space, H5P_DEFAULT, out);
    if (memory_space >= 0) H5Sclose(memory_space);
    if (file_space >= 0) H5Sclose(file_space);
    if (rc < 0)
        return dt_errorf("%s: cannot read %s[%lld, %lld) (truncated file?)", tokens->path, name, (long long)start,
                         (long long)(start + count));
    /* Widen in place from the end: out[i] covers uint16 slots 2i and 2i+1 >= i, already consumed. */
    if (narrow)
        for (int64_t i = count - 1; i >= 0; i--) {
            uint16_t token;
            memcpy(&token, (const uint8_t *)out + 2 * i, sizeof token);
            out[i] = token;
        }
    return DT_OK;
}

/* Every token of out[count] (read from split at start) is < vocab_size, or an error naming the first that is not. */
static dt_status check_range(const data_tokens *tokens, data_split split, int64_t start, int64_t count,
                             const int32_t *out, const char *when) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t token;
        memcpy(&token, &out[i], sizeof token); /* as stored: a uint32 above INT32_MAX stays visible */
        if ((int64_t)token >= tokens->vocab_size)
            return dt_errorf("%s: token %u at %s[%lld] is >= vocab_size %lld%s", tokens->path, token,
                             split_names[split], (long long)(start + i), (long long)tokens->vocab_size, when);
    }
    return DT_OK;
}

/* Checks every token of both splits once, at open, in chunks (files larger
 * than memory work): an out-of-range id is found before a run starts, not
 * hours in when a window happens to hold it. */
static dt_status scan_splits(data_tokens *tokens) {
    enum { CHUNK = 1 << 20 };
    int32_t *buffer = malloc(CHUNK * sizeof *buffer);
    if (!buffer) return dt_errorf("%s: out of memory checking the tokens", tokens->path);
    dt_status status = DT_OK;
    for (int s = 0; s < 2 && status == DT_OK; s++)
        for (int64_t start = 0; start < tokens->split_length[s] && status == DT_OK; start += CHUNK) {
            int64_t count = tokens->split_length[s] - start < CHUNK ? tokens->split_length[s] - start : CHUNK;
            status = read_raw(tokens, (data_split)s, start, count, buffer);
            if (status == DT_OK)
                status = check_range(tokens, (data_split)s, start, count, buffer, " (found when the file was opened)");
        }
    free(buffer);
    return status;
}

dt_status data_tokens_read(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out) {
    if (read_raw(tokens, split, start, count, out) != DT_OK) return DT_ERR;
    /* Cheap next to the read, and it keeps a file changed after opening from reaching the model. */
    return check_range(tokens, split, start, count, out, "");
}
