/* Linked into every test program (CMakeLists.txt): applies DBRANCH_ISA
 * before Criterion starts, as the CLI does at its start, so ctest can run a
 * suite again with the kernels forced down to AVX2 or portable C (the
 * *_isa_avx2 and *_isa_scalar entries). A level this CPU lacks, or an
 * unknown word, stops the program with the error: never a silent run at
 * another level. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/isa.h"

__attribute__((constructor)) static void apply_isa_level_from_environment(void) {
    if (k_isa_from_environment() != DT_OK) {
        fprintf(stderr, "%s\n", dt_error_message());
        exit(2);
    }
}
