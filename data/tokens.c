/* Token dataset files (SPEC §5; data/tokens.h).
 *
 * Layout: root attributes format = "dbranch-tokens", tokenizer, vocab_size,
 * source; contiguous 1-D datasets /train and /val (uint16 when
 * vocab_size <= 65536, else uint32); BPE merges under /tokenizer. Record
 * files add the record_len attribute, int32 answer marks and, when labelled,
 * /train_target and /val_target stored like the splits. Files are
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
    const data_record_layout *records; /* NULL: streams */
} token_file_parts;

static const char *const answer_names[2] = {"/train_answer", "/val_answer"};
static const char *const target_names[2] = {"/train_target", "/val_target"};

static dt_status write_token_file(hid_t file, const void *ctx) {
    const token_file_parts *p = ctx;
    hid_t file_type = p->tok->vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    dt_status status = h5_write_attr_string(file, "format", "dbranch-tokens");
    if (status == DT_OK) status = data_tokenizer_write_h5(p->tok, file);
    if (status == DT_OK)
        status = h5_write_attr_string(file, "source", p->source && p->source[0] ? p->source : "unknown");
    if (status == DT_OK) status = write_split(file, "/train", p->train, p->n_train, file_type);
    if (status == DT_OK) status = write_split(file, "/val", p->val, p->n_val, file_type);
    if (!p->records) return status;
    if (status == DT_OK) status = h5_write_attr_int(file, "record_len", p->records->record_len);
    for (int s = 0; s < 2 && status == DT_OK; s++) {
        int64_t shape[1] = {s ? p->n_val : p->n_train};
        status = h5_write_i32(file, answer_names[s], p->records->answer[s], 1, shape);
        if (status == DT_OK && p->records->target[s])
            status = write_split(file, target_names[s], p->records->target[s], shape[0], file_type);
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

    const token_file_parts parts = {tok, train, n_train, val, n_val, source, NULL};
    return h5_write_file(path, write_token_file, &parts);
}

dt_status data_tokens_write_records(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                                    const int32_t *val, int64_t n_val, const char *source,
                                    const data_record_layout *layout) {
    if (!tok || !tok->token_length) return dt_errorf("%s: tokenizer is not initialised", path);
    const int64_t R = layout->record_len;
    if (R < 2 || n_train % R || n_val % R || !layout->answer[0] || !layout->answer[1])
        return dt_errorf("%s: splits of %lld and %lld tokens are not whole records of %lld tokens with answer marks",
                         path, (long long)n_train, (long long)n_val, (long long)R);
    if (!layout->target[0] != !layout->target[1])
        return dt_errorf("%s: either both splits or neither have labelled targets", path);
    if (check_tokens(train, n_train, tok->vocab_size, "/train") != DT_OK ||
        check_tokens(val, n_val, tok->vocab_size, "/val") != DT_OK ||
        (layout->target[0] && check_tokens(layout->target[0], n_train, tok->vocab_size, target_names[0]) != DT_OK) ||
        (layout->target[1] && check_tokens(layout->target[1], n_val, tok->vocab_size, target_names[1]) != DT_OK))
        return dt_error_context("%s", path);
    const token_file_parts parts = {tok, train, n_train, val, n_val, source, layout};
    return h5_write_file(path, write_token_file, &parts);
}

static dt_status open_ids(hid_t file, const char *name, hid_t *dataset_out, int *token_size, int64_t *length);

/* A record file's record_len, answer and target datasets, checked against the splits. */
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
    for (int s = 0; s < 2; s++) {
        tokens->has_target[s] = h5_exists(tokens->file, target_names[s]);
        if (!tokens->has_target[s]) continue;
        if (!tokens->record_len)
            return dt_errorf("dataset '%s' needs the record_len attribute (targets come with record files)",
                             target_names[s]);
        int token_size = 0;
        int64_t length = 0;
        if (open_ids(tokens->file, target_names[s], &tokens->target_dataset[s], &token_size, &length) != DT_OK)
            return DT_ERR;
        if (length != tokens->split_length[s] || token_size != tokens->split_token_size[s])
            return dt_errorf("dataset '%s' must hold %lld ids of %d bytes, one per token of %s", target_names[s],
                             (long long)tokens->split_length[s], tokens->split_token_size[s], split_names[s]);
    }
    return DT_OK;
}

int64_t data_tokens_target_shift(const data_tokens *tokens, data_split split) {
    return (split == SPLIT_TRAIN || split == SPLIT_VAL) && tokens->has_target[split] ? 0 : 1;
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
    for (int s = 0; s < 2; s++) {
        if (tokens->split_dataset[s] > 0) H5Dclose(tokens->split_dataset[s]);
        if (tokens->target_dataset[s] > 0) H5Dclose(tokens->target_dataset[s]);
    }
    if (tokens->file > 0) H5Fclose(tokens->file);
    data_tokenizer_free(&tokens->tokenizer);
    memset(tokens, 0, sizeof *tokens);
    tokens->file = tokens->split_dataset[0] = tokens->split_dataset[1] = H5I_INVALID_HID;
    tokens->target_dataset[0] = tokens->target_dataset[1] = H5I_INVALID_HID;
}

