/* Muon: momentum, then the update replaced by its Newton-Schulz
 * orthogonalisation (Keller Jordan's modded-nanogpt), formula in optim.h.
 *
 * The quintic iteration X <- a X + (b A + c A^2) X with A = X X^T drives every
 * singular value of the normalised matrix towards ~1 (into about [0.7, 1.2]
 * after 5 steps with a = 3.4445, b = -4.7750, c = 2.0315), which is cheaper than
 * an SVD and needs only GEMMs. It runs on the wide orientation (rows <= cols)
 * so A is the smaller Gram matrix. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "optim/optim.h"

int64_t optim_newton_schulz_work_floats(int64_t rows, int64_t cols) {
    int64_t small = rows < cols ? rows : cols;
    return 2 * rows * cols + 2 * small * small; /* X, next X, A, B */
}

int64_t optim_muon_work_floats(int64_t rows, int64_t cols) {
    return rows * cols + optim_newton_schulz_work_floats(rows, cols); /* the update u, then Newton-Schulz */
}

void optim_newton_schulz(float *x, int64_t rows, int64_t cols, int steps, float *work) {
    // x [rows, cols] in place; work as optim_newton_schulz_work_floats
    const int transposed = rows > cols;
    const int64_t s = transposed ? cols : rows; /* X is [s, l] with s <= l */
    const int64_t l = transposed ? rows : cols;
    float *X = work;           // [s, l]
    float *X_next = X + s * l; // [s, l]
    float *A = X_next + s * l; // [s, s]
    float *B = A + s * s;      // [s, s]

    if (transposed) {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                X[j * l + i] = x[i * cols + j];
    } else {
        memcpy(X, x, (size_t)(s * l) * sizeof(float));
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < s * l; i++)
        sum_sq += (double)X[i] * X[i];
    const float inv_norm = (float)(1.0 / (sqrt(sum_sq) + 1e-7));
    for (int64_t i = 0; i < s * l; i++)
        X[i] *= inv_norm;

    const float a = (float)OPTIM_NS_A, b = (float)OPTIM_NS_B, c = (float)OPTIM_NS_C;
    for (int step = 0; step < steps; step++) {
        // A [s,s] = X X^T
        k_gemm(0, 1, s, s, l, 1.0f, X, l, X, l, 0.0f, A, s);
        // B [s,s] = b A + c A A
        memcpy(B, A, (size_t)(s * s) * sizeof(float));
        k_gemm(0, 0, s, s, s, c, A, s, A, s, b, B, s);
        // X_next [s,l] = a X + B X
        memcpy(X_next, X, (size_t)(s * l) * sizeof(float));
        k_gemm(0, 0, s, l, s, 1.0f, B, s, X, l, a, X_next, l);
        float *swap = X;
        X = X_next;
        X_next = swap;
    }

    if (transposed) {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                x[i * cols + j] = X[j * l + i];
    } else {
        memcpy(x, X, (size_t)(s * l) * sizeof(float));
    }
}

void optim_muon_update(float *data, const float *grad, float *momentum, int64_t n_matrices, int64_t rows, int64_t cols,
                       double lr, double mu, int nesterov, int ns_steps, double weight_decay, float *work) {
    // data, grad, momentum [n_matrices, rows, cols]; work as optim_muon_work_floats
    const int64_t n = rows * cols;
    float *update = work; // [rows, cols]
    float *ns_work = work + n;
    const float momentum_f = (float)mu, one_minus_mu = (float)(1.0 - mu);
    /* Tall matrices get a larger step so the per-element update RMS matches wide ones. */
    const float step = (float)(lr * sqrt(fmax(1.0, (double)rows / (double)cols)));
    const float decay = (float)(1.0 - lr * weight_decay);
    for (int64_t e = 0; e < n_matrices; e++) {
        float *p = data + e * n;
        const float *g = grad + e * n;
        float *buf = momentum + e * n;
        for (int64_t i = 0; i < n; i++) {
            buf[i] = momentum_f * buf[i] + one_minus_mu * g[i];
            update[i] = nesterov ? one_minus_mu * g[i] + momentum_f * buf[i] : buf[i];
        }
        optim_newton_schulz(update, rows, cols, ns_steps, ns_work);
        for (int64_t i = 0; i < n; i++)
            p[i] = p[i] * decay - step * update[i];
    }
}
