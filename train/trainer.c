/* The training loop (see trainer.h): setup of a fresh or resumed run, one
 * optimizer step, the validation sweep, checkpoints, and the loop tying them
 * together with the token budget, evaluation and checkpoint cadence, stop
 * requests and divergence. */
#include "train/trainer.h"
#include "train/branch_norms.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/output_dir.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "models/model_budget.h"
#include "models/model_io.h"
#include "train/checkpoint_rotation.h"
#include "train/machine_load.h"
#include "train/provenance.h"
#include "train/time_limit.h"
#include "train/trunk.h"

/* What trainer_free must release (trainer.ready bits). */
enum {
    READY_MODEL = 1 << 0,
    READY_OPTIM = 1 << 1,
    READY_TOKENS = 1 << 2,
    READY_LOADER = 1 << 3,
    READY_PARALLEL = 1 << 4,
    READY_LOG = 1 << 5,
};

/* Independent streams from one seed: weights, batches, the trainer's own draws. */
static uint64_t stream_seed(int64_t seed, uint64_t stream) { return (uint64_t)seed * 0x9E3779B97F4A7C15ULL + stream; }

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One run per output directory: an exclusive flock on out_dir/train.lock,
 * held until trainer_free (the kernel drops it when the process dies, so a
 * killed run never leaves a stale lock). The file holds the holder's pid, so
 * the refused run can name it. */
static dt_status lock_out_dir(trainer *t, const char *out_dir) {
    char path[TRAIN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/train.lock", out_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return dt_errorf("%s: cannot create the lock file (%s)", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        char holder[32] = "";
        ssize_t n = busy ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        int saved = errno;
        close(fd);
        if (busy)
            return dt_errorf("%s: another dbranch train is using this directory (pid %s)", out_dir,
                             holder[0] ? holder : "unknown");
        return dt_errorf("%s: cannot lock (%s)", path, strerror(saved));
    }
    char pid[32];
    int length = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)length, 0) != length) {
        int saved = errno;
        close(fd);
        return dt_errorf("%s: cannot write (%s)", path, strerror(saved));
    }
    t->lock_fd = fd;
    return DT_OK;
}

void trainer_describe_params(const model *m, optim_param *out) {
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        const dt_tensor *t = p->tensor;
        optim_param *o = &out[i];
        memset(o, 0, sizeof *o);
        o->name = p->name;
        o->offset = dt_f32(t) - m->params_memory; /* the same in grads_memory */
        o->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            o->shape[d] = t->shape[d];
        o->size = t->size;
        o->decay = p->is_matrix && !p->is_embedding;
        /* Hidden matrices only: the router's few rows choose experts, and
         * orthogonalising them would erase the scale the top-k reads. */
        o->muon = o->decay && strstr(p->name, "router") == NULL;
    }
}

/* The checkpoint's model must be the configured one: compare key by key. */
static dt_status check_same_model(const model_config *stored, const model_config *wanted, const char *path) {
    for (int i = 0; i < model_config_key_count(); i++) {
        const char *key = model_config_key(i);
        char a[128], b[128];
        if (model_config_get(stored, key, a, sizeof a) != DT_OK || model_config_get(wanted, key, b, sizeof b) != DT_OK)
            return DT_ERR;
        if (strcmp(a, b))
            return dt_errorf("%s holds a model with model.%s = %s, the run's config says %s", path, key, a, b);
    }
    return DT_OK;
}