/* Opens a dataset of token ids (/train, /val, a labelled file's targets) into
 * *dataset and checks it is a 1-D unsigned integer dataset of at most 32 bits;
 * *token_size = the bytes per id reads use, *length = its ids. */
static dt_status open_ids(hid_t file, const char *name, hid_t *dataset_out, int *token_size, int64_t *length) {
    if (!h5_exists(file, name)) return dt_errorf("missing dataset '%s'", name);
    hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    if (dataset < 0) return dt_errorf("'%s' is not a dataset", name);
    *dataset_out = dataset;
    hid_t type = H5Dget_type(dataset);
    size_t size = type >= 0 ? H5Tget_size(type) : 0;
    int ok = type >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_NONE && size <= 4;
    if (type >= 0) H5Tclose(type);
    if (!ok) return dt_errorf("dataset '%s' must hold unsigned integers of at most 32 bits", name);
    /* Reads use the native type of this width; uint8 (which we never write) is converted to uint16. */
    *token_size = size <= 2 ? 2 : 4;
    hid_t space = H5Dget_space(dataset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t dims[1] = {0};
    if (rank == 1) H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0) H5Sclose(space);
    if (rank != 1) return dt_errorf("dataset '%s' has rank %d, expected 1", name, rank);
    *length = (int64_t)dims[0];
    return DT_OK;
}

static dt_status scan_splits(data_tokens *tokens);

dt_status data_tokens_open(data_tokens *tokens, const char *path) {
    memset(tokens, 0, sizeof *tokens);
    tokens->file = tokens->split_dataset[0] = tokens->split_dataset[1] = H5I_INVALID_HID;
    tokens->target_dataset[0] = tokens->target_dataset[1] = H5I_INVALID_HID;
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
        status = open_ids(tokens->file, split_names[s], &tokens->split_dataset[s], &tokens->split_token_size[s],
                          &tokens->split_length[s]);
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

/* out[count] = split[start .. start + count) as stored (uint32 values in int32 slots), unchecked;
 * targets = 1: the split's labelled targets instead of its tokens. */
static dt_status read_raw(data_tokens *tokens, data_split split, int targets, int64_t start, int64_t count,
                          int32_t *out) {
    if (split != SPLIT_TRAIN && split != SPLIT_VAL) return dt_errorf("%s: unknown split %d", tokens->path, (int)split);
    const char *name = targets ? target_names[split] : split_names[split];
    int64_t length = tokens->split_length[split];
    hid_t dataset = targets ? tokens->target_dataset[split] : tokens->split_dataset[split];
    if (dataset <= 0 && targets)
        return dt_errorf("%s has no %s dataset (not a labelled record file)", tokens->path, name);
    if (dataset <= 0) return dt_errorf("%s: token file is not open", tokens->path);
    if (start < 0 || count < 0 || start > length || count > length - start)
        return dt_errorf("%s: read of %s[%lld, %lld) is outside the split of %lld tokens", tokens->path, name,
                         (long long)start, (long long)(start + count), (long long)length);
    if (count == 0) return DT_OK;
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
static dt_status check_range(const data_tokens *tokens, const char *name, int64_t start, int64_t count,
                             const int32_t *out, const char *when) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t token;
        memcpy(&token, &out[i], sizeof token); /* as stored: a uint32 above INT32_MAX stays visible */
        if ((int64_t)token >= tokens->vocab_size)
            return dt_errorf("%s: token %u at %s[%lld] is >= vocab_size %lld%s", tokens->path, token, name,
                             (long long)(start + i), (long long)tokens->vocab_size, when);
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
    for (int s = 0; s < 4 && status == DT_OK; s++) { /* /train, /val, then their targets if labelled */
        const data_split split = (data_split)(s % 2);
        const int targets = s >= 2;
        if (targets && !tokens->has_target[split]) continue;
        const char *name = targets ? target_names[split] : split_names[split];
        for (int64_t start = 0; start < tokens->split_length[split] && status == DT_OK; start += CHUNK) {
            int64_t count = tokens->split_length[split] - start < CHUNK ? tokens->split_length[split] - start : CHUNK;
            status = read_raw(tokens, split, targets, start, count, buffer);
            if (status == DT_OK)
                status = check_range(tokens, name, start, count, buffer, " (found when the file was opened)");
        }
    }
    free(buffer);
    return status;
}

dt_status data_tokens_read(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out) {
    if (read_raw(tokens, split, 0, start, count, out) != DT_OK) return DT_ERR;
    /* Cheap next to the read, and it keeps a file changed after opening from reaching the model. */
    return check_range(tokens, split_names[split], start, count, out, "");
}

dt_status data_tokens_read_targets(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out) {
    if (read_raw(tokens, split, 1, start, count, out) != DT_OK) return DT_ERR;
    return check_range(tokens, target_names[split], start, count, out, "");
}
