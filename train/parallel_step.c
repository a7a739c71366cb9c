/* Data-parallel training step (see parallel_step.h): weight-sharing replicas
 * with flat gradient buffers of their own, one tape per worker, the MoE
 * balance fractions combined between the forward and the backward, and the
 * call of the optimizer's fused update pass (optim/update.c) with the
 * replicas' gradients as the copies it sums.
 *
 * Determinism: rows go to workers by a fixed split, and the update's work is
 * a fixed list of chunks whose squared sums are added in list order, so a run
 * is bit-for-bit repeatable at a given thread count (and the gradient norm
 * does not depend on how chunks are shared among the threads). */
#include "train/parallel_step.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/ops.h"
#include "kernels/gemm.h"

enum { MESSAGE_SIZE = 512 };

static float *zeroed_floats(int64_t n) {
    void *p = NULL;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

/* The replica's tensor standing for `t` (a parameter of m), or t itself when
 * t is not a parameter (NULL stays NULL). */
static dt_tensor *remap(const model *m, const model *replica, dt_tensor *t) {
    if (!t) return NULL;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].tensor == t) return replica->params[i].tensor;
    return t;
}

/* model_block_weights and model_layer hold nothing but tensor pointers; if a
 * field is added there, it must be remapped below too. */
_Static_assert(sizeof(model_block_weights) == (8 + MODEL_FFN_SLOTS) * sizeof(dt_tensor *),
               "remap every model_block_weights field");
_Static_assert(sizeof(model_layer) ==
                   11 * sizeof(dt_tensor *) + sizeof(const float *) + 2 * sizeof(model_block_weights),
               "remap every model_layer field (rope_table is shared)");

static void remap_block(const model *m, const model *replica, model_block_weights *w) {
    dt_tensor **fields[] = {&w->wq, &w->wq_bias, &w->wk, &w->wk_bias, &w->wv, &w->wv_bias, &w->wo, &w->wo_bias};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        *fields[i] = remap(m, replica, *fields[i]);
    for (int slot = 0; slot < MODEL_FFN_SLOTS; slot++)
        w->ffn[slot] = remap(m, replica, w->ffn[slot]);
}

static void replica_free(model *replica) {
    if (replica->params)
        for (int i = 0; i < replica->n_params; i++)
            free(replica->params[i].tensor);
    free(replica->params);
    free(replica->layers);
    free(replica->grads_memory);
    memset(replica, 0, sizeof *replica);
}

/* A model sharing m's weights (and RoPE table) with a flat gradient buffer
 * of its own, laid out like m's. */
static dt_status replica_init(model *replica, const model *m) {
    *replica = *m;
    replica->params = calloc((size_t)m->n_params, sizeof *replica->params);
    replica->layers = calloc((size_t)m->config.n_layer, sizeof *replica->layers);
    replica->grads_memory = zeroed_floats(m->n_floats);
    if (!replica->params || !replica->layers || !replica->grads_memory) {
        free(replica->params);
        free(replica->layers);
        free(replica->grads_memory);
        memset(replica, 0, sizeof *replica);
        return dt_errorf("parallel step: out of memory for a model replica");
    }
    for (int i = 0; i < m->n_params; i++) {
        replica->params[i] = m->params[i];
        dt_tensor *t = malloc(sizeof *t);
        replica->params[i].tensor = t;
        if (!t) goto oom;
        *t = *m->params[i].tensor; /* a view of m's weights */
        t->producer = NULL;
        t->grad = replica->grads_memory + (m->params[i].tensor->grad - m->grads_memory);
    }
    replica->tok_emb = remap(m, replica, m->tok_emb);
    replica->tok_emb2 = remap(m, replica, m->tok_emb2);
    replica->pos_emb = remap(m, replica, m->pos_emb);
    replica->final_norm = remap(m, replica, m->final_norm);
    replica->final_norm_bias = remap(m, replica, m->final_norm_bias);
    replica->lm_head = remap(m, replica, m->lm_head);
    replica->branch_tok_emb = remap(m, replica, m->branch_tok_emb);
    replica->route_final_query = remap(m, replica, m->route_final_query);
    replica->route_final_norm = remap(m, replica, m->route_final_norm);
    replica->disco_norm = remap(m, replica, m->disco_norm);
    replica->disco_gate_weight = remap(m, replica, m->disco_gate_weight);
    replica->disco_gate_bias = remap(m, replica, m->disco_gate_bias);
    replica->feedback_w_u = remap(m, replica, m->feedback_w_u);
    replica->feedback_w_g = remap(m, replica, m->feedback_w_g);
    replica->feedback_norm_tok = remap(m, replica, m->feedback_norm_tok);
    replica->feedback_norm_in = remap(m, replica, m->feedback_norm_in);
    for (int64_t l = 0; l < m->config.n_layer; l++) {
        model_layer *layer = &replica->layers[l];
        *layer = m->layers[l];
        dt_tensor **fields[] = {&layer->attn_norm,       &layer->attn_norm_bias,   &layer->ffn_norm,
                                &layer->ffn_norm_bias,   &layer->couple_q,         &layer->couple_hidden,
                                &layer->couple_out,      &layer->route_attn_query, &layer->route_attn_norm,
                                &layer->route_ffn_query, &layer->route_ffn_norm};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            *fields[i] = remap(m, replica, *fields[i]);
        remap_block(m, replica, &layer->primary);
        remap_block(m, replica, &layer->branch);
    }
    return DT_OK;
oom:
    replica_free(replica);
    return dt_errorf("parallel step: out of memory for a model replica's gradients");
}

