/* Validation loss, teacher-forced (model_forward without a tape) or through
 * the decode engine; see eval_loss.h. Both paths hand their logits to the same
 * scoring code (the mixture kernel), so any difference between the two figures
 * is a difference in the logits. Sums are kept per window (WINDOW_SUMS) and
 * added in window order, which is what lets several processes share the
 * windows and still give the one-process figures to the bit. */
#include "eval/eval_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "data/loader.h"
#include "kernels/mixture.h"
#include "kernels/softmax.h"

/* Per window: sums of nll, primary CE, branch CE, alpha over its scored
 * positions, then the positions and the bytes of their targets. */
enum { WINDOW_SUMS = 6, CHUNK_WINDOWS = 1024 };

eval_loss_options eval_loss_default_options(void) {
    return (eval_loss_options){.split = SPLIT_VAL,
                               .n_windows = 0,
                               .seq_len = 0,
                               .prompt_len = 0,
                               .method = EVAL_TEACHER_FORCED,
                               .decode_mode = EVAL_DECODE_GROUPED,
                               .comm = NULL};
}

/* Running sums over scored positions, plus per-position scratch [seq_len]. */
typedef struct scorer {
    const model_config *config;
    int with_branch;
    float *nll, *alpha, *ce_primary, *ce_branch; /* [seq_len] */
    double sum_nll, sum_primary, sum_branch, sum_alpha;
    int64_t n_tokens;
} scorer;

/* Scores M positions: logits_primary, logits_branch [M,V] (branch NULL when
 * it does not run), targets [M]. */
static void score(scorer *sc, const float *logits_primary, const float *logits_branch, const int32_t *targets,
                  int64_t M) {
    int64_t V = sc->config->vocab_size;
    if (sc->with_branch) {
        k_mixture_forward(sc->nll, sc->alpha, sc->ce_primary, sc->ce_branch, logits_primary, logits_branch, targets, M,
                          V, (float)sc->config->mix_alpha_min, (float)sc->config->mix_alpha_max);
    } else {
        k_cross_entropy_forward(sc->ce_primary, logits_primary, targets, M, V);
        for (int64_t i = 0; i < M; i++) {
            sc->nll[i] = sc->ce_primary[i];
            sc->alpha[i] = 1.0f;
            sc->ce_branch[i] = 0.0f;
        }
    }
    for (int64_t i = 0; i < M; i++) {
        sc->sum_nll += sc->nll[i];
        sc->sum_primary += sc->ce_primary[i];
        sc->sum_branch += sc->ce_branch[i];
        sc->sum_alpha += sc->alpha[i];
    }
    sc->n_tokens += M;
}

static dt_status check_options(const model *m, const data_tokens *data, const eval_loss_options *o, int64_t seq_len) {
    const model_config *c = &m->config;
    if (c->vocab_size != data->vocab_size)
        return dt_errorf("model vocab_size %lld != dataset vocab_size %lld (%s)", (long long)c->vocab_size,
                         (long long)data->vocab_size, data->path);
    if (seq_len < 1 || seq_len > c->block_size)
        return dt_errorf("seq_len %lld outside 1..block_size %lld", (long long)seq_len, (long long)c->block_size);
    if (o->prompt_len < 0 || o->prompt_len > seq_len)
        return dt_errorf("prompt_len %lld outside 1..seq_len %lld", (long long)o->prompt_len, (long long)seq_len);
    if (o->method == EVAL_DECODE && o->prompt_len < 1)
        return dt_errorf("decode evaluation needs prompt_len >= 1 (got %lld)", (long long)o->prompt_len);
    if (o->n_windows < 0) return dt_errorf("n_windows %lld is negative", (long long)o->n_windows);
    if (o->feedback != EVAL_FEEDBACK_STANDARD && !c->feedback)
        return dt_errorf("--feedback %s needs a model with feedback = 1 (SPEC §6.5)",
                         eval_feedback_mode_name(o->feedback));
    if (o->feedback != EVAL_FEEDBACK_STANDARD && seq_len > MODEL_FEEDBACK_MAX_PASSES &&
        o->method == EVAL_TEACHER_FORCED)
        return dt_errorf("--feedback %s teacher-forced runs seq_len = %lld passes (at most %d); use --method decode",
                         eval_feedback_mode_name(o->feedback), (long long)seq_len, MODEL_FEEDBACK_MAX_PASSES);
    if (o->split != SPLIT_TRAIN && o->split != SPLIT_VAL) return dt_errorf("unknown split %d", (int)o->split);
    return DT_OK;
}

