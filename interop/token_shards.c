/* Reading llm.c shards and nanoGPT .bin token files (see token_shards.h). */
#include "interop/token_shards.h"

#include <stdlib.h>
#include <string.h>

#include "interop/file_util.h"

enum { LLMC_HEADER_INTS = 256, LLMC_MAGIC_U16 = 20240520, LLMC_MAGIC_U32 = 20240801 };

dt_status interop_shard_format_parse(const char *word, interop_shard_format *format) {
    if (!strcmp(word, "llmc")) return *format = SHARD_LLMC, DT_OK;
    if (!strcmp(word, "nanogpt")) return *format = SHARD_NANOGPT, DT_OK;
    return dt_errorf("unknown token file format '%s' (expected llmc or nanogpt)", word);
}

dt_status interop_read_token_file(const char *path, interop_shard_format format, int32_t **tokens, int64_t *n,
                                  int64_t *max_token) {
    unsigned char *bytes = NULL;
    size_t size = 0;
    if (interop_read_file(path, &bytes, &size) != DT_OK) return DT_ERR;
    size_t start = 0, width = 2;
    uint64_t count = 0;
    dt_status status = DT_OK;
    if (format == SHARD_LLMC) {
        int32_t header[LLMC_HEADER_INTS];
        if (size < sizeof header) {
            status = dt_errorf("%s: %zu bytes, shorter than the 1024-byte header", path, size);
        } else {
            memcpy(header, bytes, sizeof header);
            start = sizeof header;
            if (header[0] == LLMC_MAGIC_U16)
                width = 2;
            else if (header[0] == LLMC_MAGIC_U32)
                width = 4;
            else
                status = dt_errorf("%s: header[0] (magic) is %d, expected %d (uint16 tokens) or %d (uint32 tokens)",
                                   path, header[0], LLMC_MAGIC_U16, LLMC_MAGIC_U32);
            if (status == DT_OK && header[2] < 0)
                status = dt_errorf("%s: header[2] (token count) is %d", path, header[2]);
            count = status == DT_OK ? (uint64_t)header[2] : 0;
            if (status == DT_OK && (size - start) / width < count)
                status = dt_errorf("%s: header[2] (token count) says %llu tokens, the body holds %zu (truncated)", path,
                                   (unsigned long long)count, (size - start) / width);
            else if (status == DT_OK && size - start != count * width)
                status = dt_errorf("%s: %zu bytes after the %llu tokens header[2] (token count) announces", path,
                                   size - start - (size_t)(count * width), (unsigned long long)count);
        }
    } else {
        if (size % 2)
            status = dt_errorf("%s: %zu bytes is not a whole number of uint16 tokens (truncated?)", path, size);
        count = size / 2;
    }
    int32_t *grown = status == DT_OK ? realloc(*tokens, (size_t)(*n + (int64_t)count + 1) * sizeof *grown) : NULL;
    if (status == DT_OK && !grown)
        status = dt_errorf("%s: out of memory for %llu tokens", path, (unsigned long long)count);
    for (uint64_t i = 0; status == DT_OK && i < count; i++) {
        uint32_t token = 0;
        memcpy(&token, bytes + start + i * width, width);
        if (token > INT32_MAX) {
            status = dt_errorf("%s: token %llu is %u, beyond int32", path, (unsigned long long)i, token);
            break;
        }
        grown[*n + (int64_t)i] = (int32_t)token;
        if ((int64_t)token > *max_token) *max_token = token;
    }
    if (grown) *tokens = grown;
    if (status == DT_OK) *n += (int64_t)count;
    free(bytes);
    return status;
}