dt_status train_parallel_init(train_parallel *p, model *m, optimizer *opt, const dt_comm *comm, int64_t batch_size,
                              int64_t seq_len, int n_threads, int split_rows) {
    memset(p, 0, sizeof *p);
    p->model = m;
    p->opt = opt;
    p->comm = comm ? comm : dt_comm_single();
    p->batch_size = batch_size;
    p->seq_len = seq_len;
    p->feedback = model_feedback_plain();
    if (batch_size < 1 || seq_len < 1)
        return dt_errorf("parallel step: batch %lld x %lld (both must be positive)", (long long)batch_size,
                         (long long)seq_len);
    if (opt->data != m->params_memory || opt->grad != m->grads_memory || opt->n_floats != m->n_floats)
        return dt_errorf("parallel step: the optimizer does not describe the model's flat buffers "
                         "(trainer_describe_params)");
    if (n_threads <= 0) n_threads = k_get_threads();
    int workers = split_rows ? n_threads : 1;
    if (workers > batch_size) workers = (int)batch_size;
    if (workers < 1) workers = 1;
    p->n_workers = workers;
    p->n_update_threads = n_threads;
    if (optim_reserve_threads(opt, n_threads) != DT_OK) return DT_ERR;

    p->contexts = calloc((size_t)workers, sizeof *p->contexts);
    p->row_begin = calloc((size_t)workers + 1, sizeof *p->row_begin);
    p->input_views = calloc((size_t)workers, sizeof *p->input_views);
    p->target_views = calloc((size_t)workers, sizeof *p->target_views);
    p->outputs = calloc((size_t)workers, sizeof *p->outputs);
    p->extra_grads = calloc((size_t)workers, sizeof *p->extra_grads);
    if (!p->contexts || !p->row_begin || !p->input_views || !p->target_views || !p->outputs || !p->extra_grads)
        goto oom;
    if (m->config.family == FAMILY_MOE) {
        /* one term per application of each MoE layer: n_loop of them (SPEC §6.6), or up to
         * MODEL_FEEDBACK_MAX_PASSES with feedback (SPEC §6.5) */
        const int64_t terms = m->arch.n_loop * m->config.n_layer * (m->config.feedback ? MODEL_FEEDBACK_MAX_PASSES : 1);
        p->balance_sums = calloc((size_t)(2 * terms * m->config.n_expert), sizeof *p->balance_sums);
        if (!p->balance_sums) goto oom;
    }
    for (int w = 0; w < workers; w++)
        if (ag_ctx_init(&p->contexts[w], 0) != DT_OK) {
            train_parallel_free(p);
            return DT_ERR;
        }
    for (int w = 0; w <= workers; w++)
        p->row_begin[w] = batch_size * w / workers;
    if (workers > 1) {
        p->replicas = calloc((size_t)(workers - 1), sizeof *p->replicas);
        if (!p->replicas) goto oom;
        for (int r = 0; r < workers - 1; r++) {
            if (replica_init(&p->replicas[r], m) != DT_OK) {
                train_parallel_free(p);
                return DT_ERR;
            }
            p->extra_grads[r] = p->replicas[r].grads_memory;
        }
    }
    return DT_OK;
oom:
    train_parallel_free(p);
    return dt_errorf("parallel step: out of memory");
}

