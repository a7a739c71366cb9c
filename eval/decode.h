/* The KV-cache decode engine: prompt prefill and one-token decode steps on the
 * kernels directly (no autograd tape), for baseline models and for
 * Decode-Branch models in grouped and un-grouped form (SPEC §2 "Grouped
 * decode").
 *
 * A session owns one K and one V cache per layer, [block_size, Hkv*hd] (per
 * applied layer with n_loop = K > 1, SPEC §6.6: K·L of them), and
 * every scratch buffer a prefill or a step needs; all of it is allocated once
 * by eval_decode_init, so prefill and steps allocate nothing.
 *
 * Positions: eval_decode_prefill(tokens[0..P-1]) runs the PRIMARY path over
 * the whole prompt with batched GEMMs and causal attention, writing K/V for
 * positions 0..P-1, and leaves the logits of position P-1. The branch row
 * starts at the last prompt position (SPEC §2): it runs once at P-1 with token
 * x_{P-1}, reading the primary's q1, z1, m1 (and router logits) at P-1. In
 * grouped mode it is one extra row of the prompt's batched products (so the
 * prefill streams each shared matrix once, like the baseline's); un-grouped, a
 * separate pass after the prompt. Each eval_decode_step(x_t) then processes
 * position t = pos + 1: the primary row writes K_l[t], V_l[t]; the branch row
 * reads them; both produce next-token logits at t.
 *
 * Modes:
 *   BASELINE   the primary row only (for a branch model: its primary path);
 *   GROUPED    primary and branch rows stacked into one [2, C] input for every
 *              matrix they share (Wq, Wo, FFN, router and experts, LM head),
 *              one attention pass with both queries, MoE experts run once for
 *              the union of the two rows' experts;
 *   UNGROUPED  the same math with the two rows in separate passes.
 *
 * Threads: a step runs on k_get_threads() threads as one team (eval/team.h),
 * one OpenMP region per step with counter-synchronised stages inside, so a
 * thread descheduled by other jobs on a shared machine does not stall every
 * stage. The prefill's batched GEMMs go through BLIS (k_linear_forward). */
#ifndef EVAL_DECODE_H
#define EVAL_DECODE_H

#include <stdint.h>

#include "core/arena.h"
#include "core/error.h"
#include "eval/decode_weights.h"
#include "eval/matvec.h"
#include "eval/team.h"
#include "models/disco.h"
#include "models/model.h"

typedef enum { EVAL_DECODE_BASELINE = 0, EVAL_DECODE_GROUPED = 1, EVAL_DECODE_UNGROUPED = 2 } eval_decode_mode;

/* Latent feedback decoding (SPEC §6.5), for models with feedback = 1:
 *   STANDARD  plain passes only (the prompt and every step embed their token);
 *   SOFT      each step's position t takes u_t = fuse(h_{t-1}, e_t), h_{t-1}
 *             the top state (Norm_f output) of the previous position; the
 *             prompt is one plain pass;
 *   FUSED     the prompt gets a plain pass and then one feedback pass (its
 *             cache rewritten), then soft steps.
 * The KV cache is unchanged; the session carries one extra vector, h_{pos}. */
typedef enum { EVAL_FEEDBACK_STANDARD = 0, EVAL_FEEDBACK_SOFT = 1, EVAL_FEEDBACK_FUSED = 2 } eval_feedback_mode;

/* Which product serves the M <= 2 decode rows: eval_matvec (eval/matvec.h,
 * the default, measured faster) or k_linear_forward (BLIS). */
typedef enum { EVAL_MATVEC_OWN = 0, EVAL_MATVEC_BLIS = 1 } eval_matvec_path;

/* Memory touched by the last prefill or step, counted from the shapes of what
 * ran: a matrix used by one stacked [2, C] product counts once, the same
 * matrix used by two separate rows counts twice. */
typedef struct eval_decode_traffic {
    double weight_bytes;   /* matrices, biases, norm weights, embedding rows read */
    double kv_read_bytes;  /* K and V cache rows read by attention passes */
    double kv_write_bytes; /* K and V rows written (the primary row only) */
    int64_t matrix_loads;  /* weight matrices streamed (linear-layer calls) */
    int64_t expert_loads;  /* MoE experts run (per layer: the union of the rows' experts when grouped) */
} eval_decode_traffic;

/* Scratch of a decode step: row 0 is the primary row, row 1 the branch row. */
typedef struct eval_decode_rows {
    float *h, *x, *o, *m, *expert_out; /* [2, C] */
    float *q, *y;                      /* [2, H*hd] */
    float *hidden_a, *hidden_b, *z;    /* [2, F] */
    float *hidden_c, *hidden_d;        /* [2, F] third and fourth factors of product FFNs (else 1 float) */
    float *history;                    /* [2L+1, 2, C] attn_res: each row's sources at this position */
    float *mean, *rstd;                /* [2] */
    float *router_logits;              /* [2, E] */
    float *attn_scratch;               /* [2, H, block_size] attention scores */
    int32_t *route_index;              /* [n_loop * L, 2, 64] each row's experts per applied layer (this step) */
    float *route_gates;                /* [n_loop * L, 2, 64] their gates */
} eval_decode_rows;

/* Scratch of a prefill of up to max_prompt positions: P rows of the prompt
 * plus one row for the branch at position P-1 (grouped mode), shapes [P+1, .]. */
