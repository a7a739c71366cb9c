/* Finite-difference gradient checking for autograd ops and whole models.
 *
 * How it works: build(ctx, user) runs a forward pass and returns an arena
 * tensor y of any shape. The checker turns it into the scalar
 *     loss = sum_i w_i * y_i
 * with fixed random weights w (normal, seeded), so every output element
 * matters and a mistake in any of them shows. It runs ag_backward once for the
 * analytic gradients, then for each checked element x_j of each input it
 * evaluates the loss at x_j +/- eps (accumulated in double, grad mode off) and
 * compares the central difference to the analytic value.
 *
 * Contract for callers:
 *   - inputs are heap tensors (dt_tensor_new) of float32, requires_grad = 1,
 *     created once; build() reads them (directly or through user) and may only
 *     create arena tensors. Constants (token ids, ...) live in user.
 *   - the checker calls ag_reset(ctx) before every evaluation, so build() must
 *     not keep arena pointers from one call to the next.
 *   - the checker zeroes (allocating if needed) each input's grad before the
 *     backward and leaves the analytic gradient there afterwards.
 *
 * Error measure per element, robust to both large and vanishing gradients:
 *     |analytic - numeric| / max(|numeric|, floor_input * S_input, floor_global * S_all)
 * where S_input is the largest |numeric| of that input and S_all the largest
 * over all inputs (the same spirit as the SPEC's reference tolerances).
 * An infinite input element (e.g. a -inf log-weight) cannot be perturbed: its
 * numeric gradient is taken as 0. */
#ifndef TEST_GRADCHECK_H
#define TEST_GRADCHECK_H

#include <stdint.h>

#include "autograd/tape.h"

typedef dt_tensor *(*gradcheck_build_fn)(ag_ctx *ctx, void *user);

typedef struct {
    double eps;                   /* perturbation (float32 inputs: 1e-3 .. 1e-2) */
    double tol;                   /* an element whose error exceeds this counts as failed (in the report) */
    double floor_input;           /* fraction of the input's largest gradient used as a denominator floor */
    double floor_global;          /* fraction of the largest gradient over all inputs, likewise */
    int64_t max_checks_per_input; /* 0: every element; else this many random elements per input */
    uint64_t seed;                /* weights w and the element sample */
} gradcheck_options;

typedef struct {
    double max_error; /* the returned value */
    int worst_input;  /* where it occurred */
    int64_t worst_index;
    double worst_analytic;
    double worst_numeric;
    int64_t n_checked;
    int64_t n_failed;       /* elements with error > tol */
    double max_abs_numeric; /* largest |numeric gradient| seen (S_all) */
} gradcheck_result;

/* Defaults: eps 1e-2, tol 1e-2, floors 0.1 and 1e-3, every element, seed 1234. */
gradcheck_options gradcheck_defaults(void);

/* Returns the maximum error (see above), or INFINITY when the forward or the
 * backward fails (report says why). report (may be NULL) receives one line
 * describing the worst element and the failure count. */
double gradcheck(ag_ctx *ctx, gradcheck_build_fn build, void *user, dt_tensor **inputs, int n_inputs, double eps,
                 double tol, char *report, int report_size);

/* Same with every option; result (may be NULL) receives the details. */
double gradcheck_ex(ag_ctx *ctx, gradcheck_build_fn build, void *user, dt_tensor **inputs, int n_inputs,
                    const gradcheck_options *options, gradcheck_result *result, char *report, int report_size);

/* Heap float32 tensor filled with normal(0, std) values, requires_grad = 1 and
 * a zeroed grad buffer: the usual gradcheck input. NULL on a bad shape. */
dt_tensor *gradcheck_param(uint64_t seed, float std, int ndim, const int64_t *shape);

#endif
