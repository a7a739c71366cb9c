/* `dbranch prepare` end to end (the binary in env DBRANCH_BINARY) plus the
 * corpus helpers it is built on: the block split and the python-tree preset
 * walk. Datasets written by the CLI are checked by reading them back and
 * decoding them to the input bytes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/corpus.h"
#include "data/tokens.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char temp_dir[64];

static void make_temp_dir(void) { test_scratch_dir(temp_dir, sizeof temp_dir, "prepare"); }

static void remove_temp_dir(void) { test_remove_dir(temp_dir); }

TestSuite(cli_prepare, .init = make_temp_dir, .fini = remove_temp_dir);

static char *temp_path(const char *name) {
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s", temp_dir, name);
    return path;
}

static void write_text(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot write %s", path);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static int file_exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

/* Runs `dbranch prepare ARGS...` (NULL-terminated; each one is quoted for the
 * shell, so it arrives as one argument); returns the exit code, stdout /
 * stderr in *out, *err (caller frees; NULL: not kept). */
static int run_prepare(const char *const *args, char **out, char **err) {
    char line[4096] = "prepare";
    for (int i = 0; args[i]; i++) {
        cr_assert(strchr(args[i], '\'') == NULL, "argument %s has a quote", args[i]);
        size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, " '%s'", args[i]);
    }
    return test_run_dbranch(NULL, line, out, err);
}

/* Asserts exit code 1 and a one-line "dbranch prepare: ..." message containing `needle`. */
static void assert_fails_naming(const char *const *args, const char *needle) {
    char *err;
    int code = run_prepare(args, NULL, &err);
    cr_assert_eq(code, 1, "exit code %d for a bad invocation (expected 1)", code);
    test_assert_one_line_error(err, "dbranch prepare: ", needle);
    free(err);
}

/* Reads both splits and decodes them with the file's own tokenizer. */
static void decode_file(const char *path, char **train, size_t *n_train, char **val, size_t *n_val, int64_t *vocab_size,
                        data_tokenizer_kind *kind) {
    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, path), DT_OK, "%s", dt_error_message());
    *vocab_size = tokens.vocab_size;
    *kind = tokens.tokenizer.kind;
    for (int s = 0; s < 2; s++) {
        int64_t n = tokens.split_length[s];
        int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
        cr_assert_eq(data_tokens_read(&tokens, (data_split)s, 0, n, ids), DT_OK, "%s", dt_error_message());
        uint8_t *text = NULL;
        size_t n_text = 0;
        cr_assert_eq(data_tokenizer_decode(&tokens.tokenizer, ids, n, &text, &n_text), DT_OK);
        if (s == 0)
            *train = (char *)text, *n_train = n_text;
        else
            *val = (char *)text, *n_val = n_text;
        free(ids);
    }
    data_tokens_close(&tokens);
}

static char *sample_corpus(size_t *n) {
    static const char *const lines[] = {"In the beginning God created the heaven and the earth.\n",
                                        "And the earth was without form, and void.\n",
                                        "And God said, Let there be light: and there was light.\n",
                                        "def main(argv):\n    return 0\n", "x = [1, 2, 3]  # numbers\n"};
    char *text = malloc(40000);
    size_t used = 0;
    for (int i = 0; used < 30000; i++) {
        const char *line = lines[(i * 7 + i / 3) % 5];
        memcpy(text + used, line, strlen(line));
        used += strlen(line);
    }
    *n = used;
    return text;
}

Test(cli_prepare, help_exits_zero) {
    const char *args[] = {"--help", NULL};
    char *out;
    cr_assert_eq(run_prepare(args, &out, NULL), 0);
    cr_assert(strstr(out, "--val-fraction") != NULL && strstr(out, "--preset") != NULL, "help: %s", out);
    free(out);
}

