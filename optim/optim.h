/* Optimizers: AdamW and Muon, with the global-norm clip, in one fused update
 * pass over flat buffers (llm.c's layout).
 *
 * The optimizer sees the model as two flat float arrays, weights and
 * gradients, with a descriptor per parameter (its offset, shape and two
 * flags: weight decay, Muon), not as model tensors: the trainer decides which
 * parameter gets what (SPEC names, is_matrix, is_embedding) and this layer
 * stays below models/. Its own state is flat too: AdamW's m and v are one
 * buffer each over the AdamW-updated parameters, Muon's momentum one buffer
 * over the Muon-updated ones, each parameter at state_offset[i]. Every buffer
 * (state, the update plan, the Newton-Schulz workspaces) is allocated by
 * optim_init / optim_reserve_threads; optim_update allocates nothing.
 *
 * The update pass (optim_update), for a step after one or more micro-batches:
 *     g  <- (grad + sum of the other threads' gradient copies) * grad_scale / comm size
 *           (the copies are zeroed; between the sum and the scale, one in-place
 *           sum over the processes of the whole flat gradient: comm->allreduce_f32)
 *     n  <- ||g||_2 over every parameter, in double, in a fixed chunk order
 *     g  <- g * max_norm / (n + 1e-6)                 when max_norm > 0 and n > max_norm
 *     AdamW or Muon on each parameter, then grad <- 0.
 * A non-finite n updates nothing (the gradients stay summed, the step count
 * stays): the caller stops.
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
 * head, norms, biases, coupling vectors, routers) are updated by AdamW.
 * AdamW's lr is per parameter group: lr * param.lr_scale.
 *
 * Determinism: the work is a fixed list of chunks (AdamW parameters in
 * pieces of OPTIM_CHUNK floats, Muon matrices whole) whose squared sums are
 * added in list order, and every rule is elementwise or per matrix, so a run
 * is bit-for-bit repeatable and the norm does not depend on the thread count. */
#ifndef OPTIM_OPTIM_H
#define OPTIM_OPTIM_H

#include <stdint.h>

#include "core/comm.h"
#include "core/error.h"

typedef enum { OPTIM_ADAMW = 0, OPTIM_MUON = 1 } optim_kind;

/* Newton-Schulz quintic coefficients (Jordan et al., modded-nanogpt). */
#define OPTIM_NS_A 3.4445
#define OPTIM_NS_B (-4.7750)
#define OPTIM_NS_C 2.0315

/* Floats per chunk of the update pass: small enough that a chunk's gradient,
 * weights and moments stay in L2 between the reduction and the update, large
 * enough that the chunk list stays short. */
enum { OPTIM_CHUNK = 16384 };

typedef struct optim_param {
    const char *name; /* SPEC §3 name; must outlive the optimizer (checkpoints, errors) */
    int64_t offset;   /* where its [size] floats start in the flat weight and gradient buffers */
    int ndim;
    int64_t shape[4];
    int64_t size;
    int decay; /* decoupled weight decay applies (matrices that are not embeddings) */
    int muon;  /* eligible for Muon: a hidden matrix [rows, cols] or experts [E, rows, cols] */
    /* Its parameter group's AdamW learning rate over the update's lr (the
     * paper's recipe gives embeddings, the head and the vectors their own):
     * the step uses lr * lr_scale, its decoupled decay too. 0 is read as 1,
     * so a descriptor that names no group keeps the one lr. Ignored by Muon. */
    double lr_scale;
} optim_param;

typedef struct optim_hparams {
    double beta1, beta2, eps;
    double weight_decay;      /* AdamW decoupled decay */
    double muon_momentum;     /* mu */
    double muon_weight_decay; /* decoupled decay of Muon matrices (0 as in modded-nanogpt) */
    int muon_nesterov;        /* 1: nesterov-style update (default) */
    int muon_ns_steps;        /* Newton-Schulz iterations (5) */
} optim_hparams;

/* One unit of the update pass: `length` floats of parameter `param` from `offset` (within it). */
typedef struct optim_chunk {
    int param;
    int64_t offset, length;
} optim_chunk;

