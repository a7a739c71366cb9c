/* Parameter counts, FLOPs and decode bytes from a configuration (see
 * model_info.h for the formulas). Everything is counted per tensor of SPEC §3
 * so the figures line up with the checkpoint, and per decode step as the
 * grouped decode of SPEC §2 reads memory: each shared weight once for both rows. */
#include "models/model_info.h"

#include <string.h>

#include "models/arch.h"
#include "models/disco.h"
#include "models/ffn.h"
#include "models/norm_kinds.h"
#include "models/position_kinds.h"

/* One layer's tensors, in floats, split by what a decode step does with them. */
typedef struct {
    int64_t norms;       /* attn_norm, ffn_norm (+ biases) */
    int64_t routes;      /* attn_res: the layer's two routes' query and norm weight */
    int64_t routes_read; /* the part a decode step reads (layer 0's attention route: none) */
    int64_t q, kv, o;    /* wq; wk + wv; wo (weights only) */
    int64_t q_bias, kv_bias, o_bias;
    model_ffn_cost ffn; /* the FFN kind's own figures */
    int64_t couple;     /* couple_q + couple_hidden + couple_out (0 without coupling) */
    int64_t persist;    /* recurrent: Norm1 and wk, wv (+ biases) again, on the layer's output */
} layer_sizes;

static layer_sizes sizes_of(const model_arch *a, const model_layer_arch *la) {
    layer_sizes s;
    memset(&s, 0, sizeof s);
    const int64_t C = a->C, q_width = la->q_width, kv_width = la->kv_width;
    s.norms = (a->norm->has_bias ? 2 : 1) * 2 * C;
    s.q = q_width * C;
    s.kv = 2 * kv_width * C;
    s.o = C * q_width;
    if (a->linear_bias) {
        s.q_bias = q_width;
        s.kv_bias = 2 * kv_width;
        s.o_bias = C;
    }
    la->ffn->cost(a, la, &s.ffn);
    s.couple = (la->couple_q ? q_width : 0) + (la->couple_hidden ? la->d_ff : 0) + (la->couple_out ? C : 0);
    /* attn_res: two routes' query and norm weight, read like the norms (but
     * layer 0's attention route has one source, s_0 itself: nothing read) */
    s.routes = a->routed ? 4 * C : 0;
    s.routes_read = a->routed ? (la == &a->layers[0] ? 2 : 4) * C : 0;
    s.persist = a->recurrent ? s.norms / 2 + s.kv + s.kv_bias : 0;
    return s;
}

/* FFN floats a row reads (or multiplies through) with k experts: dense kinds ignore k. */
static int64_t ffn_read(const model_ffn_cost *f, int64_t k) {
    return f->dense_matmul + f->dense_vectors + f->router + k * f->expert;
}
static int64_t ffn_matmul(const model_ffn_cost *f, int64_t k) { return f->dense_matmul + f->router + k * f->expert; }
/* The part of ffn_read that is matrices (what bf16 decode weights store in 2 bytes). */
static int64_t ffn_matrices(const model_ffn_cost *f, int64_t k) {
    return f->dense_matmul + f->router + k * (f->expert - f->expert_vectors);
}

/* Floats per token one block's backward needs from its forward: norm outputs
 * and statistics, q/k/v, the attention output and its log-sum-exp, the
 * residual stream, the FFN's activations, the projections. `branch` counts the
 * branch trajectory's block (no K/V; coupled q, hidden and output instead). */
