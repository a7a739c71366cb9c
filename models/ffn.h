/* FFN kinds: the seam where a feed-forward block plugs in (SQLite's
 * sqlite3_vfs is the model). A kind is one table entry (ffn_kinds.c) holding
 * everything the rest of dbranch needs to know about it:
 *
 *   declare   its parameters (names after "layers.{l}.", shapes, init)
 *   forward   the taped training forward on [B,T,C]
 *   rows      the decode-step form on the stacked primary/branch rows
 *   prefill   the batched prompt form
 *   cost      parameters, matrix parameters per token, bytes per decode step
 *
 * The training forward, the decode engine and the cost model call these and
 * nothing else, so a new kind touches neither (docs/ARCHITECTURE.md, "How to
 * add an FFN kind").
 *
 * The decode forms run inside the decode engine's step team; they reach its
 * products and serial sections through model_row_exec, which eval/decode.c
 * implements (models/ stays below eval/). */
#ifndef MODEL_FFN_H
#define MODEL_FFN_H

#include <stdint.h>

#include "autograd/tape.h"
#include "models/arch.h"

/* Tensors one kind may own per layer (its slots in model_block_weights.ffn). */
enum { MODEL_FFN_SLOTS = 8 };

/* How a parameter starts (model_init_weights). */
typedef enum {
    MODEL_INIT_NORMAL = 0, /* normal(0, 0.02) */
    MODEL_INIT_RESIDUAL,   /* normal(0, 0.02 / sqrt(2 L)): writes into the residual stream */
    MODEL_INIT_ZERO,
    MODEL_INIT_ONE,
} model_init_kind;

/* Where a kind's declare() puts its tensors: add(name, shape, ...) appends the
 * parameter "{prefix}layers.{l}.{name}" and returns it (NULL on failure). */
typedef struct model_param_sink {
    void *self;
    dt_tensor *(*add)(void *self, const char *name, int ndim, const int64_t *shape, int is_matrix,
                      model_init_kind init);
} model_param_sink;

/* The MoE balance terms of the primary's layers, as they are made (SPEC §1). */
typedef struct model_ffn_balance {
    dt_tensor *sum;    /* [1] sum over the layers so far (NULL: none yet) */
    int64_t count;     /* layers so far */
    float **fractions; /* [L] each term's f, as its backward reads it */
    float *mean_probs; /* [L, E] */
} model_ffn_balance;

/* One training-forward call of an FFN (SPEC §1-§2). */
typedef struct model_ffn_train {
    ag_ctx *ctx;
    const model_arch *arch;
    const model_layer_arch *layer;
    dt_tensor *const *w; /* [MODEL_FFN_SLOTS] this trajectory's weights */
    int branch;          /* 0: the primary; 1: the decode branch */
    dt_tensor *x;        /* [B,T,C] the normed input */
    /* Branch coupling (SPEC §2), NULL when absent. z1 and m1 are the
     * primary's, already detached when detach_primary says so. */
    dt_tensor *z1, *couple_hidden; /* [B,T,F], [F] */
    dt_tensor *m1, *couple_out;    /* [B,T,C], [C] */
    /* When non-NULL the kind returns residual + m (+ couple_out ⊙ m1 on the
     * branch) in fused ops; only passed to kinds with fuses_residual. */
    dt_tensor *residual;        /* [B,T,C] */
    int keep_hidden;            /* primary: the branch reads z1 (record it in state) */
    model_primary_state *state; /* primary: z1, router_logits out; branch: router_logits in */
    model_ffn_balance *balance; /* primary MoE layers add their balance term */
    int64_t top_k;              /* experts per token of this trajectory (MoE) */
    int replay;                 /* branch MoE: experts from the primary's router logits */
} model_ffn_train;

/* ---- decode forms ---- */

/* A product of the decode engine: out [M,N] = in [M,K] · weight [N,K]^T + bias [N]. */
typedef struct model_row_product {
    float *out;
    const float *in;
    const float *weight, *bias;
    int64_t M, K, N;
} model_row_product;

/* The decode engine's services to a kind's decode form (implemented by
 * eval/decode.c). Every thread of the step team runs the form: control flow
 * may depend only on data written in completed stages (eval/team.h). */
