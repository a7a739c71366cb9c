/* dbranch eval: validation loss of a model on a dataset (eval/eval_loss.h).
 * Teacher-forced by default; with --prompt-len P the decode engine prefills P
 * tokens of each window and steps through the rest (--method tf scores the
 * same positions teacher-forced, for comparison). Under mpirun (a build
 * with -DDBRANCH_MPI=ON) the processes share the windows and rank 0 alone
 * prints; the figures are the one-process figures to the bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "data/tokens.h"
#include "eval/accuracy.h"
#include "eval/eval_loss.h"
#include "eval/feedback_passes.h"
#include "kernels/gemm.h"
#include "models/model_io.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch eval --model CKPT.h5 --data DATA.h5 [--split val|train] [--windows N]\n"
                 "                    [--seq-len T] [--prompt-len P] [--method tf|decode]\n"
                 "                    [--decode grouped|ungrouped|baseline] [--weights fp32|bf16] [--threads K]\n"
                 "                    [--feedback standard|soft|fused] [--feedback-passes N,N,...] [--json]\n\n"
                 "Mean loss over non-overlapping windows of the split (all of them, or --windows N spread\n"
                 "evenly over it):\n"
                 "the mixture NLL for a Decode-Branch model (loss), the primary and branch cross-entropies,\n"
                 "the mean alpha and bits per byte. --seq-len defaults to the model's block_size.\n"
                 "--prompt-len P: score positions P-1.. only, through the decode engine (prefill P tokens,\n"
                 "then one step per token) unless --method tf. --weights bf16: the decode engine multiplies by a\n"
                 "bfloat16 copy of the matrices made at load (norms, biases, coupling vectors stay float32).\n"
                 "Record files with answer marks (dbranch prepare --synthetic): also the accuracy on the\n"
                 "marked answers (argmax of the model's distribution, teacher-forced), overall and per\n"
                 "position in the record.\n"
                 "Several processes: `mpirun -n N --bind-to none -x OMP_NUM_THREADS dbranch eval ...` (a build with\n"
                 "-DDBRANCH_MPI=ON): window w is scored by process w %% N, rank 0 prints the same figures as one\n"
                 "process would, to the bit.\n"
                 "--feedback (models with feedback = 1, SPEC §6.5): the decode engine's latent feedback\n"
                 "mode (soft: each step fuses the previous top state; fused: also one feedback pass over\n"
                 "the prompt); teacher-forced, soft and fused run the forward with seq_len passes\n"
                 "(soft decoding from each window's first token).\n"
                 "--feedback-passes 0,1,2,5,10,30 (feedback = 1): the teacher-forced loss with N fused passes\n"
                 "after the plain one for each N of the list (increasing, 0..1000; N = 0 is the plain model;\n"
                 "fused passes read the previous pass's top state Norm_f(h_L), no jitter, no prefix mixin;\n"
                 "the passes of a window run once up to the largest N), and the state change of the last two\n"
                 "passes: the mean over scored positions t of ||h_t^(N+1) - h_t^(N)||_2 / ||h_t^(N)||_2\n"
                 "(Euclidean norm over the d_model channels of the top state; positions t < N are exact\n"
                 "zeros by causality). Whole windows, one process.\n");
}

/* 1 when text is an integer in [min, max] (cli/args.c prints nothing: the caller's line names option and value). */
static int parse_int64(const char *text, int64_t min, int64_t max, int64_t *out) {
    return cli_parse_int("", text, min, max, out) == DT_OK;
}

/* The --feedback-passes figures, as JSON (one line) or a table. */
static void print_feedback_passes(const eval_feedback_passes_result *r, const char *model_path, const char *data_path,
                                  const char *split, int json) {
    if (json) {
        printf("{\"model\": \"%s\", \"data\": \"%s\", \"split\": \"%s\", \"method\": \"teacher-forced\", "
               "\"windows\": %lld, \"seq_len\": %lld, \"tokens\": %lld, \"bytes\": %lld, \"feedback_passes\": [",
               model_path, data_path, split, (long long)r->n_windows, (long long)r->seq_len, (long long)r->n_tokens,
               (long long)r->n_bytes);
        for (int i = 0; i < r->n; i++) {
            char change[32] = "null";
            if (r->fused[i] > 0) snprintf(change, sizeof change, "%.6g", r->state_change[i]);
            printf("%s{\"fused\": %lld, \"loss\": %.6f, \"bits_per_byte\": %.6f, \"state_change\": %s}", i ? ", " : "",
                   (long long)r->fused[i], r->loss[i], r->bits_per_byte[i], change);
        }
        printf("]}\n");
        return;
    }
    printf("eval %s on %s (%s): %lld windows, %lld positions scored, teacher-forced, latent feedback by fused passes\n",
           model_path, data_path, split, (long long)r->n_windows, (long long)r->n_tokens);
    printf("%6s  %8s  %9s  %12s\n", "fused", "loss", "bits/byte", "state change");
    for (int i = 0; i < r->n; i++) {
        if (r->fused[i] > 0)
            printf("%6lld  %8.4f  %9.4f  %12.4g\n", (long long)r->fused[i], r->loss[i], r->bits_per_byte[i],
                   r->state_change[i]);
        else
            printf("%6lld  %8.4f  %9.4f  %12s\n", (long long)r->fused[i], r->loss[i], r->bits_per_byte[i], "-");
    }
}

