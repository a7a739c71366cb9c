/* Data-parallel training step (see parallel_step.h): weight-sharing replicas
 * with their own gradients, one tape per worker, and the fused update pass
 * (sum over workers, scale, norm, clip, AdamW or Muon, zero).
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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Floats per chunk of the update pass: small enough that a chunk's gradient,
 * weights and moments stay in L2 between the reduction and the update, large
 * enough that the chunk list stays short. */
#define UPDATE_CHUNK 16384
enum { MESSAGE_SIZE = 512 };

/* The buffers a replica adds: each parameter a new header over the same
 * weights with a zeroed gradient of its own. */
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
_Static_assert(sizeof(model_layer) == 11 * sizeof(dt_tensor *) + sizeof(const float *) + 2 * sizeof(model_block_weights),
               "remap every model_layer field (rope_table is shared)");

static void remap_block(const model *m, const model *replica, model_block_weights *w) {
    dt_tensor **fields[] = {&w->wq, &w->wq_bias, &w->wk, &w->wk_bias, &w->wv, &w->wv_bias, &w->wo, &w->wo_bias};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) *fields[i] = remap(m, replica, *fields[i]);
    for (int slot = 0; slot < MODEL_FFN_SLOTS; slot++) w->ffn[slot] = remap(m, replica, w->ffn[slot]);
}

static void replica_free(model *replica) {
    if (replica->params)
        for (int i = 0; i < replica->n_params; i++) {
            dt_tensor *t = replica->params[i].tensor;
            if (!t) continue;
            free(t->grad);
            free(t);
        }
    free(replica->params);
    free(replica->layers);
    memset(replica, 0, sizeof *replica);
}

/* A model sharing m's weights (and RoPE table) with gradients of its own. */
static dt_status replica_init(model *replica, const model *m) {
    *replica = *m;
    replica->params = calloc((size_t)m->n_params, sizeof *replica->params);
    replica->layers = calloc((size_t)m->config.n_layer, sizeof *replica->layers);
    if (!replica->params || !replica->layers) {
        free(replica->params);
        free(replica->layers);
        memset(replica, 0, sizeof *replica);
        return dt_errorf("parallel step: out of memory for a model replica");
    }
    for (int i = 0; i < m->n_params; i++) {
        replica->params[i] = m->params[i];
        dt_tensor *t = malloc(sizeof *t);
        replica->params[i].tensor = t;
        if (!t) goto oom;
        *t = *m->params[i].tensor;
        t->heap_owned = 0; /* the weights are m's */
        t->producer = NULL;
        t->grad = zeroed_floats(t->size);
        if (!t->grad) goto oom;
    }
    replica->tok_emb = remap(m, replica, m->tok_emb);
    replica->pos_emb = remap(m, replica, m->pos_emb);
    replica->final_norm = remap(m, replica, m->final_norm);
    replica->final_norm_bias = remap(m, replica, m->final_norm_bias);
    replica->lm_head = remap(m, replica, m->lm_head);
    replica->branch_tok_emb = remap(m, replica, m->branch_tok_emb);
    replica->route_final_query = remap(m, replica, m->route_final_query);
    replica->route_final_norm = remap(m, replica, m->route_final_norm);
    for (int64_t l = 0; l < m->config.n_layer; l++) {
        model_layer *layer = &replica->layers[l];
        *layer = m->layers[l];
        dt_tensor **fields[] = {&layer->attn_norm,        &layer->attn_norm_bias,  &layer->ffn_norm,
                                &layer->ffn_norm_bias,    &layer->couple_q,        &layer->couple_hidden,
                                &layer->couple_out,       &layer->route_attn_query, &layer->route_attn_norm,
                                &layer->route_ffn_query,  &layer->route_ffn_norm};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) *fields[i] = remap(m, replica, *fields[i]);
        remap_block(m, replica, &layer->primary);
        remap_block(m, replica, &layer->branch);
    }
    return DT_OK;
oom:
    replica_free(replica);
    return dt_errorf("parallel step: out of memory for a model replica's gradients");
}

static int64_t muon_rows(const optim_param *p) { return p->shape[p->ndim - 2]; }
static int64_t muon_cols(const optim_param *p) { return p->shape[p->ndim - 1]; }

