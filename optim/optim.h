/* Optimizers: AdamW and Muon, plus global-norm gradient clipping.
 *
 * The optimizer sees parameters as flat float buffers with a shape and two
 * flags (weight decay, Muon), not as model tensors: the trainer decides which
 * parameter gets what (SPEC names, is_matrix, is_embedding) and this layer
 * stays below models/. Every buffer (AdamW moments, Muon momentum, the
 * Newton-Schulz workspace) is allocated once in optim_init; optim_step
 * allocates nothing.
 *
 * AdamW (Loshchilov & Hutter, PyTorch's formula), for the step t = step + 1:
 *     p <- p * (1 - lr * weight_decay)              (only when param.decay)
 *     m <- beta1 m + (1 - beta1) g
 *     v <- beta2 v + (1 - beta2) g^2
 *     p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *
 * Muon (modded-nanogpt), for each matrix [rows, cols] (a 3-D expert tensor
 * [E, rows, cols] is E matrices):
 *     buf <- mu buf + (1 - mu) g
 *     u   <- (1 - mu) g + mu buf                    (nesterov; buf otherwise)
 *     u   <- NewtonSchulz5(u)                       (approximately U V^T)
 *     p   <- p * (1 - muon_lr * muon_weight_decay)  (only when param.decay)
 *     p   <- p - muon_lr * sqrt(max(1, rows / cols)) * u
 * With optimizer = muon, parameters without the muon flag (embeddings, the
 * head, norms, biases, coupling vectors, routers) are updated by AdamW. */
#ifndef OPTIM_OPTIM_H
#define OPTIM_OPTIM_H

#include <stdint.h>

#include "core/error.h"

typedef enum { OPTIM_ADAMW = 0, OPTIM_MUON = 1 } optim_kind;

/* Newton-Schulz quintic coefficients (Jordan et al., modded-nanogpt). */
#define OPTIM_NS_A 3.4445
#define OPTIM_NS_B (-4.7750)
#define OPTIM_NS_C 2.0315

typedef struct optim_param {
    const char *name; /* SPEC §3 name; must outlive the optimizer (checkpoints, errors) */
    float *data;      /* [size] weights */
    float *grad;      /* [size] gradient of the step */
    int ndim;
    int64_t shape[4];
    int64_t size;
    int decay; /* decoupled weight decay applies (matrices that are not embeddings) */
    int muon;  /* eligible for Muon: a hidden matrix [rows, cols] or experts [E, rows, cols] */
} optim_param;

typedef struct optim_hparams {
    double beta1, beta2, eps;
    double weight_decay;      /* AdamW decoupled decay */
    double muon_momentum;     /* mu */
    double muon_weight_decay; /* decoupled decay of Muon matrices (0 as in modded-nanogpt) */
    int muon_nesterov;        /* 1: nesterov-style update (default) */
    int muon_ns_steps;        /* Newton-Schulz iterations (5) */
} optim_hparams;

typedef struct optimizer {
    optim_kind kind;
    optim_hparams hp;
    optim_param *params; /* [n_params] copy of the descriptors */
    int n_params;
    float **m, **v;   /* [n_params] AdamW moments; NULL entries for Muon-updated parameters */
    float **momentum; /* [n_params] Muon buffers; NULL entries for AdamW-updated parameters */
    int64_t step;     /* optimizer steps taken so far (AdamW's t is step + 1) */
    float *ns_work;   /* Newton-Schulz workspace, sized for the largest Muon matrix */
} optimizer;

optim_hparams optim_hparams_default(void);
const char *optim_kind_name(optim_kind kind);

/* Copies the descriptors and allocates (zeroed) state for each parameter. */
dt_status optim_init(optimizer *opt, optim_kind kind, const optim_param *params, int n_params, const optim_hparams *hp);
void optim_free(optimizer *opt);

/* Is parameter i updated by Muon (else AdamW)? */
int optim_is_muon(const optimizer *opt, int index);

/* One update of every parameter from its gradient, at this step's learning
 * rates (AdamW's lr and Muon's lr). Increments opt->step. */
void optim_step(optimizer *opt, double lr, double muon_lr);

/* The two updates on one tensor (what optim_step dispatches to). */
/* data, grad, m, v [n]; t >= 1 is the step number used for bias correction */
void optim_adamw_update(float *data, const float *grad, float *m, float *v, int64_t n, int64_t t, double lr,
                        double beta1, double beta2, double eps, double weight_decay);
/* data, grad, momentum [n_matrices, rows, cols]; work: optim_muon_work_floats(rows, cols) floats */
void optim_muon_update(float *data, const float *grad, float *momentum, int64_t n_matrices, int64_t rows, int64_t cols,
                       double lr, double mu, int nesterov, int ns_steps, double weight_decay, float *work);
int64_t optim_muon_work_floats(int64_t rows, int64_t cols);

/* Newton-Schulz orthogonalisation in place: x [rows, cols] is replaced by an
 * approximation of U V^T (G = U S V^T), singular values within about
 * [0.7, 1.2]. Works on x / ||x||_F, on the transpose when rows > cols; every
 * product goes through k_gemm. work: optim_newton_schulz_work_floats floats. */
void optim_newton_schulz(float *x, int64_t rows, int64_t cols, int steps, float *work);
int64_t optim_newton_schulz_work_floats(int64_t rows, int64_t cols);

/* Global L2 norm of all gradients, summed in double in a fixed order (the
 * result does not depend on the thread count, so resumed runs stay exact). */
double optim_grad_norm(const optim_param *params, int n_params);
/* Scales every gradient by s. */
void optim_scale_grads(const optim_param *params, int n_params, float s);
/* Returns the pre-clip norm; when it exceeds max_norm (> 0) every gradient is
 * scaled by max_norm / (norm + 1e-6) (PyTorch's clip_grad_norm_). A
 * non-finite norm is returned unchanged and nothing is scaled. */
double optim_clip_grad_norm(const optim_param *params, int n_params, double max_norm);

#endif