Test(cli_prepare, byte_dataset_from_a_file) {
    size_t n = 0;
    char *text = sample_corpus(&n); /* < 64 KiB: one block, so val is the tail */
    char *input = temp_path("corpus.txt"), *output = temp_path("byte.h5");
    write_text(input, text, n);
    const char *args[] = {"--input", input, "--tokenizer", "byte", "--val-fraction", "0.1", "--out", output, NULL};
    char *out;
    cr_assert_eq(run_prepare(args, &out, NULL), 0);
    char *train, *val;
    size_t n_train, n_val;
    int64_t vocab;
    data_tokenizer_kind kind;
    decode_file(output, &train, &n_train, &val, &n_val, &vocab, &kind);
    cr_assert_eq(kind, TOKENIZER_BYTE);
    cr_assert_eq(vocab, 256);
    cr_assert_eq(n_train + n_val, n);
    cr_assert(memcmp(train, text, n_train) == 0 && memcmp(val, text + n_train, n_val) == 0,
              "train ++ val is not the input");
    /* About 10% held out (moved forward to a line start), and the cut is at a line start. */
    cr_assert(n_val > 0.08 * n && n_val <= 0.1 * n + 1, "val has %zu of %zu bytes", n_val, n);
    cr_assert_eq(text[n_train - 1], '\n');
    cr_assert(strstr(out, "bytes/token") != NULL, "summary: %s", out);
    free(out);
    free(train);
    free(val);
    free(text);
    free(input);
    free(output);
}

Test(cli_prepare, bpe_dataset_decodes_to_the_input) {
    size_t n = 0;
    char *text = sample_corpus(&n);
    char *input = temp_path("corpus.txt"), *output = temp_path("bpe.h5");
    write_text(input, text, n);
    const char *args[] = {"--input", input, "--tokenizer", "bpe", "--vocab", "300", "--out", output, NULL};
    cr_assert_eq(run_prepare(args, NULL, NULL), 0);
    char *train, *val;
    size_t n_train, n_val;
    int64_t vocab;
    data_tokenizer_kind kind;
    decode_file(output, &train, &n_train, &val, &n_val, &vocab, &kind);
    cr_assert_eq(kind, TOKENIZER_BPE);
    cr_assert_eq(vocab, 300);
    cr_assert_eq(n_train + n_val, n);
    cr_assert(memcmp(train, text, n_train) == 0 && memcmp(val, text + n_train, n_val) == 0);
    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, output), DT_OK);
    /* 44 merges on five repeated lines: the common words and spaces merge, at least a third shorter. */
    cr_assert_lt(tokens.split_length[SPLIT_TRAIN], (int64_t)n_train * 2 / 3, "%lld tokens for %zu bytes",
                 (long long)tokens.split_length[SPLIT_TRAIN], n_train);
    data_tokens_close(&tokens);
    free(train);
    free(val);
    free(text);
    free(input);
    free(output);
}

Test(cli_prepare, several_inputs_are_concatenated_in_order) {
    char *first = temp_path("first.txt"), *second = temp_path("second.txt"), *output = temp_path("two.h5");
    char text[2000];
    for (int i = 0; i < 1000; i++)
        text[i] = "first file line\n"[i % 16];
    for (int i = 1000; i < 2000; i++)
        text[i] = "second\n"[i % 7];
    write_text(first, text, 1000);
    write_text(second, text + 1000, 1000);
    const char *args[] = {"--input", first, second, "--out", output, NULL};
    cr_assert_eq(run_prepare(args, NULL, NULL), 0);
    char *train, *val;
    size_t n_train, n_val;
    int64_t vocab;
    data_tokenizer_kind kind;
    decode_file(output, &train, &n_train, &val, &n_val, &vocab, &kind);
    cr_assert_eq(n_train + n_val, 2000);
    cr_assert(memcmp(train, text, n_train) == 0 && memcmp(val, text + n_train, n_val) == 0);
    free(train);
    free(val);
    free(first);
    free(second);
    free(output);
}

