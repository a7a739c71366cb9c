/* Parameter counts, FLOPs and decode bytes from a configuration (see
 * model_info.h for the formulas). Everything is counted per tensor of SPEC §3
 * so the figures line up with the checkpoint, and per decode step as the
 * grouped decode of SPEC §2 reads memory: each shared weight once for both rows. */
#include "models/model_info.h"

#include <string.h>

/* One layer's tensors, in floats, split by what a decode step does with them. */
typedef struct {
    int64_t norms;        /* attn_norm, ffn_norm (+ biases for nanogpt) */
    int64_t q, kv, o;     /* wq; wk + wv; wo (weights only) */
    int64_t q_bias, kv_bias, o_bias;
    int64_t ffn_dense;    /* dense FFN matrices + biases (0 for moe) */
    int64_t ffn_dense_matmul; /* dense FFN matrices only */
    int64_t router;       /* moe router */
    int64_t expert;       /* one expert: w1 + w3 + w2 */
    int64_t couple;       /* couple_q + couple_hidden + couple_out (0 without coupling) */
} layer_sizes;

static layer_sizes sizes_of(const model_config *c) {
    layer_sizes s;
    memset(&s, 0, sizeof s);
    const int64_t C = c->d_model, hd = model_head_dim(c), q_width = c->n_head * hd, kv_width = c->n_kv_head * hd;
    const int gpt = c->family == FAMILY_NANOGPT;
    s.norms = gpt ? 4 * C : 2 * C;
    s.q = q_width * C;
    s.kv = 2 * kv_width * C;
    s.o = C * q_width;
    if (gpt) {
        s.q_bias = q_width;
        s.kv_bias = 2 * kv_width;
        s.o_bias = C;
        s.ffn_dense_matmul = 2 * c->d_ff * C; /* fc [4C,C], proj [C,4C] */
        s.ffn_dense = s.ffn_dense_matmul + c->d_ff + C;
    } else if (c->family == FAMILY_LLAMA) {
        s.ffn_dense_matmul = 3 * c->d_ff * C; /* w1, w3 [F,C], w2 [C,F] */
        s.ffn_dense = s.ffn_dense_matmul;
    } else {
        s.router = c->n_expert * C;
        s.expert = 3 * c->d_ff * C;
    }
    if (c->branch == BRANCH_DECODE && c->couple) s.couple = q_width + (c->family == FAMILY_MOE ? 0 : c->d_ff) + C;
    return s;
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
    info->config = c;
    info->context = context;

    const layer_sizes s = sizes_of(&c);
    const int64_t C = c.d_model, V = c.vocab_size, L = c.n_layer, hd = model_head_dim(&c);
    const int64_t q_width = c.n_head * hd, kv_width = c.n_kv_head * hd;
    const int gpt = c.family == FAMILY_NANOGPT, moe = c.family == FAMILY_MOE;
    const int branch = c.branch == BRANCH_DECODE, own_copies = branch && !c.share;
    const int64_t E = c.n_expert, k = c.top_k, kb = c.top_k_branch;

    /* ---- parameter counts ---- */
    const int64_t ffn_all = moe ? s.router + E * s.expert : s.ffn_dense;
    info->layer_params_primary = s.norms + s.q + s.kv + s.o + s.q_bias + s.kv_bias + s.o_bias + ffn_all;
    const int64_t final_norm = gpt ? 2 * C : C;
    const int64_t head = V * C;
    info->other_params_primary = V * C + (gpt ? c.block_size * C : 0) + final_norm + (c.tie_embeddings ? 0 : head);
    /* share = off: own wq, wo (+ biases) and all FFN weights (SPEC §2). */
    const int64_t copies = own_copies ? s.q + s.o + s.q_bias + s.o_bias + ffn_all : 0;
    info->layer_params_branch = s.couple + copies;
    info->other_params_branch = branch && c.branch_emb == BRANCH_EMB_OWN ? V * C : 0;
    info->params_primary = L * info->layer_params_primary + info->other_params_primary;
    info->params_branch = L * info->layer_params_branch + info->other_params_branch;
    info->params_total = info->params_primary + info->params_branch;

    /* ---- FLOPs ---- */
    const int64_t ffn_matmul_primary = moe ? s.router + k * s.expert : s.ffn_dense_matmul;
    const int64_t ffn_matmul_branch = moe ? s.router + kb * s.expert : s.ffn_dense_matmul;
    info->matmul_params_primary = L * (s.q + s.kv + s.o + ffn_matmul_primary) + head;
    /* The branch computes no K/V; replay still needs the branch's router logits for its gates. */
    info->matmul_params_branch = branch ? L * (s.q + s.o + ffn_matmul_branch) + head : 0;
    const double attention_per_key = 4.0 * (double)q_width; /* q.k and p.v: 2 FLOPs each per head dim */
    info->prefill_flops_per_token =
        2.0 * (double)info->matmul_params_primary + (double)L * attention_per_key * (double)c.block_size;
    info->decode_flops_baseline =
        2.0 * (double)info->matmul_params_primary + (double)L * attention_per_key * (double)context;
    info->decode_flops_branch =
        info->decode_flops_baseline +
        (branch ? 2.0 * (double)info->matmul_params_branch + (double)L * attention_per_key * (double)context : 0.0);

    /* ---- weight bytes per decode step ---- */
    const int64_t emb_rows = gpt ? 2 * C : C; /* tok_emb row (+ pos_emb row) */
    info->experts_baseline = moe ? k : 0;
    const int64_t ffn_read_baseline = moe ? s.router + k * s.expert : s.ffn_dense;
    const int64_t layer_read_baseline =
        s.norms + s.q + s.kv + s.o + s.q_bias + s.kv_bias + s.o_bias + ffn_read_baseline;
    const int64_t floats_baseline = L * layer_read_baseline + emb_rows + final_norm + head;
    int64_t floats_grouped = floats_baseline, floats_ungrouped = floats_baseline;
    info->experts_grouped = info->experts_ungrouped = info->experts_baseline;
    if (branch) {
        const int64_t ffn_read_branch = moe ? s.router + kb * s.expert : s.ffn_dense;
        /* The branch embedding is another row (of branch.tok_emb, or of tok_emb when shared);
         * the pos_emb row at position t is the primary's row. */
        const int64_t branch_row = C;
        if (own_copies) {
            /* Different tensors: nothing to share except the norms, head and K/V. */
            floats_grouped += L * (s.q + s.o + s.q_bias + s.o_bias + ffn_read_branch + s.couple) + branch_row;
            info->experts_grouped = moe ? k + kb : 0;
        } else {
            int64_t union_experts = c.branch_routing == ROUTING_REPLAY ? max64(k, kb) : min64(E, k + kb);
            int64_t extra_experts = moe ? union_experts - k : 0;
            floats_grouped += L * (extra_experts * s.expert + s.couple) + branch_row;
            info->experts_grouped = moe ? union_experts : 0;
        }
        /* Un-grouped: the branch pass reads everything it uses again. */
        const int64_t layer_read_branch = s.norms + s.q + s.o + s.q_bias + s.o_bias + ffn_read_branch + s.couple;
        floats_ungrouped += L * layer_read_branch + emb_rows + final_norm + head;
        info->experts_ungrouped = moe ? k + kb : 0;
    }
    info->weight_bytes_baseline = 4.0 * (double)floats_baseline;
    info->weight_bytes_grouped = 4.0 * (double)floats_grouped;
    info->weight_bytes_ungrouped = 4.0 * (double)floats_ungrouped;

    /* ---- KV cache bytes per decode step ---- */
    info->kv_bytes_baseline = 4.0 * (double)L * 2.0 * (double)context * (double)kv_width;
    info->kv_bytes_grouped = info->kv_bytes_baseline;
    info->kv_bytes_ungrouped = branch ? 2.0 * info->kv_bytes_baseline : info->kv_bytes_baseline;
    return DT_OK;
}
