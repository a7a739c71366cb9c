/* See letters.h. */
#include "letters.h"

#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"

void test_write_letters(const char *path, uint64_t seed, int n_letters, int64_t n_train, int64_t n_val) {
    int32_t *tokens = malloc((size_t)(n_train + n_val) * sizeof *tokens);
    cr_assert_not_null(tokens);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n_train + n_val; i++)
        tokens[i] = 'a' + (int32_t)dt_rng_below(&rng, (uint64_t)n_letters);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(path, &tok, tokens, n_train, tokens + n_train, n_val, "letters"), DT_OK, "%s: %s",
                 path, dt_error_message());
    data_tokenizer_free(&tok);
    free(tokens);
}
