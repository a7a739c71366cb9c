/* The fused update pass (optim.h): the threads' gradient copies summed into
 * the flat gradient, the sum over processes, the global norm, the clip, AdamW
 * or Muon, and the zeroed gradients, in one OpenMP region over the fixed
 * chunk list, each thread on a contiguous share of it.
 *
 * Why fused: a sweep per step (sum, norm, clip, update, zero) would read
 * every float five times; here a chunk is read by the sum (which also takes
 * its squares) and once more by the update while it is still in the core's
 * cache. One process needs one barrier (the norm needs every chunk's
 * squares); more processes add the allreduce between the sum and the squares. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "optim/optim.h"

/* Chunks [first, last) of thread `thread` of n: contiguous runs holding about
 * equal numbers of floats. */
static void chunk_range(const optimizer *opt, int thread, int n, int *first, int *last) {
    int64_t total = 0;
    for (int c = 0; c < opt->n_chunks; c++)
        total += opt->chunks[c].length;
    const int64_t begin = total * thread / n, end = total * (thread + 1) / n;
    int64_t position = 0;
    *first = opt->n_chunks;
    *last = opt->n_chunks;
    for (int c = 0; c < opt->n_chunks; c++) {
        if (position >= begin && *first == opt->n_chunks) *first = c;
        if (position >= end) {
            *last = c;
            break;
        }
        position += opt->chunks[c].length;
    }
    if (*first > *last) *first = *last;
}

/* Independent double accumulators of a chunk's sum of squares: with one
 * running sum every addition waits for the previous one (about 4 cycles per
 * float, half a millisecond per nanoGPT-baby step); lanes vectorise and
 * overlap. They are added in a fixed order, so the sum is still the same on
 * every run and at every thread count. */
enum { SQUARE_LANES = 16 };

/* One chunk: gradient = scale * (gradient + the copies), the copies zeroed;
 * returns the chunk's sum of squares. One sweep when there is one copy (two
 * threads), the common case. */
static double reduce_chunk(const optimizer *opt, const optim_chunk *chunk, float *const *extra, int n_extra,
                           float scale) {
    const int64_t start = opt->params[chunk->param].offset + chunk->offset, n = chunk->length;
    float *restrict grad = opt->grad + start; // [n]
    double lanes[SQUARE_LANES] = {0};
    int64_t i = 0;
    if (n_extra == 1) {
        float *restrict other = extra[0] + start; // [n]
        for (; i + SQUARE_LANES <= n; i += SQUARE_LANES)
            for (int j = 0; j < SQUARE_LANES; j++) {
                const float g = (grad[i + j] + other[i + j]) * scale; /* * 1.0f is exact */
                grad[i + j] = g;
                other[i + j] = 0.0f;
                lanes[j] += (double)g * (double)g;
            }
        for (; i < n; i++) {
            const float g = (grad[i] + other[i]) * scale;
            grad[i] = g;
            other[i] = 0.0f;
            lanes[0] += (double)g * (double)g;
        }
    } else {
        for (int r = 0; r < n_extra; r++) {
            float *restrict other = extra[r] + start; // [n]
            for (int64_t k = 0; k < n; k++)
                grad[k] += other[k];
            memset(other, 0, (size_t)n * sizeof *other);
        }
        for (; i + SQUARE_LANES <= n; i += SQUARE_LANES)
            for (int j = 0; j < SQUARE_LANES; j++) {
                const float g = grad[i + j] * scale;
                grad[i + j] = g;
                lanes[j] += (double)g * (double)g;
            }
        for (; i < n; i++) {
            const float g = grad[i] * scale;
            grad[i] = g;
            lanes[0] += (double)g * (double)g;
        }
    }
    double sum = 0.0;
    for (int j = 0; j < SQUARE_LANES; j++)
        sum += lanes[j];
    return sum;
}

/* One chunk: the clip, the parameter's rule (AdamW, or Muon for its
 * matrices), the zeroed gradient. */
