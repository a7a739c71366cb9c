/* Validation loss of a model on a token dataset (`dbranch eval`).
 *
 * Windows of seq_len + 1 tokens are read from a split (window i starts at
 * i * seq_len, data/loader.h); each position t predicts target t. Two ways to
 * get the logits, which must agree:
 *   teacher-forced: model_forward in no-grad mode over the whole window;
 *   decode: the decode engine prefills the first prompt_len tokens, then
 *           steps through the rest, one token at a time (eval/decode.h).
 * With prompt_len = P >= 1 both score only positions P-1 .. seq_len-1 (the
 * positions where the decode engine produces a mixture: the branch starts at
 * the last prompt position), so the two figures are comparable.
 *
 * Reported: the mixture NLL (`loss`; the primary's cross-entropy for models
 * without a branch), `loss_primary`, `loss_branch`, the mean alpha, and bits
 * per byte = loss / ln 2 * tokens / bytes, bytes counted by decoding the
 * scored target tokens with the dataset's tokenizer.
 *
 * Several processes (options.comm, e.g. `mpirun -n N dbranch eval`): window
 * w is evaluated by rank w % N; each window's sums are combined over the
 * processes (each is computed on one rank, zeros elsewhere: exact in any
 * order) and every rank adds them in window order, so the figures are the
 * one-process figures to the bit, on every rank. */
#ifndef EVAL_EVAL_LOSS_H
#define EVAL_EVAL_LOSS_H

#include <stdint.h>

#include "core/comm.h"
#include "core/error.h"
#include "data/tokens.h"
#include "eval/decode.h"
#include "models/model.h"

typedef enum { EVAL_TEACHER_FORCED = 0, EVAL_DECODE = 1 } eval_loss_method;

typedef struct eval_loss_options {
    data_split split;             /* SPLIT_VAL by default */
    int64_t n_windows;            /* 0: every window of the split; more than the split holds: all of them */
    int64_t seq_len;              /* 0: the model's block_size */
    int64_t prompt_len;           /* 0: score every position (teacher-forced only); P: positions P-1.. */
    eval_loss_method method;      /* EVAL_DECODE needs prompt_len >= 1 */
    eval_decode_mode decode_mode; /* engine mode for EVAL_DECODE (grouped by default) */
    const eval_decode_weights *decode_weights; /* EVAL_DECODE's matrices' stored form (NULL: the model's float32) */
    const dt_comm *comm; /* the processes sharing the windows (NULL: this one alone); collective */
    /* Latent feedback decoding (feedback models, SPEC §6.5): with EVAL_DECODE
     * the engine's mode; teacher-forced, soft and fused both run the forward
     * with K = seq_len passes, which is soft decoding from the window's first
     * token (fused differs from soft only through a prompt). */
    eval_feedback_mode feedback;
} eval_loss_options;

typedef struct eval_loss_result {
    double loss;          /* mean mixture NLL (primary CE without a branch) */
    double loss_primary;  /* mean CE of the primary logits */
    double loss_branch;   /* mean CE of the branch logits (0 without a branch) */
    double alpha_mean;    /* mean mixture weight (1 without a branch) */
    double bits_per_byte; /* loss / ln 2 * n_tokens / n_bytes */
    int64_t seq_len;      /* T of each window */
    int64_t n_windows;    /* windows evaluated */
    int64_t n_tokens;     /* positions scored */
    int64_t n_bytes;      /* bytes of the scored target tokens */
    int has_branch;
} eval_loss_result;

/* The teacher-forced outputs of one window inputs [T] (batch 1): model_forward
 * on ctx (reset first; no-grad for evaluation), with feedback != standard the
 * T-pass feedback forward (soft decoding from the window's first token). */
dt_status eval_forward_window(model *m, ag_ctx *ctx, const int32_t *inputs, int64_t T, eval_feedback_mode feedback,
                              model_outputs *out);

eval_loss_options eval_loss_default_options(void);

/* The windows the options select: *seq_len T (the model's block_size, a
 * record file's record length, or options->seq_len) and *n_windows, after the
 * checks eval_loss_run makes. */
dt_status eval_loss_windows(const model *m, const data_tokens *data, const eval_loss_options *options, int64_t *seq_len,
                            int64_t *n_windows);

/* The bytes the targets first..T-1 decode to (each token's byte length; 0 for an ids-only tokenizer). */
int64_t eval_window_bytes(const data_tokens *data, const int32_t *targets, int64_t first, int64_t T);

/* Checks the options against the model and the dataset (vocab sizes equal,
 * seq_len <= block_size, 1 <= prompt_len <= seq_len, the split holds a window),
 * then evaluates. */
dt_status eval_loss_run(model *m, data_tokens *data, const eval_loss_options *options, eval_loss_result *result);

#endif
