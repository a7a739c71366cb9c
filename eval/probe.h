/* Probes of a model's internals on validation windows (`dbranch analyze`),
 * the measurements of the Prism and AttnRes studies (issue 13):
 *
 *   attention distance  per layer, the mean over heads, positions and windows
 *                       of sum_s a_ts (t - s), a the causal softmax of
 *                       q k^T / sqrt(hd) (Prism: early layers more local);
 *   input RMS           per sublayer, sqrt(mean x^2) over positions, channels
 *                       and windows of the stream that enters its norm (the
 *                       residual sum, or the route h_j with attn_res; the
 *                       last entry is the final norm's input);
 *   routing weights     with attn_res, per route j and source i, the mean of
 *                       alpha_{i,r} over positions, windows and routing heads
 *                       (at init every route is the uniform mean, 1/n_j).
 *
 * Teacher-forced through model_forward (no tape) with a probe attached
 * (models/probe.h): the numbers are those of the training forward, primary
 * trajectory. The routing weights are recomputed per row by the decode
 * engine's route (model_route_row) from the sources the forward produced. */
#ifndef EVAL_PROBE_H
#define EVAL_PROBE_H

#include <stdint.h>

#include "core/error.h"
#include "data/tokens.h"
#include "models/model.h"

typedef struct eval_probe_options {
    data_split split;  /* SPLIT_VAL by default */
    int64_t n_windows; /* windows of the split from the first (0: all; more than it holds: all) */
    int64_t seq_len;   /* 0: the model's block_size */
} eval_probe_options;

typedef struct eval_probe_result {
    int64_t n_layer, n_windows, seq_len;
    int64_t *heads;         /* [L] query heads of each layer */
    double *attn_distance;  /* [L] mean attention distance (positions) */
    double *input_rms;      /* [2L+1] sublayer j's input RMS; [2L]: the final norm's */
    int routed;             /* attn_res != off: the route fields hold numbers */
    int64_t route_heads;    /* R */
    int64_t *route_sources; /* [2L+1] n_j, the sources route j reads */
    double *route_weight;   /* [2L+1, 2L+1] row j: mean alpha of source i < n_j (s_0 first) */
} eval_probe_result;

eval_probe_options eval_probe_default_options(void);

/* Runs the probes over the windows of the split (vocab sizes equal,
 * 1 <= seq_len <= block_size, the split holds a window). *result is
 * allocated here: eval_probe_result_free. */
dt_status eval_probe_run(model *m, data_tokens *data, const eval_probe_options *options, eval_probe_result *result);
void eval_probe_result_free(eval_probe_result *result);

/* The sum over heads h and positions t of sum_{s<=t} a_ts (t - s) for one
 * sequence: q [T, H*hd] and k [T, Hkv*hd] rows (query head h reads kv head
 * h / (H/Hkv)); scores [T] scratch. Divide by H*T for the mean. */
double eval_probe_attention_distance(const float *q, const float *k, int64_t T, int64_t n_head, int64_t n_kv_head,
                                     int64_t head_dim, double *scores);

#endif
