/* The reference checker (SPEC §5). Loads a reference file's model (/config,
 * /params) and /ref/tokens, runs one forward + backward, and compares each
 * expected quantity the file holds:
 *   losses (loss, loss_primary, loss_branch, aux): |err| <= 1e-5 |expected|
 *   logits_primary, logits_branch, alpha: max |err| <= 1e-4 max |expected|
 *   grads/<name>: max |err| <= 1e-4 max(max |expected|, 0.1 max over the whole model's expected grads)
 * Feedback models (SPEC §6.5) run the K passes of the /ref attribute passes
 * and compare each pass's CE with loss_passes too.
 * A parameter without a /ref/grads entry, or an entry naming no parameter, is
 * a failing line. The checker never passes what it cannot compare: a quantity
 * the model produces whose /ref dataset is missing (/ref/loss, /ref/grads, the
 * branch and MoE quantities of those kinds), an expected value that is not
 * finite, or a non-finite value of our own, is a failing line naming the
 * dataset (add_line also refuses any non-finite error or scale, since
 * inf <= tol * inf would otherwise pass). */
#include "models/reference.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "core/h5.h"
#include "models/model.h"
#include "models/model_io.h"

enum { MAX_GRAD_ENTRIES = 4096 };
static const double LOSS_TOLERANCE = 1e-5, TENSOR_TOLERANCE = 1e-4, GRAD_FLOOR_FRACTION = 0.1;

static dt_status add_line(model_reference_report *report, const char *name, double max_abs_error, double scale,
                          double tolerance, const char *note) {
    model_reference_line *lines = realloc(report->lines, (size_t)(report->n_lines + 1) * sizeof *lines);
    if (!lines) return dt_errorf("check-reference: out of memory");
    report->lines = lines;
    model_reference_line *line = &lines[report->n_lines++];
    memset(line, 0, sizeof *line);
    snprintf(line->name, sizeof line->name, "%s", name);
    snprintf(line->note, sizeof line->note, "%s", note ? note : "");
    line->max_abs_error = max_abs_error;
    line->scale = scale;
    line->tolerance = tolerance;
    /* Written so that NaN errors fail; an infinite scale would pass anything. */
    line->pass = !note && isfinite(max_abs_error) && isfinite(scale) && max_abs_error <= tolerance * scale;
    if (!line->pass) report->n_failed++;
    return DT_OK;
}

/* max |got - expected| over n values; NaN anywhere gives +inf. */
static double max_abs_difference(const float *got, const double *expected, int64_t n) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - expected[i]);
        if (!(diff <= worst)) worst = isnan(diff) ? INFINITY : diff;
    }
    return worst;
}

static int all_finite_f64(const double *values, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(values[i])) return 0;
    return 1;
}

static int all_finite_f32(const float *values, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(values[i])) return 0;
    return 1;
}

/* The failing line's note when expected [n] or got [n] cannot be compared, else NULL. */
static const char *uncomparable(const char *path, const double *expected, const float *got, int64_t n, char *note,
                                size_t size) {
    if (!all_finite_f64(expected, n)) {
        snprintf(note, size, "%s holds a non-finite expected value", path);
        return note;
    }
    if (got && !all_finite_f32(got, n)) {
        snprintf(note, size, "our value for %s is not finite", path);
        return note;
    }
    return NULL;
}

/* A quantity the model produces whose /ref dataset is missing: a failing line. */
static dt_status missing_dataset(model_reference_report *report, const char *name, const char *path, double tolerance) {
    char note[200];
    snprintf(note, sizeof note, "missing %s, which this model kind requires", path);
    return add_line(report, name, INFINITY, 0.0, tolerance, note);
}

static double max_abs(const double *values, int64_t n) {
    double largest = 0.0;
    for (int64_t i = 0; i < n; i++)
        largest = fmax(largest, fabs(values[i]));
    return largest;
}

/* /ref/<name>, a 0-d scalar, against got [1] (NULL: the model does not produce it). */
static dt_status compare_scalar(model_reference_report *report, hid_t file, const char *name, const dt_tensor *got) {
    char path[160];
    snprintf(path, sizeof path, "/ref/%s", name);
    if (!h5_exists(file, path)) return got ? missing_dataset(report, name, path, LOSS_TOLERANCE) : DT_OK;
    double expected = 0.0;
    if (h5_read_scalar(file, path, &expected) != DT_OK) return DT_ERR;
    if (!got) return add_line(report, name, INFINITY, fabs(expected), LOSS_TOLERANCE, "the model does not produce it");
    char note[200];
    return add_line(report, name, fabs((double)dt_f32(got)[0] - expected), fabs(expected), LOSS_TOLERANCE,
                    uncomparable(path, &expected, dt_f32(got), 1, note, sizeof note));
}