static dt_status setup_model(trainer *t) {
    const char *resume = t->options.resume_path;
    /* Before any allocation: weights, gradients, optimizer state and the workers' gradient copies must fit. */
    const int64_t threads = t->cfg.threads > 0 ? t->cfg.threads : k_get_threads();
    const model_use use = t->cfg.precision == TRAIN_PRECISION_BF16 ? MODEL_USE_TRAIN_BF16 : MODEL_USE_TRAIN;
    if (model_budget_check(&t->cfg.model, use, threads, 0, 0) != DT_OK) return DT_ERR;
    if (resume) {
        if (model_load(&t->model, resume) != DT_OK) return DT_ERR;
        t->ready |= READY_MODEL;
        return check_same_model(&t->model.config, &t->cfg.model, resume);
    }
    if (t->cfg.init_from[0]) {
        /* train.init_from: the weights only; optimizer, data position and RNGs start fresh. */
        if (model_load(&t->model, t->cfg.init_from) != DT_OK) return dt_error_context("train.init_from");
        t->ready |= READY_MODEL;
        return check_same_model(&t->model.config, &t->cfg.model, t->cfg.init_from);
    }
    if (model_create(&t->model, &t->cfg.model) != DT_OK) return DT_ERR;
    t->ready |= READY_MODEL;
    dt_rng init_rng;
    dt_rng_seed(&init_rng, stream_seed(t->cfg.seed, 0));
    model_init_weights(&t->model, &init_rng);
    return DT_OK;
}

optim_hparams trainer_optim_hparams(const train_config *c) {
    optim_hparams hp = optim_hparams_default();
    hp.beta1 = c->beta1;
    hp.beta2 = c->beta2;
    hp.eps = c->eps;
    hp.weight_decay = c->weight_decay;
    hp.muon_momentum = c->muon_momentum;
    hp.muon_weight_decay = c->muon_weight_decay;
    return hp;
}

void trainer_assign_lr_groups(const model *m, const train_config *c, optim_param *params) {
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        /* A tied head is tok_emb: one tensor, in the embedding group. */
        const double group_lr = p->tensor == m->lm_head && m->lm_head != m->tok_emb ? c->head_lr
                                : p->is_embedding                                   ? c->embed_lr
                                : p->tensor->ndim == 1                              ? c->vector_lr
                                                                                    : 0.0;
        params[i].lr_scale = group_lr > 0.0 ? group_lr / c->lr : 1.0;
    }
}

dt_status trainer_optimizer_init(optimizer *opt, model *m, const train_config *c) {
    optim_param *params = calloc((size_t)(m->n_params > 0 ? m->n_params : 1), sizeof *params);
    if (!params) return dt_errorf("trainer: out of memory");
    trainer_describe_params(m, params);
    trainer_assign_lr_groups(m, c, params);
    const optim_hparams hp = trainer_optim_hparams(c);
    const dt_status status =
        optim_init(opt, c->optimizer, params, m->n_params, m->params_memory, m->grads_memory, m->n_floats, &hp);
    free(params); /* optim_init keeps a copy */
    return status;
}

static dt_status setup_optimizer(trainer *t) {
    const train_config *c = &t->cfg;
    if (trainer_optimizer_init(&t->opt, &t->model, c) != DT_OK) return DT_ERR;
    t->ready |= READY_OPTIM;
    t->schedule = train_config_schedule(c);
    return DT_OK;
}

static dt_status setup_data(trainer *t) {
    const train_config *c = &t->cfg;
    if (data_tokens_open(&t->tokens, c->data_path) != DT_OK) return DT_ERR;
    t->ready |= READY_TOKENS;
    if (t->tokens.vocab_size > c->model.vocab_size)
        return dt_errorf("%s: its tokenizer has %lld tokens but model.vocab_size = %lld", c->data_path,
                         (long long)t->tokens.vocab_size, (long long)c->model.vocab_size);
    if (data_split_windows(&t->tokens, SPLIT_VAL, c->seq_len) < 1)
        return dt_errorf("%s: /val has %lld tokens, fewer than seq_len + 1 = %lld (nothing to evaluate on)",
                         c->data_path, (long long)t->tokens.split_length[SPLIT_VAL], (long long)(c->seq_len + 1));
    if (data_loader_init(&t->loader, &t->tokens, c->batch_size, c->seq_len, stream_seed(c->seed, 1)) != DT_OK)
        return DT_ERR;
    t->ready |= READY_LOADER;
    t->inputs = dt_tensor_new(DT_I32, DT_SHAPE(c->batch_size, c->seq_len));
    t->targets = dt_tensor_new(DT_I32, DT_SHAPE(c->batch_size, c->seq_len));
    if (!t->inputs || !t->targets) return DT_ERR;
    return DT_OK;
}

