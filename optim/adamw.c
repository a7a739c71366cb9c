/* AdamW on one tensor: decoupled weight decay, bias-corrected moments
 * (formula in optim.h). Elementwise, so the OpenMP split cannot change the
 * result: a run is bit-for-bit the same at any thread count. */
#include <math.h>

#include "optim/optim.h"

void optim_adamw_update(float *data, const float *grad, float *m, float *v, int64_t n, int64_t t, double lr,
                        double beta1, double beta2, double eps, double weight_decay) {
    // data, grad, m, v [n]
    /* Bias corrections in double: beta2^t stays accurate for long runs. */
    const float step_size = (float)(lr / (1.0 - pow(beta1, (double)t)));
    const float inv_sqrt_bias2 = (float)(1.0 / sqrt(1.0 - pow(beta2, (double)t)));
    const float decay = (float)(1.0 - lr * weight_decay);
    const float b1 = (float)beta1, b2 = (float)beta2, one_minus_b1 = (float)(1.0 - beta1),
                one_minus_b2 = (float)(1.0 - beta2), epsilon = (float)eps;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = b1 * m[i] + one_minus_b1 * g;
        float vi = b2 * v[i] + one_minus_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bias2 + epsilon;
        data[i] = data[i] * decay - step_size * mi / denom;
    }
}
