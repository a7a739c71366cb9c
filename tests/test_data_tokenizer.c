/* Tokenizer tests: byte identity, decode(encode(x)) == x for arbitrary bytes,
 * BPE determinism, merges derived by hand, agreement with a naive BPE written
 * here from the documented rules (recounting every pair at every merge), the
 * pre-split boundaries, compression on the training text, and HDF5 storage. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "core/rng.h"
#include "data/tokenizer.h"

/* n random bytes; alphabet NULL means all 256 values. */
static uint8_t *random_bytes(dt_rng *rng, size_t n, const char *alphabet) {
    uint8_t *bytes = malloc(n + 1);
    size_t k = alphabet ? strlen(alphabet) : 256;
    for (size_t i = 0; i < n; i++)
        bytes[i] = alphabet ? (uint8_t)alphabet[dt_rng_below(rng, k)] : (uint8_t)dt_rng_below(rng, 256);
    return bytes;
}

/* English-ish training text: words from a small list, with punctuation, digits and newlines. */
static uint8_t *sample_text(dt_rng *rng, size_t n_words, size_t *n_bytes) {
    static const char *const words[] = {"the",   "and",    "of",     "LORD", "said",  "unto",    "him",   "them",
                                        "God",   "earth",  "shall",  "be",   "it",    "was",     "light", "day",
                                        "night", "waters", "heaven", "is",   "don't", "they're", "12",    "3:16",
                                        ",",     ".",      ";",      "\n",   "\n\n",  "  "};
    size_t n_choices = sizeof words / sizeof words[0], capacity = n_words * 10 + 16, used = 0;
    uint8_t *text = malloc(capacity);
    for (size_t w = 0; w < n_words; w++) {
        const char *word = words[dt_rng_below(rng, n_choices)];
        size_t length = strlen(word);
        if (used + length + 2 > capacity) break;
        if (w > 0 && word[0] != ',' && word[0] != '.' && word[0] != ';' && word[0] != '\n') text[used++] = ' ';
        memcpy(text + used, word, length);
        used += length;
    }
    *n_bytes = used;
    return text;
}

static void assert_round_trip(const data_tokenizer *tok, const uint8_t *bytes, size_t n) {
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    cr_assert_eq(data_tokenizer_encode(tok, bytes, n, &ids, &n_ids), DT_OK, "%s", dt_error_message());
    cr_assert_leq(n_ids, (int64_t)n);
    for (int64_t i = 0; i < n_ids; i++)
        cr_assert(ids[i] >= 0 && ids[i] < tok->vocab_size);
    uint8_t *back = NULL;
    size_t n_back = 0;
    cr_assert_eq(data_tokenizer_decode(tok, ids, n_ids, &back, &n_back), DT_OK, "%s", dt_error_message());
    cr_assert_eq(n_back, n, "decoded %zu bytes, expected %zu", n_back, n);
    cr_assert(n == 0 || memcmp(back, bytes, n) == 0, "decode(encode(x)) != x");
    cr_assert_eq(back[n_back], 0, "decode output is NUL-terminated");
    free(ids);
    free(back);
}

Test(data_tokenizer, byte_is_identity) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(tok.kind, TOKENIZER_BYTE);
    cr_assert_eq(tok.vocab_size, 256);
    dt_rng rng;
    dt_rng_seed(&rng, 1);
    uint8_t *bytes = random_bytes(&rng, 5000, NULL);
    bytes[0] = 0x00;
    bytes[1] = 0xFF;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, bytes, 5000, &ids, &n_ids), DT_OK);
    cr_assert_eq(n_ids, 5000);
    for (int i = 0; i < 5000; i++)
        cr_assert_eq(ids[i], bytes[i]);
    for (int b = 0; b < 256; b++)
        cr_assert(tok.token_length[b] == 1 && tok.token_bytes[b][0] == b);
    assert_round_trip(&tok, bytes, 5000);
    assert_round_trip(&tok, bytes, 0);
    free(ids);
    free(bytes);
    data_tokenizer_free(&tok);
}

