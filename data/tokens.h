/* Token dataset files (SPEC §5): root attribute format = "dbranch-tokens",
 * 1-D unsigned datasets /train and /val, the tokenizer inside. Reads go
 * through HDF5 hyperslabs, so files larger than memory work. */
#ifndef DATA_TOKENS_H
#define DATA_TOKENS_H

#include <hdf5.h>
#include <stdint.h>

#include "core/error.h"
#include "data/tokenizer.h"

typedef enum { SPLIT_TRAIN = 0, SPLIT_VAL = 1 } data_split;

typedef struct data_tokens {
    char path[4096];
    hid_t file;
    hid_t split_dataset[2];  /* /train, /val */
    int64_t split_length[2]; /* tokens in each split */
    int64_t vocab_size;
    data_tokenizer tokenizer;
    int split_token_size[2]; /* bytes per stored token (2: uint16, 4: uint32); reads use the matching native type */
    int64_t record_len;      /* 0: each split is one token stream; R: a sequence of records of R tokens */
    int has_answer[2];       /* /train_answer, /val_answer present */
} data_tokens;

/* Writes a dataset file (via PATH.tmp + rename). source: free text naming the corpus. */
dt_status data_tokens_write(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                            const int32_t *val, int64_t n_val, const char *source);

/* A record file (data/synthetic.h): every split a whole number of records of
 * record_len tokens (root attribute `record_len`), and per split an int32
 * dataset /<split>_answer of 0/1 marking the tokens whose accuracy `dbranch eval` reports.
 * Readers that know nothing of records still read the splits as streams. */
dt_status data_tokens_write_records(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                                    const int32_t *val, int64_t n_val, const char *source, int64_t record_len,
                                    const int32_t *train_answer, const int32_t *val_answer);

/* Opens and validates: format attribute, both splits, the tokenizer, and every token id < vocab_size
 * (scanned once here, in chunks, so a bad id is an error before a run starts; reads check again). */
dt_status data_tokens_open(data_tokens *tokens, const char *path);
void data_tokens_close(data_tokens *tokens);
/* out[count] = split[start .. start + count) ; a token >= vocab_size is an error naming the file. */
dt_status data_tokens_read(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out);

/* *answer (malloc'ed, caller frees) = the split's answer marks [split_length]; an error when the file has none. */
dt_status data_tokens_read_answers(data_tokens *tokens, data_split split, int32_t **answer);

#endif
