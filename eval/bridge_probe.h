/* The bridge-state probe of the DiscoLoop study (issue 14, SPEC §6.6,
 * experiments/disco/): on the two-hop records of `dbranch prepare
 * --synthetic two-hop` (data/synthetic.h), does the stream of a looped model
 * hold the bridge entity b = r1(e) of a query "BOS e r1 r2 e''" between its
 * applications?
 *
 * For every two-hop record of the split, b is read off the file's own
 * atomic facts ("BOS e r e' EOS" records of /train), so the probe needs no
 * generator state. For each application k = 1..K, at the r1 position (input
 * 2, where "BOS e r1" first determines b) and the r2 position (input 3,
 * which predicts e''), it averages over the queries:
 *
 *   cos(H^(k)_t, tok_emb[b])         the stack's output after application k
 *   cos(H^(k)_t, tok_emb[o])         o over the other N - 1 entities of b's
 *                                    graph (the exact mean of the "random
 *                                    other entity" baseline)
 *   cos(H^(k)_t, W_out[b]), ... [o]  the same against the LM head rows
 *                                    (== tok_emb with a tied head)
 *   lens                             the fraction of queries whose head on
 *                                    Norm_f(H^(k)_t) puts its argmax on b
 *   rms                              the state's root mean square (its scale)
 *
 * and for k < K the same on the next application's input H~^(k) (with
 * DiscoLoop H^(k) + a RMSNorm_d(Phi); without it H^(k) again). The states
 * come from the training forward through the model_probe hook
 * (models/probe.h): the stream entering the final norm (j = 2L), once per
 * application, and the stream entering layer 0 (j = 0). */
#ifndef EVAL_BRIDGE_PROBE_H
#define EVAL_BRIDGE_PROBE_H

#include <stdint.h>

#include "core/error.h"
#include "data/tokens.h"
#include "models/model.h"

enum {
    EVAL_BRIDGE_POSITIONS = 2, /* 0: r1 (input 2), 1: r2 (input 3) */
    EVAL_BRIDGE_EMB = 0,       /* mean cos to tok_emb[b] */
    EVAL_BRIDGE_EMB_OTHER,     /* mean cos to tok_emb[o], o another entity of b's graph */
    EVAL_BRIDGE_HEAD,          /* mean cos to W_out[b] */
    EVAL_BRIDGE_HEAD_OTHER,    /* mean cos to W_out[o] */
    EVAL_BRIDGE_LENS,          /* fraction with argmax of the head on Norm_f(state) == b */
    EVAL_BRIDGE_RMS,           /* mean over the queries of the state's sqrt(mean x^2): the stream's scale, which
                                  DiscoLoop's injection a RMSNorm_d(Phi) (RMS a |disco.norm|) is added to */
    EVAL_BRIDGE_METRICS
};

typedef struct eval_bridge_result {
    int64_t n_loop;    /* K */
    int64_t n_queries; /* two-hop records of the split */
    int64_t entities;  /* N per graph */
    int64_t relations;
    int tied; /* the head is tok_emb: HEAD == EMB */
    /* [2K-1][POSITIONS][METRICS]: state s < K is H^(s+1) (after application
     * s + 1), state K + k (k < K-1) is H~^(k+1), the input of application k + 2. */
    double *value;
} eval_bridge_result;

static inline double eval_bridge_value(const eval_bridge_result *r, int64_t state, int position, int metric) {
    return r->value[(state * EVAL_BRIDGE_POSITIONS + position) * EVAL_BRIDGE_METRICS + metric];
}

/* Runs the probe over the two-hop records of the split (val: graph B's
 * queries, the out-of-distribution test; train: graph A's). Errors: a model
 * with n_loop = 1, a file that is not a two-hop record file (record_len 5,
 * atomic facts in /train naming one edge per (entity, relation), queries
 * whose bridge is one of them), vocab sizes that differ. *result is
 * allocated here: eval_bridge_result_free. */
dt_status eval_bridge_run(model *m, data_tokens *data, data_split split, eval_bridge_result *result);
void eval_bridge_result_free(eval_bridge_result *result);

#endif
