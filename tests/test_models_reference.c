/* The reference files (SPEC §5) through the same code as `dbranch
 * check-reference`: every tests/reference/ (every .h5) must pass every quantity, and
 * so must the files of ../shared/reference/ when that directory exists (so an
 * updated reference set is noticed), and the held-out files of
 * tests/reference/heldout/: one small model per ablation switch and size the
 * shipped files do not cover, written by tests/tools/spec_reference.py (an
 * independent float64 implementation of SPEC.md with finite-difference
 * gradients). The checker itself is tested on doctored
 * copies: a wrong loss, a missing gradient entry and an extra one must fail,
 * and a missing file is an error naming it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <hdf5.h>
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

static int is_h5(const char *name) {
    size_t n = strlen(name);
    return n > 3 && !strcmp(name + n - 3, ".h5");
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Checks every *.h5 in dir (sorted); returns how many were checked, -1 when dir does not exist. */
static int check_directory(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *names[256];
    int n = 0;
    for (struct dirent *entry; (entry = readdir(d)) != NULL && n < 256;)
        if (is_h5(entry->d_name)) names[n++] = strdup(entry->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, compare_names);
    int total_failed = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        model_reference_report report;
        dt_status status = model_reference_check(path, &report);
        cr_expect_eq(status, DT_OK, "%s: %s", path, dt_error_message());
        if (status != DT_OK) {
            total_failed++;
            continue;
        }
        double worst = 0.0;
        char line[512];
        for (int j = 0; j < report.n_lines; j++) {
            const model_reference_line *l = &report.lines[j];
            if (!l->pass) cr_log_error("%s: %s", names[i], model_reference_line_format(l, line, sizeof line));
            if (l->scale > 0 && l->max_abs_error / (l->tolerance * l->scale) > worst)
                worst = l->max_abs_error / (l->tolerance * l->scale);
        }
        cr_log_info("%s: %d quantities, %d failed, worst error %.3g of its tolerance", names[i], report.n_lines,
                    report.n_failed, worst);
        cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail", path, report.n_failed, report.n_lines);
        cr_expect_gt(report.n_lines, 3, "%s: too few quantities compared", path);
        total_failed += report.n_failed;
        model_reference_report_free(&report);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    cr_assert_eq(total_failed, 0, "%s: %d failures", dir, total_failed);
    return n;
}

Test(reference, repository_files_pass) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/reference", source_dir());
    int n = check_directory(dir);
    cr_assert_geq(n, 7, "expected the 7 reference files in %s (found %d)", dir, n);
}

Test(reference, heldout_files_pass) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/reference/heldout", source_dir());
    int n = check_directory(dir);
    cr_assert_geq(n, 30, "expected the held-out reference files in %s (found %d)", dir, n);
}

/* SPEC §6 option files (copies of ../shared/reference/options/) of the
 * options implemented so far; the others must be refused with one line
 * naming the key, never run as if the key were absent. */
static const char *const implemented_options[] = {"08_llama_triplu_branch.h5",       "09_nanogpt_prism.h5",
                                                  "10_llama_attnres_mhar_branch.h5", "12_llama_feedback.h5",
                                                  "11_llama_recurrent.h5",           "14_llama_alibi_branch.h5",
                                                  "15_llama_attnres_block.h5",       "16_moe_triplu_prodnorm.h5",
                                                  "17_nanogpt_recurrent_branch.h5",  "13_nanogpt_disco.h5"};

Test(reference, option_files_pass) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/reference/options", source_dir());
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s missing", dir);
    int n_implemented = 0, n_refused = 0;
    for (struct dirent *entry; (entry = readdir(d)) != NULL;) {
        if (!is_h5(entry->d_name)) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
        int implemented = 0;
        for (size_t i = 0; i < sizeof implemented_options / sizeof implemented_options[0]; i++)
            implemented |= !strcmp(entry->d_name, implemented_options[i]);
        model_reference_report report;
        dt_status status = model_reference_check(path, &report);
        if (implemented) {
            cr_expect_eq(status, DT_OK, "%s: %s", path, dt_error_message());
            if (status != DT_OK) continue;
            cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail", path, report.n_failed, report.n_lines);
            cr_expect_gt(report.n_lines, 3, "%s: too few quantities compared", path);
            model_reference_report_free(&report);
            n_implemented++;
        } else {
            cr_expect_eq(status, DT_ERR, "%s: an option not implemented yet must be refused", path);
            if (status == DT_OK) {
                model_reference_report_free(&report);
                continue;
            }
            cr_expect(strstr(dt_error_message(), "not implemented yet") != NULL, "%s: %s", path, dt_error_message());
            n_refused++;
        }
    }
    closedir(d);
    cr_assert_eq(n_implemented, (int)(sizeof implemented_options / sizeof implemented_options[0]),
                 "every implemented option's file present and passing");
    cr_log_info("%d option files pass, %d refused (not implemented yet)", n_implemented, n_refused);
}