static dt_status setup_state(trainer *t) {
    const char *resume = t->options.resume_path;
    memset(&t->state, 0, sizeof t->state);
    if (!resume) {
        t->state.loader_rng = t->loader.rng;
        dt_rng_seed(&t->state.trainer_rng, stream_seed(t->cfg.seed, 2));
        t->state.processes = t->comm->size;
        return DT_OK;
    }
    if (train_checkpoint_read_optim(resume, &t->opt) != DT_OK) return DT_ERR;
    if (train_checkpoint_read_state(resume, &t->state, NULL) != DT_OK) return DT_ERR;
    /* Only ordered sums are the same float operations at every process count. */
    if (t->state.processes != t->comm->size && t->cfg.reduce != DT_COMM_REDUCE_ORDERED)
        return dt_errorf("%s was trained by %lld processes; resuming with %d needs train.reduce = ordered (fast sums "
                         "depend on the process count)",
                         resume, (long long)t->state.processes, t->comm->size);
    t->state.processes = t->comm->size;
    if (t->state.step > t->total_steps)
        return dt_errorf("%s: /train: 'step' = %lld is beyond this run's %lld steps (train.tokens = %lld)", resume,
                         (long long)t->state.step, (long long)t->total_steps, (long long)t->cfg.tokens);
    t->loader.rng = t->state.loader_rng;
    t->loader.windows_drawn = t->state.windows_drawn;
    /* The resumed-from file is the last good checkpoint until this run writes one. */
    t->last_checkpoint_step = t->state.step;
    snprintf(t->last_checkpoint_path, sizeof t->last_checkpoint_path, "%s", resume);
    return DT_OK;
}

dt_status trainer_init(trainer *t, const train_config *cfg, const trainer_options *options) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    if (options) t->options = *options;
    t->last_checkpoint_step = -1;
    t->comm = t->options.comm ? t->options.comm : dt_comm_single();
    t->lock_fd = -1;
    const train_config *c = &t->cfg;
    if (c->threads > 0) k_set_threads((int)c->threads);
    t->total_steps = train_config_total_steps(c);

    size_t length = train_config_format(c, NULL, 0);
    t->config_text = malloc(length + 1);
    if (!t->config_text) return dt_errorf("trainer: out of memory");
    train_config_format(c, t->config_text, length + 1);

    /* rank 0 alone writes the directory, so it alone holds the lock (a job's
     * other processes would otherwise see it taken) */
    if (dt_make_dirs(c->out_dir) != DT_OK || (t->comm->rank == 0 && lock_out_dir(t, c->out_dir) != DT_OK)) goto fail;
    snprintf(t->checkpoint_path, sizeof t->checkpoint_path, "%s/checkpoint.h5", c->out_dir);
    snprintf(t->trunk_path, sizeof t->trunk_path, "%s/trunk.h5", c->out_dir);
    t->trunk_step = train_trunk_step(c);
    if (c->log_file[0] == '/')
        snprintf(t->log_path, sizeof t->log_path, "%s", c->log_file);
    else
        snprintf(t->log_path, sizeof t->log_path, "%s/%s", c->out_dir, c->log_file);

    if (c->batch_size % t->comm->size != 0) {
        dt_errorf("train.batch_size = %lld does not split evenly over %d processes", (long long)c->batch_size,
                  t->comm->size);
        goto fail;
    }
    t->rank_rows = c->batch_size / t->comm->size;
    if (setup_model(t) != DT_OK || setup_optimizer(t) != DT_OK || setup_data(t) != DT_OK || setup_state(t) != DT_OK)
        goto fail;
    if (train_spike_guard_init(&t->spike, c->spike_zscore, c->spike_window) != DT_OK ||
        (t->options.resume_path && train_spike_guard_read(t->options.resume_path, &t->spike) != DT_OK) ||
        (t->options.resume_path && train_grad_spikes_read(t->options.resume_path, &t->grad_spikes) != DT_OK))
        goto fail;
    t->state.spike_guard = &t->spike;
    t->state.grad_spikes = &t->grad_spikes;
    /* This process's rows split over the threads (train/parallel_step.h);
     * MoE and one-thread runs take the plain path inside it. */
    if (train_parallel_init(&t->parallel, &t->model, &t->opt, t->comm, t->rank_rows, c->seq_len, k_get_threads(), 1) !=
        DT_OK)
        goto fail;
    t->ready |= READY_PARALLEL;
    /* train.precision = bf16: the weights' bf16 copies (the replicas share
     * them), refreshed at the start of every step. */
    if (c->precision == TRAIN_PRECISION_BF16) {
        if (train_bf16_attention_check(c) != DT_OK) goto fail;
        if (model_enable_bf16(&t->model) != DT_OK) goto fail;
        t->parallel.bf16_products = 1;
        t->parallel.bf16_attention = train_bf16_attention_engine(c);
    }
    /* Every process starts from rank 0's weights (they agree anyway: same seed or same checkpoint). */
    if (t->comm->broadcast(t->comm, t->model.params_memory, (size_t)t->model.n_floats * sizeof(float), 0) != DT_OK)
        goto fail;
    int64_t print_every = c->print_every > 0 ? c->print_every : (t->total_steps + 49) / 50;
    const int logs = t->comm->rank == 0; /* one log for the job */
    if (train_log_open(&t->log, logs ? t->log_path : NULL, t->options.resume_path != NULL,
                       logs ? t->options.progress : NULL, print_every) != DT_OK)
        goto fail;
    t->ready |= READY_LOG;
    /* The log's first record (and OUT/provenance.json): what produced this run (train/provenance.h). */
    if (logs && train_provenance_record(c, t->config_text, t->options.resume_path, t->state.step, t->log.file,
                                        t->log_path, t->comm->size) != DT_OK)
        goto fail;
    return DT_OK;
