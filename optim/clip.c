/* Global-norm gradient clipping (and the plain gradient scale used to average
 * accumulated micro-batches).
 *
 * The norm is summed in double over fixed chunks whose partial sums are added
 * in order, so it is the same number at any thread count: a stopped and
 * resumed run clips exactly like the uninterrupted one. */
#include <math.h>

#include "optim/optim.h"

enum { NORM_CHUNKS = 64 };

static double sum_of_squares(const float *x, int64_t n) {
    // x [n]
    double partial[NORM_CHUNKS] = {0};
    const int64_t chunk = (n + NORM_CHUNKS - 1) / NORM_CHUNKS;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int c = 0; c < NORM_CHUNKS; c++) {
        int64_t begin = (int64_t)c * chunk, end = begin + chunk < n ? begin + chunk : n;
        double sum = 0.0;
        for (int64_t i = begin; i < end; i++)
            sum += (double)x[i] * x[i];
        partial[c] = sum;
    }
    double total = 0.0;
    for (int c = 0; c < NORM_CHUNKS; c++)
        total += partial[c];
    return total;
}

double optim_grad_norm(const optim_param *params, int n_params) {
    double total = 0.0;
    for (int i = 0; i < n_params; i++)
        total += sum_of_squares(params[i].grad, params[i].size);
    return sqrt(total);
}

void optim_scale_grads(const optim_param *params, int n_params, float s) {
    for (int i = 0; i < n_params; i++) {
        float *g = params[i].grad;
        const int64_t n = params[i].size;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t j = 0; j < n; j++)
            g[j] *= s;
    }
}

double optim_clip_grad_norm(const optim_param *params, int n_params, double max_norm) {
    double norm = optim_grad_norm(params, n_params);
    if (max_norm > 0.0 && isfinite(norm) && norm > max_norm)
        optim_scale_grads(params, n_params, (float)(max_norm / (norm + 1e-6)));
    return norm;
}