void train_parallel_free(train_parallel *p) {
    if (p->replicas)
        for (int r = 0; r < p->n_workers - 1; r++)
            replica_free(&p->replicas[r]);
    free(p->replicas);
    if (p->contexts)
        for (int w = 0; w < p->n_workers; w++)
            ag_ctx_free(&p->contexts[w]);
    free(p->contexts);
    free(p->row_begin);
    free(p->extra_grads);
    free(p->balance_sums);
    free(p->input_views);
    free(p->target_views);
    free(p->outputs);
    memset(p, 0, sizeof *p);
}

/* CPU time of the calling thread: unlike wall time, it does not count the
 * time the thread waited for a core. */
static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double scalar_or_nan(const dt_tensor *x) { return x ? (double)dt_f32(x)[0] : NAN; }

static double mean_or_nan(const dt_tensor *x) {
    if (!x) return NAN;
    double sum = 0.0;
    for (int64_t i = 0; i < x->size; i++)
        sum += dt_f32(x)[i];
    return sum / (double)x->size;
}

static train_parallel_losses losses_of(const model_outputs *out) {
    return (train_parallel_losses){
        .objective = scalar_or_nan(out->loss),
        .loss = scalar_or_nan(out->loss_reported),
        .loss_primary = scalar_or_nan(out->loss_primary),
        .loss_branch = scalar_or_nan(out->loss_branch),
        .alpha = mean_or_nan(out->alpha),
    };
}

/* Forward of rows [row_begin[w], row_begin[w+1]) on worker w's tape (kept
 * for the backward when `backward`); the outputs go to p->outputs[w]. A
 * worker without rows does nothing (p->outputs[w].loss stays NULL). */
static dt_status worker_forward(train_parallel *p, int w, const dt_tensor *inputs, const dt_tensor *targets,
                                const int64_t *row_begin, int backward) {
    model *m = w == 0 ? p->model : &p->replicas[w - 1];
    ag_ctx *ctx = &p->contexts[w];
    model_outputs *out = &p->outputs[w];
    memset(out, 0, sizeof *out);
    const int64_t T = p->seq_len, first = row_begin[w], rows = row_begin[w + 1] - first;
    if (rows == 0) return DT_OK;
    dt_tensor *in = &p->input_views[w], *tg = &p->target_views[w];
    if (dt_tensor_init(in, DT_I32, DT_SHAPE(rows, T), dt_i32(inputs) + first * T) != DT_OK ||
        dt_tensor_init(tg, DT_I32, DT_SHAPE(rows, T), dt_i32(targets) + first * T) != DT_OK)
        return DT_ERR;
    const double start = w == 0 ? omp_get_wtime() : 0.0, cpu_start = w == 0 ? thread_cpu_seconds() : 0.0;
    ag_reset(ctx);
    const int previous = ag_set_grad_enabled(ctx, backward);
    /* training: the step's feedback passes, the draws keyed by the global row */
    model_feedback_run run = backward ? p->feedback : model_feedback_plain();
    run.first_row += first;
    const dt_status status = model_forward_feedback(m, ctx, in, tg, &run, out);
    ag_set_grad_enabled(ctx, previous);
    if (w == 0) {
        p->forward_seconds = omp_get_wtime() - start;
        p->forward_cpu_seconds = thread_cpu_seconds() - cpu_start;
    }
    return status;
}

/* Backward of worker w's tape, the objective weighted by its rows' share of
 * the batch's total_rows. */
static dt_status worker_backward(train_parallel *p, int w, const int64_t *row_begin, int64_t total_rows) {
    ag_ctx *ctx = &p->contexts[w];
    const model_outputs *out = &p->outputs[w];
    if (!out->loss) return DT_OK;
    const double start = w == 0 ? omp_get_wtime() : 0.0, cpu_start = w == 0 ? thread_cpu_seconds() : 0.0;
    const double weight = (double)(row_begin[w + 1] - row_begin[w]) / (double)total_rows;
    dt_tensor *objective = weight == 1.0 ? out->loss : ag_scale(ctx, out->loss, (float)weight);
    if (ag_backward(ctx, objective) != DT_OK) return DT_ERR;
    if (w == 0) {
        p->backward_seconds = omp_get_wtime() - start;
        p->backward_cpu_seconds = thread_cpu_seconds() - cpu_start;
    }
    return DT_OK;
}

