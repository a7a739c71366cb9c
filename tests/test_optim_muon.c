/* Muon: the Newton-Schulz iteration orthogonalises (singular values of the
 * result near 1, checked through the eigenvalues of X X^T computed here by
 * Jacobi rotations in double), keeps the singular vectors of the input (the
 * update direction U V^T), the tall-matrix scale, the momentum and nesterov
 * formulas in closed form, and through the update pass (optim_update) the
 * per-expert treatment of 3-D weights and the AdamW fallback for parameters
 * not flagged for Muon. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "optim/optim.h"
#include "support/optim_flat.h"

/* Eigenvalues of a symmetric n x n matrix (a is destroyed), cyclic Jacobi. */
static void symmetric_eigenvalues(double *a, int n, double *eig) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                off += a[i * n + j] * a[i * n + j];
        if (off < 1e-22) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (fabs(a[p * n + q]) < 1e-300) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* rotate columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rotate rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int i = 0; i < n; i++)
        eig[i] = a[i * n + i];
}

/* Eigenvalues of the smaller Gram matrix of x [rows, cols] = squared singular values. */
static void squared_singular_values(const float *x, int rows, int cols, double *eig) {
    int s = rows < cols ? rows : cols;
    double *gram = calloc((size_t)s * s, sizeof *gram);
    for (int i = 0; i < s; i++)
        for (int j = 0; j < s; j++) {
            double sum = 0;
            if (rows <= cols)
                for (int k = 0; k < cols; k++)
                    sum += (double)x[i * cols + k] * x[j * cols + k];
            else
                for (int k = 0; k < rows; k++)
                    sum += (double)x[k * cols + i] * x[k * cols + j];
            gram[i * s + j] = sum;
        }
    symmetric_eigenvalues(gram, s, eig);
    free(gram);
}

/* n orthonormal vectors of length dim (rows of q [n, dim]), Gram-Schmidt in double. */
static void orthonormal_rows(dt_rng *rng, double *q, int n, int dim) {
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < dim; k++)
            q[i * dim + k] = dt_rng_normal(rng);
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < i; j++) {
                double dot = 0;
                for (int k = 0; k < dim; k++)
                    dot += q[i * dim + k] * q[j * dim + k];
                for (int k = 0; k < dim; k++)
                    q[i * dim + k] -= dot * q[j * dim + k];
            }
        double norm = 0;
        for (int k = 0; k < dim; k++)
            norm += q[i * dim + k] * q[i * dim + k];
        for (int k = 0; k < dim; k++)
            q[i * dim + k] /= sqrt(norm);
    }
}

/* g [rows, cols] = sum_i s_i u_i v_i^T with u [s, rows], v [s, cols] orthonormal rows, s = min(rows, cols). */
static void matrix_from_svd(float *g, const double *u, const double *sv, const double *v, int rows, int cols) {
    int s = rows < cols ? rows : cols;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double sum = 0;
            for (int i = 0; i < s; i++)
                sum += u[i * rows + r] * sv[i] * v[i * cols + c];
            g[r * cols + c] = (float)sum;
        }
}

/* d [s, s] = u x v^T: x expressed in the singular bases of the input. */
static void project(const float *x, const double *u, const double *v, int rows, int cols, double *d) {
    int s = rows < cols ? rows : cols;
    for (int i = 0; i < s; i++)
        for (int j = 0; j < s; j++) {
            double sum = 0;
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++)
                    sum += u[i * rows + r] * x[r * cols + c] * v[j * cols + c];
            d[i * s + j] = sum;
        }
}

static void check_orthogonalised(int rows, int cols, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    float *x = malloc((size_t)rows * cols * sizeof *x);
    float *work = malloc((size_t)optim_newton_schulz_work_floats(rows, cols) * sizeof *work);
    for (int i = 0; i < rows * cols; i++)
        x[i] = (float)(3.0 * dt_rng_normal(&rng));
    optim_newton_schulz(x, rows, cols, 5, work);
    int s = rows < cols ? rows : cols;
    double eig[64];
    squared_singular_values(x, rows, cols, eig);
    for (int i = 0; i < s; i++) {
        double sv = sqrt(fmax(eig[i], 0));
        cr_assert(sv > 0.6 && sv < 1.25, "%dx%d: singular value %d is %g (want about 0.7..1.2)", rows, cols, i, sv);
    }
    free(x);
    free(work);
}

Test(optim_muon, newton_schulz_wide_matrix_is_near_orthogonal) { check_orthogonalised(24, 40, 1); }

Test(optim_muon, newton_schulz_tall_matrix_is_near_orthogonal) { check_orthogonalised(40, 24, 2); }

/* NS(U S V^T) = U f(S) V^T: in the input's singular bases the output is
 * diagonal, with entries near 1 whatever the input's spread of singular values. */
