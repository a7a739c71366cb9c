/* dbranch generate: sample text from a model (eval/generate.h). The
 * tokenizer comes from a token dataset file (--data), a file holding one
 * (--tokenizer), or is byte-level when the model's vocabulary is 256. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/h5.h"
#include "core/input_file.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/generate.h"
#include "kernels/gemm.h"
#include "models/model_io.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch generate --model CKPT.h5 --prompt TEXT|--prompt-file FILE [--tokens N]\n"
                 "                        [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
                 "                        [--data DATA.h5 | --tokenizer FILE.h5]\n"
                 "                        [--decode grouped|ungrouped|baseline] [--threads K] [--weights fp32|bf16]\n"
                 "                        [--feedback standard|soft|fused]\n\n"
                 "Samples N tokens (default 64) after the prompt from the model's distribution: the\n"
                 "Decode-Branch mixture for a branch model (--decode baseline: the primary alone).\n"
                 "Temperature 0 is greedy; --top-k keeps the K most likely tokens, --top-p (in (0, 1])\n"
                 "the most likely ones up to that cumulative probability, after the temperature.\n"
                 "--prompt-file reads the prompt's bytes from FILE. Prints the prompt and the\n"
                 "continuation on stdout and llama.cpp-style timing lines on stderr (prompt eval:\n"
                 "the prefill; eval: the decode steps and sampling after it). The tokenizer is read\n"
                 "from the dataset (or tokenizer) file, or byte-level when the vocabulary is 256.\n"
                 "--weights bf16 decodes with a bfloat16 copy of the matrices made at load (half the bytes per\n"
                 "token; norms, biases and coupling vectors stay float32).\n"
                 "--feedback (models with feedback = 1, SPEC §6.5): standard embeds every token;\n"
                 "soft feeds each step the previous position's top state fused with its token;\n"
                 "fused also runs one feedback pass over the prompt before soft decoding.\n");
}

/* The whole of path (at most 16 MiB) as the prompt; *n its bytes. */
static dt_status read_prompt_file(const char *path, char **text, size_t *n) {
    if (dt_check_input_file(path) != DT_OK) return dt_error_context("--prompt-file");
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf("--prompt-file %s: cannot open", path);
    enum { MAX_PROMPT = 16 << 20 };
    *text = malloc(MAX_PROMPT + 1);
    *n = *text ? fread(*text, 1, MAX_PROMPT + 1, f) : 0;
    int bad = !*text || ferror(f);
    fclose(f);
    if (bad) return dt_errorf("--prompt-file %s: cannot read", path);
    if (*n > MAX_PROMPT) return dt_errorf("--prompt-file %s: over 16 MiB", path);
    if (*n == 0) return dt_errorf("--prompt-file %s: empty", path);
    return DT_OK;
}

/* llama.cpp's llama_perf_context_print lines: "prompt eval time = X ms / N tokens (Y ms per token, Z tokens per
 * second)". */
static void print_timing_line(const char *what, const char *unit, double seconds, int64_t count) {
    double ms = 1e3 * seconds;
    fprintf(stderr, "%16s = %10.2f ms / %5lld %-6s (%8.2f ms per token, %8.2f tokens per second)\n", what, ms,
            (long long)count, unit, count > 0 ? ms / (double)count : 0.0,
            count > 0 && seconds > 0 ? (double)count / seconds : 0.0);
}

/* 1 when text is an integer in [min, max] (beyond 64 bits is not). */
static int parse_int64(const char *text, int64_t min, int64_t max, int64_t *out) {
    return cli_parse_int("", text, min, max, out) == DT_OK;
}

