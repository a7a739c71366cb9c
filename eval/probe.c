/* The probes of eval/probe.h: a model_probe (models/probe.h) that sums what
 * it sees per window, and the routing weights recomputed row by row with the
 * decode engine's route from the sources kept from the forward. */
#include "eval/probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "data/loader.h"
#include "models/attn_res.h"

eval_probe_options eval_probe_default_options(void) {
    return (eval_probe_options){.split = SPLIT_VAL, .n_windows = 0, .seq_len = 0};
}

double eval_probe_attention_distance(const float *q, const float *k, int64_t T, int64_t n_head, int64_t n_kv_head,
                                     int64_t head_dim, double *scores) {
    const int64_t group = n_head / n_kv_head, q_stride = n_head * head_dim, k_stride = n_kv_head * head_dim;
    const double scale = 1.0 / sqrt((double)head_dim);
    double total = 0.0;
    for (int64_t h = 0; h < n_head; h++) {
        const int64_t kv = h / group;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * q_stride + h * head_dim;
            double max = -INFINITY;
            for (int64_t s = 0; s <= t; s++) {
                const float *ks = k + s * k_stride + kv * head_dim;
                double dot = 0.0;
                for (int64_t d = 0; d < head_dim; d++)
                    dot += (double)qt[d] * (double)ks[d];
                scores[s] = dot * scale;
                max = scores[s] > max ? scores[s] : max;
            }
            double sum = 0.0, weighted = 0.0;
            for (int64_t s = 0; s <= t; s++) {
                const double e = exp(scores[s] - max);
                sum += e;
                weighted += e * (double)(t - s);
            }
            total += weighted / sum;
        }
    }
    return total;
}

/* Running sums over the windows, and one window's sources (attn_res). */
typedef struct probe_state {
    const model *m;
    int64_t T, C, J;     /* J = 2L + 1 inputs (sublayers and the final norm) */
    double *distance;    /* [L] sums over heads and positions */
    int64_t *distance_n; /* [L] */
    double *sum_sq;      /* [J] */
    int64_t *sum_sq_n;   /* [J] */
    float *sources;      /* [J, T, C]: s_0 (sublayer 0's input), then each sublayer's output */
    double *scores;      /* [T] */
    dt_status status;
} probe_state;

static void on_input(void *user, int64_t j, const dt_tensor *x) {
    probe_state *p = user;
    const float *v = dt_f32(x);
    double s = 0.0;
    for (int64_t i = 0; i < x->size; i++)
        s += (double)v[i] * (double)v[i];
    p->sum_sq[j] += s;
    p->sum_sq_n[j] += x->size;
    if (j == 0 && p->sources && x->size == p->T * p->C) /* one row of T positions: eval_probe_run's */
        memcpy(p->sources, v, (size_t)(p->T * p->C) * sizeof(float));
}

static void on_output(void *user, int64_t j, const dt_tensor *out) {
    probe_state *p = user;
    if (p->sources && out->size == p->T * p->C)
        memcpy(p->sources + (j + 1) * p->T * p->C, dt_f32(out), (size_t)(p->T * p->C) * sizeof(float));
}

static void on_attention(void *user, int64_t l, const dt_tensor *q, const dt_tensor *k, int64_t n_head,
                         int64_t n_kv_head, int64_t head_dim) {
    probe_state *p = user;
    p->distance[l] += eval_probe_attention_distance(dt_f32(q), dt_f32(k), p->T, n_head, n_kv_head, head_dim, p->scores);
    p->distance_n[l] += n_head * p->T;
}

/* Sources route j reads (models/attn_res.h): s_0, the completed blocks of
 * the j outputs so far, and the current block's partial sum. */
static int64_t route_source_count(int64_t j, int64_t per_block) { return 1 + (j + per_block - 1) / per_block; }

/* Adds one window's routing weights: for each position and route j, the
 * softmax weights model_route_row leaves in its logits scratch. */
static void add_routes(const model *m, const probe_state *p, double *weight, float *out, float *gathered,
                       float *logits) {
    const model_arch *a = &m->arch;
    const int64_t R = a->route_heads, C = p->C, J = p->J;
    for (int64_t j = 0; j < J; j++) {
        const int64_t l = j / 2, n = route_source_count(j, a->route_per_block);
        const dt_tensor *query = j == J - 1 ? m->route_final_query
                                 : j % 2    ? m->layers[l].route_ffn_query
                                            : m->layers[l].route_attn_query;
        const dt_tensor *norm = j == J - 1 ? m->route_final_norm
                                : j % 2    ? m->layers[l].route_ffn_norm
                                           : m->layers[l].route_attn_norm;
        for (int64_t t = 0; t < p->T; t++) {
            model_route_row(out, p->sources + t * C, p->T * C, j, a->route_per_block, dt_f32(query), dt_f32(norm), R, C,
                            a->norm_eps, gathered, logits);
            for (int64_t r = 0; r < R; r++)
                for (int64_t i = 0; i < n; i++)
                    weight[j * J + i] += logits[r * n + i];
        }
    }
}

void eval_probe_result_free(eval_probe_result *r) {
    free(r->heads);
    free(r->attn_distance);
    free(r->input_rms);
    free(r->route_sources);
    free(r->route_weight);
    memset(r, 0, sizeof *r);
}