Test(optim_muon, newton_schulz_keeps_singular_vectors) {
    enum { R = 8, C = 16 };
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    double u[R * R], v[R * C], sv[R], d[R * R];
    orthonormal_rows(&rng, u, R, R);
    orthonormal_rows(&rng, v, R, C);
    for (int i = 0; i < R; i++)
        sv[i] = 1.0 + 2.0 * i / (R - 1); /* 1 .. 3 */
    float x[R * C], work[2 * R * C + 2 * R * R];
    matrix_from_svd(x, u, sv, v, R, C);
    optim_newton_schulz(x, R, C, 5, work);
    project(x, u, v, R, C, d);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++) {
            if (i == j)
                cr_assert(d[i * R + j] > 0.6 && d[i * R + j] < 1.25, "diagonal %d = %g", i, d[i * R + j]);
            else
                cr_assert(fabs(d[i * R + j]) < 0.02, "off-diagonal (%d,%d) = %g", i, j, d[i * R + j]);
        }
}

/* One Muon step on a tall matrix: the weights move by lr * sqrt(rows/cols) * U f(S) V^T. */
Test(optim_muon, tall_update_direction_and_scale) {
    enum { R = 16, C = 8 };
    dt_rng rng;
    dt_rng_seed(&rng, 9);
    double u[C * R], v[C * C], sv[C], d[C * C];
    orthonormal_rows(&rng, u, C, R);
    orthonormal_rows(&rng, v, C, C);
    for (int i = 0; i < C; i++)
        sv[i] = 0.5 + 0.25 * i;
    float p[R * C], p_start[R * C], g[R * C], momentum[R * C] = {0}, delta[R * C];
    float *work = malloc((size_t)optim_muon_work_floats(R, C) * sizeof *work);
    for (int i = 0; i < R * C; i++)
        p[i] = p_start[i] = (float)dt_rng_normal(&rng);
    matrix_from_svd(g, u, sv, v, R, C);
    const double lr = 0.02;
    optim_muon_update(p, g, momentum, 1, R, C, lr, 0.95, 1, 5, 0.0, work);
    const double scale = lr * sqrt((double)R / C);
    for (int i = 0; i < R * C; i++)
        delta[i] = (float)((p_start[i] - p[i]) / scale);
    project(delta, u, v, R, C, d);
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            if (i == j)
                cr_assert(d[i * C + j] > 0.6 && d[i * C + j] < 1.25, "diagonal %d = %g", i, d[i * C + j]);
            else
                cr_assert(fabs(d[i * C + j]) < 0.02, "off-diagonal (%d,%d) = %g", i, j, d[i * C + j]);
        }
    free(work);
}

/* With 0 Newton-Schulz steps the update is u / ||u||_F, so the momentum and
 * nesterov formulas can be checked exactly over two steps. */
static void check_momentum_formula(int nesterov) {
    enum { R = 3, C = 5, N = R * C };
    dt_rng rng;
    dt_rng_seed(&rng, 21);
    float p[N], g1[N], g2[N], momentum[N] = {0}, work[N + 2 * N + 2 * R * R];
    double p_ref[N], buf[N] = {0};
    for (int i = 0; i < N; i++) {
        p[i] = (float)dt_rng_normal(&rng);
        p_ref[i] = p[i];
        g1[i] = (float)dt_rng_normal(&rng);
        g2[i] = (float)dt_rng_normal(&rng);
    }
    const double mu = 0.9, lr = 0.1;
    const float *grads[2] = {g1, g2};
    for (int step = 0; step < 2; step++) {
        const float *g = grads[step];
        optim_muon_update(p, g, momentum, 1, R, C, lr, mu, nesterov, 0, 0.0, work);
        double upd[N], norm = 0;
        for (int i = 0; i < N; i++) {
            buf[i] = mu * buf[i] + (1 - mu) * g[i];
            upd[i] = nesterov ? (1 - mu) * g[i] + mu * buf[i] : buf[i];
            norm += upd[i] * upd[i];
        }
        norm = sqrt(norm);
        for (int i = 0; i < N; i++) {
            p_ref[i] -= lr * upd[i] / norm; /* rows < cols: scale 1 */
            cr_assert(fabs(momentum[i] - buf[i]) < 1e-6, "buffer %d: %g vs %g", i, momentum[i], buf[i]);
            cr_assert(fabs(p[i] - p_ref[i]) < 1e-6, "step %d weight %d: %g vs %g", step, i, p[i], p_ref[i]);
        }
    }
}

Test(optim_muon, nesterov_momentum_closed_form) { check_momentum_formula(1); }

Test(optim_muon, plain_momentum_closed_form) { check_momentum_formula(0); }

/* Expert weights [E, rows, cols], through the update pass: each expert
 * matrix is orthogonalised on its own (an expert with no gradient does not
 * move; the other gets rows of norm ~1). */