Test(data_tokenizer, decode_rejects_ids_outside_vocab) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    int32_t bad[3] = {65, 256, 66};
    uint8_t *text = NULL;
    size_t n = 0;
    cr_assert_eq(data_tokenizer_decode(&tok, bad, 3, &text, &n), DT_ERR);
    cr_assert(strstr(dt_error_message(), "256") != NULL, "message names the id: %s", dt_error_message());
    int32_t negative[1] = {-1};
    cr_assert_eq(data_tokenizer_decode(&tok, negative, 1, &text, &n), DT_ERR);
    data_tokenizer_free(&tok);
}

/* The classic example (Wikipedia, "Byte pair encoding"), derived by hand:
 *   aaabdaaabac: pair counts aa 4 (overlapping), ab 2, others 1 -> merge 0 = (a,a) -> Z=256
 *   ZabdZabac:   Za 2, ab 2: tie, lowest left id a=97 < 256 -> merge 1 = (a,b) -> Y=257
 *   ZYdZYac:     ZY 2 -> merge 2 = (256,257) -> X=258, text XdXac
 *   XdXac:       all 1: (258,100) (100,258) (258,97) (97,99); lowest left 97 -> merge 3 = (a,c) -> 259
 *   XdX[ac]:     (258,100) (100,258) (258,259): lowest left 100 -> merge 4 = (d,X) -> 260
 *   X[dX][ac]:   (258,260) (260,259) -> merge 5 = (258,260) -> 261; then merge 6 = (261,259) -> 262
 * after which the text is one token and no pair is left. */
Test(data_tokenizer, bpe_classic_example_by_hand) {
    const char *text = "aaabdaaabac";
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 259), DT_OK, "%s",
                 dt_error_message());
    cr_assert_eq(tok.kind, TOKENIZER_BPE);
    cr_assert_eq(tok.vocab_size, 259);
    const int32_t expected3[3][2] = {{97, 97}, {97, 98}, {256, 257}};
    for (int i = 0; i < 3; i++)
        cr_assert(tok.merges[i][0] == expected3[i][0] && tok.merges[i][1] == expected3[i][1], "merge %d = (%d,%d)", i,
                  tok.merges[i][0], tok.merges[i][1]);
    cr_assert_eq(tok.token_length[258], 4); /* X = ZY = "aa" ++ "ab" */
    cr_assert(memcmp(tok.token_bytes[258], "aaab", 4) == 0);
    int32_t *ids = NULL;
    int64_t n = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, (const uint8_t *)text, strlen(text), &ids, &n), DT_OK);
    const int32_t expected_ids[5] = {258, 'd', 258, 'a', 'c'}; /* XdXac */
    cr_assert_eq(n, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ids[i], expected_ids[i], "token %d = %d", i, ids[i]);
    free(ids);
    data_tokenizer_free(&tok);

    /* Asking for more than the text supports stops after the 7 merges above. */
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 1000), DT_OK);
    cr_assert_eq(tok.vocab_size, 263);
    const int32_t expected7[7][2] = {{97, 97}, {97, 98}, {256, 257}, {97, 99}, {100, 258}, {258, 260}, {261, 259}};
    for (int i = 0; i < 7; i++)
        cr_assert(tok.merges[i][0] == expected7[i][0] && tok.merges[i][1] == expected7[i][1], "merge %d = (%d,%d)", i,
                  tok.merges[i][0], tok.merges[i][1]);
    cr_assert_eq(data_tokenizer_encode(&tok, (const uint8_t *)text, strlen(text), &ids, &n), DT_OK);
    cr_assert(n == 1 && ids[0] == 262);
    free(ids);
    data_tokenizer_free(&tok);
}

Test(data_tokenizer, bpe_rejects_bad_vocab) {
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)"abc", 3, 255), DT_ERR);
    cr_assert(strstr(dt_error_message(), "255") != NULL, "%s", dt_error_message());
}

Test(data_tokenizer, bpe_is_deterministic) {
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    size_t n = 0;
    uint8_t *text = sample_text(&rng, 20000, &n);
    uint8_t *copy = malloc(n);
    memcpy(copy, text, n);
    data_tokenizer a, b;
    cr_assert_eq(data_tokenizer_train_bpe(&a, text, n, 600), DT_OK, "%s", dt_error_message());
    cr_assert_eq(data_tokenizer_train_bpe(&b, copy, n, 600), DT_OK, "%s", dt_error_message());
    cr_assert_eq(a.vocab_size, b.vocab_size);
    cr_assert(memcmp(a.merges, b.merges, (size_t)(a.vocab_size - 256) * sizeof a.merges[0]) == 0,
              "two trainings gave different merges");
    data_tokenizer_free(&a);
    data_tokenizer_free(&b);
    free(text);
    free(copy);
}

