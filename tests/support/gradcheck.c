/* Central-difference gradient checker; see gradcheck.h for the contract and
 * the error measure. Test support code: it may malloc (the op path never does). */
#include "support/gradcheck.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"

gradcheck_options gradcheck_defaults(void) {
    return (gradcheck_options){
        .eps = 1e-2, .tol = 1e-2, .floor_input = 0.1, .floor_global = 1e-3, .max_checks_per_input = 0, .seed = 1234};
}

dt_tensor *gradcheck_param(uint64_t seed, float std, int ndim, const int64_t *shape) {
    dt_tensor *t = dt_tensor_new(DT_F32, ndim, shape);
    if (!t) return NULL;
    if (dt_tensor_alloc_grad(t) != DT_OK) {
        dt_tensor_free(t);
        return NULL;
    }
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    dt_rng_fill_normal(&rng, dt_f32(t), t->size, std);
    t->requires_grad = 1;
    return t;
}

static void reportf(char *report, int report_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reportf(char *report, int report_size, const char *fmt, ...) {
    if (!report || report_size <= 0) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(report, (size_t)report_size, fmt, args);
    va_end(args);
}

/* sum_i w_i y_i in double: the scalar both the analytic and numeric passes differentiate. */
static double weighted_sum(const dt_tensor *y, const float *weights) {
    const float *values = dt_f32(y);
    double total = 0.0;
    for (int64_t i = 0; i < y->size; i++)
        total += (double)weights[i] * (double)values[i];
    return total;
}

/* One no-grad forward evaluation; NAN when build() fails or changes its output size. */
static double evaluate(ag_ctx *ctx, gradcheck_build_fn build, void *user, const float *weights, int64_t n_out) {
    ag_reset(ctx);
    dt_tensor *y = build(ctx, user);
    if (!y || y->dtype != DT_F32 || y->size != n_out) return NAN;
    return weighted_sum(y, weights);
}

double gradcheck_ex(ag_ctx *ctx, gradcheck_build_fn build, void *user, dt_tensor **inputs, int n_inputs,
                    const gradcheck_options *options, gradcheck_result *result, char *report, int report_size) {
    gradcheck_result res = {.max_error = INFINITY, .worst_input = -1, .worst_index = -1};
    float *weights = NULL;
    float **analytic = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *analytic);
    double **numeric = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *numeric);
    int64_t **checked = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *checked);
    int64_t *n_checks = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *n_checks);
    int grad_was_enabled = ag_set_grad_enabled(ctx, 1);
    if (!analytic || !numeric || !checked || !n_checks) {
        reportf(report, report_size, "gradcheck: out of memory");
        goto done;
    }

    /* Inputs: float32 heap tensors that require a gradient; zero their grads. */
    for (int k = 0; k < n_inputs; k++) {
        dt_tensor *x = inputs[k];
        if (!x || x->dtype != DT_F32 || !x->requires_grad || !x->heap_owned || dt_tensor_alloc_grad(x) != DT_OK) {
            reportf(report, report_size, "gradcheck: input %d is not a float32 heap tensor with requires_grad", k);
            goto done;
        }
        memset(x->grad, 0, (size_t)x->size * sizeof(float));
    }

    /* Analytic pass: loss = sum(y * w) through the tape. */
    ag_reset(ctx);
    dt_tensor *y = build(ctx, user);
    if (!y || y->dtype != DT_F32) {
        reportf(report, report_size, "gradcheck: build failed: %s", dt_error_message());
        goto done;
    }
    int64_t n_out = y->size;
    weights = malloc((size_t)n_out * sizeof *weights);
    dt_tensor *weight_tensor = ag_tensor(ctx, DT_F32, y->ndim, y->shape);
    if (!weights || !weight_tensor) {
        reportf(report, report_size, "gradcheck: out of memory");
        goto done;
    }
    dt_rng rng;
    dt_rng_seed(&rng, options->seed);
    for (int64_t i = 0; i < n_out; i++)
        weights[i] = (float)dt_rng_normal(&rng);
    memcpy(weight_tensor->data, weights, (size_t)n_out * sizeof(float));
    dt_tensor *loss = ag_sum(ctx, ag_mul(ctx, y, weight_tensor));
    if (ag_backward(ctx, loss) != DT_OK) {
        reportf(report, report_size, "gradcheck: backward failed: %s", dt_error_message());
        goto done;
    }
    for (int k = 0; k < n_inputs; k++) {
        dt_tensor *x = inputs[k];
        int64_t n = options->max_checks_per_input > 0 && options->max_checks_per_input < x->size
                        ? options->max_checks_per_input
                        : x->size;
        analytic[k] = malloc((size_t)x->size * sizeof(float));
        numeric[k] = malloc((size_t)n * sizeof(double));
        checked[k] = malloc((size_t)n * sizeof(int64_t));
        if (!analytic[k] || !numeric[k] || !checked[k]) {
            reportf(report, report_size, "gradcheck: out of memory");
            goto done;
        }
        memcpy(analytic[k], x->grad, (size_t)x->size * sizeof(float));
        n_checks[k] = n;
        /* A sample (with possible repeats) when subsampling, else every element. */
        for (int64_t j = 0; j < n; j++)
            checked[k][j] = n == x->size ? j : (int64_t)dt_rng_below(&rng, (uint64_t)x->size);
    }

    /* Numeric pass: central differences, grad mode off. */
    ag_set_grad_enabled(ctx, 0);
    for (int k = 0; k < n_inputs; k++) {
        float *data = dt_f32(inputs[k]);
        for (int64_t j = 0; j < n_checks[k]; j++) {
            int64_t i = checked[k][j];
            float original = data[i];
            float plus = (float)(original + options->eps), minus = (float)(original - options->eps);
            data[i] = plus;
            double loss_plus = evaluate(ctx, build, user, weights, n_out);
            data[i] = minus;
            double loss_minus = evaluate(ctx, build, user, weights, n_out);
            data[i] = original;
            if (isnan(loss_plus) || isnan(loss_minus)) {
                reportf(report, report_size, "gradcheck: perturbed forward failed at input %d element %lld: %s", k,
                        (long long)i, dt_error_message());
                goto done;
            }
            /* Divide by the step actually taken in float, not by 2 eps. An
             * infinite element (a dropped -inf term) cannot move: its numeric
             * gradient is 0 by convention. */
            double step = (double)plus - (double)minus;
            numeric[k][j] = isfinite(original) ? (loss_plus - loss_minus) / step : 0.0;
        }
    }

    /* Scales, then the error measure. */
    double scale_all = 0.0;
    double *scale_input = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *scale_input);
    if (!scale_input) goto done;
    for (int k = 0; k < n_inputs; k++)
        for (int64_t j = 0; j < n_checks[k]; j++) {
            double m = fabs(numeric[k][j]);
            if (m > scale_input[k]) scale_input[k] = m;
            if (m > scale_all) scale_all = m;
        }
    res.max_error = 0.0;
    res.max_abs_numeric = scale_all;
    for (int k = 0; k < n_inputs; k++)
        for (int64_t j = 0; j < n_checks[k]; j++) {
            int64_t i = checked[k][j];
            double a = analytic[k][i], n = numeric[k][j];
            double denominator =
                fmax(fabs(n), fmax(options->floor_input * scale_input[k], options->floor_global * scale_all));
            if (denominator <= 0.0) denominator = 1e-30; /* every gradient exactly 0: any analytic value is an error */
            double error = fabs(a - n) / denominator;
            if (isnan(error)) error = INFINITY;
            res.n_checked++;
            if (error > options->tol) res.n_failed++;
            if (error > res.max_error || res.worst_input < 0) {
                if (error > res.max_error) res.max_error = error;
                res.worst_input = k;
                res.worst_index = i;
                res.worst_analytic = a;
                res.worst_numeric = n;
            }
        }
    free(scale_input);
    if (n_inputs > 0) {
        char shape[64];
        dt_shape_str(inputs[res.worst_input >= 0 ? res.worst_input : 0], shape, sizeof shape);
        reportf(report, report_size,
                "gradcheck: max error %.3g at input %d %s element %lld (analytic %.6g, numeric %.6g); "
                "%lld of %lld elements over tol %.3g; largest gradient %.3g",
                res.max_error, res.worst_input, shape, (long long)res.worst_index, res.worst_analytic,
                res.worst_numeric, (long long)res.n_failed, (long long)res.n_checked, options->tol, scale_all);
    }

done:
    ag_set_grad_enabled(ctx, grad_was_enabled);
    for (int k = 0; k < n_inputs && analytic; k++) {
        /* Leave the analytic gradient in the inputs' grads (the numeric pass records no node, so they are intact). */
        free(analytic[k]);
        if (numeric) free(numeric[k]);
        if (checked) free(checked[k]);
    }
    free(analytic);
    free(numeric);
    free(checked);
    free(n_checks);
    free(weights);
    if (result) *result = res;
    return res.max_error;
}

double gradcheck(ag_ctx *ctx, gradcheck_build_fn build, void *user, dt_tensor **inputs, int n_inputs, double eps,
                 double tol, char *report, int report_size) {
    gradcheck_options options = gradcheck_defaults();
    options.eps = eps;
    options.tol = tol;
    return gradcheck_ex(ctx, build, user, inputs, n_inputs, &options, NULL, report, report_size);
}
