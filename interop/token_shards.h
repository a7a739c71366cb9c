/* Token files other trainers write, read into int32 ids for a dbranch token
 * dataset (SPEC §5):
 * - llm.c / modded-nanogpt shards: a header of 256 int32, header[0] the magic
 *   (20240520: uint16 tokens, 20240801: uint32 tokens), header[1] the
 *   version, header[2] the token count; then the tokens, little-endian;
 * - nanoGPT's train.bin / val.bin: headerless uint16 tokens.
 * A wrong magic, a count the body does not hold, or trailing bytes is an
 * error naming the file and the field. */
#ifndef INTEROP_TOKEN_SHARDS_H
#define INTEROP_TOKEN_SHARDS_H

#include <stdint.h>

#include "core/error.h"

typedef enum { SHARD_LLMC = 0, SHARD_NANOGPT = 1 } interop_shard_format;

/* "llmc", "nanogpt" -> format. */
dt_status interop_shard_format_parse(const char *word, interop_shard_format *format);

/* Appends the file's tokens to *tokens (realloc'ed; *n counts them) and
 * raises *max_token to the largest id seen. */
dt_status interop_read_token_file(const char *path, interop_shard_format format, int32_t **tokens, int64_t *n,
                                  int64_t *max_token);

#endif
