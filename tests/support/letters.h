/* A token file of random letters for the tests that train or evaluate a tiny
 * model: byte tokenizer, /train and /val of seeded uniform draws from the
 * first n_letters letters (learnable, cheap). Fails the calling test
 * (cr_assert) with the library's message when it cannot write the file. */
#ifndef TESTS_SUPPORT_LETTERS_H
#define TESTS_SUPPORT_LETTERS_H

#include <stdint.h>

void test_write_letters(const char *path, uint64_t seed, int n_letters, int64_t n_train, int64_t n_val);

#endif