Test(cli_prepare, bad_input_is_a_one_line_error) {
    char *input = temp_path("ok.txt"), *output = temp_path("never.h5"), *missing = temp_path("missing.txt");
    write_text(input, "some text\nmore text\n", 20);
    const char *missing_args[] = {"--input", missing, "--out", output, NULL};
    assert_fails_naming(missing_args, missing);
    const char *low_vocab[] = {"--input", input, "--tokenizer", "bpe", "--vocab", "255", "--out", output, NULL};
    assert_fails_naming(low_vocab, "255");
    const char *high_vocab[] = {"--input", input, "--tokenizer", "bpe", "--vocab", "65537", "--out", output, NULL};
    assert_fails_naming(high_vocab, "65537");
    const char *zero_fraction[] = {"--input", input, "--val-fraction", "0", "--out", output, NULL};
    assert_fails_naming(zero_fraction, "--val-fraction");
    const char *one_fraction[] = {"--input", input, "--val-fraction", "1", "--out", output, NULL};
    assert_fails_naming(one_fraction, "--val-fraction");
    const char *negative_fraction[] = {"--input", input, "--val-fraction", "-0.5", "--out", output, NULL};
    assert_fails_naming(negative_fraction, "-0.5");
    const char *bad_tokenizer[] = {"--input", input, "--tokenizer", "wordpiece", "--out", output, NULL};
    assert_fails_naming(bad_tokenizer, "wordpiece");
    const char *bad_preset[] = {"--preset", "shakespeare", "--out", output, NULL};
    assert_fails_naming(bad_preset, "shakespeare");
    const char *no_out[] = {"--input", input, NULL};
    assert_fails_naming(no_out, "--out");
    const char *no_input[] = {"--out", output, NULL};
    assert_fails_naming(no_input, "--input");
    cr_assert(!file_exists(output), "a failed prepare must not leave an output file");
    free(input);
    free(output);
    free(missing);
}

/* What it makes, not how fast: a wall-clock bound here failed under load on
 * the shared machine (speed belongs to benchmarks, not tests). */
Test(cli_prepare, kjv_preset_bpe) {
    if (system("command -v bible >/dev/null 2>&1") != 0) cr_skip_test("the bible program (bible-kjv) is not installed");
    char *output = temp_path("kjv.h5");
    const char *args[] = {"--preset", "kjv", "--tokenizer", "bpe", "--vocab", "4096", "--out", output, NULL};
    cr_assert_eq(run_prepare(args, NULL, NULL), 0);
    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, output), DT_OK, "%s", dt_error_message());
    cr_assert_eq(tokens.vocab_size, 4096);
    int64_t n_tokens = tokens.split_length[SPLIT_TRAIN] + tokens.split_length[SPLIT_VAL];
    /* 4.3 MB of English with 4096 tokens: well over 3 bytes per token. */
    cr_assert(n_tokens > 800000 && n_tokens < 1400000, "%lld tokens", (long long)n_tokens);
    /* The first verse decodes from the head of /train. */
    int32_t ids[64];
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, 0, 64, ids), DT_OK);
    uint8_t *text = NULL;
    size_t n_text = 0;
    cr_assert_eq(data_tokenizer_decode(&tokens.tokenizer, ids, 64, &text, &n_text), DT_OK);
    cr_assert(strstr((char *)text, "In the beginning God created the heaven and the earth.") != NULL, "%s", text);
    free(text);
    data_tokens_close(&tokens);
    free(output);
}

/* ---- corpus helpers ---- */

Test(cli_prepare, block_split_fractions) {
    /* 2 MiB of 64-byte lines: 20 blocks, each giving its last ~5% (at a line start) to val. */
    size_t n = 2 << 20;
    uint8_t *bytes = malloc(n);
    for (size_t i = 0; i < n; i++)
        bytes[i] = i % 64 == 63 ? '\n' : (uint8_t)('a' + (i / 64) % 26);
    cr_assert_eq(data_corpus_split_parts(n), 20);
    cr_assert_eq(data_corpus_split_parts(100), 1);
    cr_assert_eq(data_corpus_split_parts(3 * 65536 + 5), 3);
    uint8_t *train, *val;
    size_t n_train, n_val;
    cr_assert_eq(data_corpus_split(bytes, n, 0.05, &train, &n_train, &val, &n_val), DT_OK);
    cr_assert_eq(n_train + n_val, n);
    cr_assert(n_val > 0.045 * n && n_val < 0.055 * n, "val %zu of %zu", n_val, n);
    /* Every val piece is whole lines: val is a sequence of complete 64-byte lines. */
    cr_assert_eq(n_val % 64, 0);
    for (size_t i = 0; i < n_val; i++)
        cr_assert_eq(val[i] == '\n', i % 64 == 63);
    /* The pieces come from all over the corpus: val holds lines of many different letters. */
    int letters_seen[26] = {0}, distinct = 0;
    for (size_t i = 0; i < n_val; i += 64)
        letters_seen[val[i] - 'a'] = 1;
    for (int k = 0; k < 26; k++)
        distinct += letters_seen[k];
    cr_assert_geq(distinct, 10, "val comes from one place only");
    free(train);
    free(val);
    cr_assert_eq(data_corpus_split(bytes, n, 0.0, &train, &n_train, &val, &n_val), DT_ERR);
    cr_assert_eq(data_corpus_split(bytes, n, 1.0, &train, &n_train, &val, &n_val), DT_ERR);
    cr_assert_eq(data_corpus_split(bytes, 3, 0.05, &train, &n_train, &val, &n_val), DT_ERR); /* empty val */
    cr_assert(strstr(dt_error_message(), "empty") != NULL, "%s", dt_error_message());
    free(bytes);
}

