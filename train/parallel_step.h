/* A training step split over threads by data: each thread runs the whole
 * forward and backward of its share of the batch's rows on its own tape, with
 * every kernel single-threaded, into its own flat gradient buffer; then the
 * optimizer's fused pass (optim/optim.h) sums the gradients, takes the global
 * norm, clips, applies the optimizer and zeroes the gradients, each thread on
 * its own fixed share of the parameters.
 *
 * Why: splitting each op over the threads instead (what the kernels do when
 * called outside a parallel region) costs a fork and a join per op, about 500
 * per step of a 4-layer model, and on a shared 2-core machine a join waits
 * whenever the partner thread is descheduled: under load a nanoGPT-baby step
 * took 16x longer with 2 threads than with 1. Here a step has two parallel
 * regions with one barrier each (forward+backward; update), and every GEMM
 * keeps the row count it had per thread anyway.
 *
 * What it computes: the mean loss over the whole batch and its gradient,
 * exactly as model_forward + ag_backward on the whole batch would, up to the
 * rounding of summing per-thread partial gradients (each thread's loss is
 * weighted by its share of the rows). The MoE balance term is a product of
 * two batch means and does not split over rows: MoE steps add one barrier
 * between the forward and the backward, where the workers' assignment
 * fractions are combined into the batch's and handed back to every worker's
 * balance terms, so their gradient (and the logged objective) is the whole
 * batch's too. One-thread runs and batches of one row run the plain path
 * (kernels threaded per op).
 *
 * Processes (the communicator, core/comm.h): this process's batch is its
 * share of the job's; the update pass sums the flat gradient over the
 * processes once per step and the MoE fractions are combined over them too.
 * With the single-process communicator nothing changes.
 *
 * Memory: each extra thread holds one extra flat copy of the gradients and its
 * own arena (the activations of its rows). Nothing allocates after the first
 * step. */
#ifndef TRAIN_PARALLEL_STEP_H
#define TRAIN_PARALLEL_STEP_H

#include <stdint.h>

#include "autograd/tape.h"
#include "core/comm.h"
#include "models/model.h"
#include "optim/optim.h"

/* Batch means of a micro-batch (NaN where the model has no such number). */
typedef struct train_parallel_losses {
    double objective; /* the training objective (model_outputs.loss) */
    double loss;      /* loss_reported: mixture NLL, or CE without a branch */
    double loss_primary;
    double loss_branch;
    double alpha; /* mean mixture weight */
} train_parallel_losses;

typedef struct train_parallel {
    model *model;         /* the model trained (not owned) */
    optimizer *opt;       /* its optimizer (not owned), over the model's flat buffers */
    const dt_comm *comm;  /* the processes of the job (not owned; single process by default) */
    int n_workers;        /* threads that split the batch (1: the plain path) */
    int n_update_threads; /* threads of the update pass */
    int64_t batch_size, seq_len;
    model *replicas;      /* [n_workers - 1] the model's weights with flat gradient buffers of their own */
    float **extra_grads;  /* [n_workers - 1] the replicas' grads_memory (what the update sums) */
    ag_ctx *contexts;     /* [n_workers] tape and arena of each worker */
    int64_t *row_begin;   /* [n_workers + 1] batch rows of each worker */
    double *balance_sums; /* [2, n_layer, n_expert] MoE: the batch's fractions and mean probabilities */
    dt_tensor *input_views, *target_views; /* [n_workers] row views of the batch */
    model_outputs *outputs;                /* [n_workers] each worker's last forward (its tensors live in its arena) */
    double forward_seconds, backward_seconds; /* worker 0's wall time in the last forward_backward (diagnostics) */
    double forward_cpu_seconds,
        backward_cpu_seconds; /* worker 0's thread CPU time, same (robust to a loaded machine) */
    /* The spike guard's say in the next update (train/spike_guard.h): skip it
     * outright, or when the norm exceeds skip_norm_above (0: no limit). A
     * skipped update zeroes the gradients and leaves weights and state alone. */
    int skip_update;
    double skip_norm_above;
    /* The passes of latent feedback the next training forward runs (SPEC
     * §6.5; the trainer sets them per micro-batch, first_row being this
     * process's first row). Evaluation always runs one plain pass. */
    model_feedback_run feedback;
    /* train.precision = bf16: the training forward and backward run bf16
     * products (ag_ctx.bf16_products; the caller keeps the model's bf16
     * copies fresh). Evaluation always runs float32 products. */
    int bf16_products;
    k_bf16_attention_engine bf16_attention; /* ag_ctx.bf16_attention of every context */
} train_parallel;

/* Sets up n_threads workers (0: k_get_threads()) for batches of B x T. The
 * optimizer must be over m's flat buffers (trainer_describe_params). comm:
 * the processes this one's batch is a share of (NULL: one process).
 * split_rows = 0 keeps one tape with the kernels threaded per op (the
 * comparison point; the update pass still uses n_threads). */
dt_status train_parallel_init(train_parallel *p, model *m, optimizer *opt, const dt_comm *comm, int64_t batch_size,
                              int64_t seq_len, int n_threads, int split_rows);
void train_parallel_free(train_parallel *p);

/* Forward and backward of one micro-batch: inputs, targets int32 [B, T].
 * The gradient of the batch-mean objective accumulates (+=) into the model's
 * gradients (summed over workers at the next update); *losses gets the
 * batch means. */
dt_status train_parallel_forward_backward(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets,
                                          train_parallel_losses *losses);

/* Forward only (no tape kept, no gradient) of the first `rows` rows of
 * inputs/targets [B, T] (rows <= B: a last, partial evaluation batch), the
 * rows split over the workers like a training batch; *losses gets the means
 * over those rows. */
dt_status train_parallel_evaluate(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets, int64_t rows,
                                  train_parallel_losses *losses);

/* The update after one or more micro-batches, the optimizer's fused pass
 * (optim_update): gradients summed over workers and over the processes,
 * scaled by grad_scale (1 / micro-batches) / processes, their global L2 norm
 * written to *grad_norm, clipped to max_norm (0: no clipping; PyTorch's
 * clip_grad_norm_ formula), one optimizer step at lr (AdamW) and muon_lr
 * (Muon), and every gradient zeroed. A non-finite norm updates nothing and
 * leaves the gradients summed: the caller stops (*grad_norm tells). The
 * update is skipped (gradients zeroed) when p->skip_update is set or the
 * norm exceeds p->skip_norm_above > 0. DT_ERR when the communicator fails. */
dt_status train_parallel_update(train_parallel *p, double lr, double muon_lr, float grad_scale, double max_norm,
                                double *grad_norm);
/* Whether an update with gradient norm `norm` is (was) skipped under p's skip fields. */
int train_parallel_update_skipped(const train_parallel *p, double norm);

#endif