fail : {
    /* the first error is the one to report: closing what was opened may fail too (a full disk) */
    char first[1024];
    snprintf(first, sizeof first, "%s", dt_error_message());
    trainer_free(t);
    return dt_errorf("%s", first);
}
}

void trainer_free(trainer *t) {
    if (t->ready & READY_LOG) train_log_close(&t->log);
    train_spike_guard_free(&t->spike);
    if (t->ready & READY_PARALLEL) train_parallel_free(&t->parallel);
    dt_tensor_free(t->inputs);
    dt_tensor_free(t->targets);
    if (t->ready & READY_LOADER) data_loader_free(&t->loader);
    if (t->ready & READY_TOKENS) data_tokens_close(&t->tokens);
    if (t->ready & READY_OPTIM) optim_free(&t->opt);
    if (t->ready & READY_MODEL) model_free(&t->model);
    free(t->config_text);
    if (t->lock_fd >= 0) close(t->lock_fd); /* releases the flock */
    memset(t, 0, sizeof *t);
    t->lock_fd = -1;
}

/* rank_inputs, rank_targets: rows [first, first + rows) of inputs, targets [B, T]. */
static dt_status rank_views(trainer *t, int64_t first, int64_t rows) {
    const int64_t T = t->cfg.seq_len;
    if (dt_tensor_init(&t->rank_inputs, DT_I32, DT_SHAPE(rows, T), dt_i32(t->inputs) + first * T) != DT_OK ||
        dt_tensor_init(&t->rank_targets, DT_I32, DT_SHAPE(rows, T), dt_i32(t->targets) + first * T) != DT_OK)
        return DT_ERR;
    return DT_OK;
}

/* The passes of latent feedback a step runs (SPEC §6.5): K = 1 for the
 * first feedback_start of the steps, then a draw from feedback_passes, from
 * the trainer's checkpointed stream (so a resumed run draws the same). */
static int64_t feedback_passes_of_step(trainer *t, int64_t step) {
    const train_config *c = &t->cfg;
    if (train_config_single_pass_step(c, step)) return 1;
    return train_pass_mix_pick(&c->feedback_passes, (double)dt_rng_uniform(&t->state.trainer_rng));
}

