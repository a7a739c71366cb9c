/* libFuzzer harness: the tokenizer loader (data_tokenizer_read_h5) on a file
 * built from the input: the kind and vocab_size attributes and a
 * /tokenizer/merges dataset of fuzzed shape, type and contents (the input
 * drives the values; HDF5's own parser of the container is not ours to fuzz).
 * Oracles: no crash or UB, a refusal is one line, and a tokenizer that loads
 * decodes what it encodes back to the same bytes. */
#include <stddef.h>
#include <stdint.h>

#include "core/h5.h"
#include "data/tokenizer.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    hid_t file = fuzz_memory_file();
    static const char *const kinds[] = {"bpe", "byte", "", "BPE", "bpe\n"};
    uint8_t choice = fuzz_u8(&in);
    if (choice % 7 != 6) h5_write_attr_string(file, "tokenizer", kinds[choice % 5]);
    int64_t vocab_size = 256 + (int64_t)fuzz_u64(&in, 1);
    if (fuzz_u8(&in) % 8 == 0) vocab_size = fuzz_int(&in);
    if (fuzz_u8(&in) % 4 == 0)
        h5_write_attr_double(file, "vocab_size", fuzz_double(&in));
    else
        h5_write_attr_int(file, "vocab_size", vocab_size);
    /* The merges a valid file of this vocab_size has (computed without overflow for extreme values). */
    int64_t rows = vocab_size >= 256 && vocab_size <= 256 + 4096 ? vocab_size - 256 : 0, cols = 2;
    uint8_t shape = fuzz_u8(&in);
    if (shape % 5 == 0) rows = (int64_t)fuzz_u64(&in, 1);
    if (shape % 7 == 0) cols = fuzz_u8(&in) % 4;
    if (rows >= 0 && rows <= 4096 && cols >= 0 && cols <= 4) {
        int32_t *merges = calloc((size_t)(rows * cols + 1), sizeof *merges);
        if (!merges) abort();
        for (int64_t i = 0; i < rows * cols; i++) {
            uint8_t how = fuzz_u8(&in);
            /* Mostly earlier ids (a plausible merge list), sometimes anything. */
            merges[i] = how % 16 == 0 ? (int32_t)fuzz_int(&in) : (int32_t)(fuzz_u64(&in, 2) % (256 + i / 2 + 1));
        }
        if (shape % 11 == 0)
            h5_write_f32(file, "/tokenizer/merges", (const float *)merges, 2, (const int64_t[]){rows, cols});
        else
            h5_write_i32(file, "/tokenizer/merges", merges, 2, (const int64_t[]){rows, cols});
        free(merges);
    }
    data_tokenizer tok;
    if (data_tokenizer_read_h5(&tok, file, "fuzz-tokenizer.h5") != DT_OK) {
        fuzz_check_error();
    } else {
        /* What is left of the input is text to round-trip. */
        size_t n = in.size - in.at;
        const uint8_t *text = in.data + in.at;
        int32_t *tokens = NULL;
        int64_t n_tokens = 0;
        uint8_t *back = NULL;
        size_t n_back = 0;
        if (data_tokenizer_encode(&tok, text, n, &tokens, &n_tokens) != DT_OK) abort();
        for (int64_t i = 0; i < n_tokens; i++)
            if (tokens[i] < 0 || tokens[i] >= tok.vocab_size) abort();
        if (data_tokenizer_decode(&tok, tokens, n_tokens, &back, &n_back) != DT_OK) abort();
        if (n_back != n || memcmp(back, text, n) != 0) {
            fprintf(stderr, "fuzz: decode(encode(text)) != text (%zu bytes in, %zu out)\n", n, n_back);
            abort();
        }
        free(tokens);
        free(back);
        data_tokenizer_free(&tok);
    }
    H5Fclose(file);
    return 0;
}
