/* A token id outside the vocabulary is found when the token file is opened
 * (issue 18, item 13), not late in a run when a window happens to hold it:
 * one line naming the file, the split and the index. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "support/scratch.h"

static char work_dir[64];

static void setup(void) { test_scratch_dir(work_dir, sizeof work_dir, "data_reliability"); }
static void teardown(void) { test_remove_dir(work_dir); }

TestSuite(data_reliability, .init = setup, .fini = teardown);

/* A valid byte-level file of n_train + n_val tokens, then token `bad` written at split[index]. */
static void write_with_bad_token(const char *path, const char *split, int64_t index, uint16_t bad) {
    enum { N_TRAIN = 3000000, N_VAL = 1000 }; /* more than one scan chunk of 2^20 */
    int32_t *tokens = malloc((N_TRAIN + N_VAL) * sizeof *tokens);
    for (int64_t i = 0; i < N_TRAIN + N_VAL; i++)
        tokens[i] = (int32_t)(i % 251);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(path, &tok, tokens, N_TRAIN, tokens + N_TRAIN, N_VAL, "counting"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);
    free(tokens);
    hid_t file;
    cr_assert_eq(h5_open(path, 1, &file), DT_OK, "%s", dt_error_message());
    hid_t dataset = H5Dopen2(file, split, H5P_DEFAULT);
    cr_assert(dataset >= 0);
    hid_t space = H5Dget_space(dataset);
    hsize_t offset[1] = {(hsize_t)index}, one[1] = {1};
    cr_assert(H5Sselect_hyperslab(space, H5S_SELECT_SET, offset, NULL, one, NULL) >= 0);
    hid_t memory = H5Screate_simple(1, one, NULL);
    cr_assert(H5Dwrite(dataset, H5T_NATIVE_UINT16, memory, space, H5P_DEFAULT, &bad) >= 0);
    H5Sclose(memory);
    H5Sclose(space);
    H5Dclose(dataset);
    cr_assert_eq(h5_close(file, path), DT_OK);
}

Test(data_reliability, out_of_range_token_is_found_at_open) {
    const struct {
        const char *split;
        int64_t index;
    } cases[] = {{"/train", 2500000}, {"/val", 999}, {"/train", 0}};
    for (int k = 0; k < 3; k++) {
        char path[160], where[64];
        snprintf(path, sizeof path, "%s/bad_%d.h5", work_dir, k);
        write_with_bad_token(path, cases[k].split, cases[k].index, 300);
        data_tokens tokens;
        cr_assert_eq(data_tokens_open(&tokens, path), DT_ERR, "%s[%lld] = 300 >= 256 was accepted at open",
                     cases[k].split, (long long)cases[k].index);
        const char *message = dt_error_message();
        snprintf(where, sizeof where, "%s[%lld]", cases[k].split, (long long)cases[k].index);
        cr_assert(strstr(message, path) && strstr(message, "token 300") && strstr(message, where), "%s", message);
        cr_assert(strchr(message, '\n') == NULL);
    }
}