/* {"accuracy": ..., "answers": N, "per_position": [[t, accuracy, answers], ...]} on its own line. */
static void print_accuracy_json(const eval_accuracy_result *a) {
    printf("{\"accuracy\": %.6f, \"answers\": %lld, \"records\": %lld, \"per_position\": [",
           a->n_answers ? (double)a->n_correct / (double)a->n_answers : 0.0, (long long)a->n_answers,
           (long long)a->n_windows);
    const char *sep = "";
    for (int64_t t = 0; t < a->seq_len; t++) {
        if (!a->per_position_answers[t]) continue;
        printf("%s[%lld, %.6f, %lld]", sep, (long long)t,
               (double)a->per_position_correct[t] / (double)a->per_position_answers[t],
               (long long)a->per_position_answers[t]);
        sep = ", ";
    }
    printf("]}\n");
}

static void print_accuracy_text(const eval_accuracy_result *a) {
    printf("accuracy %.4f on %lld marked answers of %lld records; per position (input t: accuracy):\n",
           a->n_answers ? (double)a->n_correct / (double)a->n_answers : 0.0, (long long)a->n_answers,
           (long long)a->n_windows);
    int column = 0;
    for (int64_t t = 0; t < a->seq_len; t++) {
        if (!a->per_position_answers[t]) continue;
        printf("  %4lld: %.3f", (long long)t, (double)a->per_position_correct[t] / (double)a->per_position_answers[t]);
        if (++column % 8 == 0) printf("\n");
    }
    if (column % 8) printf("\n");
}

