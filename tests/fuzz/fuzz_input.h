/* Shared by the libFuzzer harnesses (tests/fuzz/README.md): a reader that
 * turns the fuzzer's bytes into the values a harness needs (running out of
 * input gives zeros, so every input is usable), HDF5 files built in memory,
 * and the one oracle every harness applies to a refused input: an error is
 * one non-empty line (the "clear errors" promise of docs/RELIABILITY.md). */
#ifndef TESTS_FUZZ_FUZZ_INPUT_H
#define TESTS_FUZZ_FUZZ_INPUT_H

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct {
    const uint8_t *data;
    size_t size, at;
} fuzz_input;

static inline uint8_t fuzz_u8(fuzz_input *in) { return in->at < in->size ? in->data[in->at++] : 0; }

static inline uint64_t fuzz_u64(fuzz_input *in, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | fuzz_u8(in);
    return v;
}

/* Mostly small values, sometimes extreme ones: where the bugs are. */
static inline int64_t fuzz_int(fuzz_input *in) {
    switch (fuzz_u8(in) % 8) {
    case 0:
        return -(int64_t)fuzz_u64(in, 1);
    case 1:
        return (int64_t)fuzz_u64(in, 8);
    case 2:
        return (int64_t)1 << (fuzz_u8(in) % 63);
    default:
        return (int64_t)fuzz_u64(in, 1);
    }
}

static inline double fuzz_double(fuzz_input *in) {
    uint64_t bits = fuzz_u64(in, 8);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* The rest of the input as a NUL-terminated string (caller frees). */
static inline char *fuzz_rest(fuzz_input *in) {
    size_t n = in->size - in->at;
    char *text = malloc(n + 1);
    if (!text) abort();
    memcpy(text, in->data + in->at, n);
    text[n] = '\0';
    in->at = in->size;
    return text;
}

/* An empty HDF5 file in memory (core driver, never written to disk). */
static inline hid_t fuzz_memory_file(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    hid_t file = H5Fcreate("fuzz-memory.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (file < 0) abort();
    return file;
}

/* A refused input must say why in one line. */
static inline void fuzz_check_error(void) {
    const char *message = dt_error_message();
    if (!message || !message[0] || strchr(message, '\n')) {
        fprintf(stderr, "fuzz: an error that is not one non-empty line: '%s'\n", message ? message : "(null)");
        abort();
    }
}

#endif