Test(optim_muon, experts_are_separate_matrices) {
    enum { E = 2, R = 4, C = 12, N = E * R * C };
    dt_rng rng;
    dt_rng_seed(&rng, 33);
    optim_flat f;
    optim_flat_init(&f, N);
    cr_assert_not_null(optim_flat_add(&f, "layers.0.moe.w1.weight", DT_SHAPE(E, R, C), 1, 1));
    float *p = f.data, p_start[N];
    for (int i = 0; i < N; i++)
        p[i] = p_start[i] = (float)dt_rng_normal(&rng);
    for (int i = R * C; i < N; i++)
        f.grad[i] = (float)dt_rng_normal(&rng); /* expert 1 only */
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_MUON, NULL), DT_OK, "%s", dt_error_message());
    cr_assert(optim_is_muon(&opt, 0));
    cr_assert_null(optim_adamw_m(&opt, 0));
    double norm;
    cr_assert_eq(optim_flat_step(&opt, 1e-3, 0.05, 1.0f, 0.0, &norm), DT_OK);
    for (int i = 0; i < R * C; i++)
        cr_assert_eq(p[i], p_start[i], "expert 0 moved at %d", i);
    float delta[R * C];
    for (int i = 0; i < R * C; i++)
        delta[i] = (p_start[R * C + i] - p[R * C + i]) / 0.05f;
    double eig[R];
    squared_singular_values(delta, R, C, eig);
    for (int i = 0; i < R; i++)
        cr_assert(sqrt(eig[i]) > 0.6 && sqrt(eig[i]) < 1.25, "sv %d = %g", i, sqrt(eig[i]));
    for (int i = 0; i < N; i++)
        cr_assert_eq(f.grad[i], 0.0f, "gradient %d not zeroed", i);
    optim_free(&opt);
    optim_flat_free(&f);
}

/* optimizer = muon: unflagged parameters (here a norm weight) are AdamW's,
 * and their first step is the sign step lr * g / |g|. */
Test(optim_muon, unflagged_parameters_use_adamw) {
    optim_flat f;
    optim_flat_init(&f, 9);
    cr_assert_not_null(optim_flat_add(&f, "layers.0.mlp.fc.weight", DT_SHAPE(2, 3), 1, 1));
    cr_assert_not_null(optim_flat_add(&f, "layers.0.ffn_norm.weight", DT_SHAPE(3), 0, 0));
    float *w = optim_flat_data(&f, 0), *w_grad = optim_flat_grad(&f, 0), *norm = optim_flat_data(&f, 1);
    for (int i = 0; i < 6; i++)
        w[i] = 0, w_grad[i] = (float)((i / 3 + 1) * (i % 3 + 1)); /* rank 1, positive */
    const float norm0[3] = {1, 1, 1}, norm_grad0[3] = {0.5f, -0.25f, 2.0f};
    memcpy(norm, norm0, sizeof norm0);
    memcpy(optim_flat_grad(&f, 1), norm_grad0, sizeof norm_grad0);
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_MUON, NULL), DT_OK, "%s", dt_error_message());
    cr_assert(optim_is_muon(&opt, 0));
    cr_assert(!optim_is_muon(&opt, 1));
    cr_assert(optim_adamw_m(&opt, 1) != NULL && optim_adamw_v(&opt, 1) != NULL && optim_adamw_m(&opt, 0) == NULL);
    cr_assert(optim_muon_momentum(&opt, 0) != NULL && optim_muon_momentum(&opt, 1) == NULL);
    cr_assert_eq(opt.n_adamw_floats, 3, "AdamW state only for the AdamW parameter");
    cr_assert_eq(opt.n_muon_floats, 6);
    double grad_norm;
    cr_assert_eq(optim_flat_step(&opt, 0.1, 0.02, 1.0f, 0.0, &grad_norm), DT_OK);
    cr_assert(fabs(norm[0] - 0.9) < 1e-6 && fabs(norm[1] - 1.1) < 1e-6 && fabs(norm[2] - 0.9) < 1e-6,
              "norm weights %g %g %g", norm[0], norm[1], norm[2]);
    /* The Muon matrix moved against its gradient: NS(a b^T) = a b^T / (|a||b|), all positive. */
    for (int i = 0; i < 6; i++)
        cr_assert(w[i] < 0, "w[%d] = %g", i, w[i]);
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_muon, rejects_vector_flagged_for_muon) {
    optim_flat f;
    optim_flat_init(&f, 4);
    cr_assert_not_null(optim_flat_add(&f, "layers.0.attn.wq.bias", DT_SHAPE(4), 0, 1));
    optimizer opt;
    cr_assert_eq(optim_flat_optimizer(&f, &opt, OPTIM_MUON, NULL), DT_ERR);
    cr_assert(strstr(dt_error_message(), "layers.0.attn.wq.bias") != NULL, "%s", dt_error_message());
    optim_flat_free(&f);
}
