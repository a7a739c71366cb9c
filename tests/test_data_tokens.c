/* Token dataset file tests (SPEC §5): write/read round trip, on-disk types and
 * attributes, hyperslab reads at offsets, and one-line errors (never crashes)
 * for missing, foreign, truncated and crafted-bad files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/rng.h"
#include "data/tokens.h"
#include "support/scratch.h"

static char temp_dir[64];

static void make_temp_dir(void) { test_scratch_dir(temp_dir, sizeof temp_dir, "tokens"); }

static void remove_temp_dir(void) { test_remove_dir(temp_dir); }

TestSuite(data_tokens, .init = make_temp_dir, .fini = remove_temp_dir);

static const char *temp_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", temp_dir, name);
    return path;
}

static int file_exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

static int32_t *random_tokens(uint64_t seed, int64_t n, int64_t vocab) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    int32_t *tokens = malloc((size_t)(n > 0 ? n : 1) * sizeof *tokens);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)vocab);
    return tokens;
}

Test(data_tokens, byte_round_trip_and_layout) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    int32_t *train = random_tokens(1, 10000, 256), *val = random_tokens(2, 777, 256);
    const char *path = temp_path("byte.h5");
    cr_assert_eq(data_tokens_write(path, &tok, train, 10000, val, 777, "unit test corpus"), DT_OK, "%s",
                 dt_error_message());
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert(!file_exists(tmp), "PATH.tmp was renamed away");

    /* The layout, read with HDF5 directly. */
    hid_t file;
    cr_assert_eq(h5_open(path, 0, &file), DT_OK);
    char text[256];
    int64_t vocab = 0;
    cr_assert_eq(h5_read_attr_string(file, "format", text, sizeof text), DT_OK);
    cr_assert_str_eq(text, "dbranch-tokens");
    cr_assert_eq(h5_read_attr_string(file, "tokenizer", text, sizeof text), DT_OK);
    cr_assert_str_eq(text, "byte");
    cr_assert_eq(h5_read_attr_string(file, "source", text, sizeof text), DT_OK);
    cr_assert_str_eq(text, "unit test corpus");
    cr_assert_eq(h5_read_attr_int(file, "vocab_size", &vocab), DT_OK);
    cr_assert_eq(vocab, 256);
    hid_t dataset = H5Dopen2(file, "/train", H5P_DEFAULT);
    hid_t type = H5Dget_type(dataset);
    cr_assert(H5Tequal(type, H5T_STD_U16LE) > 0, "/train is stored as uint16");
    H5Tclose(type);
    H5Dclose(dataset);
    H5Fclose(file);

    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(tokens.vocab_size, 256);
    cr_assert_eq(tokens.split_length[SPLIT_TRAIN], 10000);
    cr_assert_eq(tokens.split_length[SPLIT_VAL], 777);
    cr_assert(tokens.split_token_size[SPLIT_TRAIN] == 2 && tokens.split_token_size[SPLIT_VAL] == 2);
    cr_assert_eq(tokens.tokenizer.kind, TOKENIZER_BYTE);
    int32_t *back = malloc(10000 * sizeof *back);
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, 0, 10000, back), DT_OK);
    cr_assert(memcmp(back, train, 10000 * sizeof *back) == 0);
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_VAL, 0, 777, back), DT_OK);
    cr_assert(memcmp(back, val, 777 * sizeof *back) == 0);
    /* Hyperslabs at offsets, including the very end and an empty read. */
    const int64_t starts[] = {0, 1, 4095, 9000, 9999, 10000};
    const int64_t counts[] = {7, 100, 2, 1000, 1, 0};
    for (int k = 0; k < 6; k++) {
        cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, starts[k], counts[k], back), DT_OK, "%s",
                     dt_error_message());
        for (int64_t i = 0; i < counts[k]; i++)
            cr_assert_eq(back[i], train[starts[k] + i]);
    }
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_VAL, 770, 7, back), DT_OK);
    cr_assert(memcmp(back, val + 770, 7 * sizeof *back) == 0);
    /* Reads past either end are errors naming the file. */
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, 9999, 2, back), DT_ERR);
    cr_assert(strstr(dt_error_message(), path) != NULL, "%s", dt_error_message());
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_VAL, -1, 2, back), DT_ERR);
    data_tokens_close(&tokens);
    free(back);
    free(train);
    free(val);
    data_tokenizer_free(&tok);
}

