/* Loss ops: per-row cross-entropy, the Decode-Branch mixture NLL (SPEC §2,
 * fused kernel; alpha exposed as a constant tensor), and the Switch
 * load-balancing term of a MoE router (SPEC §1). */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_internal.h"
#include "kernels/mixture.h"
#include "kernels/softmax.h"

/* Targets hold one id per row of logits [..., V], in any shape of that size. */
static int check_targets(const char *op, const dt_tensor *logits, const dt_tensor *targets) {
    if (!ag_check_i32(op, "targets", targets)) return 0;
    if (targets->size != dt_rows(logits)) {
        ag_fail_shapes(op, logits, targets, "do not match (logits [..., V], targets [...])");
        return 0;
    }
    return ag_check_ids(op, "target", targets, dt_cols(logits));
}

/* ---- cross_entropy: logits [M,V], targets [M] -> losses [M] ---- */

static void cross_entropy_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *logits = node->in[0], *targets = node->in[1];
    float *d_logits = ag_grad(ctx, logits); /* [M,V] */
    if (d_logits)
        k_cross_entropy_backward_stats(d_logits, node->out->grad, dt_f32(logits), node->saved, dt_i32(targets),
                                       dt_rows(logits), dt_cols(logits));
}

dt_tensor *ag_cross_entropy(ag_ctx *ctx, dt_tensor *logits, dt_tensor *targets) {
    static const char *op = "cross_entropy";
    if (!logits || !targets) return NULL;
    if (!ag_check_f32(op, "logits", logits) || !check_targets(op, logits, targets)) return NULL;
    int64_t M = dt_rows(logits), V = dt_cols(logits);
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(M)); /* [M] */
    if (!out) return NULL;
    dt_tensor *inputs[2] = {logits, targets};
    const int record = ag_needs_grad(ctx, inputs, 2);
    float *stats = record ? ag_scratch(ctx, (size_t)(2 * M) * sizeof(float)) : NULL; /* [M,2] row max, log sum */
    if (record && !stats) return NULL;
    k_cross_entropy_forward_stats(dt_f32(out), stats, dt_f32(logits), dt_i32(targets), M, V);
    if (record) {
        ag_node *node = ag_record(ctx, op, cross_entropy_backward, out, inputs, 2);
        if (!node) return NULL;
        node->saved = stats;
    }
    return out;
}

/* ---- mixture_nll: logits_p, logits_q [M,V], targets [M] -> nll [M] ---- */

static void mixture_nll_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *logits_p = node->in[0], *logits_q = node->in[1], *targets = node->in[2];
    int detach_primary = (int)node->iarg[0], alpha_detach = (int)node->iarg[1];
    float *d_p = detach_primary ? NULL : ag_grad(ctx, logits_p); /* [M,V] */
    float *d_q = ag_grad(ctx, logits_q);                         /* [M,V] */
    if (!d_p && !d_q) return;
    /* the forward's row statistics (the same bits as recomputing them) */
    k_mixture_backward_saved(d_p, d_q, node->out->grad, dt_f32(logits_p), dt_f32(logits_q), dt_i32(targets),
                             dt_rows(logits_p), dt_cols(logits_p), node->farg[0], node->farg[1], alpha_detach,
                             node->saved);
}

dt_tensor *ag_mixture_nll(ag_ctx *ctx, dt_tensor *logits_p, dt_tensor *logits_q, dt_tensor *targets, float alpha_min,
                          float alpha_max, int detach_primary, int alpha_detach, dt_tensor **alpha_out) {
    return ag_mixture_nll_ce(ctx, logits_p, logits_q, targets, alpha_min, alpha_max, detach_primary, alpha_detach,
                             alpha_out, NULL, NULL);
}