/* /ref/<name> of got's shape against got (NULL: the model does not produce it). */
static dt_status compare_tensor(model_reference_report *report, hid_t file, const char *name, const dt_tensor *got) {
    char path[160];
    snprintf(path, sizeof path, "/ref/%s", name);
    if (!h5_exists(file, path)) return got ? missing_dataset(report, name, path, TENSOR_TOLERANCE) : DT_OK;
    if (!got) return add_line(report, name, INFINITY, 0.0, TENSOR_TOLERANCE, "the model does not produce it");
    double *expected = malloc((size_t)got->size * sizeof *expected);
    if (!expected) return dt_errorf("check-reference: out of memory");
    dt_status status = h5_read_f64(file, path, expected, got->ndim, got->shape);
    char note[200];
    if (status == DT_OK)
        status =
            add_line(report, name, max_abs_difference(dt_f32(got), expected, got->size), max_abs(expected, got->size),
                     TENSOR_TOLERANCE, uncomparable(path, expected, dt_f32(got), got->size, note, sizeof note));
    free(expected);
    return status;
}

/* Names of the datasets under /ref/grads (heap strings; *n_names entries). */
static dt_status list_grad_entries(hid_t file, char ***names, int *n_names) {
    *names = NULL;
    *n_names = 0;
    hid_t group = H5Gopen2(file, "/ref/grads", H5P_DEFAULT);
    if (group < 0) return dt_errorf("cannot open group /ref/grads");
    H5G_info_t info;
    dt_status status = DT_OK;
    if (H5Gget_info(group, &info) < 0 || info.nlinks > MAX_GRAD_ENTRIES) {
        status = dt_errorf("cannot list /ref/grads");
    } else if (info.nlinks > 0) {
        *names = calloc(info.nlinks, sizeof **names);
        if (!*names) status = dt_errorf("check-reference: out of memory");
        for (hsize_t i = 0; status == DT_OK && i < info.nlinks; i++) {
            ssize_t length = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
            char *name = length > 0 ? malloc((size_t)length + 1) : NULL;
            if (!name) {
                status = dt_errorf("cannot list /ref/grads");
                break;
            }
            H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)length + 1, H5P_DEFAULT);
            (*names)[(*n_names)++] = name;
        }
    }
    H5Gclose(group);
    return status;
}

/* Every parameter's gradient against /ref/grads, with the model-wide floor on the scale. */
static dt_status compare_grads(model_reference_report *report, hid_t file, const model *m) {
    if (!h5_exists(file, "/ref/grads")) return missing_dataset(report, "grads", "/ref/grads", TENSOR_TOLERANCE);
    char **entries = NULL;
    int n_entries = 0;
    double **expected = calloc((size_t)m->n_params, sizeof *expected); // per parameter, NULL when absent
    dt_status status =
        expected ? list_grad_entries(file, &entries, &n_entries) : dt_errorf("check-reference: out of memory");
    double largest_in_model = 0.0;
    for (int i = 0; status == DT_OK && i < m->n_params; i++) {
        const dt_tensor *param = m->params[i].tensor;
        char path[160];
        snprintf(path, sizeof path, "/ref/grads/%s", m->params[i].name);
        if (!h5_exists(file, path)) continue;
        expected[i] = malloc((size_t)param->size * sizeof **expected);
        if (!expected[i]) {
            status = dt_errorf("check-reference: out of memory");
            break;
        }
        status = h5_read_f64(file, path, expected[i], param->ndim, param->shape);
        if (status == DT_OK) largest_in_model = fmax(largest_in_model, max_abs(expected[i], param->size));
    }
    for (int i = 0; status == DT_OK && i < m->n_params; i++) {
        const dt_tensor *param = m->params[i].tensor;
        char name[128];
        snprintf(name, sizeof name, "grad %s", m->params[i].name);
        if (!expected[i]) {
            status = add_line(report, name, INFINITY, 0.0, TENSOR_TOLERANCE, "no /ref/grads entry");
            continue;
        }
        double scale = fmax(max_abs(expected[i], param->size), GRAD_FLOOR_FRACTION * largest_in_model);
        double error;
        if (param->grad) {
            error = max_abs_difference(param->grad, expected[i], param->size);
        } else { /* no gradient reached it: compare zeros */
            error = max_abs(expected[i], param->size);
        }
        char path[160], note[200];
        snprintf(path, sizeof path, "/ref/grads/%s", m->params[i].name);
        status = add_line(report, name, error, scale, TENSOR_TOLERANCE,
                          uncomparable(path, expected[i], param->grad, param->size, note, sizeof note));
    }
    for (int j = 0; status == DT_OK && j < n_entries; j++) {
        if (model_find_param(m, entries[j])) continue;
        char name[128];
        snprintf(name, sizeof name, "grad %s", entries[j]);
        status = add_line(report, name, INFINITY, 0.0, TENSOR_TOLERANCE, "no such parameter in the model");
    }
    for (int j = 0; j < n_entries; j++)
        free(entries[j]);
    free(entries);
    for (int i = 0; expected && i < m->n_params; i++)
        free(expected[i]);
    free(expected);
    return status;
}