Test(data_tokenizer, bpe_round_trips_arbitrary_bytes) {
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    size_t n = 0;
    uint8_t *text = sample_text(&rng, 5000, &n);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, text, n, 512), DT_OK, "%s", dt_error_message());
    const char *alphabet_for[4] = {NULL, "ab \n", NULL, "the and  \n\n'sx"};
    for (int kind = 0; kind < 4; kind++) {
        for (size_t length = 0; length < 300; length += 37) {
            uint8_t *bytes;
            if (kind == 2) { /* NUL and 0xFF and broken UTF-8: bytes picked from a 9-byte set by hand */
                static const uint8_t set[] = {0x00, 0xFF, 0xC3, 0xA9, 0x80, ' ', 'a', '\'', 0xE2};
                bytes = malloc(length + 1);
                for (size_t i = 0; i < length; i++)
                    bytes[i] = set[dt_rng_below(&rng, sizeof set)];
            } else {
                bytes = random_bytes(&rng, length, alphabet_for[kind]);
            }
            assert_round_trip(&tok, bytes, length);
            free(bytes);
        }
    }
    /* Long runs hit the chunk cap; a lone invalid continuation byte and a NUL. */
    uint8_t run[1000];
    memset(run, '=', sizeof run);
    assert_round_trip(&tok, run, sizeof run);
    memset(run, ' ', sizeof run);
    assert_round_trip(&tok, run, sizeof run);
    assert_round_trip(&tok, (const uint8_t *)"\x80", 1);
    assert_round_trip(&tok, (const uint8_t *)"\0", 1);
    assert_round_trip(&tok, text, n);
    data_tokenizer_free(&tok);
    free(text);
}

Test(data_tokenizer, bpe_compresses_its_training_text) {
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    size_t n = 0;
    uint8_t *text = sample_text(&rng, 20000, &n);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, text, n, 400), DT_OK);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, text, n, &ids, &n_ids), DT_OK);
    /* Whole words of this small vocabulary fit in 144 merges: expect well over 2 bytes per token. */
    cr_assert_lt((double)n_ids, 0.5 * (double)n, "%lld tokens for %zu bytes", (long long)n_ids, n);
    free(ids);
    data_tokenizer_free(&tok);
    free(text);
}

/* ---- A naive BPE from the documented rules, to check the incremental one. ---- */

static int naive_class(uint8_t c) { /* 0 whitespace, 1 letter, 2 digit, 3 other */
    if (c != 0 && strchr(" \t\n\r\v\f", c)) return 0;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return 1;
    if (c >= '0' && c <= '9') return 2;
    return 3;
}

/* Splits text into chunks: start offsets into starts[], returns the count. */
static size_t naive_split(const uint8_t *text, size_t n, size_t *starts) {
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    size_t count = 0, i = 0;
    while (i < n) {
        starts[count++] = i;
        size_t end = i;
        int matched = 0;
        for (int k = 0; k < 7 && !matched; k++) {
            size_t m = strlen(contractions[k]);
            if (i + m <= n && memcmp(text + i, contractions[k], m) == 0) {
                end = i + m;
                matched = 1;
            }
        }
        if (!matched) {
            size_t j = i;
            if (text[j] == ' ' && j + 1 < n && naive_class(text[j + 1]) != 0) j++;
            int cls = naive_class(text[j]);
            while (j < n && naive_class(text[j]) == cls)
                j++;
            if (cls == 0 && j < n && j - i > 1) j--; /* whitespace before a word: leave one byte */
            end = j;
        }
        if (end - i > 128) end = i + 128;
        i = end;
    }
    starts[count] = n;
    return count;
}