Test(data_tokens, bpe_round_trip_keeps_the_tokenizer) {
    const char *text = "to be or not to be, that is the question: whether tis nobler in the mind to suffer";
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 290), DT_OK);
    int32_t *ids = NULL;
    int64_t n = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, (const uint8_t *)text, strlen(text), &ids, &n), DT_OK);
    const char *path = temp_path("bpe.h5");
    cr_assert_eq(data_tokens_write(path, &tok, ids, n - 5, ids + n - 5, 5, "hamlet"), DT_OK, "%s", dt_error_message());
    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(tokens.tokenizer.kind, TOKENIZER_BPE);
    cr_assert_eq(tokens.vocab_size, tok.vocab_size);
    cr_assert(memcmp(tokens.tokenizer.merges, tok.merges, (size_t)(tok.vocab_size - 256) * sizeof tok.merges[0]) == 0);
    /* The file alone decodes its tokens back to the text. */
    int32_t *all = malloc((size_t)n * sizeof *all);
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, 0, n - 5, all), DT_OK);
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_VAL, 0, 5, all + n - 5), DT_OK);
    uint8_t *decoded = NULL;
    size_t n_decoded = 0;
    cr_assert_eq(data_tokenizer_decode(&tokens.tokenizer, all, n, &decoded, &n_decoded), DT_OK);
    cr_assert(n_decoded == strlen(text) && memcmp(decoded, text, n_decoded) == 0);
    data_tokens_close(&tokens);
    free(decoded);
    free(all);
    free(ids);
    data_tokenizer_free(&tok);
}

Test(data_tokens, write_rejects_out_of_vocab_tokens) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    int32_t train[4] = {1, 2, 256, 3};
    const char *path = temp_path("bad_write.h5");
    cr_assert_eq(data_tokens_write(path, &tok, train, 4, train, 2, "x"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "256") != NULL, "%s", dt_error_message());
    cr_assert(!file_exists(path));
    data_tokenizer_free(&tok);
}

Test(data_tokens, missing_and_foreign_files_are_errors) {
    data_tokens tokens;
    const char *missing = temp_path("nope.h5");
    cr_assert_eq(data_tokens_open(&tokens, missing), DT_ERR);
    cr_assert(strstr(dt_error_message(), missing) != NULL, "%s", dt_error_message());

    const char *text_file = temp_path("text.h5");
    FILE *f = fopen(text_file, "w");
    fputs("not an hdf5 file at all\n", f);
    fclose(f);
    cr_assert_eq(data_tokens_open(&tokens, text_file), DT_ERR);
    cr_assert(strstr(dt_error_message(), text_file) != NULL, "%s", dt_error_message());

    /* An HDF5 file with another format attribute (e.g. a checkpoint). */
    const char *checkpoint = temp_path("checkpoint.h5");
    hid_t file;
    cr_assert_eq(h5_create(checkpoint, &file), DT_OK);
    h5_write_attr_string(file, "format", "dbranch-checkpoint");
    h5_close(file, checkpoint);
    cr_assert_eq(data_tokens_open(&tokens, checkpoint), DT_ERR);
    cr_assert(strstr(dt_error_message(), "dbranch-checkpoint") != NULL, "%s", dt_error_message());
    cr_assert(strstr(dt_error_message(), checkpoint) != NULL, "%s", dt_error_message());

    /* No format attribute at all. */
    const char *bare = temp_path("bare.h5");
    cr_assert_eq(h5_create(bare, &file), DT_OK);
    h5_close(file, bare);
    cr_assert_eq(data_tokens_open(&tokens, bare), DT_ERR);
    cr_assert(strstr(dt_error_message(), "format") != NULL, "%s", dt_error_message());
}