/* /ref/tokens int32 [B, T+1] -> inputs [B, T] and targets [B, T] in the arena. */
static dt_status read_tokens(hid_t file, ag_ctx *ctx, const model *m, dt_tensor **inputs, dt_tensor **targets) {
    int ndim = 0;
    int64_t shape[4] = {0};
    if (h5_dataset_shape(file, "/ref/tokens", &ndim, shape) != DT_OK) return DT_ERR;
    if (ndim != 2 || shape[0] < 1 || shape[1] < 2)
        return dt_errorf("/ref/tokens must be int32 [B, T+1] with T >= 1 (rank %d)", ndim);
    const int64_t B = shape[0], T = shape[1] - 1;
    if (T > m->config.block_size)
        return dt_errorf("/ref/tokens: T = %lld exceeds block_size %lld", (long long)T,
                         (long long)m->config.block_size);
    dt_tensor *all = ag_tensor(ctx, DT_I32, 2, shape);
    *inputs = ag_tensor(ctx, DT_I32, DT_SHAPE(B, T));
    *targets = ag_tensor(ctx, DT_I32, DT_SHAPE(B, T));
    if (!all || !*inputs || !*targets) return DT_ERR;
    if (h5_read_i32(file, "/ref/tokens", dt_i32(all), 2, shape) != DT_OK) return DT_ERR;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            dt_i32(*inputs)[b * T + t] = dt_i32(all)[b * (T + 1) + t];
            dt_i32(*targets)[b * T + t] = dt_i32(all)[b * (T + 1) + t + 1];
        }
    return DT_OK;
}

/* A feedback model's file says how its expected values were made (SPEC
 * §6.5): /ref attributes passes (K, no jitter, no prefix mixin) and
 * feedback_lambda. Both are required: a silent K = 1 would compare the wrong
 * objective. */
static dt_status read_feedback_run(hid_t file, model_feedback_run *run) {
    hid_t ref = H5Gopen2(file, "/ref", H5P_DEFAULT);
    if (ref < 0) return dt_errorf("cannot open group /ref");
    int64_t passes = 0;
    double lambda = 0.0;
    dt_status status = DT_OK;
    if (!h5_has_attr(ref, "passes") || !h5_has_attr(ref, "feedback_lambda"))
        status = dt_errorf("/ref: a feedback model's file needs the attributes passes and feedback_lambda (SPEC §6.5)");
    if (status == DT_OK) status = h5_read_attr_int(ref, "passes", &passes);
    if (status == DT_OK) status = h5_read_attr_double(ref, "feedback_lambda", &lambda);
    H5Gclose(ref);
    if (status != DT_OK) return DT_ERR;
    if (passes < 1 || passes > MODEL_FEEDBACK_MAX_PASSES)
        return dt_errorf("/ref: passes = %lld (1 to %d)", (long long)passes, MODEL_FEEDBACK_MAX_PASSES);
    if (!isfinite(lambda)) return dt_errorf("/ref: feedback_lambda = %g is not finite", lambda);
    run->passes = passes;
    run->lambda = lambda;
    return DT_OK;
}