/* Held-out option files (independent float64 implementations of SPEC §6:
 * tests/tools/spec_reference.py options for §6.1-6.4, spec_reference_loop.py
 * for §6.6, spec_reference_feedback.py for §6.5): every option is
 * implemented, so every file passes. 22 files cover SPEC §6.1-§6.3 (product
 * FFNs, per-layer heads, attention residuals), 4 ALiBi (§6.4, with per-layer
 * heads, MoE and nanogpt), 4 the recurrent layer of §6.4 (one of them with
 * ALiBi too), 6 loops and DiscoLoop (§6.6), 4 latent feedback (§6.5). */
Test(reference, option_heldout_files) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/reference/options_heldout", source_dir());
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s missing", dir);
    int n_pass = 0, n_refused = 0;
    for (struct dirent *entry; (entry = readdir(d)) != NULL;) {
        if (!is_h5(entry->d_name)) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
        model_reference_report report;
        if (model_reference_check(path, &report) != DT_OK) {
            cr_expect(strstr(dt_error_message(), "not implemented yet") != NULL, "%s: %s", path, dt_error_message());
            n_refused++;
            continue;
        }
        cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail", path, report.n_failed, report.n_lines);
        cr_expect_gt(report.n_lines, 3, "%s: too few quantities compared", path);
        n_pass += report.n_failed == 0;
        model_reference_report_free(&report);
    }
    closedir(d);
    cr_assert_eq(n_refused, 0, "%d held-out option files refused", n_refused);
    cr_assert_geq(n_pass, 40, "only %d held-out option files pass", n_pass);
    cr_log_info("%d held-out option files pass, %d refused (not implemented yet)", n_pass, n_refused);
}

/* SPEC §6.6's held-out files (tests/tools/spec_reference_loop.py): a plain
 * loop, DiscoLoop with the learned gate and top-k, disco_top = 0, tied
 * heads, MoE with loops (aux over K·L terms); each must be present and pass. */
Test(reference, loop_heldout_files_pass) {
    const char *names[] = {"llama_loop3",   "nanogpt_disco_learned_top5", "llama_disco_top0_loop3",
                           "moe_loop2_aux", "moe_disco_learned_loop3",    "llama_disco_tied_top64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/tests/reference/options_heldout/%s.h5", source_dir(), names[i]);
        model_reference_report report;
        cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s: %s", path, dt_error_message());
        cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail", path, report.n_failed, report.n_lines);
        cr_expect_gt(report.n_lines, 10, "%s: too few quantities compared", path);
        model_reference_report_free(&report);
    }
}

Test(reference, shared_files_pass_when_present) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/../shared/reference", source_dir());
    if (access(dir, R_OK) != 0) {
        cr_log_info("%s absent: nothing to check", dir);
        return;
    }
    int n = check_directory(dir);
    cr_assert_geq(n, 1, "%s holds no reference files", dir);
}

/* ---- the checker rejects what it must ---- */

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    cr_assert_not_null(in, "cannot read %s", from);
    FILE *out = fopen(to, "wb");
    cr_assert_not_null(out, "cannot write %s", to);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* A writable copy of reference file `name` in /tmp; path into buf. */
static const char *doctored_copy(const char *name, char *buf, size_t size) {
    char from[1024];
    snprintf(from, sizeof from, "%s/tests/reference/%s", source_dir(), name);
    snprintf(buf, size, "/tmp/dbranch_test_reference_%d_%s", (int)getpid(), name);
    copy_file(from, buf);
    return buf;
}

static const model_reference_line *find_line(const model_reference_report *report, const char *name) {
    for (int i = 0; i < report->n_lines; i++)
        if (!strcmp(report->lines[i].name, name)) return &report->lines[i];
    return NULL;
}

Test(reference, a_wrong_loss_fails_that_line_only) {
    char path[1024];
    doctored_copy("04_llama_branch.h5", path, sizeof path);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK, "%s", dt_error_message());
    double loss;
    cr_assert_eq(h5_read_scalar(file, "/ref/loss", &loss), DT_OK);
    /* 3e-5 relative: outside the 1e-5 tolerance, far inside any real bug. */
    cr_assert_eq(h5_write_scalar(file, "/ref/loss", loss * (1.0 + 3e-5)), DT_OK);
    cr_assert_eq(h5_close(file, path), DT_OK);
    model_reference_report report;
    cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s", dt_error_message());
    const model_reference_line *line = find_line(&report, "loss");
    cr_assert_not_null(line);
    cr_assert_not(line->pass, "a loss off by 3e-5 relative passed");
    cr_assert_eq(report.n_failed, 1, "only the loss should fail (%d failed)", report.n_failed);
    model_reference_report_free(&report);
    unlink(path);
}

