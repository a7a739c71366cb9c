/* Loader tests: training windows are contiguous slices of /train with targets
 * shifted by one, starts cover exactly [0, n - T - 1], the stream is a
 * function of the seed, resuming from (rng, windows_drawn) continues it
 * identically, and the val sweep tiles the split without overlap. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/loader.h"
#include "support/scratch.h"

static char temp_dir[64];

static void make_temp_dir(void) { test_scratch_dir(temp_dir, sizeof temp_dir, "loader"); }

static void remove_temp_dir(void) { test_remove_dir(temp_dir); }

TestSuite(data_loader, .init = make_temp_dir, .fini = remove_temp_dir);

/* Writes a byte-tokenizer file whose splits are random streams, returns them for comparison. */
static void write_file(const char *name, int64_t n_train, int64_t n_val, int32_t **train, int32_t **val,
                       data_tokens *tokens) {
    dt_rng rng;
    dt_rng_seed(&rng, 1234);
    *train = malloc((size_t)n_train * sizeof **train);
    *val = malloc((size_t)(n_val > 0 ? n_val : 1) * sizeof **val);
    for (int64_t i = 0; i < n_train; i++)
        (*train)[i] = (int32_t)dt_rng_below(&rng, 256);
    for (int64_t i = 0; i < n_val; i++)
        (*val)[i] = (int32_t)dt_rng_below(&rng, 256);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", temp_dir, name);
    cr_assert_eq(data_tokens_write(path, &tok, *train, n_train, *val, n_val, "loader test"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);
    cr_assert_eq(data_tokens_open(tokens, path), DT_OK, "%s", dt_error_message());
}

/* Start of the T+1 window (inputs, then the last target) inside stream, or -1. Random
 * streams of 256 symbols make windows of 9+ tokens unique in practice. */
static int64_t find_window(const int32_t *stream, int64_t n, const int32_t *inputs, const int32_t *targets, int64_t T) {
    int64_t found = -1;
    for (int64_t s = 0; s + T + 1 <= n; s++) {
        if (memcmp(stream + s, inputs, (size_t)T * sizeof *inputs) != 0 || stream[s + T] != targets[T - 1]) continue;
        cr_assert_eq(found, -1, "window matches at two starts: the test stream is not random enough");
        found = s;
    }
    return found;
}

Test(data_loader, windows_are_contiguous_slices) {
    int32_t *train, *val;
    data_tokens tokens;
    write_file("a.h5", 5000, 500, &train, &val, &tokens);
    const int64_t B = 4, T = 16;
    data_loader loader;
    cr_assert_eq(data_loader_init(&loader, &tokens, B, T, 42), DT_OK, "%s", dt_error_message());
    int32_t inputs[4 * 16], targets[4 * 16];
    for (int step = 0; step < 10; step++) {
        cr_assert_eq(data_loader_next(&loader, inputs, targets), DT_OK, "%s", dt_error_message());
        for (int64_t b = 0; b < B; b++) {
            for (int64_t t = 0; t + 1 < T; t++)
                cr_assert_eq(targets[b * T + t], inputs[b * T + t + 1]);
            int64_t start = find_window(train, 5000, inputs + b * T, targets + b * T, T);
            cr_assert(start >= 0 && start <= 5000 - T - 1, "row %lld is not a slice of /train", (long long)b);
        }
    }
    cr_assert_eq(loader.windows_drawn, 40);
    data_loader_free(&loader);
    data_tokens_close(&tokens);
    free(train);
    free(val);
}

Test(data_loader, starts_cover_the_whole_range) {
    /* n_train = T + 3: the valid starts are exactly 0, 1, 2; all must appear, no other. */
    int32_t *train, *val;
    data_tokens tokens;
    const int64_t T = 12;
    write_file("small.h5", T + 3, 20, &train, &val, &tokens);
    data_loader loader;
    cr_assert_eq(data_loader_init(&loader, &tokens, 1, T, 7), DT_OK);
    int seen[3] = {0, 0, 0};
    int32_t inputs[12], targets[12];
    for (int draw = 0; draw < 300; draw++) {
        cr_assert_eq(data_loader_next(&loader, inputs, targets), DT_OK);
        int64_t start = find_window(train, T + 3, inputs, targets, T);
        cr_assert(start >= 0 && start <= 2, "start %lld", (long long)start);
        seen[start]++;
    }
    /* Uniform: each start about 100 of 300 (binomial sd ~8). */
    for (int s = 0; s < 3; s++)
        cr_assert(seen[s] > 60 && seen[s] < 140, "start %d drawn %d times", s, seen[s]);
    data_loader_free(&loader);

    /* A split shorter than T + 1 cannot feed the loader. */
    cr_assert_eq(data_loader_init(&loader, &tokens, 1, T + 3, 7), DT_ERR);
    cr_assert(strstr(dt_error_message(), "/train") != NULL, "%s", dt_error_message());
    data_tokens_close(&tokens);
    free(train);
    free(val);
}

Test(data_loader, stream_is_reproducible_and_resumable) {
    int32_t *train, *val;
    data_tokens tokens;
    write_file("b.h5", 3000, 100, &train, &val, &tokens);
    const int64_t B = 3, T = 10, N = B * T;
    data_loader a, b, c;
    cr_assert_eq(data_loader_init(&a, &tokens, B, T, 99), DT_OK);
    cr_assert_eq(data_loader_init(&b, &tokens, B, T, 99), DT_OK);
    cr_assert_eq(data_loader_init(&c, &tokens, B, T, 100), DT_OK);
    int32_t in_a[30], tg_a[30], in_b[30], tg_b[30], in_c[30], tg_c[30];
    int differs = 0;
    for (int step = 0; step < 5; step++) {
        data_loader_next(&a, in_a, tg_a);
        data_loader_next(&b, in_b, tg_b);
        data_loader_next(&c, in_c, tg_c);
        cr_assert(memcmp(in_a, in_b, N * sizeof *in_a) == 0 && memcmp(tg_a, tg_b, N * sizeof *tg_a) == 0,
                  "same seed, different batch at step %d", step);
        differs |= memcmp(in_a, in_c, N * sizeof *in_a) != 0;
    }
    cr_assert(differs, "another seed gives another stream");

    /* Checkpoint a after 5 steps: its state is the RNG struct and windows_drawn. */
    dt_rng saved_rng = a.rng;
    uint64_t saved_drawn = a.windows_drawn;
    cr_assert_eq(saved_drawn, 15);
    data_loader resumed;
    cr_assert_eq(data_loader_init(&resumed, &tokens, B, T, 12345), DT_OK); /* seed is overwritten by the state */
    resumed.rng = saved_rng;
    resumed.windows_drawn = saved_drawn;
    for (int step = 0; step < 5; step++) {
        data_loader_next(&a, in_a, tg_a);
        data_loader_next(&resumed, in_b, tg_b);
        cr_assert(memcmp(in_a, in_b, N * sizeof *in_a) == 0 && memcmp(tg_a, tg_b, N * sizeof *tg_a) == 0,
                  "resumed stream differs at step %d after the checkpoint", step);
    }
    cr_assert_eq(resumed.windows_drawn, a.windows_drawn);
    data_loader_free(&a);
    data_loader_free(&b);
    data_loader_free(&c);
    data_loader_free(&resumed);
    data_tokens_close(&tokens);
    free(train);
    free(val);
}

Test(data_loader, val_sweep_tiles_the_split) {
    const int64_t T = 8;
    /* Split lengths around the boundaries: T (no window), T+1 (one), 2T (one), 2T+1 (two), and a long one. */
    const int64_t lengths[] = {T, T + 1, 2 * T, 2 * T + 1, 1001};
    const int64_t expected_windows[] = {0, 1, 1, 2, 125}; /* floor((n - 1) / T) */
    for (int k = 0; k < 5; k++) {
        int32_t *train, *val;
        data_tokens tokens;
        char name[32];
        snprintf(name, sizeof name, "val%d.h5", k);
        write_file(name, 100, lengths[k], &train, &val, &tokens);
        int64_t n_windows = data_split_windows(&tokens, SPLIT_VAL, T);
        cr_assert_eq(n_windows, expected_windows[k], "n=%lld: %lld windows", (long long)lengths[k],
                     (long long)n_windows);
        int *covered = calloc((size_t)lengths[k], sizeof *covered); /* times each val token is a target */
        for (int64_t i = 0; i < n_windows; i++) {
            int32_t inputs[8], targets[8];
            cr_assert_eq(data_split_window(&tokens, SPLIT_VAL, i, T, inputs, targets), DT_OK, "%s", dt_error_message());
            for (int64_t t = 0; t < T; t++) {
                cr_assert_eq(inputs[t], val[i * T + t]);
                cr_assert_eq(targets[t], val[i * T + t + 1]);
                covered[i * T + t + 1]++;
            }
        }
        /* Every target position 1 .. n_windows*T is predicted exactly once; nothing beyond. */
        for (int64_t p = 0; p < lengths[k]; p++)
            cr_assert_eq(covered[p], p >= 1 && p <= n_windows * T ? 1 : 0, "position %lld", (long long)p);
        int32_t inputs[8], targets[8];
        cr_assert_eq(data_split_window(&tokens, SPLIT_VAL, n_windows, T, inputs, targets), DT_ERR);
        cr_assert_eq(data_split_window(&tokens, SPLIT_VAL, -1, T, inputs, targets), DT_ERR);
        free(covered);
        data_tokens_close(&tokens);
        free(train);
        free(val);
    }
}

/* An evaluation of fewer windows than the split holds reads them spread
 * evenly over it, not its first ones: the i-th is floor(i * total /
 * selected), increasing, the first at the start and the last in the final
 * 1/selected of the split; all of them (or more asked) is every window in
 * order. */
Test(data_loader, eval_windows_spread_over_the_split) {
    const int64_t T = 8;
    int32_t *train, *val;
    data_tokens tokens;
    write_file("spread.h5", 100, 1001, &train, &val, &tokens);
    const int64_t total = data_split_windows(&tokens, SPLIT_VAL, T); /* 125 */
    cr_assert_eq(total, 125);
    const int64_t selections[] = {1, 4, 10, 124};
    for (size_t k = 0; k < sizeof selections / sizeof selections[0]; k++) {
        const int64_t n = selections[k];
        int64_t previous = -1;
        for (int64_t i = 0; i < n; i++) {
            const int64_t w = data_eval_window_index(i, n, total);
            cr_assert_eq(w, i * total / n, "window %lld of %lld", (long long)i, (long long)n);
            cr_assert_gt(w, previous, "the windows increase");
            previous = w;
            int32_t inputs[8], targets[8];
            cr_assert_eq(data_eval_window(&tokens, SPLIT_VAL, i, n, T, inputs, targets), DT_OK, "%s",
                         dt_error_message());
            for (int64_t t = 0; t < T; t++) {
                cr_assert_eq(inputs[t], val[w * T + t]);
                cr_assert_eq(targets[t], val[w * T + t + 1]);
            }
        }
        cr_assert_geq(previous, total - (total + n - 1) / n, "%lld windows end in the split's last part", (long long)n);
    }
    cr_assert_eq(data_eval_window_index(0, 4, total), 0);
    cr_assert_eq(data_eval_window_index(3, 4, total), 93); /* not 3: the first four would be 0..3 */
    for (int64_t i = 0; i < total; i++) {
        cr_assert_eq(data_eval_window_index(i, total, total), i, "all the windows: in order");
        cr_assert_eq(data_eval_window_index(i, total + 7, total), i, "more than the split holds: all in order");
    }
    data_tokens_close(&tokens);
    free(train);
    free(val);
}