typedef struct optimizer {
    optim_kind kind;
    optim_hparams hp;
    optim_param *params; /* [n_params] copy of the descriptors */
    int n_params;
    float *data; /* [n_floats] the flat weights (not owned) */
    float *grad; /* [n_floats] the flat gradients (not owned) */
    int64_t n_floats;
    float *m, *v;    /* [n_adamw_floats] AdamW moments */
    float *momentum; /* [n_muon_floats] Muon buffers */
    int64_t n_adamw_floats, n_muon_floats;
    int64_t *state_offset; /* [n_params] parameter i's state in m/v (AdamW) or momentum (Muon) */
    int *uses_muon;        /* [n_params] */
    int64_t step;          /* optimizer steps taken so far (AdamW's t is step + 1) */
    optim_chunk *chunks;   /* [n_chunks] the update's work, in its fixed order */
    int n_chunks;
    double *chunk_sums; /* [n_chunks] sums of squared gradients */
    float **ns_work;    /* [n_ns_work] Newton-Schulz workspaces, one per update thread (Muon only) */
    int n_ns_work;
} optimizer;

optim_hparams optim_hparams_default(void);
const char *optim_kind_name(optim_kind kind);

/* Copies the descriptors, checks that each lies inside data/grad [n_floats],
 * allocates (zeroed) state and the update plan for one thread. */
dt_status optim_init(optimizer *opt, optim_kind kind, const optim_param *params, int n_params, float *data, float *grad,
                     int64_t n_floats, const optim_hparams *hp);
void optim_free(optimizer *opt);
/* Lets optim_update run on up to n_threads threads (Muon needs a workspace each). */
dt_status optim_reserve_threads(optimizer *opt, int n_threads);

/* Is parameter i updated by Muon (else AdamW)? */
int optim_is_muon(const optimizer *opt, int index);
/* Parameter i's state [size]: AdamW's moments (NULL for a Muon parameter),
 * Muon's momentum (NULL for an AdamW parameter). */
float *optim_adamw_m(const optimizer *opt, int index);
float *optim_adamw_v(const optimizer *opt, int index);
float *optim_muon_momentum(const optimizer *opt, int index);

typedef struct optim_update_args {
    double lr, muon_lr;        /* this step's learning rates (AdamW's, Muon's) */
    float grad_scale;          /* 1 / micro-batches */
    double max_norm;           /* clip threshold (0: no clipping) */
    float *const *extra_grads; /* [n_extra] other threads' flat gradient copies [n_floats], same layout */
    int n_extra;
    const dt_comm *comm; /* NULL: one process */
    int n_threads;       /* threads of the pass (<= optim_reserve_threads'; < 1: one) */
    /* The spike guard's say (train/spike_guard.h): skip the update outright,
     * or when the norm exceeds skip_norm_above (0: no limit). A skipped
     * update zeroes the gradients and leaves weights, moments and step alone. */
    int skip_update;
    double skip_norm_above;
} optim_update_args;

/* Whether an update with gradient norm `norm` is (was) skipped under a's skip fields. */
int optim_update_skipped(const optim_update_args *a, double norm);

/* The update pass (above). *grad_norm gets the pre-clip norm (non-finite:
 * nothing was updated). DT_ERR only when the communicator fails. */
dt_status optim_update(optimizer *opt, const optim_update_args *args, double *grad_norm);

/* AdamW's per-step constants, computed once per update in double
 * (beta2^t stays accurate for long runs). */
typedef struct optim_adamw_step {
    float step_size, inv_sqrt_bias2, epsilon, b1, b2, one_minus_b1, one_minus_b2;
} optim_adamw_step;
optim_adamw_step optim_adamw_step_at(const optim_hparams *hp, int64_t t, double lr);

/* The update rules on one piece of memory (what optim_update applies per chunk). */
/* data, grad, m, v [n]: AdamW on clip * grad with the decoupled decay factor
 * `decay` (1 - lr * weight_decay), then grad <- 0. */
void optim_adamw_update(float *data, float *grad, float *m, float *v, int64_t n, float clip, float decay,
                        const optim_adamw_step *k);
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

#endif