typedef struct model_row_exec {
    void *self;
    /* Queues a product (counted as one matrix load); runs at the next flush. */
    void (*linear)(void *self, const model_row_product *p);
    void (*flush)(void *self);
    /* Two products of equal M and N handed out together by rows; epilogue(n0,
     * n1, arg) runs on each claimed range [n0, n1) of N (the SwiGLU fusion).
     * NULL when the engine has no such path (the caller uses linear+serial). */
    void (*linear_pair)(void *self, const model_row_product *a, const model_row_product *b,
                        void (*epilogue)(int64_t n0, int64_t n1, void *arg), void *arg);
    /* One thread runs the section (returns 1), then calls serial_end. */
    int (*serial_begin)(void *self);
    void (*serial_end)(void *self);
    void (*count_expert)(void *self);                 /* one expert run (traffic counters) */
    void (*count_vector)(void *self, int64_t floats); /* a vector read outside the products (traffic counters) */
} model_row_exec;

#define MODEL_ROW_SERIAL(exec)                                                                                         \
    for (int row_serial_once_ = (exec)->serial_begin((exec)->self); row_serial_once_;                                  \
         (exec)->serial_end((exec)->self), row_serial_once_ = 0)

/* Per-layer scratch of the MoE forms: each row's experts and gates this step. */
enum { MODEL_MAX_TOP_K = 64 };

/* One decode-step call: rows [row0, row0 + n_rows) of the stacked [2, *]
 * buffers (row 0 the primary, row 1 the branch). */
typedef struct model_ffn_rows {
    const model_row_exec *exec;
    const model_arch *arch;
    const model_layer_arch *layer;
    const model_config *config;
    dt_tensor *const *w[2]; /* [MODEL_FFN_SLOTS] weights of row 0 and row 1 */
    int row0, n_rows;
    const float *x;                 /* [2,C] normed input */
    float *m;                       /* [2,C] output */
    float *hidden_a, *hidden_b, *z; /* [2,F] scratch */
    float *hidden_c, *hidden_d;     /* [2,F] the third and fourth factors (product FFNs) */
    float *z1;                      /* [F] the primary's hidden at this layer (saved by row 0) */
    const float *couple_hidden;     /* [F] or NULL */
    /* MoE */
    float *router_logits;    /* [2,E] scratch */
    float *router1;          /* [E] the primary's router logits at this layer (saved by row 0) */
    int32_t *route_index[2]; /* [MODEL_MAX_TOP_K] each row's experts, this layer */
    float *route_gates[2];   /* [MODEL_MAX_TOP_K] their gates */
    float *expert_out;       /* [2,C] scratch */
} model_ffn_rows;

/* One prefill call: P prompt rows, and with extra = 1 the branch row P. */
typedef struct model_ffn_prefill {
    const model_row_exec *exec;
    const model_arch *arch;
    const model_layer_arch *layer;
    const model_config *config;
    dt_tensor *const *w[2]; /* primary's and branch's weights */
    int64_t P;
    int extra;
    const float *x;                 /* [P+1,C] */
    float *m;                       /* [P+1,C] */
    float *hidden_a, *hidden_b, *z; /* [P+1,F] */
    float *hidden_c, *hidden_d;     /* [P+1,F] the third and fourth factors (product FFNs) */
    float *z1;                      /* [F] primary hidden at row P-1 (saved) */
    const float *couple_hidden;     /* [F] or NULL */
    /* MoE */
    float *router_logits;                       /* [P+1,E] */
    float *router1;                             /* [E] saved: primary logits at P-1 */
    int32_t *topk_index;                        /* [P,top_k] */
    float *topk_logits, *topk_gates;            /* [P,top_k] */
    int32_t *expert_rows;                       /* [P+1] */
    float *expert_gates;                        /* [P+1] */
    float *expert_in, *expert_out;              /* [P+1,C] */
    float *row_out;                             /* [C] scratch for one branch-row expert */
    float *row_hidden_a, *row_hidden_b, *row_z; /* [F] scratch for one branch-row expert */
    float *row_hidden_c, *row_hidden_d;         /* [F] */
} model_ffn_prefill;