/* The MoE balance term of the whole batch (SPEC §1: f and the mean router
 * probabilities are batch means, and the term is their product, so it does
 * not split over rows). After every worker's forward: f of the batch is the
 * row-weighted mean of the workers' f (and, when `across_processes`, the
 * mean of that over the processes, through the communicator: every process
 * holds an equal share of the batch), and it replaces each worker's f where
 * its balance terms' backward reads it; the gradient then is the whole
 * batch's exactly. *correction gets what to add to the row-weighted mean of
 * this process's workers' objectives to make it the whole batch's objective
 * (up to the mean of the processes' cross-entropies). */
static dt_status combine_balance(train_parallel *p, const int64_t *row_begin, int64_t total_rows, int across_processes,
                                 double *correction) {
    const model_config *c = &p->model->config;
    int64_t layers = 0;
    for (int w = 0; w < p->n_workers; w++)
        if (p->outputs[w].loss) layers = p->outputs[w].moe_layers;
    const int64_t E = c->n_expert;
    double *fractions = p->balance_sums, *mean_probs = p->balance_sums + layers * E; // [layers, E] each
    double aux_workers = 0.0, aux_batch = 0.0;
    for (int64_t l = 0; l < layers; l++) {
        for (int64_t e = 0; e < E; e++) {
            double f = 0.0, mean_prob = 0.0;
            for (int w = 0; w < p->n_workers; w++) {
                const model_outputs *out = &p->outputs[w];
                if (!out->loss) continue;
                const double weight = (double)(row_begin[w + 1] - row_begin[w]) / (double)total_rows;
                f += weight * out->balance_fractions[l][e];
                mean_prob += weight * out->router_mean_probs[l * E + e];
            }
            fractions[l * E + e] = f;
            mean_probs[l * E + e] = mean_prob;
        }
    }
    double processes = 1.0;
    if (across_processes && p->comm->size > 1) {
        if (p->comm->allreduce_f64(p->comm, p->balance_sums, 2 * layers * E) != DT_OK)
            return dt_error_context("parallel step: the MoE balance fractions over %d processes", p->comm->size);
        processes = (double)p->comm->size;
    }
    for (int64_t l = 0; l < layers; l++) {
        for (int64_t e = 0; e < E; e++) {
            const double f = fractions[l * E + e] / processes, mean_prob = mean_probs[l * E + e] / processes;
            aux_batch += (double)E * f * mean_prob;
            for (int w = 0; w < p->n_workers; w++)
                if (p->outputs[w].loss) p->outputs[w].balance_fractions[l][e] = (float)f;
        }
    }
    for (int w = 0; w < p->n_workers; w++) {
        const model_outputs *out = &p->outputs[w];
        if (!out->loss) continue;
        const double weight = (double)(row_begin[w + 1] - row_begin[w]) / (double)total_rows;
        aux_workers += weight * scalar_or_nan(out->aux);
    }
    /* aux is the mean over the MoE layers' applications (K·L with n_loop or feedback), weighted by aux_loss_coef. */
    *correction = c->aux_loss_coef * ((layers > 0 ? aux_batch / (double)layers : 0.0) - aux_workers);
    return DT_OK;
}

/* Runs every worker on its rows [row_begin[w], row_begin[w + 1]) of a batch
 * of total_rows rows in one parallel region (forward, then backward when
 * `backward`; MoE adds a barrier between them for combine_balance, which a
 * training step makes across the processes too: evaluation does not need the
 * batch's fractions, and its batches need not be collective); *losses gets
 * the row-weighted means. */
