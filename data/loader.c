/* Batch loader (data/loader.h).
 *
 * Training windows: each of the B rows is a contiguous slice of T + 1 tokens
 * of /train whose start is uniform in [0, n_train - T - 1], drawn with the
 * loader's own dt_rng (seeded from the run seed). One draw per window, so
 * (rng, windows_drawn) is the whole stream state: copy both into a freshly
 * initialised loader and it continues the identical stream.
 * Validation: window i of a split starts at i*T and holds T + 1 tokens, so the
 * windows tile the split without overlap (each target is predicted once).
 * Record files (data/tokens.h, record_len R): a window is the first T + 1
 * tokens of one record, never straddling two (a task's state starts at its
 * record): training draws the record uniformly, validation window i is
 * record i. A labelled record file (data/tokens.h) stores each position's
 * target beside it, so a window is the first T tokens of a record and
 * their T targets. */
#include "data/loader.h"

#include <stdlib.h>
#include <string.h>

dt_status data_loader_init(data_loader *loader, data_tokens *tokens, int64_t batch_size, int64_t seq_len,
                           uint64_t seed) {
    memset(loader, 0, sizeof *loader);
    if (batch_size < 1 || seq_len < 1)
        return dt_errorf("loader: batch_size %lld and seq_len %lld must be >= 1", (long long)batch_size,
                         (long long)seq_len);
    int64_t n_train = tokens->split_length[SPLIT_TRAIN], shift = data_tokens_target_shift(tokens, SPLIT_TRAIN);
    if (tokens->record_len && seq_len + shift > tokens->record_len)
        return dt_errorf("%s: windows of %lld tokens do not fit in its records of record_len = %lld "
                         "(set the sequence length to at most %lld)",
                         tokens->path, (long long)(seq_len + shift), (long long)tokens->record_len,
                         (long long)(tokens->record_len - shift));
    if (n_train < seq_len + shift)
        return dt_errorf("%s: /train has %lld tokens, fewer than a window of %lld", tokens->path, (long long)n_train,
                         (long long)(seq_len + shift));
    loader->tokens = tokens;
    loader->batch_size = batch_size;
    loader->seq_len = seq_len;
    dt_rng_seed(&loader->rng, seed);
    loader->windows_drawn = 0;
    return DT_OK;
}

void data_loader_free(data_loader *loader) {
    if (!loader) return;
    memset(loader, 0, sizeof *loader);
}

/* The window of T positions at start: its tokens, and as targets the next
 * tokens (no staging buffer: the inputs shifted plus one more) or, in a
 * labelled file, the stored ones. */
// inputs [T], targets [T]
static dt_status read_window(data_tokens *tokens, data_split split, int64_t start, int64_t T, int32_t *inputs,
                             int32_t *targets) {
    if (data_tokens_read(tokens, split, start, T, inputs) != DT_OK) return DT_ERR;
    if (tokens->has_target[split]) return data_tokens_read_targets(tokens, split, start, T, targets);
    if (T > 1) memcpy(targets, inputs + 1, (size_t)(T - 1) * sizeof *targets);
    return data_tokens_read(tokens, split, start + T, 1, targets + T - 1);
}

// inputs [B, T], targets [B, T]
dt_status data_loader_next(data_loader *loader, int32_t *inputs, int32_t *targets) {
    const int64_t T = loader->seq_len;
    /* Streams: starts 0 .. n_train - T - 1 inclusive, n_train - T choices. Records: the start of one of them. */
    const int64_t R = loader->tokens->record_len, n_train = loader->tokens->split_length[SPLIT_TRAIN];
    uint64_t n_starts = (uint64_t)(R ? n_train / R : n_train - T);
    for (int64_t b = 0; b < loader->batch_size; b++) {
        int64_t start = (int64_t)dt_rng_below(&loader->rng, n_starts) * (R ? R : 1);
        loader->windows_drawn++;
        if (read_window(loader->tokens, SPLIT_TRAIN, start, T, inputs + b * T, targets + b * T) != DT_OK) return DT_ERR;
    }
    return DT_OK;
}

int64_t data_split_windows(const data_tokens *tokens, data_split split, int64_t seq_len) {
    if (seq_len < 1 || (split != SPLIT_TRAIN && split != SPLIT_VAL)) return 0;
    int64_t n = tokens->split_length[split], shift = data_tokens_target_shift(tokens, split);
    if (tokens->record_len) return seq_len + shift <= tokens->record_len ? n / tokens->record_len : 0;
    /* Window i needs tokens [i*T, i*T + T]: i*T + T + 1 <= n. */
    return n >= seq_len + 1 ? (n - 1) / seq_len : 0;
}

int64_t data_eval_window_index(int64_t i, int64_t n_selected, int64_t n_total) {
    if (n_selected >= n_total || n_selected < 1) return i;
    /* i < n_selected <= n_total, both below 2^31 windows in practice; the product fits int64 */
    return i * n_total / n_selected;
}

// inputs [T], targets [T]
dt_status data_eval_window(data_tokens *tokens, data_split split, int64_t i, int64_t n_selected, int64_t seq_len,
                           int32_t *inputs, int32_t *targets) {
    const int64_t n_total = data_split_windows(tokens, split, seq_len);
    return data_split_window(tokens, split, data_eval_window_index(i, n_selected, n_total), seq_len, inputs, targets);
}

// inputs [T], targets [T]
dt_status data_split_window(data_tokens *tokens, data_split split, int64_t index, int64_t seq_len, int32_t *inputs,
                            int32_t *targets) {
    int64_t n_windows = data_split_windows(tokens, split, seq_len);
    if (index < 0 || index >= n_windows)
        return dt_errorf("%s: window %lld of %s is out of range (%lld windows of %lld tokens)", tokens->path,
                         (long long)index, split == SPLIT_TRAIN ? "/train" : "/val", (long long)n_windows,
                         (long long)seq_len);
    int64_t start = index * (tokens->record_len ? tokens->record_len : seq_len);
    return read_window(tokens, split, start, seq_len, inputs, targets);
}
