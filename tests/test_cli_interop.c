/* `dbranch export`, `dbranch import` and `dbranch prepare --from` end to end
 * (the binary in env DBRANCH_BINARY): help, a CLI round trip, and the refused
 * inputs, each one line naming the file and the reason, tensor or field, with
 * a non-zero exit. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokens.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static char tmp_dir[256];
static void make_tmp_dir(void) { test_scratch_dir(tmp_dir, sizeof tmp_dir, "cli_interop"); }
static void remove_tmp_dir(void) { test_remove_dir(tmp_dir); }
TestSuite(cli_interop, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name) {
    static char path[4][512];
    static int which;
    which = (which + 1) % 4;
    snprintf(path[which], sizeof path[which], "%s/%s", tmp_dir, name);
    return path[which];
}

static const char *saved_model(const char *name, model_family family, const char *extra_key, const char *extra_value) {
    model_config c = model_config_default(family);
    const char *pairs[][2] = {
        {"vocab_size", "40"}, {"block_size", "8"}, {"n_layer", "1"}, {"d_model", "8"}, {"n_head", "2"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        cr_assert_eq(model_config_set(&c, pairs[i][0], pairs[i][1]), DT_OK);
    if (family == FAMILY_MOE) cr_assert_eq(model_config_set(&c, "n_expert", "2"), DT_OK);
    if (extra_key) cr_assert_eq(model_config_set(&c, extra_key, extra_value), DT_OK);
    model m;
    cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, 1);
    model_init_weights(&m, &rng);
    const char *path = tmp_path(name);
    cr_assert_eq(model_save(&m, path), DT_OK, "%s", dt_error_message());
    model_free(&m);
    return path;
}

static int run(const char *args, char **err) {
    char *out = NULL;
    int code = test_run_dbranch(NULL, args, &out, err);
    free(out);
    return code;
}

Test(cli_interop, help_exits_zero) {
    const char *commands[] = {"export --help", "import --help"};
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        cr_assert_eq(test_run_dbranch(NULL, commands[i], &out, NULL), 0, "%s", commands[i]);
        cr_assert(strstr(out, "usage: dbranch"), "%s prints its usage", commands[i]);
        free(out);
    }
}

Test(cli_interop, export_import_round_trip_and_every_format_writes) {
    char model_path[512]; /* tmp_path's buffers rotate */
    snprintf(model_path, sizeof model_path, "%s", saved_model("llama.h5", FAMILY_LLAMA, "branch", "decode"));
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "export --format hf --model %s --out %s", model_path, tmp_path("hf"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    snprintf(args, sizeof args, "import --format hf --in %s --out %s", tmp_path("hf"), tmp_path("back.h5"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    model a, b;
    cr_assert_eq(model_load(&a, model_path), DT_OK);
    cr_assert_eq(model_load(&b, tmp_path("back.h5")), DT_OK, "%s", dt_error_message());
    cr_assert_eq(a.n_params, b.n_params);
    for (int i = 0; i < a.n_params; i++)
        cr_assert_eq(memcmp(a.params[i].tensor->data, b.params[i].tensor->data, 4 * (size_t)a.params[i].tensor->size),
                     0, "%s", a.params[i].name);
    model_free(&a);
    model_free(&b);
    snprintf(args, sizeof args, "export --format llama2c --model %s --out %s", model_path, tmp_path("l2c"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    snprintf(args, sizeof args, "export --format gguf --model %s --out %s", model_path, tmp_path("m.gguf"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    char *side = test_slurp(tmp_path("m.branch.safetensors"));
    cr_assert(strstr(side + 8, "branch.tok_emb.weight"), "the GGUF export's branch side file");
    free(side);
}

Test(cli_interop, unexpressible_configs_are_one_line_errors) {
    struct {
        const char *file, *format, *key, *value, *needle;
    } cases[] = {
        {"moe.h5", "llama2c", NULL, NULL, "family moe"},
        {"gpt.h5", "llama2c", NULL, NULL, "family nanogpt"},
        {"share.h5", "gguf", NULL, NULL, "share = off"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_family family = !strcmp(cases[i].file, "moe.h5") ? FAMILY_MOE : FAMILY_NANOGPT;
        const char *path = saved_model(cases[i].file, family, cases[i].key, cases[i].value);
        if (!strcmp(cases[i].file, "share.h5")) { /* share = off needs the branch set first */
            model_config d = model_config_default(FAMILY_NANOGPT);
            const char *p[][2] = {{"vocab_size", "40"}, {"block_size", "8"},  {"n_layer", "1"}, {"d_model", "8"},
                                  {"n_head", "2"},      {"branch", "decode"}, {"share", "off"}};
            for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
                cr_assert_eq(model_config_set(&d, p[k][0], p[k][1]), DT_OK);
            model m;
            cr_assert_eq(model_create(&m, &d), DT_OK, "%s", dt_error_message());
            cr_assert_eq(model_save(&m, path), DT_OK);
            model_free(&m);
        }
        char args[2048], *err = NULL;
        snprintf(args, sizeof args, "export --format %s --model %s --out %s", cases[i].format, path,
                 tmp_path("refused"));
        cr_assert_neq(run(args, &err), 0, "case %zu exits non-zero", i);
        test_assert_one_line_error(err, "dbranch export: ", cases[i].needle);
        cr_assert(strstr(err, cases[i].file), "names the file: %s", err);
        free(err);
    }
}

Test(cli_interop, damaged_safetensors_is_a_one_line_error) {
    const char *model_path = saved_model("gpt.h5", FAMILY_NANOGPT, NULL, NULL);
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "export --format hf --model %s --out %s", model_path, tmp_path("hf"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    /* Truncate the body by 4 bytes. */
    const char *weights = tmp_path("hf/model.safetensors");
    FILE *f = fopen(weights, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)size);
    cr_assert_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    f = fopen(weights, "wb");
    fwrite(bytes, 1, (size_t)size - 4, f);
    fclose(f);
    free(bytes);
    snprintf(args, sizeof args, "import --format hf --in %s --out %s", tmp_path("hf"), tmp_path("x.h5"));
    cr_assert_neq(run(args, &err), 0);
    test_assert_one_line_error(err, "dbranch import: ", "model.safetensors: tensor '");
    cr_assert(strstr(err, "truncated"), "%s", err);
    free(err);
}

/* An llm.c shard: 256 int32 header, then count tokens of width bytes. */
static void write_shard(const char *path, int32_t magic, int width, const uint32_t *tokens, int32_t count,
                        int32_t header_count) {
    int32_t header[256] = {magic, 1, header_count};
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(header, 4, 256, f);
    for (int32_t i = 0; i < count; i++) {
        uint16_t narrow = (uint16_t)tokens[i];
        fwrite(width == 2 ? (const void *)&narrow : (const void *)&tokens[i], (size_t)width, 1, f);
    }
    fclose(f);
}

static void assert_split(const char *path, data_split split, const uint32_t *expected, int64_t n) {
    data_tokens t;
    cr_assert_eq(data_tokens_open(&t, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(t.split_length[split], n);
    int32_t got[16];
    cr_assert_eq(data_tokens_read(&t, split, 0, n, got), DT_OK, "%s", dt_error_message());
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq((uint32_t)got[i], expected[i], "token %lld", (long long)i);
    /* Ids from another tool carry no bytes here: decoding is refused, not empty text. */
    cr_assert_eq(t.tokenizer.kind, TOKENIZER_EXTERNAL);
    uint8_t *text = NULL;
    size_t n_bytes = 0;
    cr_assert_eq(data_tokenizer_decode(&t.tokenizer, got, n, &text, &n_bytes), DT_ERR);
    cr_assert(strstr(dt_error_message(), "external"), "%s", dt_error_message());
    data_tokens_close(&t);
}

Test(cli_interop, prepare_reads_llmc_shards_and_nanogpt_bins) {
    const uint32_t train[5] = {50256, 1, 2, 65535, 7}, train2[3] = {9, 8, 7}, val[4] = {100000, 3, 0, 70000};
    write_shard(tmp_path("train_000.bin"), 20240520, 2, train, 5, 5);
    write_shard(tmp_path("train_001.bin"), 20240520, 2, train2, 3, 3);
    write_shard(tmp_path("val_000.bin"), 20240801, 4, val, 4, 4);
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "prepare --from llmc --train-file %s %s --val-file %s --vocab 100277 --out %s",
             tmp_path("train_000.bin"), tmp_path("train_001.bin"), tmp_path("val_000.bin"), tmp_path("llmc.h5"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    const uint32_t all_train[8] = {50256, 1, 2, 65535, 7, 9, 8, 7};
    assert_split(tmp_path("llmc.h5"), SPLIT_TRAIN, all_train, 8);
    assert_split(tmp_path("llmc.h5"), SPLIT_VAL, val, 4);

    const uint16_t bin[4] = {5, 50000, 0, 12};
    FILE *f = fopen(tmp_path("train.bin"), "wb");
    fwrite(bin, 2, 4, f);
    fclose(f);
    f = fopen(tmp_path("val.bin"), "wb");
    fwrite(bin, 2, 2, f);
    fclose(f);
    snprintf(args, sizeof args, "prepare --from nanogpt --train-file %s --val-file %s --vocab 50257 --out %s",
             tmp_path("train.bin"), tmp_path("val.bin"), tmp_path("nano.h5"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    const uint32_t expected[4] = {5, 50000, 0, 12};
    assert_split(tmp_path("nano.h5"), SPLIT_TRAIN, expected, 4);
    assert_split(tmp_path("nano.h5"), SPLIT_VAL, expected, 2);
}

Test(cli_interop, bad_token_files_are_one_line_errors_naming_the_field) {
    const uint32_t tokens[4] = {1, 2, 3, 4};
    write_shard(tmp_path("magic.bin"), 20240521, 2, tokens, 4, 4);
    write_shard(tmp_path("short.bin"), 20240520, 2, tokens, 3, 4);
    write_shard(tmp_path("ok.bin"), 20240520, 2, tokens, 4, 4);
    FILE *f = fopen(tmp_path("odd.bin"), "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    struct {
        const char *from, *file, *vocab, *needle;
    } cases[] = {
        {"llmc", "magic.bin", "50257", "header[0] (magic) is 20240521"},
        {"llmc", "short.bin", "50257", "header[2] (token count)"},
        {"nanogpt", "odd.bin", "50257", "not a whole number of uint16 tokens"},
        {"llmc", "ok.bin", "4", "token id 4 is >= --vocab 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], *err = NULL;
        snprintf(args, sizeof args, "prepare --from %s --train-file %s --val-file %s --vocab %s --out %s",
                 cases[i].from, tmp_path(cases[i].file), tmp_path("ok.bin"), cases[i].vocab, tmp_path("bad.h5"));
        cr_assert_neq(run(args, &err), 0, "case %zu", i);
        test_assert_one_line_error(err, "dbranch prepare: ", cases[i].needle);
        if (i < 3) cr_assert(strstr(err, cases[i].file), "names the file: %s", err);
        free(err);
    }
}

Test(cli_interop, tokens_option_exports_the_dataset_tokenizer) {
    const char *corpus = tmp_path("corpus.txt");
    FILE *f = fopen(corpus, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++)
        fprintf(f, "the cat sat on the mat, line %d of the corpus.\n", i);
    fclose(f);
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "prepare --input %s --tokenizer bpe --vocab 300 --out %s", corpus, tmp_path("bpe.h5"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    char model_path[512], small[512]; /* tmp_path's buffers rotate */
    snprintf(model_path, sizeof model_path, "%s", saved_model("v300.h5", FAMILY_LLAMA, "vocab_size", "300"));
    snprintf(args, sizeof args, "export --format llama2c --model %s --tokens %s --out %s", model_path,
             tmp_path("bpe.h5"), tmp_path("l2c"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    char *tokenizer = test_slurp(tmp_path("l2c/tokenizer.bin"));
    cr_assert(memmem(tokenizer, 64, "\x01\x00\x00\x00", 4), "tokenizer.bin starts with byte tokens of length 1");
    free(tokenizer);
    snprintf(args, sizeof args, "export --format gguf --model %s --tokens %s --out %s", model_path, tmp_path("bpe.h5"),
             tmp_path("t.gguf"));
    cr_assert_eq(run(args, &err), 0, "%s", err);
    free(err);
    snprintf(args, sizeof args, "export --format hf --model %s --tokens %s --out %s", model_path, tmp_path("bpe.h5"),
             tmp_path("hf"));
    cr_assert_neq(run(args, &err), 0);
    test_assert_one_line_error(err, "dbranch export: ", "--tokens");
    free(err);
    /* A tokenizer larger than the model's vocabulary is refused. */
    snprintf(small, sizeof small, "%s", saved_model("v40.h5", FAMILY_LLAMA, NULL, NULL));
    snprintf(args, sizeof args, "export --format gguf --model %s --tokens %s --out %s", small, tmp_path("bpe.h5"),
             tmp_path("small.gguf"));
    cr_assert_neq(run(args, &err), 0);
    test_assert_one_line_error(err, "dbranch export: ", "the tokenizer has 300 tokens, the model only 40");
    free(err);
}
