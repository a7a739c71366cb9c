/* The gradient-norm spike watch (train/grad_spikes.h): a norm above 10x the
 * median of the 50 steps before it counts, nothing counts while the window
 * fills, the counts are taken (and zeroed) by each report, the window and
 * counts survive a checkpoint in order, nonsense stored values are refused,
 * and an evaluation record with spikes prints one warning line and logs them. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "support/scratch.h"
#include "train/grad_spikes.h"
#include "train/log.h"

static char work_dir[64];

static void setup(void) { test_scratch_dir(work_dir, sizeof work_dir, "train_grad_spikes"); }
static void teardown(void) { test_remove_dir(work_dir); }

TestSuite(train_grad_spikes, .init = setup, .fini = teardown, .timeout = 30);

/* 50 norms around 1 whose median is 1.0 exactly: 0.5 .. 1.5 in pairs. */
static void fill_window(train_grad_spikes *w) {
    for (int i = 0; i < TRAIN_GRAD_SPIKE_WINDOW; i++)
        train_grad_spikes_record(w, i % 2 ? 1.0 + 0.02 * (i / 2) : 1.0 - 0.02 * (i / 2));
}

Test(train_grad_spikes, counts_norms_above_ten_medians_once_the_window_is_full) {
    train_grad_spikes w;
    memset(&w, 0, sizeof w);
    for (int i = 0; i < TRAIN_GRAD_SPIKE_WINDOW - 1; i++)
        train_grad_spikes_record(&w, 1.0);
    train_grad_spikes_record(&w, 500.0); /* the window is not full yet: not judged */
    int64_t spikes;
    double largest;
    train_grad_spikes_take(&w, &spikes, &largest);
    cr_assert_eq(spikes, 0);
    memset(&w, 0, sizeof w);
    fill_window(&w);
    train_grad_spikes_record(&w, 9.9); /* below 10x the median (1.0) */
    train_grad_spikes_take(&w, &spikes, &largest);
    cr_assert_eq(spikes, 0, "9.9 is no spike");
    cr_assert_eq(largest, 0.0);
    memset(&w, 0, sizeof w);
    fill_window(&w);
    train_grad_spikes_record(&w, 10.5);
    train_grad_spikes_record(&w, 1.0);
    train_grad_spikes_record(&w, 30.0); /* the median is still 1.0: one 10.5 in the window moves it little */
    train_grad_spikes_take(&w, &spikes, &largest);
    cr_assert_eq(spikes, 2);
    cr_assert(fabs(largest - 30.0 / 1.01) < 1e-9, "largest ratio %.12g", largest);
    train_grad_spikes_take(&w, &spikes, &largest);
    cr_assert(spikes == 0 && largest == 0.0, "a report zeroes the counts");
}