/* The micro-batch's feedback run: the step's K, its own seed for the jitter
 * and prefix draws, this process's first row of the batch. */
static model_feedback_run feedback_run_of(trainer *t, int64_t passes) {
    const train_config *c = &t->cfg;
    model_feedback_run run = model_feedback_plain();
    if (!c->model.feedback) return run;
    run.passes = passes;
    run.lambda = c->feedback_lambda;
    run.jitter = (float)c->feedback_jitter;
    run.prefix_mixin = (int)c->feedback_prefix_mixin;
    run.seed = dt_rng_next(&t->state.trainer_rng);
    run.first_row = t->comm->rank * t->rank_rows;
    return run;
}

dt_status trainer_step(trainer *t, train_step_record *record) {
    const train_config *c = &t->cfg;
    const int64_t step = t->state.step; /* 0-based index of the step being taken */
    const double start = now_seconds();
    /* The final norm's weight: every position of every family reads it. */
    if (t->options.poison_step > 0 && step + 1 == t->options.poison_step) dt_f32(t->model.final_norm)[0] = NAN;
    /* The weights as the last update (or the checkpoint, or the broadcast) left them, rounded once for the step. */
    model_refresh_bf16(&t->model);

    /* Sums over the micro-batches of objective, loss, primary, branch, alpha:
     * this process's rows, then (several processes) the mean over them. */
    double sums[5] = {0, 0, 0, 0, 0};
    const double inv = 1.0 / (double)c->grad_accum;
    const int64_t passes = feedback_passes_of_step(t, step);
    for (int64_t micro = 0; micro < c->grad_accum; micro++) {
        t->parallel.feedback = feedback_run_of(t, passes);
        /* Every process draws the whole batch (one seeded stream) and takes its rows. */
        if (data_loader_next(&t->loader, dt_i32(t->inputs), dt_i32(t->targets)) != DT_OK ||
            rank_views(t, t->comm->rank * t->rank_rows, t->rank_rows) != DT_OK)
            return DT_ERR;
        if (t->options.garbage_batch_step > 0 && step + 1 == t->options.garbage_batch_step)
            for (int64_t i = 0; i < t->targets->size; i++)
                dt_i32(t->targets)[i] = (int32_t)((i * 7919 + 13) % c->model.vocab_size);
        train_parallel_losses losses;
        if (train_parallel_forward_backward(&t->parallel, &t->rank_inputs, &t->rank_targets, &losses) != DT_OK)
            return dt_error_context("step %lld", (long long)(step + 1));
        sums[0] += losses.objective;
        sums[1] += losses.loss;
        sums[2] += losses.loss_primary;
        sums[3] += losses.loss_branch;
        sums[4] += losses.alpha;
    }
    if (t->comm->size > 1) {
        if (t->comm->allreduce_f64(t->comm, sums, 5) != DT_OK)
            return dt_error_context("step %lld", (long long)(step + 1));
        for (int k = 0; k < 5; k++)
            sums[k] /= (double)t->comm->size;
    }
    /* Checked on the job's sums, so every process stops at the same step. */
    if (!isfinite(sums[0]))
        return dt_errorf("step %lld: loss is %g; stopping (the weights are not saved)", (long long)(step + 1),
                         sums[0] * inv);
    double lr = optim_schedule_lr(&t->schedule, step);
    double grad_norm;
    /* The spike guard (train/spike_guard.h): the objective is judged now, the norm inside the update. */
    const double mean_objective = sums[0] * inv; /* the job's mean: every process decides alike */
    t->parallel.skip_update = train_spike_guard_objective_spike(&t->spike, mean_objective);
    t->parallel.skip_norm_above = train_spike_guard_norm_limit(&t->spike);
    /* One pass: sum over workers, 1/grad_accum, norm, clip, optimizer (Muon
     * at its own peak on the same schedule shape), zeroed gradients. */
    if (train_parallel_update(&t->parallel, lr, c->muon_lr * lr / c->lr, 1.0f / (float)c->grad_accum, c->grad_clip,
                              &grad_norm) != DT_OK)
        return dt_error_context("step %lld", (long long)(step + 1));
    if (!isfinite(grad_norm))
        return dt_errorf("step %lld: gradient norm is %g; stopping (the weights are not saved)", (long long)(step + 1),
                         grad_norm);
    const int skipped = train_parallel_update_skipped(&t->parallel, grad_norm);
    train_spike_guard_record(&t->spike, mean_objective, grad_norm, skipped);
    train_grad_spikes_record(&t->grad_spikes, grad_norm);

    const int64_t step_tokens = train_config_tokens_per_step(c);
    const double seconds = now_seconds() - start;
    t->state.step++;
    t->state.tokens_seen += step_tokens;
    t->state.elapsed_seconds += seconds;
    t->state.loader_rng = t->loader.rng;
    t->state.windows_drawn = t->loader.windows_drawn;

    *record = (train_step_record){
        .step = t->state.step,
        .total_steps = t->total_steps,
        .tokens = t->state.tokens_seen,
        .lr = lr,
        .loss = sums[1] * inv,
        .loss_primary = sums[2] * inv,
        .loss_branch = sums[3] * inv,
        .alpha = sums[4] * inv,
        .objective = sums[0] * inv,
        .grad_norm = grad_norm,
        .tokens_per_s = seconds > 0 ? (double)step_tokens / seconds : 0,
        .step_seconds = seconds,
        .elapsed = t->state.elapsed_seconds,
        .skipped_updates = t->spike.skipped,
        .feedback_passes = c->model.feedback ? passes : 0,
    };
    return train_log_step(&t->log, record);
}