/* The update's work list: AdamW parameters in chunks, Muon matrices whole. */
static dt_status build_chunks(train_parallel *p) {
    const optimizer *opt = p->opt;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int i = 0; i < opt->n_params; i++) {
            const int64_t size = opt->params[i].size;
            if (optim_is_muon(opt, i)) {
                if (pass) p->chunks[n] = (train_parallel_chunk){.param = i, .offset = 0, .length = size};
                n++;
                continue;
            }
            for (int64_t offset = 0; offset < size; offset += UPDATE_CHUNK) {
                if (pass)
                    p->chunks[n] = (train_parallel_chunk){
                        .param = i, .offset = offset, .length = size - offset < UPDATE_CHUNK ? size - offset : UPDATE_CHUNK};
                n++;
            }
        }
        if (!pass) {
            p->chunks = calloc((size_t)(n > 0 ? n : 1), sizeof *p->chunks);
            p->chunk_sums = calloc((size_t)(n > 0 ? n : 1), sizeof *p->chunk_sums);
            if (!p->chunks || !p->chunk_sums) return dt_errorf("parallel step: out of memory for the update plan");
        }
    }
    p->n_chunks = n;
    return DT_OK;
}

dt_status train_parallel_init(train_parallel *p, model *m, optimizer *opt, int64_t batch_size, int64_t seq_len,
                              int n_threads, int split_rows) {
    memset(p, 0, sizeof *p);
    p->model = m;
    p->opt = opt;
    p->batch_size = batch_size;
    p->seq_len = seq_len;
    if (batch_size < 1 || seq_len < 1)
        return dt_errorf("parallel step: batch %lld x %lld (both must be positive)", (long long)batch_size,
                         (long long)seq_len);
    if (n_threads <= 0) n_threads = k_get_threads();
    int workers = split_rows ? n_threads : 1;
    if (workers > batch_size) workers = (int)batch_size;
    if (workers < 1) workers = 1;
    p->n_workers = workers;
    p->n_update_threads = n_threads;

    /* Which model parameter each optimizer parameter is (by its weights). */
    p->param_index = calloc((size_t)(opt->n_params > 0 ? opt->n_params : 1), sizeof *p->param_index);
    if (!p->param_index) goto oom;
    for (int i = 0; i < opt->n_params; i++) {
        p->param_index[i] = -1;
        for (int j = 0; j < m->n_params; j++)
            if (dt_f32(m->params[j].tensor) == opt->params[i].data) p->param_index[i] = j;
        if (p->param_index[i] < 0 || opt->params[i].grad != m->params[p->param_index[i]].tensor->grad) {
            dt_errorf("parallel step: optimizer parameter '%s' is not a parameter of the model",
                      opt->params[i].name ? opt->params[i].name : "?");
            train_parallel_free(p);
            return DT_ERR;
        }
    }
    if (build_chunks(p) != DT_OK) {
        train_parallel_free(p);
        return DT_ERR;
    }

    const int slots = workers > n_threads ? workers : n_threads; /* the update may use more threads than split rows */
    p->contexts = calloc((size_t)workers, sizeof *p->contexts);
    p->row_begin = calloc((size_t)workers + 1, sizeof *p->row_begin);
    p->input_views = calloc((size_t)workers, sizeof *p->input_views);
    p->target_views = calloc((size_t)workers, sizeof *p->target_views);
    p->outputs = calloc((size_t)workers, sizeof *p->outputs);
    p->muon_work = calloc((size_t)slots, sizeof *p->muon_work);
    if (!p->contexts || !p->row_begin || !p->input_views || !p->target_views || !p->outputs || !p->muon_work) goto oom;
    for (int w = 0; w < workers; w++)
        if (ag_ctx_init(&p->contexts[w], 0) != DT_OK) {
            train_parallel_free(p);
            return DT_ERR;
        }
    for (int w = 0; w <= workers; w++) p->row_begin[w] = batch_size * w / workers;
    if (workers > 1) {
        p->replicas = calloc((size_t)(workers - 1), sizeof *p->replicas);
        if (!p->replicas) goto oom;
        for (int r = 0; r < workers - 1; r++)
            if (replica_init(&p->replicas[r], m) != DT_OK) {
                train_parallel_free(p);
                return DT_ERR;
            }
    }
    /* Newton-Schulz scratch per thread: optim_step's single workspace would be shared. */
    int64_t muon_floats = 0;
    for (int i = 0; i < opt->n_params; i++)
        if (optim_is_muon(opt, i)) {
            int64_t need = optim_muon_work_floats(muon_rows(&opt->params[i]), muon_cols(&opt->params[i]));
            if (need > muon_floats) muon_floats = need;
        }
    if (muon_floats > 0)
        for (int t = 0; t < slots; t++)
            if (!(p->muon_work[t] = zeroed_floats(muon_floats))) goto oom;
    return DT_OK;
oom:
    train_parallel_free(p);
    return dt_errorf("parallel step: out of memory");
}

