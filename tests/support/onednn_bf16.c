/* The oneDNN bf16 engine's availability for the tests (onednn_bf16.h). */
#include "support/onednn_bf16.h"

#include <criterion/criterion.h>
#include <string.h>

#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"

void test_require_onednn_bf16(void) {
    const int available = strcmp(k_bf16_gemm_onednn_kernel(), "unavailable") != 0;
    if (!available && k_isa_supported() < K_ISA_AVX512)
        cr_skip_test("oneDNN builds no bf16 matmul on this CPU (up to %s): the widen engine's tests cover it",
                     k_isa_name(k_isa_supported()));
    cr_assert(available, "oneDNN builds no bf16 matmul on an AVX-512 CPU");
}