Test(cli_prepare, python_tree_order_and_exclusions) {
    const char *files[] = {"b.py",
                           "a.py",
                           "A.py",
                           "sub/x.py",
                           "sub/deeper/y.py",
                           "sub-dir/z.py",
                           "test/skip.py",
                           "pkg/tests/skip.py",
                           "idlelib/idle_test/skip.py",
                           "site-packages/skip.py",
                           "dist-packages/skip.py",
                           "notes.txt",
                           "pyfile.pyc"};
    char *root = temp_path("lib");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[600], command[700];
        snprintf(path, sizeof path, "%s/%s", root, files[i]);
        snprintf(command, sizeof command, "mkdir -p \"$(dirname '%s')\"", path);
        cr_assert_eq(system(command), 0);
        char content[128];
        snprintf(content, sizeof content, "<%s>", files[i]);
        write_text(path, content, strlen(content));
    }
    data_corpus corpus;
    cr_assert_eq(data_corpus_read_python_tree(&corpus, root), DT_OK, "%s", dt_error_message());
    /* Bytewise order of relative paths: 'A' < 'a', and "sub-dir/" < "sub/" because '-' < '/'. */
    const char *expected = "<A.py><a.py><b.py><sub-dir/z.py><sub/deeper/y.py><sub/x.py>";
    cr_assert_eq(corpus.n_bytes, strlen(expected));
    cr_assert(memcmp(corpus.bytes, expected, corpus.n_bytes) == 0, "got %.*s", (int)corpus.n_bytes, corpus.bytes);
    cr_assert_eq(corpus.n_files, 6);
    data_corpus_free(&corpus);
    free(root);
}

/* ---- preset large: the kernel tarball's parts, the BPE sample ---- */

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Writes root/NAME with content "<NAME>\n" (directories made as needed). */
static void write_member(const char *root, const char *name) {
    char path[1200], command[1400];
    snprintf(path, sizeof path, "%s/%s", root, name);
    snprintf(command, sizeof command, "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(command), 0);
    char content[600];
    snprintf(content, sizeof content, "<%s>\n", name);
    write_text(path, content, strlen(content));
}

/* The concatenated contents of the given members in bytewise order of their
 * names (the archive order of `tar --sort=name` for these names). */
static char *expected_concatenation(char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, compare_strings);
    char *text = calloc(1, 65536);
    for (int i = 0; i < n; i++) {
        size_t used = strlen(text);
        snprintf(text + used, 65536 - used, "<%s>\n", names[i]);
    }
    return text;
}

/* A fixture tree shaped like linux-source-6.1: a .c at the top and a .h two
 * levels down in each code directory, Documentation in *.rst / *.txt, and
 * members of every kind the parts must skip. */
