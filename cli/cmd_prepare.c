/* dbranch prepare: read a corpus (files or a preset), split it into train and
 * val blocks, learn a tokenizer on the train part, encode both parts and write
 * a token dataset file (SPEC §5). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/commands.h"
#include "core/output_dir.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "data/tokens.h"

enum { MAX_INPUTS = 4096 };
/* The sample's seed is fixed: one corpus and one --bpe-sample give one tokenizer. */
#define BPE_SAMPLE_SEED 1337u

static void print_help(void) {
    printf("usage: dbranch prepare (--input FILE... | --preset kjv|pycode|large) [--tokenizer byte|bpe] [--vocab N]\n"
           "                       [--bpe-sample BYTES] [--val-fraction F] --out DATA.h5\n"
           "\n"
           "Tokenizes a corpus into a token dataset file (HDF5, SPEC §5).\n"
           "\n"
           "  --input FILE...     one or more files, concatenated in the given order\n"
           "  --preset kjv        the King James Bible: stdout of `bible \"Genesis 1:1-Revelation 22:21\"`\n"
           "                      (Debian package bible-kjv)\n"
           "  --preset pycode     every *.py file of python3's standard library (sysconfig 'stdlib'),\n"
           "                      without site-packages, dist-packages and test directories, sorted\n"
           "                      bytewise by relative path and concatenated\n"
           "  --preset large      prose and code, about 400 MB (150M BPE tokens at --vocab 8192): the KJV,\n"
           "                      the GCIDE dictionary (dict-gcide), the Linux kernel's Documentation\n"
           "                      *.rst/*.txt and its *.c/*.h of 24 directories (linux-source-6.1,\n"
           "                      streamed from /usr/src/linux-source-6.1.tar.xz, not unpacked)\n"
           "  --tokenizer KIND    byte (V = 256, default) or bpe (byte-level BPE, GPT-2 style pre-split)\n"
           "  --vocab N           BPE vocabulary size, 256..65536 (default 4096)\n"
           "  --bpe-sample BYTES  learn the merges on a seeded sample of about BYTES of the training text\n"
           "                      (64 KiB blocks drawn without replacement, in corpus order; 0 = all of\n"
           "                      it, the default); the whole corpus is still encoded\n"
           "  --val-fraction F    fraction of the corpus held out for validation, in (0, 1) (default 0.05)\n"
           "  --out PATH          the token file to write (written as PATH.tmp, then renamed;\n"
           "                      its missing directories are made)\n"
           "\n"
           "Token ids another trainer made: dbranch prepare --from llmc|nanogpt --train-file FILE...\n"
           "  --val-file FILE... --vocab N --out DATA.h5 reads llm.c / modded-nanogpt shards (llmc: 256-int32\n"
           "  header, magic 20240520 uint16 or 20240801 uint32 tokens) or nanoGPT's headerless uint16\n"
           "  train.bin / val.bin (nanogpt); the dataset's tokenizer is 'external' (ids only).\n"
           "\n"
           "Synthetic record tasks (every record R tokens; dbranch eval reports accuracy on the answers):\n"
           "  --synthetic prefix-sum [--length N (32)] [--modulus K (2)] [--train-records (20000)]\n"
           "      [--val-records (1000)]: records \">\" x0 a0 .. x(N-1) a(N-1), R = 2N + 1, digits x in [0, K),\n"
           "      answers a_i = 'a' + (x0 + .. + xi) mod K (K = 2: running parity); byte tokens;\n"
           "      --answers final: records \">\" x0 .. x(m-1) \"=\" a \".\"..., m uniform in 1..N, R = N + 3,\n"
           "      one answer (the sum of all m digits) per record; --answers labels: records x0 .. x(N-1),\n"
           "      R = N, with a_i stored as the target of position i (never an input; N >= 2)\n"
           "  --synthetic two-hop [--entities N (200)] [--relations R (4)]: graphs A and B of N entities\n"
           "      each; train: every atomic fact \"BOS e r e' EOS\" and graph A's two-hop queries\n"
           "      \"BOS e r1 r2 e''\"; val: graph B's two-hop queries (R = 5; ids only)\n"
           "      --answers labels: a labelled file whose query targets its bridge r1(e) at r1 (as the\n"
           "      atomic fact with that prefix does), every other target the next token\n"
           "  [--seed S (1)] --out DATA.h5\n"
           "\n"
           "Split: the raw corpus is cut into P = min(20, max(1, bytes / 64 KiB)) equal parts (at line\n"
           "starts); the last F of each part (from a line start) is validation, the rest training. Both are\n"
           "contiguous blocks of text spread over the whole corpus, never shuffled bytes. BPE merges are\n"
           "learned on the training text only, so the validation loss is honest.\n");
}

static double seconds_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