/* A token file written by hand: byte tokenizer, /train of the given HDF5 type and rank. */
static void craft_file(const char *path, hid_t train_type, int train_rank, const int32_t *train, int64_t n,
                       int with_val) {
    hid_t file;
    cr_assert_eq(h5_create(path, &file), DT_OK);
    h5_write_attr_string(file, "format", "dbranch-tokens");
    h5_write_attr_string(file, "tokenizer", "byte");
    h5_write_attr_int(file, "vocab_size", 256);
    h5_write_attr_string(file, "source", "crafted");
    hsize_t dims[2] = {(hsize_t)n, 1};
    hid_t space = H5Screate_simple(train_rank, dims, NULL);
    hid_t dataset = H5Dcreate2(file, "/train", train_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_geq(H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, train), 0);
    H5Dclose(dataset);
    if (with_val) {
        dataset = H5Dcreate2(file, "/val", train_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        cr_assert_geq(H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, train), 0);
        H5Dclose(dataset);
    }
    H5Sclose(space);
    cr_assert_eq(h5_close(file, path), DT_OK);
}

/* Out-of-range ids are found when the file is opened (every token is scanned
 * once there), naming the file and the value; uint16 and uint32 storage alike,
 * and a uint32 beyond INT32_MAX too. */
Test(data_tokens, token_at_or_above_vocab_is_an_open_error) {
    int32_t train[6] = {1, 2, 3, 300, 4, 255};
    int32_t out[6];
    const char *path = temp_path("big_token.h5");
    craft_file(path, H5T_STD_U16LE, 1, train, 6, 1);
    data_tokens tokens;
    cr_assert_eq(data_tokens_open(&tokens, path), DT_ERR, "a token 300 >= 256 was accepted");
    cr_assert(strstr(dt_error_message(), path) != NULL, "%s", dt_error_message());
    cr_assert(strstr(dt_error_message(), "300") != NULL, "%s", dt_error_message());

    const char *wide = temp_path("wide.h5");
    craft_file(wide, H5T_STD_U32LE, 1, train, 6, 1);
    cr_assert_eq(data_tokens_open(&tokens, wide), DT_ERR, "a uint32 token 300 >= 256 was accepted");
    cr_assert(strstr(dt_error_message(), "300") != NULL, "%s", dt_error_message());
    const int32_t huge[3] = {1, 2, 0};
    uint32_t beyond_int32 = 3000000000u;
    const char *huge_path = temp_path("huge.h5");
    craft_file(huge_path, H5T_STD_U32LE, 1, huge, 3, 1);
    hid_t file;
    cr_assert_eq(h5_open(huge_path, 1, &file), DT_OK);
    hid_t dataset = H5Dopen2(file, "/train", H5P_DEFAULT);
    hsize_t offset[1] = {2}, one[1] = {1};
    hid_t file_space = H5Dget_space(dataset), memory_space = H5Screate_simple(1, one, NULL);
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, NULL, one, NULL);
    cr_assert_geq(H5Dwrite(dataset, H5T_NATIVE_UINT32, memory_space, file_space, H5P_DEFAULT, &beyond_int32), 0);
    H5Sclose(memory_space);
    H5Sclose(file_space);
    H5Dclose(dataset);
    h5_close(file, huge_path);
    cr_assert_eq(data_tokens_open(&tokens, huge_path), DT_ERR);
    cr_assert(strstr(dt_error_message(), "3000000000") != NULL, "%s", dt_error_message());

    /* uint32 storage of in-range tokens reads. */
    const int32_t good[3] = {1, 2, 3};
    craft_file(wide, H5T_STD_U32LE, 1, good, 3, 1);
    cr_assert_eq(data_tokens_open(&tokens, wide), DT_OK, "%s", dt_error_message());
    cr_assert_eq(tokens.split_token_size[SPLIT_VAL], 4);
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_VAL, 0, 3, out), DT_OK);
    cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 3);
    data_tokens_close(&tokens);

    /* uint8 storage (never written by us) still reads. */
    const char *narrow = temp_path("narrow.h5");
    craft_file(narrow, H5T_STD_U8LE, 1, train, 3, 1);
    cr_assert_eq(data_tokens_open(&tokens, narrow), DT_OK, "%s", dt_error_message());
    cr_assert_eq(data_tokens_read(&tokens, SPLIT_TRAIN, 0, 3, out), DT_OK, "%s", dt_error_message());
    cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 3);
    data_tokens_close(&tokens);
}

