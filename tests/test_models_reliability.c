/* The reference checker never passes what it cannot compare (issue 18, item
 * 1): an expected value that is +-inf or NaN, a missing /ref dataset the model
 * kind requires (/ref/loss, /ref/grads, a branch model's /ref/alpha), or a
 * non-finite value of our own each give a failing line naming the dataset. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "models/reference.h"

static const char *source_dir(void) {
    const char *dir = getenv("DBRANCH_SOURCE_DIR");
    return dir ? dir : ".";
}

/* A writable copy of reference file `name` in /tmp (path into buf), opened read-write in *file. */
static hid_t doctored_copy(const char *name, char *buf, size_t size) {
    char from[1024];
    snprintf(from, sizeof from, "%s/tests/reference/%s", source_dir(), name);
    snprintf(buf, size, "/tmp/dbranch_test_reliab_%d_%s", (int)getpid(), name);
    FILE *in = fopen(from, "rb"), *out = fopen(buf, "wb");
    cr_assert(in && out, "cannot copy %s to %s", from, buf);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
        cr_assert_eq(fwrite(chunk, 1, n, out), n);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
    hid_t file;
    cr_assert_eq(h5_open(buf, 1, &file), DT_OK, "%s", dt_error_message());
    return file;
}

/* Checks path; asserts that some line fails with a note containing needle, and returns how many failed. */
static int check_fails_naming(const char *path, const char *needle) {
    model_reference_report report;
    cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s", dt_error_message());
    int found = 0;
    char line[512];
    for (int i = 0; i < report.n_lines; i++) {
        const model_reference_line *l = &report.lines[i];
        if (!l->pass && strstr(l->note, needle)) found = 1;
        if (l->pass && strstr(l->note, needle)) cr_log_error("%s", model_reference_line_format(l, line, sizeof line));
    }
    int failed = report.n_failed;
    model_reference_report_free(&report);
    cr_assert(found, "%s: no failing line names '%s' (%d failed)", path, needle, failed);
    cr_assert_gt(failed, 0);
    unlink(path);
    return failed;
}

Test(reference_reliability, infinite_expected_loss_fails) {
    char path[1024];
    hid_t file = doctored_copy("01_nanogpt_base.h5", path, sizeof path);
    cr_assert_eq(h5_write_scalar(file, "/ref/loss", INFINITY), DT_OK);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "/ref/loss holds a non-finite");
}

/* Rewrites float dataset `name` of file: first (values at indices 0, 1) or every value (first < 0: all = fill). */
static void rewrite_dataset(hid_t file, const char *name, float first, float second, float fill) {
    int ndim;
    int64_t shape[4];
    cr_assert_eq(h5_dataset_shape(file, name, &ndim, shape), DT_OK, "%s", dt_error_message());
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *values = malloc((size_t)n * sizeof *values);
    cr_assert_eq(h5_read_f32(file, name, values, ndim, shape), DT_OK);
    if (fill != 0.0f)
        for (int64_t i = 0; i < n; i++)
            values[i] = fill;
    else {
        values[0] = first;
        values[1] = second;
    }
    cr_assert_eq(h5_write_f32(file, name, values, ndim, shape), DT_OK);
    free(values);
}

Test(reference_reliability, infinite_expected_logits_fail) {
    char path[1024];
    hid_t file = doctored_copy("01_nanogpt_base.h5", path, sizeof path);
    rewrite_dataset(file, "/ref/logits_primary", -INFINITY, INFINITY, 0.0f);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "/ref/logits_primary holds a non-finite");
}

Test(reference_reliability, missing_loss_fails) {
    char path[1024];
    hid_t file = doctored_copy("01_nanogpt_base.h5", path, sizeof path);
    cr_assert(H5Ldelete(file, "/ref/loss", H5P_DEFAULT) >= 0);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "missing /ref/loss");
}

Test(reference_reliability, missing_branch_alpha_and_grads_fail) {
    char path[1024];
    hid_t file = doctored_copy("02_nanogpt_branch.h5", path, sizeof path);
    cr_assert(H5Ldelete(file, "/ref/alpha", H5P_DEFAULT) >= 0);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "missing /ref/alpha");
    file = doctored_copy("02_nanogpt_branch.h5", path, sizeof path);
    cr_assert(H5Ldelete(file, "/ref/grads", H5P_DEFAULT) >= 0);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "missing /ref/grads");
}

Test(reference_reliability, non_finite_results_of_our_own_fail) {
    /* Weights near FLT_MAX overflow the logits to inf: our values, not the file's, are non-finite. */
    char path[1024];
    hid_t file = doctored_copy("01_nanogpt_base.h5", path, sizeof path);
    rewrite_dataset(file, "/params/final_norm.weight", 0.0f, 0.0f, 3e38f);
    cr_assert_eq(h5_close(file, path), DT_OK);
    check_fails_naming(path, "our value for /ref/");
}