dt_tensor *ag_mixture_nll_ce(ag_ctx *ctx, dt_tensor *logits_p, dt_tensor *logits_q, dt_tensor *targets, float alpha_min,
                             float alpha_max, int detach_primary, int alpha_detach, dt_tensor **alpha_out,
                             dt_tensor **ce_p_out, dt_tensor **ce_q_out) {
    static const char *op = "mixture_nll";
    if (alpha_out) *alpha_out = NULL;
    if (ce_p_out) *ce_p_out = NULL;
    if (ce_q_out) *ce_q_out = NULL;
    if (!logits_p || !logits_q || !targets) return NULL;
    if (!ag_check_f32(op, "logits_p", logits_p) || !ag_check_f32(op, "logits_q", logits_q)) return NULL;
    if (!dt_same_shape(logits_p, logits_q))
        return ag_fail_shapes(op, logits_p, logits_q, "differ (logits_p and logits_q must be equal)");
    if (!check_targets(op, logits_p, targets)) return NULL;
    if (!(0.0f <= alpha_min && alpha_min <= alpha_max && alpha_max <= 1.0f)) {
        dt_errorf("%s: alpha bounds [%g, %g] (need 0 <= min <= max <= 1)", op, (double)alpha_min, (double)alpha_max);
        return NULL;
    }
    int64_t M = dt_rows(logits_p), V = dt_cols(logits_p);
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(M));                    /* nll [M] */
    dt_tensor *alpha = ag_tensor(ctx, DT_F32, DT_SHAPE(M));                  /* [M], a constant */
    dt_tensor *ce_p = ce_p_out ? ag_tensor(ctx, DT_F32, DT_SHAPE(M)) : NULL; /* [M], constants */
    dt_tensor *ce_q = ce_q_out ? ag_tensor(ctx, DT_F32, DT_SHAPE(M)) : NULL;
    if (!out || !alpha || (ce_p_out && !ce_p) || (ce_q_out && !ce_q)) return NULL;
    /* detach_primary: logits_p is read as a constant, so only logits_q decides whether to record. */
    dt_tensor *inputs[3] = {logits_p, logits_q, targets};
    dt_tensor *grad_sources[2] = {detach_primary ? NULL : logits_p, logits_q};
    const int record = ag_needs_grad(ctx, grad_sources, 2);
    void *saved = record ? ag_scratch(ctx, k_mixture_saved_bytes(M)) : NULL; /* the rows' statistics, for backward */
    if (record && !saved) return NULL;
    k_mixture_forward_saving(dt_f32(out), dt_f32(alpha), ce_p ? dt_f32(ce_p) : NULL, ce_q ? dt_f32(ce_q) : NULL,
                             dt_f32(logits_p), dt_f32(logits_q), dt_i32(targets), M, V, alpha_min, alpha_max, saved);
    if (record) {
        ag_node *node = ag_record(ctx, op, mixture_nll_backward, out, inputs, 3);
        if (!node) return NULL;
        node->saved = saved;
        node->iarg[0] = detach_primary;
        node->iarg[1] = alpha_detach;
        node->farg[0] = alpha_min;
        node->farg[1] = alpha_max;
    }
    if (alpha_out) *alpha_out = alpha;
    if (ce_p_out) *ce_p_out = ce_p;
    if (ce_q_out) *ce_q_out = ce_q;
    return out;
}

/* ---- moe_balance: router_logits [N,E], f [E] -> E * sum_e f_e * mean_n softmax(logits[n])_e ---- */

typedef struct {
    float *probs;     /* [N,E] softmax of the router logits */
    float *fractions; /* [E] copy of f (the caller's buffer need not outlive the step) */
} moe_balance_saved;

static void moe_balance_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *logits = node->in[0];
    float *d_logits = ag_grad(ctx, logits); /* [N,E] */
    if (!d_logits) return;
    moe_balance_saved *saved = node->saved;
    int64_t N = logits->shape[0], E = logits->shape[1];
    /* d out / d P[n,e] = E f_e / N = c_e; through the softmax:
     * d logits[n,e] = P[n,e] (c_e - sum_j c_j P[n,j]). */
    double c_scale = (double)node->out->grad[0] * (double)E / (double)N;
    for (int64_t n = 0; n < N; n++) {
        const float *p = saved->probs + n * E;
        double dot = 0.0;
        for (int64_t e = 0; e < E; e++)
            dot += (double)saved->fractions[e] * p[e];
        for (int64_t e = 0; e < E; e++)
            d_logits[n * E + e] += (float)(c_scale * p[e] * ((double)saved->fractions[e] - dot));
    }
}

dt_tensor *ag_moe_balance(ag_ctx *ctx, dt_tensor *router_logits, const float *fractions) {
    return ag_moe_balance_ex(ctx, router_logits, fractions, NULL, NULL);
}

dt_tensor *ag_moe_balance_ex(ag_ctx *ctx, dt_tensor *router_logits, const float *fractions, float **fractions_read,
                             float *mean_probs) {
    static const char *op = "moe_balance";
    if (!router_logits) return NULL;
    if (!ag_check_f32(op, "router_logits", router_logits)) return NULL;
    if (router_logits->ndim != 2) return ag_fail_shape(op, "router_logits", router_logits, "(must be [N, E])");
    if (!fractions) {
        dt_errorf("%s: fractions is NULL", op);
        return NULL;
    }
    int64_t N = router_logits->shape[0], E = router_logits->shape[1];
    dt_tensor *out = ag_tensor(ctx, DT_F32, DT_SHAPE(1));
    moe_balance_saved *saved = ag_scratch(ctx, sizeof *saved);
    if (!out || !saved) return NULL;
    saved->probs = ag_scratch(ctx, (size_t)(N * E) * sizeof(float));
    saved->fractions = ag_scratch(ctx, (size_t)E * sizeof(float));
    if (!saved->probs || !saved->fractions) return NULL;
    memcpy(saved->fractions, fractions, (size_t)E * sizeof(float));
    k_softmax_forward(saved->probs, dt_f32(router_logits), N, E);
    double total = 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t e = 0; e < E; e++)
            total += (double)fractions[e] * saved->probs[n * E + e];
    dt_f32(out)[0] = (float)((double)E * total / (double)N);
    if (fractions_read) *fractions_read = saved->fractions;
    if (mean_probs)
        for (int64_t e = 0; e < E; e++) {
            double sum = 0.0;
            for (int64_t n = 0; n < N; n++)
                sum += saved->probs[n * E + e];
            mean_probs[e] = (float)(sum / (double)N);
        }
    dt_tensor *inputs[1] = {router_logits};
    if (ag_needs_grad(ctx, inputs, 1)) {
        ag_node *node = ag_record(ctx, op, moe_balance_backward, out, inputs, 1);
        if (!node) return NULL;
        node->saved = saved;
    }
    return out;
}
