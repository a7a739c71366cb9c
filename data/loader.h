/* Batches for training and evaluation.
 *
 * Training: B random contiguous windows of T + 1 tokens from /train, drawn
 * from a seeded stream; the stream state (RNG + windows drawn) is part of a
 * checkpoint so a resumed run sees the same batches.
 * Evaluation: a deterministic sweep of non-overlapping windows of /val.
 * Record files (record_len R, data/tokens.h): each window is the start of one
 * record, so it needs T + 1 <= R (T <= R in a labelled file, whose targets
 * are stored beside the tokens). */
#ifndef DATA_LOADER_H
#define DATA_LOADER_H

#include <stdint.h>

#include "core/rng.h"
#include "data/tokens.h"

typedef struct data_loader {
    data_tokens *tokens;
    int64_t batch_size;
    int64_t seq_len;
    dt_rng rng;
    uint64_t windows_drawn;
} data_loader;

/* Fails when the train split is shorter than T + 1 tokens. */
dt_status data_loader_init(data_loader *loader, data_tokens *tokens, int64_t batch_size, int64_t seq_len,
                           uint64_t seed);
void data_loader_free(data_loader *loader);
/* inputs, targets int32 [B, T]: targets are inputs shifted by one (the stored targets of a labelled file). */
dt_status data_loader_next(data_loader *loader, int32_t *inputs, int32_t *targets);

/* Number of non-overlapping windows of T + 1 tokens in a split (window i starts at i*T; record files: one per record).
 */
int64_t data_split_windows(const data_tokens *tokens, data_split split, int64_t seq_len);
/* inputs, targets [T] of window i of the split. */
dt_status data_split_window(data_tokens *tokens, data_split split, int64_t index, int64_t seq_len, int32_t *inputs,
                            int32_t *targets);

/* Which window of the split's n_total an evaluation of n_selected windows
 * reads as its i-th: floor(i * n_total / n_selected), spread evenly over the
 * split (n_selected >= n_total: window i itself). Not the first n_selected:
 * a validation split is a cut of every twentieth of its corpus
 * (data/corpus.c), and its start is one text (the large preset's first 64
 * windows: 16k tokens of one dictionary). Increasing in i, so a sum over the
 * windows in i's order is the same on every process count. */
int64_t data_eval_window_index(int64_t i, int64_t n_selected, int64_t n_total);
/* inputs, targets [T] of the i-th of n_selected evaluation windows of the split. */
dt_status data_eval_window(data_tokens *tokens, data_split split, int64_t i, int64_t n_selected, int64_t seq_len,
                           int32_t *inputs, int32_t *targets);

#endif
