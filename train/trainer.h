/* The training loop.
 *
 * A step is grad_accum micro-batches of batch_size x seq_len tokens: for each,
 * model_forward and ag_backward (parameter gradients accumulate), the batch's
 * rows split over the threads (train/parallel_step.h); then one pass takes
 * the average over micro-batches, the global-norm clip, one optimizer step at
 * the schedule's learning rate, and zeroes the gradients. The run stops at the
 * token budget (train.tokens), so two models given the same budget have seen
 * the same number of tokens (the matched-token comparison). Evaluation on the
 * validation sweep runs every eval_every steps and at the end; checkpoints
 * every checkpoint_every steps and at the end (also when stopped).
 *
 * After the first step nothing on a step's path calls malloc: activations
 * and the tape come from each worker's arena, which folds into one chunk at
 * the second reset, and every other buffer is allocated in trainer_init.
 *
 * A resumed run (options.resume_path) restores weights, optimizer state, the
 * batch stream and the trainer RNG, so with the same thread count it produces
 * the same per-step losses, bit for bit, as the run that was never stopped.
 *
 * A non-finite loss or gradient norm stops the run with an error before the
 * optimizer touches the weights; no checkpoint is written then, so the last
 * good one stays on disk.
 *
 * Several processes (options.comm, core/comm.h): every one draws the whole
 * batch from the same seeded stream and trains on its equal share of the
 * rows (train.batch_size must split evenly); the step's losses are the
 * job's means, evaluation windows are shared out, a stop request (a signal
 * or the time limit) on any process stops all at the same step, and rank 0
 * alone logs and writes checkpoints. */
#ifndef TRAIN_TRAINER_H
#define TRAIN_TRAINER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "autograd/tape.h"
#include "core/comm.h"
#include "data/loader.h"
#include "data/tokens.h"
#include "models/model.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/grad_spikes.h"
#include "train/log.h"
#include "train/parallel_step.h"
#include "train/run_config.h"
#include "train/spike_guard.h"

typedef struct trainer_options {
    const char *resume_path;          /* continue from this checkpoint (NULL: a fresh run) */
    FILE *progress;                   /* human progress (NULL: silent) */
    volatile sig_atomic_t *stop_flag; /* set from a signal handler: finish the step, checkpoint, return */
    int64_t stop_after_step;          /* > 0: stop (with a checkpoint) once this many steps are done */
    double time_limit_seconds;        /* > 0: stop (with a checkpoint) before a step would end past this many
                                         seconds of this call's loop (train/time_limit.h) */
    int64_t poison_step;              /* test hook, > 0: a NaN is written into final_norm before this step */
    int64_t pause_after_step;         /* test hook, > 0: the process stops itself (SIGSTOP) once this step is
                                         logged, before any checkpoint, so a test can SIGKILL it at a known point */
    const dt_comm *comm;              /* the job's processes (NULL: this one alone) */
    int64_t garbage_batch_step;       /* test hook, > 0: that step's (1-based) targets are replaced by
                                         arbitrary token ids, a loss spike for the spike guard to catch */
} trainer_options;

/* Why a run ended before its budget (trainer_result.stopped). */
typedef enum {
    TRAIN_STOP_NONE = 0,   /* not stopped: the budget was reached */
    TRAIN_STOP_SIGNAL,     /* options.stop_flag (SIGINT / SIGTERM), on any process */
    TRAIN_STOP_STEP,       /* options.stop_after_step */
    TRAIN_STOP_TIME_LIMIT, /* options.time_limit_seconds */
} train_stop_reason;

typedef struct trainer_result {
    int64_t steps;  /* steps completed (over all segments of the run) */
    int64_t tokens; /* training tokens seen */
    int stopped;    /* 1: stopped early (stop_reason says why); a checkpoint was written */
    train_stop_reason stop_reason;
    int evaluated; /* final_eval holds the end-of-run evaluation */
    train_eval_record final_eval;
    double elapsed_seconds;
} trainer_result;

typedef struct trainer {
    train_config cfg;
    trainer_options options;
    char *config_text; /* resolved INI text (stored in checkpoints) */
    char checkpoint_path[TRAIN_PATH_MAX + 32];
    char trunk_path[TRAIN_PATH_MAX + 32]; /* out_dir/trunk.h5 (train.save_trunk; train/trunk.h) */
    int64_t trunk_step;                   /* the step count it is written at (-1: none) */
    char log_path[2 * TRAIN_PATH_MAX];
    const dt_comm *comm; /* options.comm, or the single-process communicator */
    model model;
    optimizer opt;
    optim_schedule schedule;
    data_tokens tokens;
    data_loader loader;
    train_parallel parallel;             /* forward+backward split over threads, and the fused update */
    dt_tensor *inputs, *targets;         /* int32 [B, T] heap tensors reused every micro-batch */
    int64_t rank_rows;                   /* B / processes: the rows this process trains on */
    dt_tensor rank_inputs, rank_targets; /* int32 [rank_rows, T] views of this process's rows */
    train_state state;
    train_spike_guard spike;       /* train.spike_zscore's window (checkpointed with state) */
    train_grad_spikes grad_spikes; /* the gradient-norm watch (likewise) */
    train_log log;
    int64_t total_steps;
    int64_t last_checkpoint_step;                   /* -1: none on disk (written by this process or resumed from) */
    char last_checkpoint_path[TRAIN_PATH_MAX + 32]; /* the file holding it ("" when none) */
    int lock_fd;                                    /* out_dir/train.lock, flock'ed for the run's lifetime (-1: none) */
    int ready;                                      /* bit flags of what trainer_free must release */
} trainer;

/* Builds everything (fresh or resumed); cfg must have passed train_config_validate. */
dt_status trainer_init(trainer *t, const train_config *cfg, const trainer_options *options);
void trainer_free(trainer *t);

/* One optimizer step; fills *record (also written to the log). */
dt_status trainer_step(trainer *t, train_step_record *record);
/* Validation loss over the sweep (eval_windows windows, or all), no-grad mode. */
dt_status trainer_evaluate(trainer *t, train_eval_record *record);
/* Writes out_dir/checkpoint.h5 (PATH.tmp + rename). */
dt_status trainer_save(trainer *t);
/* The loop: steps to the budget (or a stop), evaluations, checkpoints. */
dt_status trainer_run(trainer *t, trainer_result *result);

/* The optimizer settings of a run configuration (betas, eps, weight decays, Muon momentum). */
optim_hparams trainer_optim_hparams(const train_config *c);
/* The run's optimizer (train.optimizer, trainer_optim_hparams) over m's flat buffers. */
dt_status trainer_optimizer_init(optimizer *opt, model *m, const train_config *c);

/* The parameters' optimizer view (offsets into the model's flat buffers):
 * decay for matrices that are not embeddings; Muon for the same set minus MoE
 * routers (which stay on AdamW). */
void trainer_describe_params(const model *m, optim_param *out);
/* The AdamW parameter groups (train.embed_lr, head_lr, vector_lr; 0 = lr):
 * sets each descriptor's lr_scale = its group's lr / train.lr, so the groups
 * follow the one schedule at their own peaks (as muon_lr does). Groups:
 * tok_emb, tok_emb2, pos_emb and branch.tok_emb (embed_lr); an untied lm_head
 * (head_lr; a tied one is tok_emb); 1-D tensors: norms, biases, the coupling
 * vectors, attn_res routes (vector_lr); anything else on AdamW (routers, or
 * every matrix with optimizer = adamw) keeps lr. */
void trainer_assign_lr_groups(const model *m, const train_config *c, optim_param *params);

#endif
