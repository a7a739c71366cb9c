/* Answer accuracy of a model on a record file (eval/accuracy.h). */
#include "eval/accuracy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "data/loader.h"
#include "eval/eval_loss.h"
#include "kernels/mixture.h"

void eval_accuracy_result_free(eval_accuracy_result *result) {
    if (!result) return;
    free(result->per_position_answers);
    free(result->per_position_correct);
    memset(result, 0, sizeof *result);
}

/* The predicted token of one position: argmax over V of the primary softmax,
 * or of alpha * softmax(primary) + (1 - alpha) * softmax(branch) (lowest id on ties). */
// logits_primary [V], logits_branch [V] or NULL
static int32_t predict(const float *logits_primary, const float *logits_branch, double alpha, double one_minus_alpha,
                       int64_t V) {
    if (!logits_branch) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (logits_primary[v] > logits_primary[best]) best = v;
        return (int32_t)best;
    }
    double max_p = logits_primary[0], max_b = logits_branch[0], sum_p = 0, sum_b = 0;
    for (int64_t v = 1; v < V; v++) {
        max_p = fmax(max_p, logits_primary[v]);
        max_b = fmax(max_b, logits_branch[v]);
    }
    for (int64_t v = 0; v < V; v++) {
        sum_p += exp(logits_primary[v] - max_p);
        sum_b += exp(logits_branch[v] - max_b);
    }
    int64_t best = 0;
    double best_p = -1;
    for (int64_t v = 0; v < V; v++) {
        double p =
            alpha * exp(logits_primary[v] - max_p) / sum_p + one_minus_alpha * exp(logits_branch[v] - max_b) / sum_b;
        if (p > best_p) best_p = p, best = v;
    }
    return (int32_t)best;
}

dt_status eval_accuracy_run(model *m, data_tokens *data, data_split split, int64_t n_windows, int64_t seq_len,
                            eval_accuracy_result *result) {
    memset(result, 0, sizeof *result);
    const int64_t R = data->record_len, V = m->config.vocab_size;
    if (!R) return dt_errorf("%s is not a record file (no record_len): accuracy needs answer marks", data->path);
    if (data->vocab_size != V)
        return dt_errorf("%s: vocab_size %lld differs from the model's %lld", data->path, (long long)data->vocab_size,
                         (long long)V);
    /* A mark at record index i scores the target stored at i: the target of input position i - shift. */
    const int64_t shift = data_tokens_target_shift(data, split), longest = R - shift;
    int64_t T = seq_len ? seq_len : (m->config.block_size < longest ? m->config.block_size : longest);
    if (T > m->config.block_size || T > longest)
        return dt_errorf("seq_len %lld exceeds the model's block_size %lld or the %lld positions of a record",
                         (long long)T, (long long)m->config.block_size, (long long)longest);
    int64_t available = data_split_windows(data, split, T);
    int64_t n = n_windows == 0 || n_windows > available ? available : n_windows;
    int32_t *marks = NULL;
    if (data_tokens_read_answers(data, split, &marks) != DT_OK) return DT_ERR;
    const int with_branch = m->config.branch == BRANCH_DECODE;
    int32_t *inputs = malloc((size_t)T * sizeof *inputs), *targets = malloc((size_t)T * sizeof *targets);
    float *alpha = malloc((size_t)T * sizeof *alpha);
    double *one_minus_alpha = malloc((size_t)T * sizeof *one_minus_alpha);
    result->per_position_answers = calloc((size_t)T, sizeof *result->per_position_answers);
    result->per_position_correct = calloc((size_t)T, sizeof *result->per_position_correct);
    ag_ctx ctx;
    int have_ctx = 0;
    dt_status status = DT_OK;
    if (!inputs || !targets || !alpha || !one_minus_alpha || !result->per_position_answers ||
        !result->per_position_correct) {
        status = dt_errorf("eval: out of memory for accuracy over windows of %lld tokens", (long long)T);
        goto done;
    }
    if ((status = ag_ctx_init(&ctx, 0)) != DT_OK) goto done;
    have_ctx = 1;
    ag_set_grad_enabled(&ctx, 0);
    for (int64_t w = 0; w < n && status == DT_OK; w++) {
        if ((status = data_eval_window(data, split, w, n, T, inputs, targets)) != DT_OK) break;
        model_outputs out;
        if ((status = eval_forward_window(m, &ctx, inputs, T, EVAL_FEEDBACK_STANDARD, &out)) != DT_OK) break;
        const float *lp = dt_f32(out.logits_primary), *lb = with_branch ? dt_f32(out.logits_branch) : NULL;
        if (with_branch) /* the mixture kernels' one definition of alpha */
            k_mixture_alpha_range(alpha, one_minus_alpha, lp, T, V, (float)m->config.mix_alpha_min,
                                  (float)m->config.mix_alpha_max);
        const int32_t *record_marks = marks + w * R;
        for (int64_t t = 0; t < T; t++) {
            if (!record_marks[t + shift]) continue;
            int32_t guess = predict(lp + t * V, lb ? lb + t * V : NULL, with_branch ? alpha[t] : 1.0,
                                    with_branch ? one_minus_alpha[t] : 0.0, V);
            int correct = guess == targets[t];
            result->per_position_answers[t]++;
            result->per_position_correct[t] += correct;
            result->n_answers++;
            result->n_correct += correct;
        }
    }
    if (status != DT_OK) goto done;
    result->seq_len = T;
    result->n_windows = n;
done:
    if (have_ctx) ag_ctx_free(&ctx);
    free(inputs);
    free(targets);
    free(alpha);
    free(one_minus_alpha);
    free(marks);
    if (status != DT_OK) eval_accuracy_result_free(result);
    return status;
}