int cli_prepare_fail(const char *message_format, const char *value) {
    fprintf(stderr, "dbranch prepare: ");
    fprintf(stderr, message_format, value);
    fprintf(stderr, "\n");
    return 1;
}

static int fail(const char *message_format, const char *value) { return cli_prepare_fail(message_format, value); }

/* 1 when path names the same file as out_path: the same string, or the same
 * inode when out_path exists (a hard link, a symlink, ./x vs x). */
static int same_file(const char *path, const char *out_path) {
    if (!strcmp(path, out_path)) return 1;
    struct stat a, b;
    return stat(path, &a) == 0 && stat(out_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int starts_option(const char *arg) { return arg[0] == '-' && arg[1] == '-'; }

int cmd_prepare(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    for (int i = 0; i < argc; i++) { /* token ids from another tool; synthetic tasks */
        if (!strcmp(argv[i], "--from")) return cmd_prepare_tokens(argc, argv);
        if (!strcmp(argv[i], "--synthetic")) return cmd_prepare_synthetic(argc, argv);
    }
    const char *inputs[MAX_INPUTS];
    int n_inputs = 0;
    const char *preset = NULL, *tokenizer_kind = "byte", *out_path = NULL;
    const char *vocab_text = NULL, *fraction_text = NULL, *sample_text = NULL;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc && !starts_option(argv[i + 1]);
        if (!strcmp(arg, "--input")) {
            if (!has_value) return fail("%s needs at least one file", arg);
            while (i + 1 < argc && !starts_option(argv[i + 1])) {
                if (n_inputs == MAX_INPUTS) return fail("too many input files (at most %s)", "4096");
                inputs[n_inputs++] = argv[++i];
            }
        } else if (!strcmp(arg, "--preset") || !strcmp(arg, "--tokenizer") || !strcmp(arg, "--vocab") ||
                   !strcmp(arg, "--val-fraction") || !strcmp(arg, "--out") || !strcmp(arg, "--bpe-sample")) {
            if (!has_value) return fail("%s needs a value", arg);
            const char *value = argv[++i];
            if (!strcmp(arg, "--preset"))
                preset = value;
            else if (!strcmp(arg, "--tokenizer"))
                tokenizer_kind = value;
            else if (!strcmp(arg, "--vocab"))
                vocab_text = value;
            else if (!strcmp(arg, "--val-fraction"))
                fraction_text = value;
            else if (!strcmp(arg, "--bpe-sample"))
                sample_text = value;
            else
                out_path = value;
        } else {
            return fail("unknown argument '%s' (try dbranch prepare --help)", arg);
        }
    }

    /* Validate everything before reading a byte. */
    if (!out_path) return fail("%s", "--out PATH is required");
    if (dt_make_output_parent("--out", out_path) != DT_OK) return cli_fail("prepare");
    if (preset && n_inputs) return fail("%s", "use either --input or --preset, not both");
    if (!preset && !n_inputs) return fail("%s", "give --input FILE... or --preset kjv|pycode|large");
    for (int i = 0; i < n_inputs; i++)
        if (same_file(inputs[i], out_path))
            return fail("--out '%s' is one of the --input files: it would overwrite the corpus", out_path);
    if (preset && strcmp(preset, "kjv") && strcmp(preset, "pycode") && strcmp(preset, "large"))
        return fail("unknown preset '%s' (expected kjv, pycode or large)", preset);
    int is_bpe = !strcmp(tokenizer_kind, "bpe");
    if (!is_bpe && strcmp(tokenizer_kind, "byte"))
        return fail("unknown tokenizer '%s' (expected byte or bpe)", tokenizer_kind);
    long long vocab = is_bpe ? 4096 : 256;
    if (vocab_text) {
        char *end = NULL;
        errno = 0;
        vocab = strtoll(vocab_text, &end, 10);
        if (errno || end == vocab_text || *end) return fail("--vocab '%s' is not an integer", vocab_text);
        if (!is_bpe && vocab != 256) return fail("--vocab %s: the byte tokenizer has exactly 256 tokens", vocab_text);
        if (vocab < 256 || vocab > 65536) return fail("--vocab %s is outside [256, 65536]", vocab_text);
    }
    long long bpe_sample = 0;
    if (sample_text) {
        char *end = NULL;
        errno = 0;
        bpe_sample = strtoll(sample_text, &end, 10);
        if (errno || end == sample_text || *end || bpe_sample < 0)
            return fail("--bpe-sample '%s' is not a byte count >= 0", sample_text);
        if (!is_bpe) return fail("--bpe-sample %s needs --tokenizer bpe", sample_text);
    }
    double val_fraction = 0.05;
    if (fraction_text) {
        char *end = NULL;
        val_fraction = strtod(fraction_text, &end);
        if (end == fraction_text || *end) return fail("--val-fraction '%s' is not a number", fraction_text);
        if (!(val_fraction > 0.0 && val_fraction < 1.0))
            return fail("--val-fraction %s is outside (0, 1)", fraction_text);
    }

    double t_start = seconds_now();
    data_corpus corpus;
    dt_status status = preset ? data_corpus_preset(&corpus, preset) : data_corpus_read_files(&corpus, inputs, n_inputs);
    if (status != DT_OK) return cli_fail("prepare");
    double t_read = seconds_now();

    uint8_t *train_text = NULL, *val_text = NULL;
    size_t n_train_bytes = 0, n_val_bytes = 0;
    if (data_corpus_split(corpus.bytes, corpus.n_bytes, val_fraction, &train_text, &n_train_bytes, &val_text,
                          &n_val_bytes) != DT_OK) {
        data_corpus_free(&corpus);
        return cli_fail("prepare");
    }
    /* The splits are copies: the raw corpus is not needed again (one byte per input byte less at the peak). */
    const size_t n_corpus_bytes = corpus.n_bytes;
    free(corpus.bytes);
    corpus.bytes = NULL;

    /* The merges' text: all of train, or a seeded sample of it (--bpe-sample). */
    const uint8_t *merge_text = train_text;
    size_t n_merge_bytes = n_train_bytes;
    uint8_t *sample = NULL;
    data_tokenizer tok = {0};
    status = DT_OK;
    if (is_bpe && bpe_sample > 0 && (size_t)bpe_sample < n_train_bytes) {
        status = data_corpus_sample_blocks(train_text, n_train_bytes, (size_t)bpe_sample, BPE_SAMPLE_SEED, &sample,
                                           &n_merge_bytes);
        merge_text = sample;
    }
    if (status == DT_OK)
        status = is_bpe ? data_tokenizer_train_bpe(&tok, merge_text, n_merge_bytes, vocab) : data_tokenizer_byte(&tok);
    free(sample);
    double t_tokenizer = seconds_now();
    int32_t *train_tokens = NULL, *val_tokens = NULL;
    int64_t n_train = 0, n_val = 0;
    if (status == DT_OK) status = data_tokenizer_encode(&tok, train_text, n_train_bytes, &train_tokens, &n_train);
    if (status == DT_OK) status = data_tokenizer_encode(&tok, val_text, n_val_bytes, &val_tokens, &n_val);
    free(train_text); /* encoded: the tokens are what is written */
    free(val_text);
    train_text = val_text = NULL;
    double t_encode = seconds_now();
    if (status == DT_OK)
        status = data_tokens_write(out_path, &tok, train_tokens, n_train, val_tokens, n_val, corpus.source);
    double t_write = seconds_now();

    int exit_code = 0;
    if (status != DT_OK) {
        exit_code = cli_fail("prepare");
    } else {
        int64_t n_tokens = n_train + n_val;
        printf("dbranch prepare: %s\n", corpus.source);
        printf("  bytes        %zu (train %zu, val %zu; %lld blocks)\n", n_corpus_bytes, n_train_bytes, n_val_bytes,
               (long long)data_corpus_split_parts(n_corpus_bytes));
        printf("  tokenizer    %s, vocab %lld", is_bpe ? "bpe" : "byte", (long long)tok.vocab_size);
        if (is_bpe && tok.vocab_size < vocab) printf(" (asked %lld: the corpus ran out of pairs)", vocab);
        if (is_bpe)
            printf(", merges learned on %zu bytes (%.1f MB/s)", n_merge_bytes,
                   (double)n_merge_bytes / 1e6 / (t_tokenizer - t_read > 0 ? t_tokenizer - t_read : 1e-9));
        printf("\n");
        printf("  tokens       %lld (train %lld, val %lld), encoded at %.1f MB/s\n", (long long)n_tokens,
               (long long)n_train, (long long)n_val,
               (double)n_corpus_bytes / 1e6 / (t_encode - t_tokenizer > 0 ? t_encode - t_tokenizer : 1e-9));
        printf("  bytes/token  %.3f (train %.3f, val %.3f)\n", (double)n_corpus_bytes / (double)n_tokens,
               (double)n_train_bytes / (double)n_train, (double)n_val_bytes / (double)n_val);
        printf("  time         %.2f s (read %.2f, tokenizer %.2f, encode %.2f, write %.2f)\n", t_write - t_start,
               t_read - t_start, t_tokenizer - t_read, t_encode - t_tokenizer, t_write - t_encode);
        printf("  wrote        %s\n", out_path);
    }
    free(train_tokens);
    free(val_tokens);
    data_tokenizer_free(&tok);
    free(train_text);
    free(val_text);
    data_corpus_free(&corpus);
    return exit_code;
}