/* Merges left to right every occurrence of (a, b) in word[0..*n). */
static void naive_merge(int32_t *word, int *n, int32_t a, int32_t b, int32_t id) {
    int kept = 0;
    for (int i = 0; i < *n;) {
        if (i + 1 < *n && word[i] == a && word[i + 1] == b) {
            word[kept++] = id;
            i += 2;
        } else {
            word[kept++] = word[i++];
        }
    }
    *n = kept;
}

/* Trains both ways on text and compares merges and the final segmentation. */
static void check_against_naive(const uint8_t *text, size_t n, int target_vocab) {
    size_t *starts = malloc((n + 1) * sizeof *starts);
    size_t n_chunks = naive_split(text, n, starts);
    int32_t **words = malloc(n_chunks * sizeof *words);
    int *lengths = malloc(n_chunks * sizeof *lengths);
    for (size_t w = 0; w < n_chunks; w++) {
        lengths[w] = (int)(starts[w + 1] - starts[w]);
        words[w] = malloc((size_t)lengths[w] * sizeof **words);
        for (int k = 0; k < lengths[w]; k++)
            words[w][k] = text[starts[w] + (size_t)k];
    }
    int32_t(*naive_merges)[2] = malloc((size_t)target_vocab * sizeof *naive_merges);
    int n_naive = 0;
    int64_t *counts = malloc((size_t)target_vocab * target_vocab * sizeof *counts);
    for (int m = 0; m < target_vocab - 256; m++) {
        memset(counts, 0, (size_t)target_vocab * target_vocab * sizeof *counts);
        for (size_t w = 0; w < n_chunks; w++)
            for (int k = 0; k + 1 < lengths[w]; k++)
                counts[words[w][k] * target_vocab + words[w][k + 1]]++;
        int64_t best = 0;
        int best_a = -1, best_b = -1;
        for (int a = 0; a < target_vocab; a++) /* ascending scan + strict '>' = lowest pair wins ties */
            for (int b = 0; b < target_vocab; b++)
                if (counts[a * target_vocab + b] > best) {
                    best = counts[a * target_vocab + b];
                    best_a = a;
                    best_b = b;
                }
        if (best == 0) break;
        naive_merges[n_naive][0] = best_a;
        naive_merges[n_naive][1] = best_b;
        for (size_t w = 0; w < n_chunks; w++)
            naive_merge(words[w], &lengths[w], best_a, best_b, 256 + n_naive);
        n_naive++;
    }
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, text, n, target_vocab), DT_OK, "%s", dt_error_message());
    cr_assert_eq(tok.vocab_size, 256 + n_naive);
    for (int m = 0; m < n_naive; m++)
        cr_assert(tok.merges[m][0] == naive_merges[m][0] && tok.merges[m][1] == naive_merges[m][1],
                  "merge %d: got (%d,%d), naive (%d,%d)", m, tok.merges[m][0], tok.merges[m][1], naive_merges[m][0],
                  naive_merges[m][1]);
    /* Encoding the training text reproduces the naive final segmentation. */
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, text, n, &ids, &n_ids), DT_OK);
    int64_t cursor = 0;
    for (size_t w = 0; w < n_chunks; w++)
        for (int k = 0; k < lengths[w]; k++, cursor++) {
            cr_assert_lt(cursor, n_ids);
            cr_assert_eq(ids[cursor], words[w][k], "token %lld", (long long)cursor);
        }
    cr_assert_eq(cursor, n_ids);
    free(ids);
    data_tokenizer_free(&tok);
    for (size_t w = 0; w < n_chunks; w++)
        free(words[w]);
    free(words);
    free(lengths);
    free(starts);
    free(counts);
    free(naive_merges);
}

Test(data_tokenizer, bpe_matches_naive_recount) {
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    /* A small alphabet so pairs repeat and ties are frequent; spaces, digits, quotes, newlines, a UTF-8 lead byte. */
    uint8_t *text = random_bytes(&rng, 6000, "aab ba  c1'\n.s\xc3");
    check_against_naive(text, 6000, 256 + 120);
    free(text);
    /* All 256 byte values: mostly pairs seen once, so nearly every pick is a tie. */
    text = random_bytes(&rng, 3000, NULL);
    check_against_naive(text, 3000, 256 + 60);
    free(text);
    /* Runs longer than the 128-byte chunk cap, and overlapping pairs (aaa...). */
    size_t n = 0;
    text = malloc(8000);
    while (n < 7000) {
        size_t run = 1 + dt_rng_below(&rng, 300);
        uint8_t c = "ab="[dt_rng_below(&rng, 3)];
        for (size_t k = 0; k < run; k++)
            text[n++] = c;
        text[n++] = dt_rng_below(&rng, 2) ? ' ' : '\n';
    }
    check_against_naive(text, n, 256 + 100);
    free(text);
}