typedef struct eval_decode_prefill_buffers {
    float *h, *x, *o, *m, *expert_in, *expert_out; /* [P+1, C] */
    float *q, *y;                                  /* [P+1, H*hd] */
    float *hidden_a, *hidden_b, *z;                /* [P+1, F] */
    float *hidden_c, *hidden_d;                    /* [P+1, F] product FFNs' extra factors (else 1 float) */
    float *history;                                /* [2L+1, P+1, C] attn_res: every row's sources */
    float *mean, *rstd;                            /* [P+1] */
    float *lse;                                    /* [H, P] */
    float *router_logits;                          /* [P+1, E] */
    int32_t *topk_index;                           /* [P, top_k] the prompt rows' experts */
    float *topk_logits, *topk_gates;               /* [P, top_k] */
    int32_t *expert_rows;                          /* [P+1] rows routed to one expert */
    float *expert_gates;                           /* [P+1] their gates */
    float *feedback_inputs;                        /* [P, C] fused mode: the prompt's feedback-pass inputs */
    float *k_rows, *v_rows; /* [P, Hkv*hd] a layer's prompt K, V as rows (head-block caches: then copied in) */
} eval_decode_prefill_buffers;

typedef struct eval_decode_session {
    const model *model;
    eval_decode_mode mode;
    eval_matvec_path matvec; /* may be changed between steps */
    /* The matrices' stored form (eval/decode_weights.h), read by the M <= 2
     * products; NULL (the default): the model's float32 weights. Set before
     * the first prefill; it must outlive the session. */
    const eval_decode_weights *weights;
    int run_branch;     /* the model has a decode branch and mode != BASELINE */
    int64_t n_pos_max;  /* cache length: the model's block_size */
    int64_t max_prompt; /* longest prompt eval_decode_prefill accepts */
    int64_t pos;        /* position whose logits are held; -1 before the first prefill */
    dt_arena arena;     /* owns every buffer below */
    /* Per applied layer a block of n_pos_max * max_kv_width floats: head
     * blocks [Hkv, n_pos_max, hd] (each head's positions contiguous: the
     * decode attention reads one stream per head, kernels/attention.h,
     * k_kv_cache), or for recurrent models (SPEC §6.4) rows [n_pos_max, Hkv*hd]. */
    float *k_cache, *v_cache;
    /* The primary's new K, V rows at `pos` (k rotated), before they go into
     * the cache; recurrent: its temporary pairs, which the branch row reads too. */
    float *k_tmp, *v_tmp; /* [L, Hkv*hd] */
    float *x_persist;     /* [C] Norm1_l(out_t) of the primary row */
    /* The primary's intermediates at position `pos`, per layer, read by the branch row. */
    float *q1;                            /* [L, H*hd] query before RoPE */
    float *z1;                            /* [L, F] MLP hidden activation (dense layers) */
    float *m1;                            /* [L, C] FFN output */
    float *router1;                       /* [L, E] router logits (moe) */
    float *route_gathered, *route_logits; /* [2L+1, C], [(2L+1) R]: one attn_res route's scratch */
    float *disco_logits;                  /* [DISCO_CHUNK, V] DiscoLoop: a prefill chunk's logits (SPEC §6.6) */
    model_disco_scratch disco;            /* DiscoLoop's scratch for DISCO_CHUNK rows (models/disco.h) */
    eval_decode_rows rows;
    eval_decode_prefill_buffers prefill;
    float *logits;               /* [2, V]: row 0 primary, row 1 branch (valid when run_branch), at `pos` */
    float alpha;                 /* mixture weight at `pos` (1 without a branch) */
    double one_minus_alpha;      /* the branch's weight 1 - alpha, exact near alpha = 1 (kernels/mixture.h) */
    eval_feedback_mode feedback; /* latent feedback decoding; set between sequences (standard after init) */
    float *feedback_top;         /* [C] the top state Norm_f(h_L) at `pos` (feedback models) */
    float *feedback_scratch;     /* [3C] one fusion's scratch and e_t */
    eval_decode_traffic traffic; /* of the last prefill or step */
    eval_team team;              /* stage counters of the step team (eval/team.h) */
} eval_decode_session;

/* Allocates the caches and all scratch for this model (max_prompt 0: block_size). */
dt_status eval_decode_init(eval_decode_session *s, const model *m, eval_decode_mode mode, int64_t max_prompt);
void eval_decode_free(eval_decode_session *s);

/* Starts a sequence: tokens [n_prompt] at positions 0..n_prompt-1 (forgets any
 * earlier one). logits_all [n_prompt, V] receives the primary logits of every
 * prompt position when non-NULL (teacher-forced; costs the LM head on all rows). */
dt_status eval_decode_prefill(eval_decode_session *s, const int32_t *tokens, int64_t n_prompt, float *logits_all);
/* Feeds the next token at position pos + 1; an error when the cache is full. */
dt_status eval_decode_step(eval_decode_session *s, int32_t token);

static inline const float *eval_decode_logits_primary(const eval_decode_session *s) { return s->logits; }
/* NULL when the branch does not run. */
static inline const float *eval_decode_logits_branch(const eval_decode_session *s) {
    return s->run_branch ? s->logits + s->model->config.vocab_size : (const float *)0;
}

/* probs [V] = the model's next-token distribution at `pos`: the mixture
 * alpha p + (1 - alpha) q for a branch model (p when the branch does not run). */
void eval_decode_mixture(const eval_decode_session *s, float *probs);

const char *eval_decode_mode_name(eval_decode_mode mode);
const char *eval_feedback_mode_name(eval_feedback_mode mode);
/* "standard" | "soft" | "fused"; an error naming the value otherwise. */
dt_status eval_feedback_mode_parse(const char *text, eval_feedback_mode *mode);

#endif