dt_status eval_forward_window(model *m, ag_ctx *ctx, const int32_t *inputs, int64_t T, eval_feedback_mode feedback,
                              model_outputs *out) {
    ag_reset(ctx);
    dt_tensor *tokens = ag_tensor(ctx, DT_I32, DT_SHAPE(1, T));
    if (!tokens) return DT_ERR;
    memcpy(tokens->data, inputs, (size_t)T * sizeof(int32_t));
    memset(out, 0, sizeof *out);
    model_feedback_run run = model_feedback_plain();
    if (feedback != EVAL_FEEDBACK_STANDARD) run.passes = T; /* the soft decode of T positions (SPEC §6.5) */
    return model_forward_feedback(m, ctx, tokens, NULL, &run, out);
}

/* Teacher-forced logits of one window (eval_forward_window), scored from position first. */
static dt_status window_teacher_forced(model *m, ag_ctx *ctx, const int32_t *inputs, const int32_t *targets, int64_t T,
                                       int64_t first, eval_feedback_mode feedback, scorer *sc) {
    model_outputs out;
    if (eval_forward_window(m, ctx, inputs, T, feedback, &out) != DT_OK) return DT_ERR;
    int64_t V = m->config.vocab_size;
    const float *logits_branch = sc->with_branch ? dt_f32(out.logits_branch) + first * V : NULL;
    if (sc->with_branch && !out.logits_branch) return dt_errorf("model_forward returned no branch logits");
    score(sc, dt_f32(out.logits_primary) + first * V, logits_branch, targets + first, T - first);
    return DT_OK;
}

/* The same window through the decode engine: prefill P tokens, step the rest. */
static dt_status window_decode(eval_decode_session *s, const int32_t *inputs, const int32_t *targets, int64_t T,
                               int64_t P, scorer *sc) {
    if (eval_decode_prefill(s, inputs, P, NULL) != DT_OK) return DT_ERR;
    score(sc, eval_decode_logits_primary(s), eval_decode_logits_branch(s), targets + P - 1, 1);
    for (int64_t t = P; t < T; t++) {
        if (eval_decode_step(s, inputs[t]) != DT_OK) return DT_ERR;
        score(sc, eval_decode_logits_primary(s), eval_decode_logits_branch(s), targets + t, 1);
    }
    return DT_OK;
}

/* Evaluation window w of n_windows (data_eval_window), scored by either path; its sums into out[WINDOW_SUMS]. */
static dt_status score_window(model *m, data_tokens *data, const eval_loss_options *o, ag_ctx *ctx,
                              eval_decode_session *session, int32_t *inputs, int32_t *targets, int64_t T, int64_t first,
                              int64_t w, int64_t n_windows, scorer *sc, double *out) {
    dt_status status = data_eval_window(data, o->split, w, n_windows, T, inputs, targets);
    if (status != DT_OK) return status;
    sc->sum_nll = sc->sum_primary = sc->sum_branch = sc->sum_alpha = 0.0;
    sc->n_tokens = 0;
    if (o->method == EVAL_TEACHER_FORCED)
        status = window_teacher_forced(m, ctx, inputs, targets, T, first, o->feedback, sc);
    else
        status = window_decode(session, inputs, targets, T, o->prompt_len, sc);
    if (status != DT_OK) return dt_error_context("window %lld", (long long)w);
    /* The bytes the scored targets decode to, from each token's byte length
     * (ids are in range: the read checked them); an ids-only tokenizer's are 0. */
    const int64_t n_bytes = eval_window_bytes(data, targets, first, T);
    out[0] = sc->sum_nll;
    out[1] = sc->sum_primary;
    out[2] = sc->sum_branch;
    out[3] = sc->sum_alpha;
    out[4] = (double)sc->n_tokens;
    out[5] = (double)n_bytes;
    return DT_OK;
}

dt_status eval_loss_windows(const model *m, const data_tokens *data, const eval_loss_options *o, int64_t *seq_len,
                            int64_t *n_windows) {
    int64_t T = o->seq_len ? o->seq_len : m->config.block_size;
    /* A record file's windows are its records' first T + 1 tokens, T in a labelled one (data/loader.h). */
    const int64_t shift = data_tokens_target_shift(data, o->split);
    if (!o->seq_len && data->record_len && T > data->record_len - shift) T = data->record_len - shift;
    if (check_options(m, data, o, T) != DT_OK) return DT_ERR;
    int64_t available = data_split_windows(data, o->split, T);
    if (available < 1 && data->record_len)
        return dt_errorf("%s: windows of %lld tokens do not fit in its records of record_len = %lld", data->path,
                         (long long)(T + shift), (long long)data->record_len);
    if (available < 1)
        return dt_errorf("%s: the %s split holds fewer than %lld tokens (one window of seq_len + 1)", data->path,
                         o->split == SPLIT_VAL ? "val" : "train", (long long)(T + 1));
    *seq_len = T;
    *n_windows = o->n_windows == 0 || o->n_windows > available ? available : o->n_windows;
    return DT_OK;
}