static void update_chunk(const optimizer *opt, const optim_chunk *chunk, float clip, const optim_adamw_step *adamw,
                         double lr, double muon_lr, float *muon_work) {
    const optim_hparams *hp = &opt->hp;
    const optim_param *param = &opt->params[chunk->param];
    const int64_t start = param->offset + chunk->offset, n = chunk->length;
    const int64_t state = opt->state_offset[chunk->param] + chunk->offset;
    float *grad = opt->grad + start; // [n]
    if (opt->uses_muon[chunk->param]) {
        if (clip != 1.0f)
            for (int64_t i = 0; i < n; i++)
                grad[i] *= clip;
        const int64_t rows = param->shape[param->ndim - 2], cols = param->shape[param->ndim - 1];
        optim_muon_update(opt->data + start, grad, opt->momentum + state, param->size / (rows * cols), rows, cols,
                          muon_lr, hp->muon_momentum, hp->muon_nesterov, hp->muon_ns_steps,
                          param->decay ? hp->muon_weight_decay : 0.0, muon_work);
        memset(grad, 0, (size_t)n * sizeof *grad);
    } else {
        /* The parameter's group lr; scale 1 keeps the shared constants bit for bit. */
        const double scale = param->lr_scale > 0.0 ? param->lr_scale : 1.0;
        optim_adamw_step scaled = *adamw;
        if (scale != 1.0) scaled.step_size = (float)((double)adamw->step_size * scale);
        const float decay = (float)(1.0 - lr * scale * (param->decay ? hp->weight_decay : 0.0));
        optim_adamw_update(opt->data + start, grad, opt->m + state, opt->v + state, n, clip, decay, &scaled);
    }
}

int optim_update_skipped(const optim_update_args *a, double norm) {
    return a->skip_update || (a->skip_norm_above > 0 && norm > a->skip_norm_above);
}

dt_status optim_update(optimizer *opt, const optim_update_args *a, double *grad_norm) {
    const int64_t t = opt->step + 1;
    const optim_adamw_step adamw = optim_adamw_step_at(&opt->hp, t, a->lr);
    const dt_comm *comm = a->comm ? a->comm : dt_comm_single();
    const int processes = comm->size > 1;
    int threads = a->n_threads > 1 ? a->n_threads : 1;
    if (threads > opt->n_ns_work) threads = opt->n_ns_work;
    double norm = 0.0;
    dt_status comm_status = DT_OK;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int thread = omp_get_thread_num(), n_threads = omp_get_num_threads();
        int first, last;
        chunk_range(opt, thread, n_threads, &first, &last);
        /* With one process the scale rides on the sum's sweep, squares included. */
        const float sum_scale = processes ? 1.0f : a->grad_scale;
        for (int c = first; c < last; c++)
            opt->chunk_sums[c] = reduce_chunk(opt, &opt->chunks[c], a->extra_grads, a->n_extra, sum_scale);
        if (processes) {
#pragma omp barrier
#pragma omp master
            comm_status = comm->allreduce_f32(comm, opt->grad, opt->n_floats);
#pragma omp barrier
            /* The mean over processes: each one's gradient is its rows' mean. */
            const float scale = a->grad_scale / (float)comm->size;
            for (int c = first; c < last && comm_status == DT_OK; c++)
                opt->chunk_sums[c] = reduce_chunk(opt, &opt->chunks[c], NULL, 0, scale);
        }
#pragma omp barrier
        /* Every thread adds the same sums in the same order: one norm for all. */
        double total = 0.0;
        for (int c = 0; c < opt->n_chunks; c++)
            total += opt->chunk_sums[c];
        const double thread_norm = comm_status == DT_OK ? sqrt(total) : NAN;
        if (isfinite(thread_norm) && optim_update_skipped(a, thread_norm)) {
            for (int c = first; c < last; c++) { /* skipped: this thread's share of the gradient zeroed, nothing else */
                const optim_chunk *chunk = &opt->chunks[c];
                memset(opt->grad + opt->params[chunk->param].offset + chunk->offset, 0,
                       (size_t)chunk->length * sizeof(float));
            }
        } else if (isfinite(thread_norm)) {
            const float clip =
                a->max_norm > 0.0 && thread_norm > a->max_norm ? (float)(a->max_norm / (thread_norm + 1e-6)) : 1.0f;
            float *work = opt->ns_work[thread];
            /* Backwards: the chunks the sum touched last are the ones still in this core's cache. */
            for (int c = last - 1; c >= first; c--)
                update_chunk(opt, &opt->chunks[c], clip, &adamw, a->lr, a->muon_lr, work);
        }
        if (thread == 0) norm = thread_norm;
    }
    *grad_norm = norm;
    if (comm_status != DT_OK) return dt_error_context("update: the gradient sum over %d processes", comm->size);
    if (isfinite(norm) && !optim_update_skipped(a, norm)) opt->step = t;
    return DT_OK;
}