int cmd_eval(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *model_path = NULL, *data_path = NULL, *method = NULL;
    eval_loss_options options = eval_loss_default_options();
    int64_t threads = 0;
    int json = 0, decode_given = 0;
    dt_dtype weights_type = DT_F32;
    const char *weights_given = NULL, *feedback_given = NULL, *feedback_passes = NULL;
    int64_t fused[EVAL_FEEDBACK_MAX_LIST];
    int n_fused = 0;
    cli_seen seen = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "dbranch eval: unexpected argument '%s' (try --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "dbranch eval: option %s needs a value\n", a);
            return 2;
        }
        i++;
        if (cli_once(&seen, a) != DT_OK) {
            fprintf(stderr, "dbranch eval: %s\n", dt_error_message());
            return 2;
        }
        int ok = 1;
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--data"))
            data_path = v;
        else if (!strcmp(a, "--split")) {
            if (!strcmp(v, "val"))
                options.split = SPLIT_VAL;
            else if (!strcmp(v, "train"))
                options.split = SPLIT_TRAIN;
            else
                ok = 0;
        } else if (!strcmp(a, "--windows"))
            ok = parse_int64(v, 1, INT64_MAX, &options.n_windows);
        else if (!strcmp(a, "--seq-len"))
            ok = parse_int64(v, 1, INT64_MAX, &options.seq_len);
        else if (!strcmp(a, "--prompt-len"))
            ok = parse_int64(v, 1, INT64_MAX, &options.prompt_len);
        else if (!strcmp(a, "--threads"))
            ok = parse_int64(v, 1, K_MAX_THREADS, &threads);
        else if (!strcmp(a, "--method")) {
            method = v;
            ok = !strcmp(v, "tf") || !strcmp(v, "decode");
        } else if (!strcmp(a, "--weights")) {
            weights_given = v;
            ok = eval_decode_weights_parse(v, &weights_type) == DT_OK;
        } else if (!strcmp(a, "--feedback")) {
            feedback_given = v;
            ok = eval_feedback_mode_parse(v, &options.feedback) == DT_OK;
        } else if (!strcmp(a, "--feedback-passes")) {
            feedback_passes = v;
            if (eval_feedback_passes_parse(v, fused, &n_fused) != DT_OK) {
                fprintf(stderr, "dbranch eval: %s\n", dt_error_message());
                return 2;
            }
        } else if (!strcmp(a, "--decode")) {
            decode_given = 1;
            if (!strcmp(v, "grouped"))
                options.decode_mode = EVAL_DECODE_GROUPED;
            else if (!strcmp(v, "ungrouped"))
                options.decode_mode = EVAL_DECODE_UNGROUPED;
            else if (!strcmp(v, "baseline"))
                options.decode_mode = EVAL_DECODE_BASELINE;
            else
                ok = 0;
        } else {
            fprintf(stderr, "dbranch eval: unknown option %s (try --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "dbranch eval: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!model_path || !data_path) {
        fprintf(stderr, "dbranch eval: --model and --data are required (try --help)\n");
        return 2;
    }
    if (method)
        options.method = strcmp(method, "tf") ? EVAL_DECODE : EVAL_TEACHER_FORCED;
    else
        options.method = options.prompt_len > 0 ? EVAL_DECODE : EVAL_TEACHER_FORCED;
    if (decode_given && options.method == EVAL_TEACHER_FORCED) {
        fprintf(stderr,
                "dbranch eval: --decode has no effect on teacher-forced scoring (%s); drop it or use "
                "--prompt-len P with --method decode\n",
                method ? "--method tf" : "no --prompt-len");
        return 2;
    }
    if (weights_given && options.method == EVAL_TEACHER_FORCED) {
        fprintf(stderr, "dbranch eval: --weights %s applies to the decode engine, not to teacher-forced scoring (%s)\n",
                weights_given, method ? "--method tf" : "no --prompt-len");
        return 2;
    }
    if (feedback_passes && (options.prompt_len || method || decode_given || weights_given || feedback_given)) {
        fprintf(stderr, "dbranch eval: --feedback-passes scores whole windows teacher-forced; drop --prompt-len, "
                        "--method, --decode, --weights and --feedback\n");
        return 2;
    }
    if (threads > 0) k_set_threads((int)threads);

    const dt_comm *comm = NULL;
    /* Sums of per-window figures with one nonzero term each: exact in either mode. */
    if (cli_join_job(DT_COMM_REDUCE_ORDERED, &comm) != DT_OK) return cli_fail("eval");
    options.comm = comm;
    model m;
    data_tokens data;
    dt_status status = model_load(&m, model_path);
    if (status == DT_OK && (status = data_tokens_open(&data, data_path)) != DT_OK) model_free(&m);
    if (status != DT_OK) {
        const int code = cli_fail_job("eval", comm);
        cli_leave_job(comm);
        return code;
    }
    eval_decode_weights weights;
    status = eval_decode_weights_init(&weights, &m, weights_type);
    options.decode_weights = &weights;
    eval_loss_result r;
    eval_feedback_passes_result by_passes;
    if (status == DT_OK && feedback_passes)
        status = eval_feedback_passes_run(&m, &data, &options, fused, n_fused, &by_passes);
    else if (status == DT_OK)
        status = eval_loss_run(&m, &data, &options, &r);
    eval_accuracy_result accuracy = {0};
    int with_accuracy = status == DT_OK && !feedback_passes && data.has_answer[options.split];
    if (with_accuracy) /* every rank computes it (small record files); rank 0 prints */
        status = eval_accuracy_run(&m, &data, options.split, options.n_windows, options.seq_len, &accuracy);
    if (status == DT_OK && (!comm || comm->rank == 0)) {
        const char *split = options.split == SPLIT_VAL ? "val" : "train";
        const char *how =
            options.method == EVAL_TEACHER_FORCED ? "teacher-forced" : eval_decode_mode_name(options.decode_mode);
        if (feedback_passes) {
            print_feedback_passes(&by_passes, model_path, data_path, split, json);
        } else if (json) {
            char branch[32] = "null";
            if (r.has_branch) snprintf(branch, sizeof branch, "%.6f", r.loss_branch);
            printf("{\"model\": \"%s\", \"data\": \"%s\", \"split\": \"%s\", \"method\": \"%s\", \"windows\": %lld, "
                   "\"seq_len\": %lld, \"prompt_len\": %lld, \"tokens\": %lld, \"bytes\": %lld, \"loss\": %.6f, "
                   "\"loss_primary\": %.6f, \"loss_branch\": %s, \"alpha\": %.6f, \"bits_per_byte\": %.6f, "
                   "\"weights\": \"%s\"}\n",
                   model_path, data_path, split, how, (long long)r.n_windows, (long long)r.seq_len,
                   (long long)options.prompt_len, (long long)r.n_tokens, (long long)r.n_bytes, r.loss, r.loss_primary,
                   branch, r.alpha_mean, r.bits_per_byte, eval_decode_weights_name(weights_type));
            if (with_accuracy) print_accuracy_json(&accuracy);
        } else {
            printf("eval %s on %s (%s): %lld windows, %lld positions scored, %s%s\n", model_path, data_path, split,
                   (long long)r.n_windows, (long long)r.n_tokens, how, weights_type == DT_BF16 ? ", bf16 weights" : "");
            if (r.has_branch)
                printf("loss %.4f  loss_primary %.4f  loss_branch %.4f  alpha %.4f  bits/byte %.4f\n", r.loss,
                       r.loss_primary, r.loss_branch, r.alpha_mean, r.bits_per_byte);
            else
                printf("loss %.4f  bits/byte %.4f\n", r.loss, r.bits_per_byte);
            if (with_accuracy) print_accuracy_text(&accuracy);
        }
    }
    eval_accuracy_result_free(&accuracy);
    data_tokens_close(&data);
    eval_decode_weights_free(&weights);
    model_free(&m);
    const int code = status == DT_OK ? 0 : cli_fail_job("eval", comm);
    cli_leave_job(comm);
    return code;
}
