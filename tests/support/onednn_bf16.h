/* The oneDNN bf16 engine's availability, as the tests that run it need it.
 * oneDNN builds bf16 matmuls only from AVX-512 up (AVX512_BF16 and AMX run
 * them natively, plain AVX-512 emulates them); on an AVX2 CPU such as AMD
 * Zen 3 it has none, and the product widens instead. */
#ifndef TESTS_SUPPORT_ONEDNN_BF16_H
#define TESTS_SUPPORT_ONEDNN_BF16_H

/* Skips the calling test (cr_skip_test, with the reason) when the CPU is below
 * AVX-512 and oneDNN has no bf16 matmul for it; on an AVX-512 CPU a missing
 * engine is a failure, so the tests that need it can still fail there. */
void test_require_onednn_bf16(void);

#endif
