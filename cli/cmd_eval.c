/* dbranch eval: validation loss of a model on a dataset (eval/eval_loss.h).
 * Teacher-forced by default; with --prompt-len P the decode engine prefills P
 * tokens of each window and steps through the rest (--method tf scores the
 * same positions teacher-forced, for comparison). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "data/tokens.h"
#include "eval/eval_loss.h"
#include "kernels/gemm.h"
#include "models/model_io.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch eval --model CKPT.h5 --data DATA.h5 [--split val|train] [--windows N]\n"
                 "                    [--seq-len T] [--prompt-len P] [--method tf|decode]\n"
                 "                    [--decode grouped|ungrouped|baseline] [--threads K] [--json]\n"
                 "                    [--feedback standard|soft|fused]\n\n"
                 "Mean loss over non-overlapping windows of the split (all of them unless --windows):\n"
                 "the mixture NLL for a Decode-Branch model (loss), the primary and branch cross-entropies,\n"
                 "the mean alpha and bits per byte. --seq-len defaults to the model's block_size.\n"
                 "--prompt-len P: score positions P-1.. only, through the decode engine (prefill P tokens,\n"
                 "then one step per token) unless --method tf.\n"
                 "--feedback (models with feedback = 1, SPEC §6.5): the decode engine's latent feedback\n"
                 "mode (soft: each step fuses the previous top state; fused: also one feedback pass over\n"
                 "the prompt); teacher-forced, soft and fused run the forward with seq_len passes\n"
                 "(soft decoding from each window's first token).\n");
}

/* 1 when text is an integer in [min, max] (cli/args.c prints nothing: the caller's line names option and value). */
static int parse_int64(const char *text, int64_t min, int64_t max, int64_t *out) {
    return cli_parse_int("", text, min, max, out) == DT_OK;
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
        } else if (!strcmp(a, "--feedback")) {
            ok = eval_feedback_mode_parse(v, &options.feedback) == DT_OK;
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
    if (threads > 0) k_set_threads((int)threads);

    model m;
    data_tokens data;
    if (model_load(&m, model_path) != DT_OK) return cli_fail("eval");
    if (data_tokens_open(&data, data_path) != DT_OK) {
        model_free(&m);
        return cli_fail("eval");
    }
    eval_loss_result r;
    dt_status status = eval_loss_run(&m, &data, &options, &r);
    if (status == DT_OK) {
        const char *split = options.split == SPLIT_VAL ? "val" : "train";
        const char *how =
            options.method == EVAL_TEACHER_FORCED ? "teacher-forced" : eval_decode_mode_name(options.decode_mode);
        if (json) {
            char branch[32] = "null";
            if (r.has_branch) snprintf(branch, sizeof branch, "%.6f", r.loss_branch);
            printf("{\"model\": \"%s\", \"data\": \"%s\", \"split\": \"%s\", \"method\": \"%s\", \"windows\": %lld, "
                   "\"seq_len\": %lld, \"prompt_len\": %lld, \"tokens\": %lld, \"bytes\": %lld, \"loss\": %.6f, "
                   "\"loss_primary\": %.6f, \"loss_branch\": %s, \"alpha\": %.6f, \"bits_per_byte\": %.6f}\n",
                   model_path, data_path, split, how, (long long)r.n_windows,
                   (long long)(options.seq_len ? options.seq_len : m.config.block_size), (long long)options.prompt_len,
                   (long long)r.n_tokens, (long long)r.n_bytes, r.loss, r.loss_primary, branch, r.alpha_mean,
                   r.bits_per_byte);
        } else {
            printf("eval %s on %s (%s): %lld windows, %lld positions scored, %s\n", model_path, data_path, split,
                   (long long)r.n_windows, (long long)r.n_tokens, how);
            if (r.has_branch)
                printf("loss %.4f  loss_primary %.4f  loss_branch %.4f  alpha %.4f  bits/byte %.4f\n", r.loss,
                       r.loss_primary, r.loss_branch, r.alpha_mean, r.bits_per_byte);
            else
                printf("loss %.4f  bits/byte %.4f\n", r.loss, r.bits_per_byte);
        }
    }
    data_tokens_close(&data);
    model_free(&m);
    return status == DT_OK ? 0 : cli_fail("eval");
}
