/* DiscoLoop between the applications of a looped stack (see disco.h): the
 * taped form from the ops of autograd/ops_disco.c, and the row form the
 * decode engine runs on floats. Both take the logits of the head on H^(k)
 * from their caller, which already has the head (model_forward.c's
 * head_forward, the engine's LM-head product). */
#include "models/disco.h"

#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/topk_softmax.h"

dt_tensor *model_disco_forward(ag_ctx *ctx, const model *m, dt_tensor *h, dt_tensor *logits) {
    const model_arch *a = &m->arch;
    if (!h || !logits) return NULL;
    dt_tensor *scaled = a->disco_tau == 1.0 ? logits : ag_scale(ctx, logits, (float)(1.0 / a->disco_tau));
    dt_tensor *p = ag_topk_softmax(ctx, scaled, a->disco_top);              // [B,T,V]
    dt_tensor *phi = ag_expected_rows(ctx, p, m->lm_head);                  // [B,T,C]
    dt_tensor *injected = ag_rmsnorm(ctx, phi, m->disco_norm, a->norm_eps); // [B,T,C]
    if (a->disco_gate_learned)
        injected = ag_scale_rows(ctx, injected, ag_sigmoid_gate(ctx, h, m->disco_gate_weight, m->disco_gate_bias));
    else
        injected = ag_scale(ctx, injected, (float)a->disco_alpha);
    return ag_add(ctx, h, injected);
}

int64_t model_disco_rows_floats(const model_arch *a, int64_t M) {
    return M * a->disco_top * a->C + a->C + (a->disco_gate_learned ? a->C + 1 : 0);
}

int64_t model_disco_rows(const model *m, float *h, float *logits, int64_t M, const model_disco_scratch *scratch) {
    const model_arch *a = &m->arch;
    const int64_t C = a->C, V = a->V, top = a->disco_top;
    const float *table = (const float *)m->lm_head->data; // [V,C]
    const float inv_tau = (float)(1.0 / a->disco_tau);
    int64_t floats = C + (a->disco_gate_learned ? C + 1 : 0);
    if (a->disco_tau != 1.0)
        for (int64_t i = 0; i < M * V; i++)
            logits[i] *= inv_tau;
    float *probs = scratch->p, *phi = scratch->phi;
    const int32_t *idx = scratch->idx;
    k_topk_softmax_range(probs, logits, M, V, top, scratch->idx);
    if (top >= V && M > 2) { /* everything kept: one product over all rows */
        k_gemm(0, 0, M, C, V, 1.0f, probs, V, table, C, 0.0f, phi, C);
        floats += V * C;
    } else { /* the kept rows of W_out only */
        memset(phi, 0, (size_t)(M * C) * sizeof *phi);
        for (int64_t i = 0; i < M; i++) {
            const float *p = probs + i * V;
            for (int64_t j = 0; j < top; j++) {
                const int64_t v = top < V ? idx[i * top + j] : j;
                const float *row = table + v * C;
                for (int64_t c = 0; c < C; c++)
                    phi[i * C + c] += p[v] * row[c];
            }
        }
        floats += M * top * C;
    }
    k_rmsnorm_forward_range(phi, scratch->rstd, phi, (const float *)m->disco_norm->data, M, C, a->norm_eps);
    for (int64_t i = 0; i < M; i++) {
        float gate = (float)a->disco_alpha;
        if (a->disco_gate_learned) {
            const float *w = (const float *)m->disco_gate_weight->data;
            double z = ((const float *)m->disco_gate_bias->data)[0];
            for (int64_t c = 0; c < C; c++)
                z += (double)h[i * C + c] * w[c];
            gate = (float)(1.0 / (1.0 + exp(-z)));
        }
        for (int64_t c = 0; c < C; c++)
            h[i * C + c] += gate * phi[i * C + c];
    }
    return floats;
}
