/* libFuzzer harness: the model loader (model_read_h5, what eval, generate,
 * bench decode, train --resume and check-reference read) on a file built
 * from the input: every /config key with a value drawn from the input (a
 * plausible one or an extreme one, sometimes of the wrong type or missing),
 * and /params written from the model that config describes with fuzzed
 * damage (a missing, reshaped, retyped, extra or non-finite tensor). Oracles:
 * no crash or UB, no allocation beyond the budget (DBRANCH_MEMORY_LIMIT is
 * set to 256 MiB, and libFuzzer's -rss_limit_mb catches the rest), a refusal
 * is one line, and a model that loads has finite weights. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/h5.h"
#include "fuzz_input.h"
#include "models/model.h"
#include "models/model_budget.h"
#include "models/model_io.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    setenv("DBRANCH_MEMORY_LIMIT", "268435456", 1);
    return 0;
}

static void write_config(hid_t config, fuzz_input *in, model_config *plausible) {
    model_config base = model_config_default((model_family)(fuzz_u8(in) % 3));
    for (int i = 0; i < model_config_key_count(); i++) {
        const char *key = model_config_key(i);
        char text[64];
        model_config_get(&base, key, text, sizeof text);
        uint8_t how = fuzz_u8(in);
        if (how % 29 == 0) continue; /* missing */
        switch (model_config_key_kind(i)) {
        case MODEL_KEY_INT: {
            int64_t value = strtoll(text, NULL, 10);
            if (!strcmp(key, "vocab_size") || !strcmp(key, "block_size")) value = 8 + fuzz_u8(in) % 64;
            if (!strcmp(key, "d_model")) value = 4 * (1 + fuzz_u8(in) % 8);
            if (!strcmp(key, "n_layer")) value = 1 + fuzz_u8(in) % 3;
            if (!strcmp(key, "n_head") || !strcmp(key, "n_kv_head")) value = 1 << (fuzz_u8(in) % 3);
            if (!strcmp(key, "d_ff")) value = value ? 4 * (1 + fuzz_u8(in) % 16) : 0;
            if (how % 17 == 0) value = fuzz_int(in); /* anything */
            if (how % 31 == 0)
                h5_write_attr_double(config, key, fuzz_double(in));
            else
                h5_write_attr_int(config, key, value);
            snprintf(text, sizeof text, "%lld", (long long)value);
            break;
        }
        case MODEL_KEY_REAL:
            if (how % 5 == 0) snprintf(text, sizeof text, "%.17g", fuzz_double(in));
            h5_write_attr_double(config, key, strtod(text, NULL));
            break;
        case MODEL_KEY_WORD:
            if (how % 19 == 0) snprintf(text, sizeof text, "%c", 'a' + fuzz_u8(in) % 26);
            h5_write_attr_string(config, key, text);
            break;
        }
        model_config_set(&base, key, text); /* may fail: then the file is not plausible either */
    }
    *plausible = base;
}

static void write_params(hid_t file, fuzz_input *in, const model_config *plausible) {
    hid_t params;
    if (h5_group(file, "params", &params) != DT_OK) return;
    model m;
    model_config c = *plausible;
    /* Small models only: the harness itself must not be the one allocating gigabytes. */
    if (model_config_param_count(&c) <= 2e5 && model_budget_bytes(&c, MODEL_USE_WEIGHTS, 1, 0, 0) <= 64e6 &&
        model_create(&m, &c) == DT_OK) {
        for (int i = 0; i < m.n_params; i++) {
            dt_tensor *t = m.params[i].tensor;
            float *x = dt_f32(t);
            for (int64_t j = 0; j < t->size; j++)
                x[j] = (float)((int)(j % 7) - 3) * 0.01f;
            uint8_t how = fuzz_u8(in);
            if (how % 41 == 0) continue; /* missing */
            int64_t shape[4];
            for (int d = 0; d < t->ndim; d++)
                shape[d] = t->shape[d];
            if (how % 37 == 0) x[fuzz_u64(in, 2) % t->size] = (how & 64) ? NAN : -INFINITY;
            if (how % 43 == 0 && t->size > 1) shape[0] = t->shape[0] - 1;
            if (how % 47 == 0)
                h5_write_i32(params, m.params[i].name, (const int32_t *)x, t->ndim, shape);
            else
                h5_write_f32(params, m.params[i].name, x, t->ndim, shape);
        }
        if (fuzz_u8(in) % 23 == 0) h5_write_f32(params, "extra.weight", (const float[]){0}, 1, (const int64_t[]){1});
        model_free(&m);
    }
    H5Gclose(params);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    hid_t file = fuzz_memory_file();
    uint8_t header = fuzz_u8(&in);
    if (header % 13) h5_write_attr_string(file, "format", "dbranch-checkpoint");
    h5_write_attr_int(file, "format_version", header % 17 ? 1 : fuzz_int(&in));
    hid_t config;
    model_config plausible = model_config_default(FAMILY_NANOGPT);
    if (h5_group(file, "config", &config) == DT_OK) {
        write_config(config, &in, &plausible);
        H5Gclose(config);
    }
    write_params(file, &in, &plausible);
    model m;
    if (model_check_format_h5(file, "fuzz-model.h5") != DT_OK || model_read_h5(&m, file, "fuzz-model.h5") != DT_OK) {
        fuzz_check_error();
    } else {
        for (int i = 0; i < m.n_params; i++) {
            const dt_tensor *t = m.params[i].tensor;
            for (int64_t j = 0; j < t->size; j++)
                if (!isfinite(dt_f32(t)[j])) abort();
        }
        model_free(&m);
    }
    H5Fclose(file);
    return 0;
}