void train_parallel_free(train_parallel *p) {
    if (p->replicas)
        for (int r = 0; r < p->n_workers - 1; r++) replica_free(&p->replicas[r]);
    free(p->replicas);
    if (p->contexts)
        for (int w = 0; w < p->n_workers; w++) ag_ctx_free(&p->contexts[w]);
    free(p->contexts);
    if (p->muon_work) {
        const int slots = p->n_workers > p->n_update_threads ? p->n_workers : p->n_update_threads;
        for (int t = 0; t < slots; t++) free(p->muon_work[t]);
    }
    free(p->muon_work);
    free(p->row_begin);
    free(p->param_index);
    free(p->chunks);
    free(p->chunk_sums);
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
    for (int64_t i = 0; i < x->size; i++) sum += dt_f32(x)[i];
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
    const dt_status status = model_forward(m, ctx, in, tg, out);
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
 * row-weighted mean of the workers' f, and it replaces each worker's f where
 * its balance terms' backward reads it; the gradient then is the whole
 * batch's exactly. Returns the correction to add to the row-weighted mean of
 * the workers' objectives to make it the whole batch's objective. */
static double combine_balance(train_parallel *p, const int64_t *row_begin, int64_t total_rows) {
    const model_config *c = &p->model->config;
    int64_t layers = 0;
    for (int w = 0; w < p->n_workers; w++)
        if (p->outputs[w].loss) layers = p->outputs[w].moe_layers;
    const int64_t E = c->n_expert;
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
    /* aux is the mean over layers, weighted by aux_loss_coef in the objective. */
    return c->aux_loss_coef * (aux_batch / (double)c->n_layer - aux_workers);
}

/* Runs every worker on its rows [row_begin[w], row_begin[w + 1]) of a batch
 * of total_rows rows in one parallel region (forward, then backward when
 * `backward`; MoE adds a barrier between them for combine_balance); *losses
 * gets the row-weighted means. */
static dt_status run_workers(train_parallel *p, const dt_tensor *inputs, const dt_tensor *targets,
                             const int64_t *row_begin, int64_t total_rows, int backward, train_parallel_losses *losses) {
    const int workers = p->n_workers;
    const int is_moe = p->model->arch.n_expert > 0;
    enum { MAX_WORKERS = 256 };
    if (workers > MAX_WORKERS) return dt_errorf("parallel step: %d workers (at most %d)", workers, MAX_WORKERS);
    dt_status status[MAX_WORKERS];
    char message[MESSAGE_SIZE] = "";
    int failed = -1;
    double objective_correction = 0.0;
#pragma omp parallel num_threads(workers) if (workers > 1)
    {
        /* A runtime may hand out fewer threads than asked: then a thread takes several workers. */
        const int thread = omp_get_thread_num(), n_threads = omp_get_num_threads();
        for (int w = thread; w < workers; w += n_threads) status[w] = worker_forward(p, w, inputs, targets, row_begin, backward);
        if (is_moe && workers > 1) {
#pragma omp barrier
#pragma omp single
            {
                int all_ok = 1;
                for (int w = 0; w < workers; w++) all_ok &= status[w] == DT_OK;
                if (all_ok) objective_correction = combine_balance(p, row_begin, total_rows);
            } /* implicit barrier: every f is the batch's before any backward */
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
        for (int w = 0; w < workers; w++) ag_reset(&p->contexts[w]);
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
    if (p->n_workers > MAX_WORKERS) return dt_errorf("parallel step: %d workers (at most %d)", p->n_workers, MAX_WORKERS);
    for (int w = 0; w <= p->n_workers; w++) row_begin[w] = rows * w / p->n_workers;
    return run_workers(p, inputs, targets, row_begin, rows, 0, losses);
}

/* Chunks [first, last) of thread `thread` of n: contiguous runs holding about
 * equal numbers of floats. */
static void chunk_range(const train_parallel *p, int thread, int n, int *first, int *last) {
    int64_t total = 0;
    for (int c = 0; c < p->n_chunks; c++) total += p->chunks[c].length;
    const int64_t begin = total * thread / n, end = total * (thread + 1) / n;
    int64_t position = 0;
    *first = p->n_chunks;
    *last = p->n_chunks;
    for (int c = 0; c < p->n_chunks; c++) {
        if (position >= begin && *first == p->n_chunks) *first = c;
        if (position >= end) {
            *last = c;
            break;
        }
        position += p->chunks[c].length;
    }
    if (*first > *last) *first = *last;
}

/* Independent double accumulators of a chunk's sum of squares: with one
 * running sum every addition waits for the previous one (about 4 cycles per
 * float, half a millisecond per nanoGPT-baby step); lanes vectorise and
 * overlap. They are added in a fixed order, so the sum is still the same on
 * every run and at every thread count. */
enum { SQUARE_LANES = 16 };

/* Pass 1 on one chunk: gradient = grad_scale * (sum over workers), replicas
 * zeroed; returns the chunk's sum of squares. One sweep over the chunk when
 * there is one replica (two workers), the common case. */
static double reduce_chunk(train_parallel *p, const train_parallel_chunk *chunk, float grad_scale) {
    const optim_param *param = &p->opt->params[chunk->param];
    float *restrict grad = param->grad + chunk->offset; // [length]
    const int64_t n = chunk->length;
    const int n_replicas = p->n_workers - 1;
    double lanes[SQUARE_LANES] = {0};
    int64_t i = 0;
    if (n_replicas == 1) {
        float *restrict other = p->replicas[0].params[p->param_index[chunk->param]].tensor->grad + chunk->offset; // [length]
        for (; i + SQUARE_LANES <= n; i += SQUARE_LANES)
            for (int j = 0; j < SQUARE_LANES; j++) {
                const float g = (grad[i + j] + other[i + j]) * grad_scale; /* * 1.0f is exact */
                grad[i + j] = g;
                other[i + j] = 0.0f;
                lanes[j] += (double)g * (double)g;
            }
        for (; i < n; i++) {
            const float g = (grad[i] + other[i]) * grad_scale;
            grad[i] = g;
            other[i] = 0.0f;
            lanes[0] += (double)g * (double)g;
        }
    } else {
        for (int r = 0; r < n_replicas; r++) {
            float *restrict other = p->replicas[r].params[p->param_index[chunk->param]].tensor->grad + chunk->offset; // [length]
            for (int64_t k = 0; k < n; k++) grad[k] += other[k];
            memset(other, 0, (size_t)n * sizeof *other);
        }
        for (; i + SQUARE_LANES <= n; i += SQUARE_LANES)
            for (int j = 0; j < SQUARE_LANES; j++) {
                const float g = grad[i + j] * grad_scale;
                grad[i + j] = g;
                lanes[j] += (double)g * (double)g;
            }
        for (; i < n; i++) {
            const float g = grad[i] * grad_scale;
            grad[i] = g;
            lanes[0] += (double)g * (double)g;
        }
    }
    double sum = 0.0;
    for (int j = 0; j < SQUARE_LANES; j++) sum += lanes[j];
    return sum;
}

/* AdamW's per-step constants (optim_adamw_update's, computed once per update). */
typedef struct adamw_constants {
    float step_size, inv_sqrt_bias2, epsilon, b1, b2, one_minus_b1, one_minus_b2;
} adamw_constants;

static adamw_constants adamw_constants_at(const optim_hparams *hp, int64_t t, double lr) {
    return (adamw_constants){
        .step_size = (float)(lr / (1.0 - pow(hp->beta1, (double)t))),
        .inv_sqrt_bias2 = (float)(1.0 / sqrt(1.0 - pow(hp->beta2, (double)t))),
        .epsilon = (float)hp->eps,
        .b1 = (float)hp->beta1,
        .b2 = (float)hp->beta2,
        .one_minus_b1 = (float)(1.0 - hp->beta1),
        .one_minus_b2 = (float)(1.0 - hp->beta2),
    };
}

/* The clip, AdamW and the zeroed gradient in one sweep over a chunk.
 * The arithmetic is optim_adamw_update's (optim/adamw.c), operation for
 * operation, on the clipped gradient: the same numbers as the clip pass
 * followed by optim_step (tests/test_train_parallel.c and
 * tests/test_train_parallel_update.c check it). It lives
 * here because the chunk is then read once instead of three times, and
 * because optim_adamw_update's sqrtf keeps its loop scalar (without
 * -fno-math-errno, GCC calls sqrtf for negative arguments, so it cannot
 * vectorise the loop): with AVX-512 the sweep runs 16 floats at a time.
 * data, grad, m, v [n] */
static void adamw_clip_zero(float *restrict data, float *restrict grad, float *restrict m, float *restrict v, int64_t n,
                            float clip, float decay, const adamw_constants *k) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 clip16 = _mm512_set1_ps(clip), decay16 = _mm512_set1_ps(decay), b1 = _mm512_set1_ps(k->b1),
                 b2 = _mm512_set1_ps(k->b2), one_minus_b1 = _mm512_set1_ps(k->one_minus_b1),
                 one_minus_b2 = _mm512_set1_ps(k->one_minus_b2), step_size = _mm512_set1_ps(k->step_size),
                 inv_sqrt_bias2 = _mm512_set1_ps(k->inv_sqrt_bias2), epsilon = _mm512_set1_ps(k->epsilon);
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), clip16);
        const __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(one_minus_b1, g));
        const __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(_mm512_mul_ps(one_minus_b2, g), g));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), inv_sqrt_bias2, epsilon);
        const __m512 change = _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom);
        _mm512_storeu_ps(data + i, _mm512_fmsub_ps(_mm512_loadu_ps(data + i), decay16, change));
        _mm512_storeu_ps(grad + i, _mm512_setzero_ps());
    }
