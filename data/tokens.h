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
    hid_t target_dataset[2]; /* /train_target, /val_target of a labelled record file, else H5I_INVALID_HID */
    int has_target[2];
} data_tokens;

/* Writes a dataset file (via PATH.tmp + rename). source: free text naming the corpus. */
dt_status data_tokens_write(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                            const int32_t *val, int64_t n_val, const char *source);

/* A record file (data/synthetic.h): every split a whole number of records of
 * record_len tokens (root attribute `record_len`), and per split an int32
 * dataset /<split>_answer of 0/1 marks.
 *
 * The target of input position i is the next token, i + 1 (a language-model
 * record), unless the file is labelled: then datasets /<split>_target (token
 * ids, stored like the splits) hold the target of every position i itself,
 * so a task can ask for answers that never appear in the input (running
 * parity with the state carried inside the model). A mark at index i says
 * the target stored at i is scored: token i, or target i when labelled.
 * Readers that know nothing of records still read the splits as streams. */
typedef struct data_record_layout {
    int64_t record_len;       /* R >= 2 */
    const int32_t *answer[2]; /* [split length] 0/1 marks of /train, /val */
    const int32_t *target[2]; /* NULL (language-model records), or [split length] ids < vocab_size */
} data_record_layout;

dt_status data_tokens_write_records(const char *path, const data_tokenizer *tok, const int32_t *train, int64_t n_train,
                                    const int32_t *val, int64_t n_val, const char *source,
                                    const data_record_layout *layout);

/* Opens and validates: format attribute, both splits, the tokenizer, and every token id < vocab_size
 * (scanned once here, in chunks, so a bad id is an error before a run starts; reads check again). */
dt_status data_tokens_open(data_tokens *tokens, const char *path);
void data_tokens_close(data_tokens *tokens);
/* out[count] = split[start .. start + count) ; a token >= vocab_size is an error naming the file. */
dt_status data_tokens_read(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out);

/* 1 when the target of position i is token i + 1 (streams, language-model records); 0 for labelled records. */
int64_t data_tokens_target_shift(const data_tokens *tokens, data_split split);
/* out[count] = the labelled targets split_target[start .. start + count); an error when the split has none. */
dt_status data_tokens_read_targets(data_tokens *tokens, data_split split, int64_t start, int64_t count, int32_t *out);

/* *answer (malloc'ed, caller frees) = the split's answer marks [split_length]; an error when the file has none. */
dt_status data_tokens_read_answers(data_tokens *tokens, data_split split, int32_t **answer);

#endif
