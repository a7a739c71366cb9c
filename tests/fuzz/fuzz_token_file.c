/* libFuzzer harness: the token file loader (data_tokens_open / _read) on a
 * file built from the input: format and tokenizer attributes, /train and /val
 * of fuzzed type (u8, u16, u32, i32, f32), rank, length and ids. Oracles: no
 * crash or UB, a refusal is one line, and a file that opens reads every
 * window without a range error (ids are checked once, at open). */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "core/h5.h"
#include "data/tokens.h"
#include "fuzz_input.h"

static void write_split(hid_t file, const char *name, fuzz_input *in) {
    uint8_t how = fuzz_u8(in);
    if (how % 13 == 0) return; /* missing */
    static const hid_t *const types[] = {&H5T_STD_U16LE_g, &H5T_STD_U32LE_g, &H5T_STD_U8LE_g, &H5T_STD_I32LE_g,
                                         &H5T_IEEE_F32LE_g};
    hid_t type = *types[how % 5 < 2 || how % 9 ? how % 2 : how % 5];
    int rank = how % 17 == 0 ? 2 : 1;
    hsize_t dims[2] = {(hsize_t)(fuzz_u64(in, 2) % 4096), 1 + (hsize_t)(fuzz_u8(in) % 3)};
    uint32_t *ids = calloc(dims[0] * dims[1] + 1, sizeof *ids);
    if (!ids) abort();
    for (hsize_t i = 0; i < dims[0] * dims[1]; i++) {
        uint8_t pick = fuzz_u8(in);
        ids[i] = pick % 32 == 0 ? (uint32_t)fuzz_u64(in, 4) : pick;
    }
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dataset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (dataset >= 0) {
        H5Dwrite(dataset, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
        H5Dclose(dataset);
    }
    H5Sclose(space);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    char path[64];
    snprintf(path, sizeof path, "/tmp/dbranch_fuzz_tokens_%d.h5", (int)getpid());
    hid_t file;
    if (h5_create(path, &file) != DT_OK) abort();
    uint8_t header = fuzz_u8(&in);
    if (header % 11) h5_write_attr_string(file, "format", header % 23 ? "dbranch-tokens" : "dbranch-checkpoint");
    if (header % 7) h5_write_attr_string(file, "tokenizer", "byte");
    h5_write_attr_int(file, "vocab_size", header % 5 ? 256 : fuzz_int(&in));
    h5_write_attr_string(file, "source", "fuzz");
    write_split(file, "/train", &in);
    write_split(file, "/val", &in);
    H5Fclose(file);

    data_tokens tokens;
    if (data_tokens_open(&tokens, path) != DT_OK) {
        fuzz_check_error();
    } else {
        int32_t window[64];
        for (int s = 0; s < 2; s++) {
            int64_t length = tokens.split_length[s];
            for (int64_t start = 0; start < length; start += 61) {
                int64_t count = length - start < 64 ? length - start : 64;
                if (data_tokens_read(&tokens, (data_split)s, start, count, window) != DT_OK) {
                    fprintf(stderr, "fuzz: a file that opened fails a read: %s\n", dt_error_message());
                    abort();
                }
                for (int64_t i = 0; i < count; i++)
                    if (window[i] < 0 || window[i] >= tokens.vocab_size) abort();
            }
        }
        data_tokens_close(&tokens);
    }
    unlink(path);
    return 0;
}