Test(reference, a_wrong_gradient_entry_fails) {
    char path[1024];
    doctored_copy("02_nanogpt_branch.h5", path, sizeof path);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK, "%s", dt_error_message());
    /* One element of one gradient moved by 1e-3 x the largest gradient magnitude in the model... */
    const char *name = "/ref/grads/layers.1.branch.couple_out";
    int ndim;
    int64_t shape[4];
    cr_assert_eq(h5_dataset_shape(file, name, &ndim, shape), DT_OK, "%s", dt_error_message());
    double values[64];
    cr_assert_eq(h5_read_f64(file, name, values, ndim, shape), DT_OK);
    float as_float[64];
    for (int64_t i = 0; i < shape[0]; i++)
        as_float[i] = (float)values[i];
    as_float[3] += 0.05f;
    cr_assert_eq(h5_write_f32(file, name, as_float, ndim, shape), DT_OK);
    /* ...one parameter's entry removed, and an entry naming no parameter added. */
    cr_assert(H5Ldelete(file, "/ref/grads/layers.0.attn.wk.bias", H5P_DEFAULT) >= 0);
    cr_assert_eq(h5_write_f32(file, "/ref/grads/layers.0.attn.wz.weight", as_float, ndim, shape), DT_OK);
    cr_assert_eq(h5_close(file, path), DT_OK);
    model_reference_report report;
    cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s", dt_error_message());
    const model_reference_line *moved = find_line(&report, "grad layers.1.branch.couple_out");
    const model_reference_line *missing = find_line(&report, "grad layers.0.attn.wk.bias");
    const model_reference_line *extra = find_line(&report, "grad layers.0.attn.wz.weight");
    cr_assert(moved && missing && extra, "a line for each doctored entry");
    cr_assert_not(moved->pass, "a gradient off by 0.05 passed (scale %g)", moved->scale);
    cr_assert_not(missing->pass);
    cr_assert_not(extra->pass);
    cr_assert_eq(report.n_failed, 3, "exactly the three doctored entries fail (%d)", report.n_failed);
    model_reference_report_free(&report);
    unlink(path);
}

Test(reference, unreadable_files_are_errors) {
    model_reference_report report;
    cr_assert_eq(model_reference_check("/nonexistent/ref.h5", &report), DT_ERR);
    cr_assert(strstr(dt_error_message(), "/nonexistent/ref.h5"), "names the file: %s", dt_error_message());
    cr_assert_eq(report.n_lines, 0);
    /* A model without /ref/tokens cannot be checked. */
    char path[1024];
    doctored_copy("01_nanogpt_base.h5", path, sizeof path);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK);
    cr_assert(H5Ldelete(file, "/ref/tokens", H5P_DEFAULT) >= 0);
    cr_assert_eq(h5_close(file, path), DT_OK);
    cr_assert_eq(model_reference_check(path, &report), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tokens"), "names /ref/tokens: %s", dt_error_message());
    unlink(path);
}

/* Latent feedback (SPEC §6.5): the held-out files of
 * tests/tools/spec_reference_feedback.py (llama K = 2, nanogpt K = 3, MoE
 * with the aux term over K*L applications, a lambda != 1 with product FFN
 * and per-layer heads) pass, each pass's CE included. */
Test(reference, feedback_heldout_files) {
    const char *names[] = {"llama_feedback_k2.h5", "nanogpt_feedback_k3.h5", "moe_feedback_k2_aux.h5",
                           "llama_feedback_k3_lambda_triplu_prism.h5"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/tests/reference/options_heldout/%s", source_dir(), names[i]);
        model_reference_report report;
        cr_assert_eq(model_reference_check(path, &report), DT_OK, "%s: %s", path, dt_error_message());
        int pass_lines = 0;
        for (int j = 0; j < report.n_lines; j++)
            pass_lines += strncmp(report.lines[j].name, "loss_passes[", 12) == 0;
        cr_expect_eq(report.n_failed, 0, "%s: %d of %d quantities fail", path, report.n_failed, report.n_lines);
        cr_expect_geq(pass_lines, 2, "%s: each pass's CE is compared", path);
        model_reference_report_free(&report);
    }
}