/* Each pass's CE against the /ref attribute loss_passes [K] (when present). */
static dt_status compare_loss_passes(model_reference_report *report, hid_t file, const model_outputs *out) {
    hid_t ref = H5Gopen2(file, "/ref", H5P_DEFAULT);
    if (ref < 0) return dt_errorf("cannot open group /ref");
    dt_status status = DT_OK;
    if (H5Aexists(ref, "loss_passes") > 0) {
        double expected[MODEL_FEEDBACK_MAX_PASSES];
        hid_t attr = H5Aopen(ref, "loss_passes", H5P_DEFAULT);
        hid_t space = attr >= 0 ? H5Aget_space(attr) : H5I_INVALID_HID;
        const hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
        if (n != out->passes || !out->loss_passes)
            status =
                dt_errorf("/ref: loss_passes holds %lld values for %lld passes", (long long)n, (long long)out->passes);
        else if (H5Aread(attr, H5T_NATIVE_DOUBLE, expected) < 0)
            status = dt_errorf("/ref: cannot read loss_passes");
        if (space >= 0) H5Sclose(space);
        if (attr >= 0) H5Aclose(attr);
        for (int64_t k = 0; status == DT_OK && k < out->passes; k++) {
            char name[64], note[200];
            snprintf(name, sizeof name, "loss_passes[%lld]", (long long)k);
            status = add_line(
                report, name, fabs((double)out->loss_passes[k] - expected[k]), fabs(expected[k]), LOSS_TOLERANCE,
                uncomparable("/ref loss_passes", &expected[k], &out->loss_passes[k], 1, note, sizeof note));
        }
    }
    H5Gclose(ref);
    return status;
}

dt_status model_reference_check(const char *path, model_reference_report *report) {
    memset(report, 0, sizeof *report);
    model m;
    memset(&m, 0, sizeof m);
    ag_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    hid_t file = H5I_INVALID_HID;
    int model_loaded = 0, ctx_ready = 0;
    dt_status status = model_load(&m, path);
    if (status == DT_OK) {
        model_loaded = 1;
        status = h5_open(path, 0, &file);
    }
    if (status == DT_OK) {
        status = ag_ctx_init(&ctx, 0);
        ctx_ready = status == DT_OK;
    }
    dt_tensor *inputs = NULL, *targets = NULL;
    if (status == DT_OK) status = read_tokens(file, &ctx, &m, &inputs, &targets);
    model_outputs out;
    memset(&out, 0, sizeof out);
    model_feedback_run run = model_feedback_plain();
    if (status == DT_OK && m.config.feedback) status = read_feedback_run(file, &run);
    if (status == DT_OK) {
        model_zero_grad(&m);
        status = model_forward_feedback(&m, &ctx, inputs, targets, &run, &out);
    }
    if (status == DT_OK) status = ag_backward(&ctx, out.loss);
    if (status == DT_OK) status = compare_scalar(report, file, "loss", out.loss);
    if (status == DT_OK) status = compare_scalar(report, file, "loss_primary", out.loss_primary);
    if (status == DT_OK) status = compare_scalar(report, file, "loss_branch", out.loss_branch);
    if (status == DT_OK) status = compare_scalar(report, file, "aux", out.aux);
    if (status == DT_OK) status = compare_tensor(report, file, "alpha", out.alpha);
    if (status == DT_OK) status = compare_tensor(report, file, "logits_primary", out.logits_primary);
    if (status == DT_OK) status = compare_tensor(report, file, "logits_branch", out.logits_branch);
    if (status == DT_OK && m.config.feedback) status = compare_loss_passes(report, file, &out);
    if (status == DT_OK) status = compare_grads(report, file, &m);
    if (status != DT_OK && model_loaded) dt_error_context("%s", path);

    if (file != H5I_INVALID_HID) H5Fclose(file);
    if (ctx_ready) ag_ctx_free(&ctx);
    if (model_loaded) model_free(&m);
    if (status != DT_OK) model_reference_report_free(report);
    return status;
}

void model_reference_report_free(model_reference_report *report) {
    free(report->lines);
    memset(report, 0, sizeof *report);
}

const char *model_reference_line_format(const model_reference_line *line, char *buf, int buf_size) {
    double relative =
        line->scale > 0.0 ? line->max_abs_error / line->scale : (line->max_abs_error == 0.0 ? 0.0 : INFINITY);
    int n =
        snprintf(buf, (size_t)buf_size, "%-40s max_abs_err %.3e  scale %.3e  rel_err %.3e  (tol %.0e)  %s", line->name,
                 line->max_abs_error, line->scale, relative, line->tolerance, line->pass ? "PASS" : "FAIL");
    if (line->note[0] && n >= 0 && n < buf_size) snprintf(buf + n, (size_t)(buf_size - n), "  (%s)", line->note);
    return buf;
}