/* Writes w to a fresh file's /train and reads it back. */
static void round_trip(const train_grad_spikes *w, train_grad_spikes *back, const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s.h5", work_dir, name);
    hid_t file;
    cr_assert_eq(h5_create(path, &file), DT_OK, "%s", dt_error_message());
    hid_t group = H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(group >= 0);
    cr_assert_eq(train_grad_spikes_write(group, w), DT_OK, "%s", dt_error_message());
    H5Gclose(group);
    cr_assert_eq(h5_close(file, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(train_grad_spikes_read(path, back), DT_OK, "%s", dt_error_message());
}

Test(train_grad_spikes, a_checkpoint_keeps_the_window_in_order_and_the_counts) {
    train_grad_spikes w;
    memset(&w, 0, sizeof w);
    fill_window(&w);
    for (int i = 0; i < 7; i++) /* the ring wraps: its oldest slot is not slot 0 */
        train_grad_spikes_record(&w, 0.2 + 0.1 * i);
    train_grad_spikes_record(&w, 40.0);
    train_grad_spikes back;
    round_trip(&w, &back, "full");
    cr_assert_eq(back.count, TRAIN_GRAD_SPIKE_WINDOW);
    cr_assert_eq(back.spikes, w.spikes);
    cr_assert_eq(back.largest, w.largest);
    /* The same next steps give the same decisions: the same values, in the same ring order. */
    for (int i = 0; i < 60; i++) {
        const double norm = i % 13 == 0 ? 12.0 : 0.9 + 0.01 * i;
        train_grad_spikes_record(&w, norm);
        train_grad_spikes_record(&back, norm);
        cr_assert_eq(back.spikes, w.spikes, "step %d after the resume", i);
        for (int k = 0; k < TRAIN_GRAD_SPIKE_WINDOW; k++)
            cr_assert_eq(back.norms[(back.next + k) % TRAIN_GRAD_SPIKE_WINDOW],
                         w.norms[(w.next + k) % TRAIN_GRAD_SPIKE_WINDOW]);
    }
    /* A window still filling comes back as filling. */
    train_grad_spikes young;
    memset(&young, 0, sizeof young);
    train_grad_spikes_record(&young, 2.0);
    train_grad_spikes_record(&young, 3.0);
    round_trip(&young, &back, "young");
    cr_assert(back.count == 2 && back.next == 2 && back.norms[0] == 2.0 && back.norms[1] == 3.0);
}

Test(train_grad_spikes, nonsense_stored_values_are_refused_and_absent_ones_are_empty) {
    train_grad_spikes w, back;
    memset(&w, 0, sizeof w);
    train_grad_spikes_record(&w, -1.0);
    char path[128];
    snprintf(path, sizeof path, "%s/bad.h5", work_dir);
    hid_t file;
    cr_assert_eq(h5_create(path, &file), DT_OK);
    hid_t group = H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_eq(train_grad_spikes_write(group, &w), DT_OK);
    H5Gclose(group);
    cr_assert_eq(h5_close(file, path), DT_OK);
    cr_assert_eq(train_grad_spikes_read(path, &back), DT_ERR, "a negative norm was read");
    cr_assert(strstr(dt_error_message(), "grad_norm_window[0] = -1") && strstr(dt_error_message(), path), "%s",
              dt_error_message());
    /* A checkpoint from before the watch: empty. */
    snprintf(path, sizeof path, "%s/old.h5", work_dir);
    cr_assert_eq(h5_create(path, &file), DT_OK);
    group = H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(group);
    cr_assert_eq(h5_close(file, path), DT_OK);
    memset(&back, 0x7f, sizeof back);
    cr_assert_eq(train_grad_spikes_read(path, &back), DT_OK, "%s", dt_error_message());
    cr_assert(back.count == 0 && back.next == 0 && back.spikes == 0 && back.largest == 0.0);
}

Test(train_grad_spikes, an_eval_record_with_spikes_warns_once_and_logs_them) {
    char log_path[128];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", work_dir);
    char *progress_text = NULL;
    size_t progress_size = 0;
    FILE *progress = open_memstream(&progress_text, &progress_size);
    cr_assert_not_null(progress);
    train_log log;
    cr_assert_eq(train_log_open(&log, log_path, 0, progress, 1), DT_OK, "%s", dt_error_message());
    train_eval_record quiet = {.step = 100,
                               .tokens = 1000,
                               .windows = 4,
                               .loss = 2.5,
                               .loss_primary = NAN,
                               .loss_branch = NAN,
                               .alpha = NAN,
                               .couple_q_norm = NAN,
                               .couple_hidden_norm = NAN,
                               .couple_out_norm = NAN,
                               .branch_emb_norm = NAN};
    train_eval_record spiky = quiet;
    spiky.step = 200;
    spiky.grad_spikes = 3;
    spiky.grad_spike_largest = 87.4;
    cr_assert_eq(train_log_eval(&log, &quiet), DT_OK);
    cr_assert_eq(train_log_eval(&log, &spiky), DT_OK);
    cr_assert_eq(train_log_close(&log), DT_OK);
    fclose(progress);
    cr_assert(strstr(progress_text, "warning: 3 steps since the last evaluation had a gradient norm above 10x the "
                                    "median of the 50 steps before (largest 87x)"),
              "%s", progress_text);
    const char *first = strstr(progress_text, "warning:");
    cr_assert_null(strstr(first + 1, "warning:"), "one warning, for the record with spikes:\n%s", progress_text);
    cr_assert(strstr(progress_text, "eval step 200") < first, "the warning follows its eval line:\n%s", progress_text);
    free(progress_text);
    FILE *f = fopen(log_path, "r");
    cr_assert_not_null(f);
    char line[2048], second[2048];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_not_null(fgets(second, sizeof second, f));
    fclose(f);
    cr_assert(strstr(line, "\"grad_spikes\":0,\"grad_spike_largest\":0"), "%s", line);
    cr_assert(strstr(second, "\"grad_spikes\":3,\"grad_spike_largest\":87.4"), "%s", second);
}
