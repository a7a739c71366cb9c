/* dbranch prepare --from llmc|nanogpt: token ids another trainer wrote (llm.c
 * / modded-nanogpt shards, nanoGPT's train.bin/val.bin) into a dbranch token
 * dataset file. The readers live in interop/token_shards.c; the dataset's
 * tokenizer is 'external' (ids only: decode them with the tool that made them). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/output_dir.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "interop/token_shards.h"

enum { MAX_TOKEN_FILES = 4096 };

static int fail(const char *message, const char *value) { return cli_prepare_fail(message, value); }

static int is_option(const char *arg) { return arg[0] == '-' && arg[1] == '-'; }

int cmd_prepare_tokens(int argc, char **argv) {
    const char *from = NULL, *vocab_text = NULL, *out_path = NULL;
    const char *files[2][MAX_TOKEN_FILES];
    int n_files[2] = {0, 0};
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int split = !strcmp(arg, "--train-file") ? 0 : !strcmp(arg, "--val-file") ? 1 : -1;
        if (split >= 0) {
            if (i + 1 >= argc || is_option(argv[i + 1])) return fail("%s needs at least one file", arg);
            while (i + 1 < argc && !is_option(argv[i + 1])) {
                if (n_files[split] == MAX_TOKEN_FILES) return fail("too many token files (at most %s)", "4096");
                files[split][n_files[split]++] = argv[++i];
            }
        } else if (!strcmp(arg, "--from") || !strcmp(arg, "--vocab") || !strcmp(arg, "--out")) {
            if (i + 1 >= argc) return fail("%s needs a value", arg);
            const char **slot = !strcmp(arg, "--from") ? &from : !strcmp(arg, "--vocab") ? &vocab_text : &out_path;
            *slot = argv[++i];
        } else {
            return fail("with --from, unknown argument '%s' (try dbranch prepare --help)", arg);
        }
    }
    interop_shard_format format;
    if (interop_shard_format_parse(from, &format) != DT_OK) return cli_fail("prepare");
    if (!out_path) return fail("%s", "--out PATH is required");
    if (dt_make_output_parent("--out", out_path) != DT_OK) return cli_fail("prepare");
    if (!n_files[0] || !n_files[1]) return fail("%s", "--from needs --train-file FILE... and --val-file FILE...");
    if (!vocab_text) return fail("%s", "--from needs --vocab N (the tokenizer's size, e.g. 50257 for GPT-2)");
    char *end = NULL;
    errno = 0;
    long long vocab = strtoll(vocab_text, &end, 10);
    if (errno || end == vocab_text || *end || vocab < 1 || vocab > (1LL << 32))
        return fail("--vocab '%s' is not an integer in [1, 2^32]", vocab_text);

    int32_t *tokens[2] = {NULL, NULL};
    int64_t n[2] = {0, 0}, max_token = -1;
    dt_status status = DT_OK;
    for (int s = 0; s < 2 && status == DT_OK; s++)
        for (int f = 0; f < n_files[s] && status == DT_OK; f++)
            status = interop_read_token_file(files[s][f], format, &tokens[s], &n[s], &max_token);
    if (status == DT_OK && max_token >= vocab)
        status = dt_errorf("token id %lld is >= --vocab %lld", (long long)max_token, vocab);
    data_tokenizer tok = {0};
    if (status == DT_OK) status = data_tokenizer_external(&tok, vocab);
    char source[256];
    snprintf(source, sizeof source, "%s token files (%d train, %d val), first %s", from, n_files[0], n_files[1],
             files[0][0]);
    if (status == DT_OK) status = data_tokens_write(out_path, &tok, tokens[0], n[0], tokens[1], n[1], source);
    int code = 0;
    if (status != DT_OK)
        code = cli_fail("prepare");
    else
        printf(
            "dbranch prepare: %s -> %s\n  tokens       %lld (train %lld, val %lld), vocab %lld, tokenizer external\n",
            source, out_path, (long long)(n[0] + n[1]), (long long)n[0], (long long)n[1], vocab);
    data_tokenizer_free(&tok);
    free(tokens[0]);
    free(tokens[1]);
    return code;
}