int64_t eval_window_bytes(const data_tokens *data, const int32_t *targets, int64_t first, int64_t T) {
    int64_t n_bytes = 0;
    for (int64_t t = first; t < T; t++)
        n_bytes += data->tokenizer.token_length[targets[t]];
    return n_bytes;
}

dt_status eval_loss_run(model *m, data_tokens *data, const eval_loss_options *o, eval_loss_result *result) {
    memset(result, 0, sizeof *result);
    int64_t T, n_windows;
    if (eval_loss_windows(m, data, o, &T, &n_windows) != DT_OK) return DT_ERR;
    int64_t first = o->prompt_len > 0 ? o->prompt_len - 1 : 0; /* first scored position */

    scorer sc = {.config = &m->config};
    sc.with_branch = m->config.branch == BRANCH_DECODE &&
                     (o->method == EVAL_TEACHER_FORCED || o->decode_mode != EVAL_DECODE_BASELINE);
    int32_t *inputs = malloc((size_t)T * sizeof(int32_t)), *targets = malloc((size_t)T * sizeof(int32_t));
    float *buffers = malloc((size_t)(4 * T) * sizeof(float));
    double *chunk = malloc((size_t)(CHUNK_WINDOWS * WINDOW_SUMS) * sizeof(double)); /* [CHUNK_WINDOWS, WINDOW_SUMS] */
    ag_ctx ctx;
    eval_decode_session session;
    int have_ctx = 0, have_session = 0;
    dt_status status = DT_OK;
    if (!inputs || !targets || !buffers || !chunk) {
        status = dt_errorf("eval: out of memory for windows of %lld tokens", (long long)T);
        goto done;
    }
    sc.nll = buffers;
    sc.alpha = buffers + T;
    sc.ce_primary = buffers + 2 * T;
    sc.ce_branch = buffers + 3 * T;
    if (o->method == EVAL_TEACHER_FORCED) {
        if ((status = ag_ctx_init(&ctx, 0)) != DT_OK) goto done;
        have_ctx = 1;
        ag_set_grad_enabled(&ctx, 0);
    } else {
        if ((status = eval_decode_init(&session, m, o->decode_mode, o->prompt_len)) != DT_OK) goto done;
        session.weights = o->decode_weights;
        have_session = 1;
        session.feedback = o->feedback;
    }

    /* Chunks of windows: rank w % size scores window w into its row of
     * `chunk`, the rows are summed over the processes (one nonzero term per
     * row: exact), and the rows are added in window order on every rank. */
    const dt_comm *comm = o->comm ? o->comm : dt_comm_single();
    double totals[WINDOW_SUMS] = {0, 0, 0, 0, 0, 0};
    for (int64_t chunk_first = 0; chunk_first < n_windows; chunk_first += CHUNK_WINDOWS) {
        const int64_t n_chunk =
            n_windows - chunk_first < CHUNK_WINDOWS ? n_windows - chunk_first : (int64_t)CHUNK_WINDOWS;
        memset(chunk, 0, (size_t)(n_chunk * WINDOW_SUMS) * sizeof *chunk);
        for (int64_t w = chunk_first; w < chunk_first + n_chunk; w++) {
            if (w % comm->size != comm->rank) continue;
            if ((status = score_window(m, data, o, &ctx, &session, inputs, targets, T, first, w, n_windows, &sc,
                                       chunk + (w - chunk_first) * WINDOW_SUMS)) != DT_OK)
                goto done;
        }
        /* A failed rank never gets here; cli_fail_job takes the job down. */
        if (comm->size > 1 && (status = comm->allreduce_f64(comm, chunk, n_chunk * WINDOW_SUMS)) != DT_OK) goto done;
        for (int64_t i = 0; i < n_chunk; i++)
            for (int k = 0; k < WINDOW_SUMS; k++)
                totals[k] += chunk[i * WINDOW_SUMS + k];
    }
    const double n_tokens = totals[4];
    result->seq_len = T;
    result->n_windows = n_windows;
    result->n_tokens = (int64_t)n_tokens;
    result->n_bytes = (int64_t)totals[5];
    result->has_branch = sc.with_branch;
    result->loss = totals[0] / n_tokens;
    result->loss_primary = totals[1] / n_tokens;
    result->loss_branch = totals[2] / n_tokens;
    result->alpha_mean = totals[3] / n_tokens;
    result->bits_per_byte =
        result->n_bytes > 0 ? totals[0] / log(2.0) / totals[5] : 0.0; /* = loss/ln2 * tokens/bytes */
done:
    if (have_ctx) ag_ctx_free(&ctx);
    if (have_session) eval_decode_free(&session);
    free(inputs);
    free(targets);
    free(buffers);
    free(chunk);
    return status;
}