int cmd_generate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *model_path = NULL, *prompt = NULL, *prompt_path = NULL, *data_path = NULL, *tokenizer_path = NULL;
    eval_generate_options options = eval_generate_default_options();
    int64_t threads = 0, seed = (int64_t)options.seed;
    dt_dtype weights_type = DT_F32;
    eval_decode_weights weights = {0};
    cli_seen seen = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "dbranch generate: unexpected argument '%s' (try --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "dbranch generate: option %s needs a value\n", a);
            return 2;
        }
        i++;
        if (cli_once(&seen, a) != DT_OK) {
            fprintf(stderr, "dbranch generate: %s\n", dt_error_message());
            return 2;
        }
        int ok = 1;
        char *end;
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "--prompt-file"))
            prompt_path = v;
        else if (!strcmp(a, "--data"))
            data_path = v;
        else if (!strcmp(a, "--tokenizer"))
            tokenizer_path = v;
        else if (!strcmp(a, "--tokens"))
            ok = parse_int64(v, 0, INT64_MAX, &options.n_tokens);
        else if (!strcmp(a, "--top-k"))
            ok = parse_int64(v, 0, INT64_MAX, &options.top_k);
        else if (!strcmp(a, "--seed"))
            ok = parse_int64(v, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--threads"))
            ok = parse_int64(v, 1, K_MAX_THREADS, &threads);
        else if (!strcmp(a, "--top-p")) {
            options.top_p = strtod(v, &end);
            ok = *v != '\0' && *end == '\0' && options.top_p > 0.0 && options.top_p <= 1.0;
        } else if (!strcmp(a, "--temperature")) {
            options.temperature = strtod(v, &end);
            ok = *v != '\0' && *end == '\0' && options.temperature >= 0.0 && isfinite(options.temperature);
        } else if (!strcmp(a, "--weights")) {
            if (eval_decode_weights_parse(v, &weights_type) != DT_OK) {
                fprintf(stderr, "dbranch generate: %s\n", dt_error_message());
                return 2;
            }
        } else if (!strcmp(a, "--decode")) {
            if (!strcmp(v, "grouped"))
                options.mode = EVAL_DECODE_GROUPED;
            else if (!strcmp(v, "ungrouped"))
                options.mode = EVAL_DECODE_UNGROUPED;
            else if (!strcmp(v, "baseline"))
                options.mode = EVAL_DECODE_BASELINE;
            else
                ok = 0;
        } else if (!strcmp(a, "--feedback")) {
            ok = eval_feedback_mode_parse(v, &options.feedback) == DT_OK;
        } else {
            fprintf(stderr, "dbranch generate: unknown option %s (try --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "dbranch generate: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!model_path || (!prompt && !prompt_path)) {
        fprintf(stderr, "dbranch generate: --model and --prompt (or --prompt-file) are required (try --help)\n");
        return 2;
    }
    if (prompt && prompt_path) {
        fprintf(stderr, "dbranch generate: pass --prompt or --prompt-file, not both\n");
        return 2;
    }
    if (data_path && tokenizer_path) {
        fprintf(stderr, "dbranch generate: pass --data or --tokenizer, not both\n");
        return 2;
    }
    options.seed = (uint64_t)seed;
    if (threads > 0) k_set_threads((int)threads);

    model m;
    data_tokens data;
    data_tokenizer own_tokenizer;
    const data_tokenizer *tokenizer = NULL;
    int have_data = 0, have_tokenizer = 0;
    int32_t *tokens = NULL, *prompt_tokens = NULL;
    uint8_t *text = NULL;
    char *prompt_text = NULL;
    size_t prompt_bytes = prompt ? strlen(prompt) : 0;
    if (prompt_path && read_prompt_file(prompt_path, &prompt_text, &prompt_bytes) != DT_OK) {
        free(prompt_text);
        return cli_fail("generate");
    }
    if (prompt_path) prompt = prompt_text;
    dt_status status = DT_OK;
    if (model_load(&m, model_path) != DT_OK) {
        free(prompt_text);
        return cli_fail("generate");
    }
    if ((status = eval_decode_weights_init(&weights, &m, weights_type)) != DT_OK) goto done;
    options.weights = &weights;
    int64_t V = m.config.vocab_size;
    const char *source = data_path ? data_path : tokenizer_path;
    if (data_path) {
        if ((status = data_tokens_open(&data, data_path)) != DT_OK) goto done;
        have_data = 1;
        tokenizer = &data.tokenizer;
    } else if (tokenizer_path) {
        hid_t file;
        if ((status = h5_open(tokenizer_path, 0, &file)) != DT_OK) goto done;
        status = data_tokenizer_read_h5(&own_tokenizer, file, tokenizer_path);
        h5_close(file, tokenizer_path);
        if (status != DT_OK) goto done;
        have_tokenizer = 1;
        tokenizer = &own_tokenizer;
    } else if (V == 256) {
        if ((status = data_tokenizer_byte(&own_tokenizer)) != DT_OK) goto done;
        have_tokenizer = 1;
        tokenizer = &own_tokenizer;
        source = "byte-level";
    } else {
        status = dt_errorf("%s has a vocabulary of %lld tokens: pass --data DATA.h5 or --tokenizer FILE for its "
                           "tokenizer",
                           model_path, (long long)V);
        goto done;
    }
    if (tokenizer->vocab_size != V) {
        status = dt_errorf("model vocab_size %lld != tokenizer vocab_size %lld (%s)", (long long)V,
                           (long long)tokenizer->vocab_size, source);
        goto done;
    }
    int64_t n_prompt = 0, n_out = 0;
    if ((status = data_tokenizer_encode(tokenizer, (const uint8_t *)prompt, prompt_bytes, &prompt_tokens, &n_prompt)) !=
        DT_OK)
        goto done;
    tokens = malloc((size_t)(n_prompt + options.n_tokens + 1) * sizeof(int32_t));
    if (!tokens) {
        status = dt_errorf("out of memory");
        goto done;
    }
    memcpy(tokens, prompt_tokens, (size_t)n_prompt * sizeof(int32_t));
    eval_generate_timing timing;
    options.timing = &timing;
    if ((status = eval_generate(&m, prompt_tokens, n_prompt, &options, tokens + n_prompt, &n_out)) != DT_OK) goto done;
    size_t n_bytes = 0;
    if ((status = data_tokenizer_decode(tokenizer, tokens, n_prompt + n_out, &text, &n_bytes)) != DT_OK) goto done;
    fwrite(text, 1, n_bytes, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    print_timing_line("prompt eval time", "tokens", timing.prompt_seconds, timing.prompt_tokens);
    print_timing_line("eval time", "runs", timing.eval_seconds, timing.eval_runs);
done:
    free(prompt_text);
    free(text);
    free(tokens);
    free(prompt_tokens);
    if (have_tokenizer) data_tokenizer_free(&own_tokenizer);
    if (have_data) data_tokens_close(&data);
    eval_decode_weights_free(&weights);
    model_free(&m);
    return status == DT_OK ? 0 : cli_fail("generate");
}