Test(data_tokenizer, bpe_merges_stay_inside_presplit_words) {
    const char *text = "the cat sat on the mat. the cat sat on the hat!! 1234 1234 don't don't\n\n  the end";
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, (const uint8_t *)text, strlen(text), 2000), DT_OK);
    for (int64_t id = 256; id < tok.vocab_size; id++) {
        const uint8_t *bytes = tok.token_bytes[id];
        int length = tok.token_length[id];
        /* A token is one class of bytes after at most one leading space (or whitespace only, or a contraction). */
        int start = bytes[0] == ' ' && length > 1 && bytes[1] != ' ' && bytes[1] != '\n' ? 1 : 0;
        int cls = naive_class(bytes[start]);
        int uniform = 1;
        for (int k = start; k < length; k++)
            uniform &= naive_class(bytes[k]) == cls;
        int contraction = bytes[0] == '\'' && length <= 3;
        cr_assert(uniform || contraction, "token %lld '%.*s' crosses a pre-split boundary", (long long)id, length,
                  bytes);
    }
    data_tokenizer_free(&tok);
}

Test(data_tokenizer, h5_round_trip) {
    char dir[] = "/tmp/dbranch_tok_XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/tok.h5", dir);
    dt_rng rng;
    dt_rng_seed(&rng, 9);
    size_t n = 0;
    uint8_t *text = sample_text(&rng, 3000, &n);
    data_tokenizer tok, back;
    cr_assert_eq(data_tokenizer_train_bpe(&tok, text, n, 300), DT_OK);
    hid_t file;
    cr_assert_eq(h5_create(path, &file), DT_OK);
    cr_assert_eq(data_tokenizer_write_h5(&tok, file), DT_OK, "%s", dt_error_message());
    cr_assert_eq(h5_close(file, path), DT_OK);
    cr_assert_eq(h5_open(path, 0, &file), DT_OK);
    cr_assert_eq(data_tokenizer_read_h5(&back, file, path), DT_OK, "%s", dt_error_message());
    H5Fclose(file);
    cr_assert_eq(back.kind, TOKENIZER_BPE);
    cr_assert_eq(back.vocab_size, tok.vocab_size);
    for (int64_t id = 0; id < tok.vocab_size; id++) {
        cr_assert_eq(back.token_length[id], tok.token_length[id]);
        cr_assert(memcmp(back.token_bytes[id], tok.token_bytes[id], (size_t)tok.token_length[id]) == 0);
    }
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    cr_assert_eq(data_tokenizer_encode(&tok, text, n, &a, &na), DT_OK);
    cr_assert_eq(data_tokenizer_encode(&back, text, n, &b, &nb), DT_OK);
    cr_assert(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0, "reloaded tokenizer encodes differently");
    free(a);
    free(b);
    data_tokenizer_free(&tok);
    data_tokenizer_free(&back);
    free(text);

    /* A merge that uses a token defined after it is rejected, naming the file. */
    cr_assert_eq(h5_create(path, &file), DT_OK);
    const int32_t bad[2][2] = {{97, 98}, {257, 97}};
    int64_t shape[2] = {2, 2};
    h5_write_attr_string(file, "tokenizer", "bpe");
    h5_write_attr_int(file, "vocab_size", 258);
    h5_write_i32(file, "/tokenizer/merges", &bad[0][0], 2, shape);
    h5_close(file, path);
    cr_assert_eq(h5_open(path, 0, &file), DT_OK);
    cr_assert_eq(data_tokenizer_read_h5(&back, file, path), DT_ERR);
    H5Fclose(file);
    cr_assert(strstr(dt_error_message(), path) != NULL, "%s", dt_error_message());
    unlink(path);
    rmdir(dir);
}
