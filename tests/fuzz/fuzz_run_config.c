/* libFuzzer harness: the INI run-config reader (train/run_config.c, with the
 * [model] keys of models/config.c) on arbitrary text. Oracles: no crash or UB
 * (ASan + UBSan), a refusal is one line, and an accepted config validates or
 * is refused in one line, and formats back to text. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_input.h"
#include "train/run_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    char *text = fuzz_rest(&in);
    train_config cfg = train_config_default();
    if (train_config_parse_string(&cfg, text, "fuzz.ini") != DT_OK) {
        fuzz_check_error();
    } else if (train_config_validate(&cfg) != DT_OK) {
        fuzz_check_error();
    } else {
        size_t length = train_config_format(&cfg, NULL, 0);
        char *formatted = malloc(length + 1);
        if (!formatted) abort();
        train_config_format(&cfg, formatted, length + 1);
        free(formatted);
    }
    free(text);
    return 0;
}