/* ---- cost ---- */

/* Floats of one layer's FFN, by what a token does with them. */
typedef struct model_ffn_cost {
    int64_t params;        /* everything the kind declares (all experts) */
    int64_t dense_matmul;  /* matrices every token multiplies through (dense kinds) */
    int64_t dense_vectors; /* biases and other vectors every token reads */
    int64_t router;        /* MoE router matrix (every token) */
    int64_t expert;        /* one expert's matrices (MoE) */
    int64_t n_expert;      /* experts declared (0 for dense kinds) */
    int64_t hidden;        /* F when the kind has a hidden activation z (couple_hidden exists) */
    /* Training activations kept per token (bench train's memory estimate):
     * activation_floats + k * activation_floats_per_expert for k experts. */
    int64_t activation_floats, activation_floats_per_expert;
    /* The part of `expert` that is vectors read with its matrices (prod_norm's
     * row): bf16 decode weights keep them float32 (models/model_info.c). */
    int64_t expert_vectors;
} model_ffn_cost;

struct model_ffn_kind {
    const char *name;
    int fuses_residual; /* forward accepts call->residual */
    int has_hidden;     /* a hidden activation the branch couples to (couple_hidden) */
    int is_moe;         /* routed experts (top_k, balance term, router replay) */
    /* Tensors of one layer in SPEC §3 order, into w[slot] (slot = order). */
    dt_status (*declare)(const model_arch *arch, const model_layer_arch *layer, const model_param_sink *sink,
                         dt_tensor **w);
    dt_tensor *(*forward)(const model_ffn_train *call);
    void (*rows)(const model_ffn_rows *call);
    void (*prefill)(const model_ffn_prefill *call);
    void (*cost)(const model_arch *arch, const model_layer_arch *layer, model_ffn_cost *cost);
};

/* The table: NULL for an unknown name. */
const model_ffn_kind *model_ffn_kind_find(const char *name);

/* ---- helpers the kinds share (ffn_common.c) ---- */

/* Rows [row0, row0 + n_rows) of in [2,K] into out [2,N]: row 0 with (w0, b0),
 * row 1 with (w1, b1); two rows with the same matrix as one stacked product.
 * Queued (flush before reading out). */
void model_rows_linear(const model_row_exec *exec, float *out, const float *in, int row0, int n_rows,
                       const dt_tensor *w0, const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1, int64_t K,
                       int64_t N);
/* out [P+extra,N] = in [P+extra,K] · W^T: rows < P with (w0, b0), row P with
 * (w1, b1); one product when they share the matrix. Runs now. */
void model_prefill_linear(const model_row_exec *exec, float *out, const float *in, int64_t P, int extra,
                          const dt_tensor *w0, const dt_tensor *b0, const dt_tensor *w1, const dt_tensor *b1, int64_t K,
                          int64_t N);
/* dst[n] += couple[n] * primary[n] (couple NULL: nothing). */
void model_add_coupling(float *dst, const float *couple, const float *primary, int64_t n);
static inline const float *model_data(const dt_tensor *t) { return t ? (const float *)t->data : (const float *)0; }

/* The product of SPEC §6.1 on `rows` rows of width F, in place in a:
 * a <- a ⊙ b (⊙ c (⊙ d)) for degree 2 (3, 4), then with norm_weight [F]
 * (or NULL) a <- a / sqrt(mean(a^2) + eps) ⊙ norm_weight per row. The
 * product FFN kind and MoE's product experts share it. a, b, c, d [rows, F] */
void model_product_rows(float *a, const float *b, const float *c, const float *d, int degree, int64_t rows, int64_t F,
                        const float *norm_weight, float eps);

/* The down projection every dense kind ends with (taped): m = hidden down^T
 * (+ bias), fused with the residual and the branch's couple_out term when
 * call->residual is set. hidden [B,T,F] -> [B,T,C]. */
dt_tensor *model_ffn_down(const model_ffn_train *call, dt_tensor *hidden, dt_tensor *down, dt_tensor *down_bias);

#endif