dt_status eval_probe_run(model *m, data_tokens *data, const eval_probe_options *o, eval_probe_result *r) {
    memset(r, 0, sizeof *r);
    const model_config *c = &m->config;
    const model_arch *a = &m->arch;
    const int64_t T = o->seq_len ? o->seq_len : c->block_size, L = a->L, C = a->C, J = 2 * L + 1;
    if (c->vocab_size != data->vocab_size)
        return dt_errorf("model vocab_size %lld != dataset vocab_size %lld (%s)", (long long)c->vocab_size,
                         (long long)data->vocab_size, data->path);
    if (T < 1 || T > c->block_size)
        return dt_errorf("seq_len %lld outside 1..block_size %lld", (long long)T, (long long)c->block_size);
    if (o->n_windows < 0) return dt_errorf("n_windows %lld is negative", (long long)o->n_windows);
    const int64_t available = data_split_windows(data, o->split, T);
    if (available < 1)
        return dt_errorf("%s: the %s split holds fewer than %lld tokens (one window of seq_len + 1)", data->path,
                         o->split == SPLIT_VAL ? "val" : "train", (long long)(T + 1));
    const int64_t n_windows = o->n_windows == 0 || o->n_windows > available ? available : o->n_windows;

    probe_state p = {.m = m, .T = T, .C = C, .J = J};
    r->n_layer = L;
    r->n_windows = n_windows;
    r->seq_len = T;
    r->routed = a->routed;
    r->route_heads = a->routed ? a->route_heads : 0;
    r->heads = calloc((size_t)L, sizeof *r->heads);
    r->attn_distance = calloc((size_t)L, sizeof *r->attn_distance);
    r->input_rms = calloc((size_t)J, sizeof *r->input_rms);
    r->route_sources = calloc((size_t)J, sizeof *r->route_sources);
    r->route_weight = calloc((size_t)(J * J), sizeof *r->route_weight);
    p.distance = calloc((size_t)L, sizeof *p.distance);
    p.distance_n = calloc((size_t)L, sizeof *p.distance_n);
    p.sum_sq = calloc((size_t)J, sizeof *p.sum_sq);
    p.sum_sq_n = calloc((size_t)J, sizeof *p.sum_sq_n);
    p.scores = malloc((size_t)T * sizeof *p.scores);
    if (a->routed) p.sources = malloc((size_t)(J * T * C) * sizeof *p.sources);
    float *route_scratch = a->routed ? malloc((size_t)(C + J * C + J * a->route_heads) * sizeof(float)) : NULL;
    int32_t *inputs = malloc((size_t)T * sizeof *inputs), *targets = malloc((size_t)T * sizeof *targets);
    ag_ctx ctx;
    int have_ctx = 0;
    dt_status status = DT_OK;
    if (!r->heads || !r->attn_distance || !r->input_rms || !r->route_sources || !r->route_weight || !p.distance ||
        !p.distance_n || !p.sum_sq || !p.sum_sq_n || !p.scores || (a->routed && (!p.sources || !route_scratch)) ||
        !inputs || !targets) {
        status = dt_errorf("analyze: out of memory for windows of %lld tokens", (long long)T);
        goto done;
    }
    if ((status = ag_ctx_init(&ctx, 0)) != DT_OK) goto done;
    have_ctx = 1;
    ag_set_grad_enabled(&ctx, 0);
    const model_probe probe = {
        .user = &p, .sublayer_input = on_input, .sublayer_output = on_output, .attention = on_attention};
    for (int64_t w = 0; w < n_windows && status == DT_OK; w++) {
        if ((status = data_eval_window(data, o->split, w, n_windows, T, inputs, targets)) != DT_OK) break;
        ag_reset(&ctx);
        dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T));
        if (!tokens) {
            status = DT_ERR;
            break;
        }
        memcpy(tokens->data, inputs, (size_t)T * sizeof(int32_t));
        model_outputs out;
        m->probe = &probe;
        status = model_forward(m, &ctx, tokens, NULL, &out);
        m->probe = NULL;
        if (status != DT_OK) {
            dt_error_context("window %lld", (long long)w);
            break;
        }
        if (a->routed) add_routes(m, &p, r->route_weight, route_scratch, route_scratch + C, route_scratch + C + J * C);
    }
    if (status != DT_OK) goto done;
    for (int64_t l = 0; l < L; l++) {
        r->heads[l] = a->layers[l].n_head;
        r->attn_distance[l] = p.distance[l] / (double)p.distance_n[l];
    }
    for (int64_t j = 0; j < J; j++) {
        r->input_rms[j] = sqrt(p.sum_sq[j] / (double)p.sum_sq_n[j]);
        if (!a->routed) continue;
        r->route_sources[j] = route_source_count(j, a->route_per_block);
        for (int64_t i = 0; i < r->route_sources[j]; i++)
            r->route_weight[j * J + i] /= (double)(n_windows * T * a->route_heads);
    }
done:
    if (have_ctx) ag_ctx_free(&ctx);
    free(p.distance);
    free(p.distance_n);
    free(p.sum_sq);
    free(p.sum_sq_n);
    free(p.scores);
    free(p.sources);
    free(route_scratch);
    free(inputs);
    free(targets);
    if (status != DT_OK) eval_probe_result_free(r);
    return status;
}