#endif
    for (; i < n; i++) {
        const float g = grad[i] * clip;
        const float mi = k->b1 * m[i] + k->one_minus_b1 * g;
        const float vi = k->b2 * v[i] + k->one_minus_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) * k->inv_sqrt_bias2 + k->epsilon;
        data[i] = data[i] * decay - k->step_size * mi / denom;
        grad[i] = 0.0f;
    }
}

/* Pass 2 on one chunk: clip, the optimizer's update rule, zeroed gradient.
 * Mirrors optim_step's dispatch (AdamW, or Muon for its matrices). */
static void update_chunk(train_parallel *p, const train_parallel_chunk *chunk, float clip, const adamw_constants *adamw,
                         double lr, double muon_lr, float *muon_work) {
    const optimizer *opt = p->opt;
    const optim_hparams *hp = &opt->hp;
    const optim_param *param = &opt->params[chunk->param];
    const int64_t off = chunk->offset, n = chunk->length;
    float *grad = param->grad + off; // [n]
    if (optim_is_muon(opt, chunk->param)) {
        if (clip != 1.0f)
            for (int64_t i = 0; i < n; i++) grad[i] *= clip;
        const int64_t rows = muon_rows(param), cols = muon_cols(param);
        optim_muon_update(param->data, grad, opt->momentum[chunk->param], param->size / (rows * cols), rows, cols,
                          muon_lr, hp->muon_momentum, hp->muon_nesterov, hp->muon_ns_steps,
                          param->decay ? hp->muon_weight_decay : 0.0, muon_work);
        memset(grad, 0, (size_t)n * sizeof *grad);
    } else {
        const float decay = (float)(1.0 - lr * (param->decay ? hp->weight_decay : 0.0));
        adamw_clip_zero(param->data + off, grad, opt->m[chunk->param] + off, opt->v[chunk->param] + off, n, clip, decay,
                        adamw);
    }
}