dt_status trainer_evaluate(trainer *t, train_eval_record *record) {
    const train_config *c = &t->cfg;
    const int64_t T = c->seq_len, B = t->rank_rows;
    int64_t n_windows = data_split_windows(&t->tokens, SPLIT_VAL, T);
    if (c->eval_windows > 0 && c->eval_windows < n_windows) n_windows = c->eval_windows;
    /* Sums over the windows: loss, primary, branch, alpha (one allreduce over the processes). */
    double sums[4] = {0, 0, 0, 0};
    dt_status status = DT_OK;
    /* Batch b is process b % size's: every window is evaluated once over the job. */
    const int64_t stride = B * t->comm->size;
    for (int64_t first = B * t->comm->rank; first < n_windows && status == DT_OK; first += stride) {
        const int64_t rows = n_windows - first < B ? n_windows - first : B;
        int32_t *inputs = dt_i32(t->inputs), *targets = dt_i32(t->targets);
        for (int64_t r = 0; r < rows && status == DT_OK; r++)
            status = data_eval_window(&t->tokens, SPLIT_VAL, first + r, n_windows, T, inputs + r * T, targets + r * T);
        if (status != DT_OK || (status = rank_views(t, 0, B)) != DT_OK) break;
        train_parallel_losses losses;
        status = train_parallel_evaluate(&t->parallel, &t->rank_inputs, &t->rank_targets, rows, &losses);
        if (status != DT_OK) break;
        /* Every window has T positions: weighting batch means by rows gives the mean over positions. */
        sums[0] += losses.loss * (double)rows;
        sums[1] += losses.loss_primary * (double)rows;
        sums[2] += losses.loss_branch * (double)rows;
        sums[3] += losses.alpha * (double)rows;
    }
    if (status == DT_OK && t->comm->size > 1) status = t->comm->allreduce_f64(t->comm, sums, 4);
    if (status != DT_OK) return dt_error_context("evaluation at step %lld", (long long)t->state.step);
    const double inv = 1.0 / (double)n_windows;
    const train_branch_norms norms = train_branch_norms_of(&t->model);
    int64_t spikes;
    double largest;
    train_grad_spikes_take(&t->grad_spikes, &spikes, &largest);
    double load[3];
    train_machine_load(load);
    *record = (train_eval_record){
        .step = t->state.step,
        .tokens = t->state.tokens_seen,
        .windows = n_windows,
        .loss = sums[0] * inv,
        .loss_primary = sums[1] * inv,
        .loss_branch = sums[2] * inv,
        .alpha = sums[3] * inv,
        .elapsed = t->state.elapsed_seconds,
        .couple_q_norm = norms.couple_q,
        .couple_hidden_norm = norms.couple_hidden,
        .couple_out_norm = norms.couple_out,
        .branch_emb_norm = norms.branch_emb,
        .grad_spikes = spikes,
        .grad_spike_largest = largest,
        .load_avg_1m = load[0],
    };
    return train_log_eval(&t->log, record);
}

