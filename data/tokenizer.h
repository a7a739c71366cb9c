/* Tokenizers: byte-level (V = 256) and byte-level BPE (merges learned on a
 * corpus). decode(encode(x)) == x for any bytes. A BPE tokenizer is stored
 * inside the token dataset file under /tokenizer so the file alone decodes. */
#ifndef DATA_TOKENIZER_H
#define DATA_TOKENIZER_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* TOKENIZER_EXTERNAL: token ids made by another tool (llm.c shards, nanoGPT
 * .bin files, e.g. GPT-2's tiktoken ids): only vocab_size is known, every
 * token's byte string is empty, and decode is an error rather than text. */
typedef enum { TOKENIZER_BYTE = 0, TOKENIZER_BPE = 1, TOKENIZER_EXTERNAL = 2 } data_tokenizer_kind;

typedef struct data_tokenizer {
    data_tokenizer_kind kind;
    int64_t vocab_size;    /* 256 + number of merges */
    int32_t (*merges)[2];  /* [vocab_size - 256][2]: token 256 + i = merges[i][0] ++ merges[i][1] */
    uint8_t **token_bytes; /* [vocab_size] byte string of each token */
    int32_t *token_length; /* [vocab_size] */
    void *internal;        /* encoder lookup structures */
} data_tokenizer;

dt_status data_tokenizer_byte(data_tokenizer *tok);
/* The tokenizer of ids from elsewhere: vocab_size in [1, 2^32]. */
dt_status data_tokenizer_external(data_tokenizer *tok, int64_t vocab_size);
/* Learns merges on text until vocab_size tokens; deterministic (ties: lowest pair ids). */
dt_status data_tokenizer_train_bpe(data_tokenizer *tok, const uint8_t *text, size_t n_bytes, int64_t vocab_size);
void data_tokenizer_free(data_tokenizer *tok);

/* Encodes n_bytes into *tokens (malloc'ed, caller frees), count in *n_tokens. */
dt_status data_tokenizer_encode(const data_tokenizer *tok, const uint8_t *text, size_t n_bytes, int32_t **tokens,
                                int64_t *n_tokens);
/* Decodes into *text (malloc'ed, NUL-terminated), byte count in *n_bytes. Ids outside the vocabulary are errors. */
dt_status data_tokenizer_decode(const data_tokenizer *tok, const int32_t *tokens, int64_t n_tokens, uint8_t **text,
                                size_t *n_bytes);

/* Stores / loads the tokenizer in an open token-dataset file (attributes
 * `tokenizer`, `vocab_size` on the root, merges under /tokenizer). */
dt_status data_tokenizer_write_h5(const data_tokenizer *tok, hid_t file);
dt_status data_tokenizer_read_h5(data_tokenizer *tok, hid_t file, const char *path_for_errors);

#endif