Test(cli_prepare, kernel_tarball_parts_pick_their_members) {
    char *root = temp_path("kernel");
    char *code[256], *docs[8];
    int n_code = 0, n_docs = 0;
    for (int d = 0; d < data_corpus_n_kernel_code_dirs; d++) {
        char name[256];
        snprintf(name, sizeof name, DATA_KERNEL_PREFIX "%s/top.c", data_corpus_kernel_code_dirs[d]);
        code[n_code++] = strdup(name);
        snprintf(name, sizeof name, DATA_KERNEL_PREFIX "%s/sub/deeper/part.h", data_corpus_kernel_code_dirs[d]);
        code[n_code++] = strdup(name);
    }
    docs[n_docs++] = strdup(DATA_KERNEL_PREFIX "Documentation/index.rst");
    docs[n_docs++] = strdup(DATA_KERNEL_PREFIX "Documentation/admin-guide/notes.txt");
    const char *skipped[] = {DATA_KERNEL_PREFIX "drivers/gpu/drm/amd/regs.h", /* left out on purpose */
                             DATA_KERNEL_PREFIX "arch/arm/kernel/setup.c",    /* other architectures */
                             DATA_KERNEL_PREFIX "tools/perf/builtin.c",
                             DATA_KERNEL_PREFIX "kernel/Makefile",
                             DATA_KERNEL_PREFIX "kernel/sched/core.o",
                             DATA_KERNEL_PREFIX "kernel/script.py",
                             DATA_KERNEL_PREFIX "Documentation/conf.py",
                             DATA_KERNEL_PREFIX "Documentation/devicetree/binding.yaml",
                             DATA_KERNEL_PREFIX "README"};
    for (int i = 0; i < n_code; i++)
        write_member(root, code[i]);
    for (int i = 0; i < n_docs; i++)
        write_member(root, docs[i]);
    for (size_t i = 0; i < sizeof skipped / sizeof *skipped; i++)
        write_member(root, skipped[i]);
    char *archive = temp_path("linux.tar.xz"), command[1400];
    snprintf(command, sizeof command, "tar --sort=name -cJf '%s' -C '%s' linux-source-6.1", archive, root);
    cr_assert_eq(system(command), 0);

    const data_kernel_part parts[2] = {DATA_KERNEL_CODE, DATA_KERNEL_DOCUMENTATION};
    char *want[2] = {expected_concatenation(code, n_code), expected_concatenation(docs, n_docs)};
    char *want_code = strdup(want[0]), *want_docs = strdup(want[1]);
    for (int p = 0; p < 2; p++) {
        data_corpus corpus;
        cr_assert_eq(data_corpus_read_kernel_tar(&corpus, archive, parts[p]), DT_OK, "%s", dt_error_message());
        cr_assert_eq(corpus.n_bytes, strlen(want[p]), "part %d: got %.*s", p, (int)corpus.n_bytes, corpus.bytes);
        cr_assert(memcmp(corpus.bytes, want[p], corpus.n_bytes) == 0, "part %d: got\n%s\nwant\n%s", p, corpus.bytes,
                  want[p]);
        data_corpus_free(&corpus);
        free(want[p]);
    }

    /* The whole preset on the fixtures: KJV, then GCIDE, Documentation, code, each whole. */
    char *gcide = temp_path("gcide.dict.dz");
    snprintf(command, sizeof command, "printf 'Abdication, n. The act of abdicating.\\n' | gzip -c > '%s'", gcide);
    cr_assert_eq(system(command), 0);
    data_corpus large;
    cr_assert_eq(data_corpus_read_large(&large, archive, gcide), DT_OK, "%s", dt_error_message());
    char *tail = calloc(1, 65536);
    snprintf(tail, 65536, "Abdication, n. The act of abdicating.\n%s%s", want_docs, want_code);
    const size_t n_tail = strlen(tail);
    cr_assert_gt(large.n_bytes, n_tail + 4000000, "the KJV comes first (%zu bytes in all)", large.n_bytes);
    cr_assert(memcmp(large.bytes + large.n_bytes - n_tail, tail, n_tail) == 0, "GCIDE, Documentation, code last");
    data_corpus_free(&large);
    free(tail);
    /* A missing package is one line naming it and the apt-get command. */
    char *absent = temp_path("absent");
    cr_assert_eq(data_corpus_read_large(&large, absent, gcide), DT_ERR);
    cr_assert(strstr(dt_error_message(), "apt-get install linux-source-6.1"), "%s", dt_error_message());
    cr_assert_eq(data_corpus_read_large(&large, archive, absent), DT_ERR);
    cr_assert(strstr(dt_error_message(), "apt-get install dict-gcide"), "%s", dt_error_message());
    free(absent);
    free(gcide);

    /* A tarball without one of the code directories is no kernel source: an error naming it. */
    snprintf(command, sizeof command, "rm -r '%s/" DATA_KERNEL_PREFIX "mm' && tar -cJf '%s' -C '%s' linux-source-6.1",
             root, archive, root);
    cr_assert_eq(system(command), 0);
    data_corpus corpus;
    cr_assert_eq(data_corpus_read_kernel_tar(&corpus, archive, DATA_KERNEL_CODE), DT_ERR);
    cr_assert(strstr(dt_error_message(), "linux.tar.xz") != NULL, "%s", dt_error_message());
    char *missing = temp_path("no-such.tar.xz");
    cr_assert_eq(data_corpus_read_kernel_tar(&corpus, missing, DATA_KERNEL_CODE), DT_ERR);
    cr_assert(strstr(dt_error_message(), "no-such.tar.xz") != NULL, "%s", dt_error_message());
    for (int i = 0; i < n_code; i++)
        free(code[i]);
    for (int i = 0; i < n_docs; i++)
        free(docs[i]);
    free(want_code);
    free(want_docs);
    free(missing);
    free(archive);
    free(root);
}

