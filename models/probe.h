/* What a probe may watch inside the training forward (dbranch analyze,
 * eval/probe.h): model_forward calls these, when model.probe is set, with the
 * primary trajectory's tensors as it computes them (values only: the probe
 * copies what it needs and must not keep or change them). Training never sets
 * a probe, so the forward's cost and bits are unchanged.
 *
 * Sublayers are numbered j = 2l (attention of layer l), 2l + 1 (its FFN);
 * j = 2L is the final norm. */
#ifndef MODEL_PROBE_H
#define MODEL_PROBE_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct model_probe {
    void *user;
    /* The stream that enters sublayer j's norm, x [B,T,C]: the residual sum,
     * or with attn_res the route h_j (SPEC §6.3). Sublayer 0's is the
     * embedding s_0 either way. */
    void (*sublayer_input)(void *user, int64_t j, const dt_tensor *x);
    /* Sublayer j's own output [B,T,C] (o_l or m_l, before any residual sum):
     * with attn_res only, where it is source s_{j+1}. */
    void (*sublayer_output)(void *user, int64_t j, const dt_tensor *out);
    /* Layer l's queries q [B,T,H*hd] and keys k [B,T,Hkv*hd], after the
     * position scheme: the scores are q k^T / sqrt(hd), causal. */
    void (*attention)(void *user, int64_t l, const dt_tensor *q, const dt_tensor *k, int64_t n_head, int64_t n_kv_head,
                      int64_t head_dim);
} model_probe;

#endif