dt_status trainer_save(trainer *t) {
    /* One file for the job: the processes hold the same weights and state. */
    if (t->comm->rank == 0 &&
        (train_checkpoint_save(t->checkpoint_path, &t->model, &t->opt, &t->state, &t->cfg) != DT_OK ||
         train_checkpoint_rotate(t->cfg.out_dir, t->checkpoint_path, t->state.step, t->cfg.keep_last) != DT_OK))
        return DT_ERR;
    t->last_checkpoint_step = t->state.step;
    snprintf(t->last_checkpoint_path, sizeof t->last_checkpoint_path, "%s", t->checkpoint_path);
    return DT_OK;
}

/* train.save_trunk: the state after the last constant-rate step, beside the
 * run's checkpoint (train/trunk.h). Not counted as the last good checkpoint:
 * the run goes on from its own. */
static dt_status save_trunk(trainer *t) {
    if (t->comm->rank == 0 && train_checkpoint_save(t->trunk_path, &t->model, &t->opt, &t->state, &t->cfg) != DT_OK)
        return DT_ERR;
    train_log_message(&t->log,
                      "trunk: %s at step %lld, the last at the peak rate (`dbranch train --resume %s --tokens N`, N "
                      "above %lld, is the run of N tokens from here)",
                      t->trunk_path, (long long)t->state.step, t->trunk_path, (long long)t->cfg.tokens);
    return DT_OK;
}

/* Why the loop should stop before the next step (TRAIN_STOP_NONE: it should
 * not). A signal or the time limit on any process stops every one at the
 * same step: the requests are summed over the job. */
static train_stop_reason stop_requested(const trainer *t, const train_time_limit *limit) {
    const int64_t next = t->state.step + 1;
    const int next_evaluates = next == t->total_steps || (t->cfg.eval_every > 0 && next % t->cfg.eval_every == 0);
    const int next_saves =
        (t->cfg.checkpoint_every > 0 && next % t->cfg.checkpoint_every == 0) || next == t->trunk_step;
    double requests[2] = {t->options.stop_flag && *t->options.stop_flag ? 1.0 : 0.0,
                          train_time_limit_reached(limit, now_seconds(), next_evaluates, next_saves) ? 1.0 : 0.0};
    if (t->comm->size > 1 && t->comm->allreduce_f64(t->comm, requests, 2) != DT_OK) return TRAIN_STOP_SIGNAL;
    if (requests[0] > 0.0) return TRAIN_STOP_SIGNAL;
    if (requests[1] > 0.0) return TRAIN_STOP_TIME_LIMIT;
    if (t->options.stop_after_step > 0 && t->state.step >= t->options.stop_after_step) return TRAIN_STOP_STEP;
    return TRAIN_STOP_NONE;
}