static double block_activation_floats(const model_arch *a, const model_layer_arch *la, const layer_sizes *s,
                                      int branch) {
    const double C = (double)a->C, H = (double)la->n_head, q = (double)la->q_width, kv = (double)la->kv_width;
    const int rotary = a->position->rotary;
    const double norm_stats = (double)a->norm->stats_rows;
    /* attention: norm out + stats, q (+ rotated q), k, v (+ rotated k), output + lse, projection, residual */
    double attention = C + norm_stats + q * (rotary ? 2.0 : 1.0) + q + H + C + C;
    if (!branch)
        attention += 2.0 * kv + (rotary ? kv : 0.0);
    else if (la->couple_q)
        attention += q; /* q2 before the coupling term */
    const double k = (double)(branch ? a->top_k_branch : a->top_k);
    double ffn = (double)s->ffn.activation_floats + k * (double)s->ffn.activation_floats_per_expert;
    if (branch) ffn += (la->couple_hidden ? (double)la->d_ff : 0.0) + (la->couple_out ? C : 0.0);
    return attention + C + norm_stats + ffn + C; /* + ffn norm out + stats, + residual */
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

dt_status model_info_compute(const model_config *config, int64_t context, model_info *info) {
    memset(info, 0, sizeof *info);
    model_config c = *config;
    if (model_config_validate(&c) != DT_OK) return DT_ERR;
    if (context <= 0) context = c.block_size;
    if (context > c.block_size)
        return dt_errorf("context %lld exceeds block_size = %lld", (long long)context, (long long)c.block_size);
    model_arch arch;
    if (model_arch_build(&arch, &c) != DT_OK) return DT_ERR;
    const model_arch *a = &arch;
    info->config = c;
    info->context = context;

    const int64_t C = a->C, V = a->V, L = a->L;
    const int branch = a->has_branch, own_copies = a->branch_own_weights;
    const int64_t E = a->n_expert, k = a->top_k, kb = a->top_k_branch;
    /* the final norm, and with attn_res the final route's query and norm weight */
    const int64_t final_norm = (a->norm->has_bias ? 2 * C : C) + (a->routed ? 2 * C : 0);
    const int64_t head = V * C;
    const int64_t tables = a->tok_emb_tables; /* tok_emb (+ tok_emb2): rows read and tables held */
    const int64_t emb_rows = tables * C + (a->position->learned_table ? C : 0); /* tok_emb row(s) (+ pos_emb row) */

    /* SPEC §6.6: DiscoLoop's norm weight and learned gate */
    const int64_t disco_params = a->disco ? C + (a->disco_gate_learned ? C + 1 : 0) : 0;
    info->other_params_primary = tables * V * C + (a->position->learned_table ? a->T_max * C : 0) + final_norm +
                                 (a->tie_embeddings ? 0 : head) + disco_params;
    info->other_params_branch = a->branch_own_emb ? V * C : 0;
    info->feedback_params = c.feedback ? 2 * C * C + 2 * C : 0;
    info->other_params_primary += info->feedback_params;
    info->feedback_weight_bytes = 4.0 * (double)info->feedback_params;
    info->feedback_decode_flops = c.feedback ? 4.0 * (double)(C * C) : 0.0;
    info->params_primary = info->other_params_primary;
    info->params_branch = info->other_params_branch;
    info->matmul_params_primary = head;
    info->matmul_params_branch = branch ? head : 0;
    int64_t floats_baseline = emb_rows + final_norm + head;
    int64_t floats_grouped = floats_baseline, floats_ungrouped = floats_baseline;
    /* the matrices among those floats (bf16 decode weights: 2 bytes each; the rest stays float32) */
    int64_t matrices_baseline = head, matrices_grouped = head, matrices_ungrouped = head;
    double attention_keys_flops = 0.0; /* sum over layers of 4 H*hd: q.k and p.v per key */
    double kv_floats_per_position = 0.0;
    if (branch) { /* the branch embedding is another row; un-grouped re-reads norms and head */
        floats_grouped += C;
        floats_ungrouped += emb_rows + final_norm + head;
        matrices_ungrouped += head;
    }
    info->experts_baseline = E ? k : 0;
    /* training: embeddings, final norm and logits per token; the untied head's parameters */
    info->train_flop_params = (double)(tables * V * C + final_norm + (a->tie_embeddings ? 0 : head));
    info->train_flop_params_branch = branch ? (double)head + (c.share ? (double)final_norm : 0.0) : 0.0;
    const double head_activations = (double)(C + C + a->norm->stats_rows + V);
    info->activation_floats = head_activations;
    info->activation_floats_branch = branch ? head_activations : 0.0;
    info->experts_grouped = info->experts_ungrouped = info->experts_baseline;

    /* SPEC §6.6: n_loop = K applies every layer K times (the decode step
     * streams its weights K times and reads K·L caches); DiscoLoop adds, per
     * boundary k < K, the final norm and the head (the logits), the kept rows
     * of W_out for Phi (training: a dense p W_out, another head's worth),
     * disco.norm and the gate. */
    const int64_t K = a->n_loop, boundaries = a->disco ? K - 1 : 0;
    const int64_t disco_read = a->disco ? final_norm + head + model_disco_rows_floats(a, 1) : 0;
    info->matmul_params_primary += boundaries * (head + a->disco_top * C);
    floats_baseline += boundaries * disco_read;
    floats_grouped += boundaries * disco_read;
    floats_ungrouped += boundaries * disco_read;
    /* the boundary's head product is a matrix read (bf16 with bf16 decode weights); Phi's kept rows are read
     * from the float32 table */
    matrices_baseline += boundaries * head;
    matrices_grouped += boundaries * head;
    matrices_ungrouped += boundaries * head;
    info->train_flop_params += (double)(boundaries * (2 * head + final_norm + disco_params));
    info->activation_floats += (double)boundaries * (double)(C + a->norm->stats_rows + 2 * V + 3 * C + 2);
    for (int64_t l = 0; l < L * K; l++) {
        const model_layer_arch *la = &a->layers[l % L];
        const layer_sizes s = sizes_of(a, la);
        const int first_application = l < L;
        const int64_t attention = s.q + s.kv + s.o + s.q_bias + s.kv_bias + s.o_bias;
        const int64_t layer_primary = s.norms + s.routes + attention + s.ffn.params;
        /* share = off: own wq, wo (+ biases) and all FFN weights (SPEC §2). */
        const int64_t copies = own_copies ? s.q + s.o + s.q_bias + s.o_bias + s.ffn.params : 0;
        if (first_application) {
            info->params_primary += layer_primary;
            info->params_branch += s.couple + copies;
        }
        if (l == 0) {
            info->layer_params_primary = layer_primary;
            info->layer_params_branch = s.couple + copies;
        }

        /* FLOPs: the branch computes no K/V; replay still needs the branch's router logits for its gates. */
        info->matmul_params_primary += s.q + s.kv + s.o + ffn_matmul(&s.ffn, k) + (a->recurrent ? s.kv : 0);
        if (branch) info->matmul_params_branch += s.q + s.o + ffn_matmul(&s.ffn, kb);
        attention_keys_flops += 4.0 * (double)la->q_width;

        /* Training FLOPs and activations (bench train). */
        const int64_t ffn_train = s.ffn.params - (E ? (E - k) * s.ffn.expert : 0);
        const int64_t ffn_train_branch = s.ffn.params - (E ? (E - kb) * s.ffn.expert : 0);
        const int64_t attention_branch = s.q + s.q_bias + s.o + s.o_bias; /* no wk, wv */
        info->train_flop_params += (double)(s.norms + s.routes + attention + ffn_train + s.persist);
        if (branch)
            info->train_flop_params_branch +=
                (double)(s.couple + (c.share ? s.norms + attention_branch + ffn_train_branch : 0) +
                         (own_copies ? attention_branch + ffn_train_branch : 0));
        info->activation_floats += block_activation_floats(a, la, &s, 0);
        if (branch) info->activation_floats_branch += block_activation_floats(a, la, &s, 1);
        kv_floats_per_position += 2.0 * (double)la->kv_width;

        /* Weight bytes per decode step; a recurrent layer (SPEC §6.4) reads Norm1
         * and Wk, Wv a second time for the persistent pair of its output. */
        const int64_t layer_read = s.norms + s.routes_read + attention + ffn_read(&s.ffn, k) + s.persist;
        floats_baseline += layer_read;
        floats_grouped += layer_read;
        floats_ungrouped += layer_read;
        const int64_t layer_matrices = s.q + s.kv + s.o + ffn_matrices(&s.ffn, k) + (a->recurrent ? s.kv : 0);
        matrices_baseline += layer_matrices;
        matrices_grouped += layer_matrices;
        matrices_ungrouped += layer_matrices;
        if (branch) {
            const int64_t ffn_read_branch = ffn_read(&s.ffn, kb);
            if (own_copies) {
                /* Different tensors: nothing to share except the norms, head and K/V. */
                floats_grouped += s.q + s.o + s.q_bias + s.o_bias + ffn_read_branch + s.couple;
                matrices_grouped += s.q + s.o + ffn_matrices(&s.ffn, kb);
                if (E) info->experts_grouped = k + kb;
            } else {
                int64_t union_experts = c.branch_routing == ROUTING_REPLAY ? max64(k, kb) : min64(E, k + kb);
                floats_grouped += (E ? union_experts - k : 0) * s.ffn.expert + s.couple;
                matrices_grouped += (E ? union_experts - k : 0) * (s.ffn.expert - s.ffn.expert_vectors);
                if (E) info->experts_grouped = union_experts;
            }
            /* Un-grouped: the branch pass reads everything it uses again. */
            floats_ungrouped += s.norms + s.routes_read + s.q + s.o + s.q_bias + s.o_bias + ffn_read_branch + s.couple;
            matrices_ungrouped += s.q + s.o + ffn_matrices(&s.ffn, kb);
            if (E) info->experts_ungrouped = k + kb;
        }
    }
    info->params_total = info->params_primary + info->params_branch;
    info->attention_flops_per_key = attention_keys_flops;
    info->prefill_flops_per_token =
        2.0 * (double)info->matmul_params_primary + attention_keys_flops * (double)c.block_size;
    info->decode_flops_baseline = 2.0 * (double)info->matmul_params_primary + attention_keys_flops * (double)context;
    info->decode_flops_branch =
        info->decode_flops_baseline +
        (branch ? 2.0 * (double)info->matmul_params_branch + attention_keys_flops * (double)context : 0.0);

    info->weight_bytes_baseline = 4.0 * (double)floats_baseline;
    info->weight_bytes_grouped = 4.0 * (double)floats_grouped;
    info->weight_bytes_ungrouped = 4.0 * (double)floats_ungrouped;
    info->weight_bytes_bf16_baseline = info->weight_bytes_baseline - 2.0 * (double)matrices_baseline;
    info->weight_bytes_bf16_grouped = info->weight_bytes_grouped - 2.0 * (double)matrices_grouped;
    info->weight_bytes_bf16_ungrouped = info->weight_bytes_ungrouped - 2.0 * (double)matrices_ungrouped;

    /* KV cache bytes per decode step: every layer's K and V rows up to `context`.
     * Grouped: both queries in one pass over the cache; un-grouped: twice. */
    info->kv_bytes_baseline = 4.0 * kv_floats_per_position * (double)context;
    info->kv_bytes_grouped = info->kv_bytes_baseline;
    info->kv_bytes_ungrouped = branch ? 2.0 * info->kv_bytes_baseline : info->kv_bytes_baseline;
    model_arch_free(&arch);
    return DT_OK;
}