Test(data_tokens, malformed_splits_are_errors) {
    int32_t train[4] = {1, 2, 3, 4};
    data_tokens tokens;
    const char *no_val = temp_path("no_val.h5");
    craft_file(no_val, H5T_STD_U16LE, 1, train, 4, 0);
    cr_assert_eq(data_tokens_open(&tokens, no_val), DT_ERR);
    cr_assert(strstr(dt_error_message(), "/val") != NULL, "%s", dt_error_message());

    const char *rank2 = temp_path("rank2.h5");
    craft_file(rank2, H5T_STD_U16LE, 2, train, 4, 1);
    cr_assert_eq(data_tokens_open(&tokens, rank2), DT_ERR);
    cr_assert(strstr(dt_error_message(), "rank") != NULL, "%s", dt_error_message());

    const char *floats = temp_path("floats.h5");
    craft_file(floats, H5T_IEEE_F32LE, 1, train, 4, 1);
    cr_assert_eq(data_tokens_open(&tokens, floats), DT_ERR);
    cr_assert(strstr(dt_error_message(), "unsigned") != NULL, "%s", dt_error_message());

    /* vocab_size disagreeing with the tokenizer. */
    const char *wrong_vocab = temp_path("wrong_vocab.h5");
    craft_file(wrong_vocab, H5T_STD_U16LE, 1, train, 4, 1);
    hid_t file;
    cr_assert_eq(h5_open(wrong_vocab, 1, &file), DT_OK);
    h5_write_attr_int(file, "vocab_size", 300);
    h5_close(file, wrong_vocab);
    cr_assert_eq(data_tokens_open(&tokens, wrong_vocab), DT_ERR);
    cr_assert(strstr(dt_error_message(), "300") != NULL, "%s", dt_error_message());
}

Test(data_tokens, truncated_file_is_an_error) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    int32_t *train = random_tokens(3, 50000, 256);
    const char *path = temp_path("whole.h5");
    cr_assert_eq(data_tokens_write(path, &tok, train, 50000, train, 1000, "x"), DT_OK);
    struct stat info;
    cr_assert_eq(stat(path, &info), 0);
    /* Cut at several points: inside the data, and inside the metadata at the start. */
    const double fractions[] = {0.9, 0.5, 0.1, 0.001};
    for (int k = 0; k < 4; k++) {
        const char *cut = temp_path("cut.h5");
        char command[600];
        snprintf(command, sizeof command, "head -c %lld '%s' > '%s'", (long long)(info.st_size * fractions[k]), path,
                 cut);
        cr_assert_eq(system(command), 0);
        data_tokens tokens;
        dt_status status = data_tokens_open(&tokens, cut);
        if (status == DT_OK) { /* if the metadata survived, reading the lost data must fail */
            int32_t *out = malloc(50000 * sizeof *out);
            status = data_tokens_read(&tokens, SPLIT_TRAIN, 0, 50000, out);
            if (status == DT_OK) status = data_tokens_read(&tokens, SPLIT_VAL, 0, 1000, out);
            free(out);
            data_tokens_close(&tokens);
        }
        cr_assert_eq(status, DT_ERR, "a file cut to %.1f%% was accepted", 100 * fractions[k]);
        cr_assert(strstr(dt_error_message(), cut) != NULL, "%s", dt_error_message());
        cr_assert(strchr(dt_error_message(), '\n') == NULL, "one-line message");
    }
    free(train);
    data_tokenizer_free(&tok);
}