int train_parallel_update_skipped(const train_parallel *p, double norm) {
    return p->skip_update || (p->skip_norm_above > 0 && norm > p->skip_norm_above);
}

void train_parallel_update(train_parallel *p, double lr, double muon_lr, float grad_scale, double max_norm,
                           double *grad_norm) {
    const int64_t t = p->opt->step + 1;
    const adamw_constants adamw = adamw_constants_at(&p->opt->hp, t, lr);
    double norm = 0.0;
    const int threads = p->n_update_threads > 1 ? p->n_update_threads : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int thread = omp_get_thread_num(), n_threads = omp_get_num_threads();
        int first, last;
        chunk_range(p, thread, n_threads, &first, &last);
        for (int c = first; c < last; c++) p->chunk_sums[c] = reduce_chunk(p, &p->chunks[c], grad_scale);
#pragma omp barrier
        /* Every thread adds the same sums in the same order: one norm for all. */
        double total = 0.0;
        for (int c = 0; c < p->n_chunks; c++) total += p->chunk_sums[c];
        const double thread_norm = sqrt(total);
        if (isfinite(thread_norm) && train_parallel_update_skipped(p, thread_norm)) {
            for (int c = first; c < last; c++)
                memset(p->opt->params[p->chunks[c].param].grad + p->chunks[c].offset, 0,
                       (size_t)p->chunks[c].length * sizeof(float));
        } else if (isfinite(thread_norm)) {
            const float clip =
                max_norm > 0.0 && thread_norm > max_norm ? (float)(max_norm / (thread_norm + 1e-6)) : 1.0f;
            float *work = p->muon_work[thread];
            /* Backwards: the chunks pass 1 touched last are the ones still in this core's cache. */
            for (int c = last - 1; c >= first; c--) update_chunk(p, &p->chunks[c], clip, &adamw, lr, muon_lr, work);
        }
        if (thread == 0) norm = thread_norm;
    }
    if (isfinite(norm) && !train_parallel_update_skipped(p, norm)) p->opt->step = t;
    *grad_norm = norm;
}