static dt_status run_workers(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets,
                             const int64_t *row_begin, int64_t total_rows, int backward,
                             train_parallel_losses *losses) {
    const int workers = p->n_workers;
    const int is_moe = p->model->arch.n_expert > 0;
    const int across_processes = backward && p->comm->size > 1;
    enum { MAX_WORKERS = 256 };
    if (workers > MAX_WORKERS) return dt_errorf("parallel step: %d workers (at most %d)", workers, MAX_WORKERS);
    dt_status status[MAX_WORKERS];
    char message[MESSAGE_SIZE] = "";
    int failed = -1;
    double objective_correction = 0.0;
    /* Training products in the run's precision; validation always float32
     * (the master weights, as a checkpoint is scored). */
    for (int w = 0; w < workers; w++) {
        p->contexts[w].bf16_products = backward && p->bf16_products;
        p->contexts[w].bf16_attention = p->bf16_attention;
    }
#pragma omp parallel num_threads(workers) if (workers > 1)
    {
        /* A runtime may hand out fewer threads than asked: then a thread takes several workers. */
        const int thread = omp_get_thread_num(), n_threads = omp_get_num_threads();
        for (int w = thread; w < workers; w += n_threads)
            status[w] = worker_forward(p, w, inputs, targets, row_begin, backward);
        if (is_moe && (workers > 1 || across_processes)) {
#pragma omp barrier
#pragma omp master
            {
                int all_ok = 1;
                for (int w = 0; w < workers; w++)
                    all_ok &= status[w] == DT_OK;
                /* The main thread: the communicator's calls stay on it (comm.h). */
                if (all_ok &&
                    combine_balance(p, row_begin, total_rows, across_processes, &objective_correction) != DT_OK)
                    status[0] = DT_ERR;
            }
#pragma omp barrier
            /* every f is the batch's before any backward */
        }
        if (backward)
            for (int w = thread; w < workers; w += n_threads)
                if (status[w] == DT_OK) status[w] = worker_backward(p, w, row_begin, total_rows);
        for (int w = thread; w < workers; w += n_threads)
            if (status[w] != DT_OK) {
#pragma omp critical(train_parallel_error)
                if (failed < 0 || w < failed) {
                    failed = w;
                    snprintf(message, sizeof message, "%s", dt_error_message());
                }
            }
    }
    if (failed >= 0) return dt_errorf("%s", message);
    *losses = (train_parallel_losses){0};
    for (int w = 0; w < workers; w++) {
        const double weight = (double)(row_begin[w + 1] - row_begin[w]) / (double)total_rows;
        if (!p->outputs[w].loss) continue;
        const train_parallel_losses partial = losses_of(&p->outputs[w]);
        losses->objective += weight * partial.objective;
        losses->loss += weight * partial.loss;
        losses->loss_primary += weight * partial.loss_primary;
        losses->loss_branch += weight * partial.loss_branch;
        losses->alpha += weight * partial.alpha;
    }
    losses->objective += objective_correction;
    if (!backward)
        for (int w = 0; w < workers; w++)
            ag_reset(&p->contexts[w]);
    return DT_OK;
}

static int batch_matches(const train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets) {
    return inputs && targets && inputs->dtype == DT_I32 && targets->dtype == DT_I32 && inputs->ndim == 2 &&
           dt_same_shape(inputs, targets) && inputs->shape[0] == p->batch_size && inputs->shape[1] == p->seq_len;
}

dt_status train_parallel_forward_backward(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets,
                                          train_parallel_losses *losses) {
    if (!batch_matches(p, inputs, targets))
        return dt_errorf("parallel step: inputs and targets must be int32 [%lld, %lld]", (long long)p->batch_size,
                         (long long)p->seq_len);
    return run_workers(p, inputs, targets, p->row_begin, p->batch_size, 1, losses);
}

dt_status train_parallel_evaluate(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets, int64_t rows,
                                  train_parallel_losses *losses) {
    if (!batch_matches(p, inputs, targets))
        return dt_errorf("parallel step: inputs and targets must be int32 [%lld, %lld]", (long long)p->batch_size,
                         (long long)p->seq_len);
    if (rows < 1 || rows > p->batch_size)
        return dt_errorf("parallel step: %lld rows to evaluate (1 to %lld)", (long long)rows, (long long)p->batch_size);
    enum { MAX_WORKERS = 256 };
    int64_t row_begin[MAX_WORKERS + 1];
    if (p->n_workers > MAX_WORKERS)
        return dt_errorf("parallel step: %d workers (at most %d)", p->n_workers, MAX_WORKERS);
    for (int w = 0; w <= p->n_workers; w++)
        row_begin[w] = rows * w / p->n_workers;
    return run_workers(p, inputs, targets, row_begin, rows, 0, losses);
}

int train_parallel_update_skipped(const train_parallel *p, double norm) {
    const optim_update_args args = {.skip_update = p->skip_update, .skip_norm_above = p->skip_norm_above};
    return optim_update_skipped(&args, norm);
}

dt_status train_parallel_update(train_parallel *p, double lr, double muon_lr, float grad_scale, double max_norm,
                                double *grad_norm) {
    const optim_update_args args = {
        .lr = lr,
        .muon_lr = muon_lr,
        .grad_scale = grad_scale,
        .max_norm = max_norm,
        .extra_grads = p->extra_grads,
        .n_extra = p->n_workers - 1,
        .comm = p->comm,
        .n_threads = p->n_update_threads,
        .skip_update = p->skip_update,
        .skip_norm_above = p->skip_norm_above,
    };
    return optim_update(p->opt, &args, grad_norm);
}