dt_status trainer_run(trainer *t, trainer_result *result) {
    const train_config *c = &t->cfg;
    memset(result, 0, sizeof *result);
    const int64_t params = model_param_count(&t->model, -1);
    train_log_message(&t->log, "training: %lld steps of %lld tokens (budget %lld), %s, %.2fM parameters",
                      (long long)t->total_steps, (long long)train_config_tokens_per_step(c), (long long)c->tokens,
                      optim_kind_name(c->optimizer), (double)params / 1e6);
    if (c->precision == TRAIN_PRECISION_BF16) {
        const k_bf16_gemm_engine engine = k_bf16_gemm_active();
        if (engine == K_BF16_GEMM_ONEDNN)
            train_log_message(&t->log,
                              "precision bf16: matrix products on oneDNN (%s), float32 sums and master weights",
                              k_bf16_gemm_onednn_kernel());
        else
            train_log_message(&t->log,
                              "precision bf16: %s; products run as float32 GEMMs of bf16-rounded operands (bf16 "
                              "numerics, a little below float32 speed)",
                              k_bf16_gemm_default() == K_BF16_GEMM_WIDEN ? "this CPU has no AVX512_BF16 or AMX-BF16"
                                                                         : "DBRANCH_BF16_GEMM=widen");
        const k_bf16_attention_engine attention = train_bf16_attention_engine(c);
        train_log_message(&t->log, "precision bf16: attention %s (train.bf16_attention = %s)",
                          attention == K_BF16_ATTENTION_AMX ? "on AMX tiles (bf16 products, float32 softmax)"
                          : attention == K_BF16_ATTENTION_AVX512_BF16
                              ? "on AVX512_BF16 (bf16 products, float32 softmax)"
                              : "in float32",
                          train_bf16_attention_name(c->bf16_attention));
    }
    if (t->options.resume_path)
        train_log_message(&t->log, "resumed from %s at step %lld (%lld tokens)", t->options.resume_path,
                          (long long)t->state.step, (long long)t->state.tokens_seen);

    dt_status status = DT_OK;
    train_step_record record;
    train_time_limit limit = train_time_limit_begin(t->options.time_limit_seconds, now_seconds());
    train_stop_reason stop = TRAIN_STOP_NONE;
    while (t->state.step < t->total_steps && (stop = stop_requested(t, &limit)) == TRAIN_STOP_NONE) {
        double began = now_seconds();
        if (trainer_step(t, &record) != DT_OK) {
            status = DT_ERR;
            break;
        }
        train_time_limit_saw_step(&limit, now_seconds() - began);
        const int64_t step = t->state.step;
        if (t->options.pause_after_step > 0 && step == t->options.pause_after_step) {
            raise(SIGSTOP); /* the log lines are already flushed */
        }
        if (step == t->total_steps) break; /* the final eval and checkpoint follow the loop */
        train_eval_record eval;
        if (c->eval_every > 0 && step % c->eval_every == 0) {
            began = now_seconds();
            if (trainer_evaluate(t, &eval) != DT_OK) {
                status = DT_ERR;
                break;
            }
            train_time_limit_saw_eval(&limit, now_seconds() - began);
        }
        if (c->checkpoint_every > 0 && step % c->checkpoint_every == 0) {
            began = now_seconds();
            if (trainer_save(t) != DT_OK) {
                status = DT_ERR;
                break;
            }
            train_time_limit_saw_save(&limit, now_seconds() - began);
        }
        if (step == t->trunk_step && save_trunk(t) != DT_OK) {
            status = DT_ERR;
            break;
        }
    }
    if (status != DT_OK) {
        if (t->last_checkpoint_step >= 0) {
            char message[512];
            snprintf(message, sizeof message, "%s", dt_error_message());
            dt_errorf("%s; last good checkpoint: %s (step %lld)", message, t->last_checkpoint_path,
                      (long long)t->last_checkpoint_step);
        }
        return DT_ERR;
    }

    if (t->state.step >= t->total_steps) {
        if (trainer_evaluate(t, &result->final_eval) != DT_OK) return DT_ERR;
        result->evaluated = 1;
    } else {
        result->stopped = 1;
        result->stop_reason = stop;
    }
    if (trainer_save(t) != DT_OK) return DT_ERR;
    train_log_message(&t->log, "%s at step %lld/%lld; checkpoint %s",
                      !result->stopped                               ? "finished"
                      : result->stop_reason == TRAIN_STOP_TIME_LIMIT ? "stopped at the time limit"
                                                                     : "stopped",
                      (long long)t->state.step, (long long)t->total_steps, t->checkpoint_path);
    /* The log's last bytes reach the disk before the run reports success. */
    t->ready &= ~READY_LOG;
    if (train_log_close(&t->log) != DT_OK) return DT_ERR;
    result->steps = t->state.step;
    result->tokens = t->state.tokens_seen;
    result->elapsed_seconds = t->state.elapsed_seconds;
    return DT_OK;
}
