/* Validation loss by fused passes (feedback_passes.h): per window the passes
 * run one after another through model_forward_feedback_pass, each pass's top
 * state copied into one heap buffer that feeds the next (the arena is reset
 * between passes, so a window of 31 passes holds one pass's activations).
 * Buffers are made once before the windows; the loop allocates nothing after
 * the arena has grown to one pass. */
#include "eval/feedback_passes.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "data/loader.h"
#include "kernels/softmax.h"

dt_status eval_feedback_passes_parse(const char *text, int64_t *fused, int *n) {
    *n = 0;
    if (!text || !*text) return dt_errorf("--feedback-passes: empty list (want e.g. 0,1,2,5,10,30)");
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || errno || *p == '+' || *p == '-' || *p == ' ')
            return dt_errorf("--feedback-passes: '%.*s' in '%s' is not a whole number of passes",
                             (int)(strcspn(p, ",") ? strcspn(p, ",") : 1), p, text);
        if (v > EVAL_FEEDBACK_MAX_N)
            return dt_errorf("--feedback-passes: %lld fused passes (at most %d)", v, EVAL_FEEDBACK_MAX_N);
        if (*n > 0 && v <= fused[*n - 1])
            return dt_errorf("--feedback-passes: %lld after %lld (the list must increase)", v,
                             (long long)fused[*n - 1]);
        if (*n == EVAL_FEEDBACK_MAX_LIST)
            return dt_errorf("--feedback-passes: more than %d values in '%s'", EVAL_FEEDBACK_MAX_LIST, text);
        fused[(*n)++] = v;
        if (!*end) return DT_OK;
        p = end + 1;
    }
}

/* Mean over positions first..T-1 of ||now_t - prev_t|| / ||prev_t|| (rows of C floats). */
static double state_change(const float *now, const float *prev, int64_t first, int64_t T, int64_t C) {
    double sum = 0.0;
    for (int64_t t = first; t < T; t++) {
        double diff = 0.0, base = 0.0;
        for (int64_t c = 0; c < C; c++) {
            const double a = now[t * C + c], b = prev[t * C + c];
            diff += (a - b) * (a - b);
            base += b * b;
        }
        sum += base > 0.0 ? sqrt(diff / base) : (diff > 0.0 ? INFINITY : 0.0);
    }
    return sum;
}

static dt_status check_options(const model *m, const eval_loss_options *o, const int64_t *fused, int n) {
    if (!m->config.feedback)
        return dt_errorf("--feedback-passes needs a model with feedback = 1 (SPEC §6.5); this one has feedback = 0");
    if (n < 1 || n > EVAL_FEEDBACK_MAX_LIST)
        return dt_errorf("--feedback-passes: %d values (1..%d)", n, EVAL_FEEDBACK_MAX_LIST);
    for (int i = 0; i < n; i++)
        if (fused[i] < 0 || fused[i] > EVAL_FEEDBACK_MAX_N || (i > 0 && fused[i] <= fused[i - 1]))
            return dt_errorf("--feedback-passes: value %lld out of order or outside 0..%d", (long long)fused[i],
                             EVAL_FEEDBACK_MAX_N);
    if (o->method != EVAL_TEACHER_FORCED || o->prompt_len != 0 || o->feedback != EVAL_FEEDBACK_STANDARD)
        return dt_errorf("--feedback-passes is teacher-forced over whole windows: no --prompt-len, --method decode "
                         "or --feedback mode");
    if (o->comm && o->comm->size > 1) return dt_errorf("--feedback-passes runs in one process (not under mpirun)");
    return DT_OK;
}

dt_status eval_feedback_passes_run(model *m, data_tokens *data, const eval_loss_options *o, const int64_t *fused, int n,
                                   eval_feedback_passes_result *r) {
    memset(r, 0, sizeof *r);
    if (check_options(m, o, fused, n) != DT_OK) return DT_ERR;
    int64_t T, n_windows;
    if (eval_loss_windows(m, data, o, &T, &n_windows) != DT_OK) return DT_ERR;
    const int64_t C = m->config.d_model, V = m->config.vocab_size, K = fused[n - 1] + 1;
    double sum_loss[EVAL_FEEDBACK_MAX_LIST] = {0}, sum_change[EVAL_FEEDBACK_MAX_LIST] = {0};
    int32_t *targets = malloc((size_t)T * sizeof *targets);
    float *losses = malloc((size_t)T * sizeof *losses); /* [T] per-position CE */
    dt_tensor *tokens = dt_tensor_new(DT_I32, DT_SHAPE(1, T));
    dt_tensor *top_prev = dt_tensor_new(DT_F32, DT_SHAPE(1, T, C)); /* h^(k-1) [1,T,C] */
    ag_ctx ctx;
    int have_ctx = 0;
    dt_status status = DT_OK;
    if (!targets || !losses || !tokens || !top_prev) {
        status = dt_errorf("eval: out of memory for windows of %lld tokens", (long long)T);
        goto done;
    }
    if ((status = ag_ctx_init(&ctx, 0)) != DT_OK) goto done;
    have_ctx = 1;
    ag_set_grad_enabled(&ctx, 0);
    for (int64_t w = 0; w < n_windows; w++) {
        if ((status = data_eval_window(data, o->split, w, n_windows, T, dt_i32(tokens), targets)) != DT_OK) goto done;
        r->n_bytes += eval_window_bytes(data, targets, 0, T);
        for (int64_t k = 1, i = 0; k <= K; k++) {
            ag_reset(&ctx);
            dt_tensor *logits, *top;
            if ((status = model_forward_feedback_pass(m, &ctx, tokens, k == 1 ? NULL : top_prev, &logits, &top)) !=
                DT_OK) {
                status = dt_error_context("window %lld, pass %lld", (long long)w, (long long)k);
                goto done;
            }
            if (fused[i] == k - 1) { /* N = k - 1 fused passes: score pass k */
                k_cross_entropy_forward(losses, dt_f32(logits), targets, T, V);
                for (int64_t t = 0; t < T; t++)
                    sum_loss[i] += losses[t];
                if (k > 1) sum_change[i] += state_change(dt_f32(top), dt_f32(top_prev), 0, T, C);
                i++;
            }
            memcpy(dt_f32(top_prev), dt_f32(top), (size_t)(T * C) * sizeof(float));
        }
    }
    r->n = n;
    r->seq_len = T;
    r->n_windows = n_windows;
    r->n_tokens = n_windows * T;
    for (int i = 0; i < n; i++) {
        r->fused[i] = fused[i];
        r->loss[i] = sum_loss[i] / (double)r->n_tokens;
        r->bits_per_byte[i] = r->n_bytes > 0 ? sum_loss[i] / log(2.0) / (double)r->n_bytes : 0.0;
        r->state_change[i] = fused[i] > 0 ? sum_change[i] / (double)r->n_tokens : NAN;
    }
done:
    if (have_ctx) ag_ctx_free(&ctx);
    dt_tensor_free(tokens);
    dt_tensor_free(top_prev);
    free(targets);
    free(losses);
    return status;
}