/* The sample is whole 64 KiB blocks of the text, in corpus order, the same
 * for one seed; another seed draws other blocks; asking for more than the
 * text gives all of it. */
Test(cli_prepare, bpe_sample_is_seeded_whole_blocks) {
    const size_t block = DATA_SAMPLE_BLOCK, n = 40 * block + 123;
    uint8_t *text = malloc(n);
    for (size_t i = 0; i < n; i++) /* each block starts with its own number */
        text[i] = (uint8_t)(i % block == 0 ? i / block : (i * 31) % 251);
    uint8_t *a, *b, *c;
    size_t n_a, n_b, n_c;
    cr_assert_eq(data_corpus_sample_blocks(text, n, 5 * block - 10, 7, &a, &n_a), DT_OK);
    cr_assert_eq(data_corpus_sample_blocks(text, n, 5 * block - 10, 7, &b, &n_b), DT_OK);
    cr_assert_eq(data_corpus_sample_blocks(text, n, 5 * block - 10, 8, &c, &n_c), DT_OK);
    cr_assert_eq(n_a, 5 * block, "ceil(want / block) blocks");
    cr_assert(n_a == n_b && memcmp(a, b, n_a) == 0, "one seed, one sample");
    int last = -1, same_as_other_seed = 1;
    for (size_t k = 0; k < 5; k++) {
        const int index = a[k * block];
        cr_assert(index > last, "blocks in corpus order");
        last = index;
        cr_assert(memcmp(a + k * block, text + (size_t)index * block, block) == 0, "block %d copied whole", index);
        same_as_other_seed &= n_c == n_a && c[k * block] == a[k * block];
    }
    cr_assert(!same_as_other_seed, "seed 8 drew the same blocks as seed 7");
    free(a);
    free(b);
    free(c);
    cr_assert_eq(data_corpus_sample_blocks(text, n, 2 * n, 7, &a, &n_a), DT_OK);
    cr_assert(n_a == n && memcmp(a, text, n) == 0, "the whole text when the sample covers it");
    free(a);
    free(text);
}

/* --bpe-sample: the merges come from a sample, the whole text is encoded
 * (the dataset still decodes to the input); bad values are one-line errors. */
Test(cli_prepare, bpe_sample_option) {
    const size_t n = 3 * DATA_SAMPLE_BLOCK;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = "a line of words, then more words\n"[i % 33];
    char *input = temp_path("big.txt"), *output = temp_path("sampled.h5");
    write_text(input, text, n);
    const char *args[] = {"--input",      input,  "--tokenizer", "bpe",  "--vocab", "300",
                          "--bpe-sample", "1000", "--out",       output, NULL};
    char *out = NULL;
    cr_assert_eq(run_prepare(args, &out, NULL), 0);
    cr_assert(strstr(out, "merges learned on 65536 bytes") != NULL, "one block: %s", out);
    char *train, *val;
    size_t n_train, n_val;
    int64_t vocab;
    data_tokenizer_kind kind;
    decode_file(output, &train, &n_train, &val, &n_val, &vocab, &kind);
    cr_assert_eq(n_train + n_val, n);
    cr_assert(memcmp(train, text, n_train) == 0 && memcmp(val, text + n_train, n_val) == 0);
    const char *not_a_number[] = {"--input", input,   "--tokenizer", "bpe", "--bpe-sample",
                                  "lots",    "--out", output,        NULL};
    assert_fails_naming(not_a_number, "lots");
    const char *byte_tokenizer[] = {"--input", input, "--bpe-sample", "1000", "--out", output, NULL};
    assert_fails_naming(byte_tokenizer, "--tokenizer bpe");
    free(out);
    free(train);
    free(val);
    free(text);
    free(input);
    free(output);
}
