/* Training configuration: the [data]/[train] key table generated from
 * train/run_config_keys.def (defaults, parsing, ranges, the INI text, the
 * stored form of checkpoints), --set overrides and validation. Files are read
 * by the one config-file reader (models/config_file.h); the [model] keys are
 * the models layer's (model_config_set / model_config_get). */
#include "train/run_config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "models/config_file.h"
#include "models/config_value.h"

typedef enum {
    VALUE_INT,
    VALUE_REAL,
    VALUE_PATH,
    VALUE_SCHEDULE,
    VALUE_OPTIMIZER,
    VALUE_REDUCE,
    VALUE_PASS_MIX,
    VALUE_PRECISION,
    VALUE_ATTENTION
} value_kind;

typedef struct {
    const char *section;
    const char *name;
    const char *full_name; /* "section.name" */
    value_kind kind;
    const char *default_text;
    config_range range;
    const char *help;
    size_t offset;
} config_key;

#define RUN_KEY(section, name, field, kind, default_text, range, help)                                                 \
    {#section, #name, #section "." #name, VALUE_##kind, default_text, {range}, help, offsetof(train_config, field)},
static const config_key config_keys[] = {
#include "train/run_config_keys.def"
};
#undef RUN_KEY
static const int n_config_keys = (int)(sizeof config_keys / sizeof config_keys[0]);

static dt_status set_value(train_config *cfg, const config_key *k, const char *text);

train_config train_config_default(void) {
    train_config c;
    memset(&c, 0, sizeof c);
    c.model = model_config_default(FAMILY_NANOGPT);
    for (int i = 0; i < n_config_keys; i++)
        set_value(&c, &config_keys[i], config_keys[i].default_text); /* the defaults parse (tests) */
    return c;
}

/* ---- values ---- */

/* "K:weight,..." (or "K") -> mix; errors name the key and the bad entry. */
static dt_status parse_pass_mix(const char *key, const char *text, train_pass_mix *out) {
    train_pass_mix mix;
    memset(&mix, 0, sizeof mix);
    const char *at = text;
    double total = 0.0;
    if (!*text) return dt_errorf("%s is empty (K:weight,..., e.g. 1:0.75,2:0.25)", key);
    while (*at) {
        if (mix.n == TRAIN_PASS_MIX_MAX)
            return dt_errorf("%s = '%s': more than %d entries", key, text, TRAIN_PASS_MIX_MAX);
        char *end = NULL;
        errno = 0;
        const long long passes = strtoll(at, &end, 10);
        if (end == at || errno || passes < 1 || passes > TRAIN_MAX_PASSES)
            return dt_errorf("%s = '%s': passes must be integers in 1..%d", key, text, TRAIN_MAX_PASSES);
        double weight = 1.0;
        if (*end == ':') {
            const char *w = end + 1;
            weight = strtod(w, &end);
            if (end == w || !isfinite(weight) || weight <= 0.0)
                return dt_errorf("%s = '%s': weights must be positive numbers", key, text);
        }
        if (*end && *end != ',') return dt_errorf("%s = '%s': expected K:weight,... (e.g. 1:0.75,2:0.25)", key, text);
        for (int i = 0; i < mix.n; i++)
            if (mix.passes[i] == passes) return dt_errorf("%s = '%s': K = %lld appears twice", key, text, passes);
        mix.passes[mix.n] = passes;
        mix.weight[mix.n++] = weight;
        total += weight;
        at = *end ? end + 1 : end;
        if (*end && !*at) return dt_errorf("%s = '%s': trailing comma", key, text);
    }
    if (fabs(total - 1.0) > 1e-6) return dt_errorf("%s = '%s': the weights sum to %g, not 1", key, text, total);
    *out = mix;
    return DT_OK;
}

int64_t train_pass_mix_max(const train_pass_mix *mix) {
    int64_t largest = 1;
    for (int i = 0; i < mix->n; i++)
        largest = mix->passes[i] > largest ? mix->passes[i] : largest;
    return largest;
}

const char *train_bf16_attention_name(train_bf16_attention choice) {
    switch (choice) {
    case TRAIN_BF16_ATTENTION_AMX:
        return "amx";
    case TRAIN_BF16_ATTENTION_AVX512_BF16:
        return "avx512_bf16";
    case TRAIN_BF16_ATTENTION_FP32:
        return "fp32";
    default:
        return "auto";
    }
}

/* The engine the key pins (auto: none, reported as fp32 by the caller's rule). */
static k_bf16_attention_engine pinned_engine(train_bf16_attention choice) {
    return choice == TRAIN_BF16_ATTENTION_AMX           ? K_BF16_ATTENTION_AMX
           : choice == TRAIN_BF16_ATTENTION_AVX512_BF16 ? K_BF16_ATTENTION_AVX512_BF16
                                                        : K_BF16_ATTENTION_FP32;
}

k_bf16_attention_engine train_bf16_attention_engine(const train_config *c) {
    if (c->precision != TRAIN_PRECISION_BF16) return K_BF16_ATTENTION_FP32;
    if (c->bf16_attention == TRAIN_BF16_ATTENTION_AUTO) return k_bf16_attention_active();
    const k_bf16_attention_engine engine = pinned_engine(c->bf16_attention);
    return k_bf16_attention_available(engine) ? engine : K_BF16_ATTENTION_FP32;
}

dt_status train_bf16_attention_check(const train_config *c) {
    if (c->precision != TRAIN_PRECISION_BF16) return DT_OK;
    if (c->bf16_attention == TRAIN_BF16_ATTENTION_AMX && !k_attention_amx_available())
        return dt_errorf("train.bf16_attention = amx: this CPU (or kernel) has no AMX-BF16 tiles (auto or fp32 run "
                         "everywhere)");
    if (c->bf16_attention == TRAIN_BF16_ATTENTION_AVX512_BF16 && !k_attention_avx512_bf16_available())
        return dt_errorf("train.bf16_attention = avx512_bf16: this CPU has no AVX512_BF16, or DBRANCH_ISA forces a "
                         "level below AVX-512 (auto or fp32 run everywhere)");
    return DT_OK;
}

const char *train_precision_name(train_precision precision) {
    return precision == TRAIN_PRECISION_BF16 ? "bf16" : precision == TRAIN_PRECISION_AUTO ? "auto" : "fp32";
}

train_precision train_precision_auto(const char **why) {
    const char *unused;
    if (!why) why = &unused;
    const k_cpu_bf16 cpu = k_cpu_bf16_features();
    /* The widen engine (no bf16 units) would be bf16's numerics below
     * float32's speed: not a default. Nor is oneDNN on a vdpbf16ps no faster
     * than float32 FMA (an Intel without AMX: a nanogpt twin step 1.47x
     * float32's, DECISIONS). */
    if (k_bf16_gemm_default() != K_BF16_GEMM_ONEDNN) return *why = "no bf16 units", TRAIN_PRECISION_FP32;
    if (k_isa_active() < K_ISA_AVX512) return *why = "DBRANCH_ISA forces a level below AVX-512", TRAIN_PRECISION_FP32;
    if (cpu.amx_bf16) return *why = "AMX tiles", TRAIN_PRECISION_BF16;
    if (cpu.bf16_dot_doubles_fma) return *why = "vdpbf16ps at twice the float32 FMA rate", TRAIN_PRECISION_BF16;
    return *why = "this vdpbf16ps is no faster than float32 FMA: bf16 would only add roundings", TRAIN_PRECISION_FP32;
}

int64_t train_pass_mix_pick(const train_pass_mix *mix, double r) {
    double cumulative = 0.0;
    for (int i = 0; i < mix->n; i++) {
        cumulative += mix->weight[i];
        if (r < cumulative) return mix->passes[i];
    }
    return mix->n > 0 ? mix->passes[mix->n - 1] : 1; /* r above a sum rounded below 1 */
}

/* text is already trimmed (or stored verbatim). */
static dt_status set_value(train_config *cfg, const config_key *k, const char *text) {
    void *field = (char *)cfg + k->offset;
    switch (k->kind) {
    case VALUE_INT:
        return config_parse_int(k->full_name, text, 1, field);
    case VALUE_REAL:
        return config_parse_real(k->full_name, text, field);
    case VALUE_PATH:
        if (strlen(text) >= TRAIN_PATH_MAX)
            return dt_errorf("%s: path longer than %d bytes", k->full_name, TRAIN_PATH_MAX - 1);
        memcpy(field, text, strlen(text) + 1);
        return DT_OK;
    case VALUE_SCHEDULE:
        if (optim_schedule_parse(text, field) != DT_OK) return dt_error_context("%s", k->full_name);
        return DT_OK;
    case VALUE_OPTIMIZER:
        if (!strcmp(text, "adamw"))
            *(optim_kind *)field = OPTIM_ADAMW;
        else if (!strcmp(text, "muon"))
            *(optim_kind *)field = OPTIM_MUON;
        else
            return dt_errorf("%s = '%s' must be adamw|muon", k->full_name, text);
        return DT_OK;
    case VALUE_REDUCE:
        if (dt_comm_reduce_parse(text, field) != DT_OK)
            return dt_errorf("%s = '%s' must be ordered|fast", k->full_name, text);
        return DT_OK;
    case VALUE_PASS_MIX:
        return parse_pass_mix(k->full_name, text, field);
    case VALUE_PRECISION:
        if (!strcmp(text, "auto"))
            *(train_precision *)field = TRAIN_PRECISION_AUTO;
        else if (!strcmp(text, "fp32"))
            *(train_precision *)field = TRAIN_PRECISION_FP32;
        else if (!strcmp(text, "bf16"))
            *(train_precision *)field = TRAIN_PRECISION_BF16;
        else
            return dt_errorf("%s = '%s' must be auto|fp32|bf16", k->full_name, text);
        return DT_OK;
    case VALUE_ATTENTION:
        if (!strcmp(text, "auto"))
            *(train_bf16_attention *)field = TRAIN_BF16_ATTENTION_AUTO;
        else if (!strcmp(text, "amx"))
            *(train_bf16_attention *)field = TRAIN_BF16_ATTENTION_AMX;
        else if (!strcmp(text, "avx512_bf16"))
            *(train_bf16_attention *)field = TRAIN_BF16_ATTENTION_AVX512_BF16;
        else if (!strcmp(text, "fp32"))
            *(train_bf16_attention *)field = TRAIN_BF16_ATTENTION_FP32;
        else
            return dt_errorf("%s = '%s' must be auto|amx|avx512_bf16|fp32", k->full_name, text);
        return DT_OK;
    }
    return DT_ERR;
}

static void get_value(const train_config *cfg, const config_key *k, char *text, size_t capacity) {
    const void *field = (const char *)cfg + k->offset;
    switch (k->kind) {
    case VALUE_INT:
        snprintf(text, capacity, "%lld", (long long)*(const int64_t *)field);
        break;
    case VALUE_REAL:
        config_format_real(*(const double *)field, text, (int)capacity);
        break;
    case VALUE_PATH:
        snprintf(text, capacity, "%s", (const char *)field);
        break;
    case VALUE_SCHEDULE:
        snprintf(text, capacity, "%s", optim_schedule_name(*(const optim_schedule_kind *)field));
        break;
    case VALUE_OPTIMIZER:
        snprintf(text, capacity, "%s", optim_kind_name(*(const optim_kind *)field));
        break;
    case VALUE_REDUCE:
        snprintf(text, capacity, "%s", dt_comm_reduce_name(*(const dt_comm_reduce *)field));
        break;
    case VALUE_PRECISION:
        snprintf(text, capacity, "%s", train_precision_name(*(const train_precision *)field));
        break;
    case VALUE_ATTENTION:
        snprintf(text, capacity, "%s", train_bf16_attention_name(*(const train_bf16_attention *)field));
        break;
    case VALUE_PASS_MIX: {
        const train_pass_mix *mix = field;
        size_t used = 0;
        if (capacity) text[0] = '\0';
        for (int i = 0; i < mix->n && used < capacity; i++) {
            char weight[40];
            config_format_real(mix->weight[i], weight, (int)sizeof weight);
            int n =
                snprintf(text + used, capacity - used, "%s%lld:%s", i ? "," : "", (long long)mix->passes[i], weight);
            if (n > 0) used += (size_t)n;
        }
        break;
    }
    }
}

void train_config_key_describe(int index, char *text, int capacity) {
    if (index < 0 || index >= n_config_keys) {
        snprintf(text, (size_t)capacity, "?");
        return;
    }
    const config_key *k = &config_keys[index];
    /* what each kind accepts, as the parser reads it */
    static const char *const accepted[] = {
        [VALUE_INT] = "integer",
        [VALUE_REAL] = "real",
        [VALUE_PATH] = "path",
        [VALUE_SCHEDULE] = "cosine|linear|wsd|constant",
        [VALUE_OPTIMIZER] = "adamw|muon",
        [VALUE_REDUCE] = "ordered|fast",
        [VALUE_PASS_MIX] = "K or K:weight,...",
        [VALUE_PRECISION] = "auto|fp32|bf16",
        [VALUE_ATTENTION] = "auto|amx|avx512_bf16|fp32",
    };
    char values[96];
    snprintf(values, sizeof values, "%s", accepted[k->kind]);
    if ((k->kind == VALUE_INT || k->kind == VALUE_REAL) && config_range_is_set(&k->range)) {
        snprintf(values + strlen(values), sizeof values - strlen(values), " in ");
        config_range_format(&k->range, values + strlen(values), (int)(sizeof values - strlen(values)));
    }
    snprintf(text, (size_t)capacity, "%-24s %s; default '%s': %s", k->full_name, values, k->default_text, k->help);
}

static const config_key *find_key(const char *section, const char *name) {
    for (int i = 0; i < n_config_keys; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].name, name)) return &config_keys[i];
    return NULL;
}

static int known_section(const char *section) {
    return !strcmp(section, "model") || !strcmp(section, "data") || !strcmp(section, "train");
}

dt_status train_config_set_key(train_config *cfg, const char *section, const char *key, const char *value) {
    if (!known_section(section)) return dt_errorf("unknown section [%s] (sections: model, data, train)", section);
    if (!strcmp(section, "model")) {
        if (!model_config_has_key(key)) return dt_errorf("unknown key 'model.%s'", key);
        return model_config_set(&cfg->model, key, value);
    }
    const config_key *k = find_key(section, key);
    if (!k) return dt_errorf("unknown key '%s.%s'", section, key);
    char text[TRAIN_PATH_MAX];
    if (config_trim(k->full_name, value, text, sizeof text) != DT_OK) return DT_ERR;
    return set_value(cfg, k, text);
}

/* ---- stored form (checkpoint attributes) ---- */

int train_config_key_count(void) { return n_config_keys; }
const char *train_config_key_name(int index) {
    return index >= 0 && index < n_config_keys ? config_keys[index].full_name : NULL;
}
model_key_kind train_config_key_kind(int index) {
    if (index < 0 || index >= n_config_keys) return MODEL_KEY_WORD;
    return config_keys[index].kind == VALUE_INT    ? MODEL_KEY_INT
           : config_keys[index].kind == VALUE_REAL ? MODEL_KEY_REAL
                                                   : MODEL_KEY_WORD;
}
void train_config_get_stored(const train_config *cfg, int index, char *text, size_t capacity) {
    if (index < 0 || index >= n_config_keys) {
        if (capacity) text[0] = '\0';
        return;
    }
    get_value(cfg, &config_keys[index], text, capacity);
}
dt_status train_config_set_stored(train_config *cfg, int index, const char *text) {
    if (index < 0 || index >= n_config_keys) return dt_errorf("run key %d does not exist", index);
    return set_value(cfg, &config_keys[index], text);
}

/* ---- INI files ---- */

static dt_status on_file_entry(void *user, const char *section, const char *key, const char *value) {
    return train_config_set_key(user, section, key, value);
}

dt_status train_config_load(train_config *cfg, const char *path) { return config_file_read(path, on_file_entry, cfg); }

dt_status train_config_parse_string(train_config *cfg, const char *text, const char *origin) {
    return config_file_parse(text, origin, on_file_entry, cfg);
}

dt_status train_config_set(train_config *cfg, const char *assignment) {
    const char *equals = strchr(assignment, '=');
    if (!equals || equals == assignment)
        return dt_errorf("--set '%s': expected section.key=value or key=value", assignment);
    char raw_key[128], key[128];
    size_t key_len = (size_t)(equals - assignment);
    if (key_len >= sizeof raw_key) return dt_errorf("--set '%s': key too long", assignment);
    memcpy(raw_key, assignment, key_len);
    raw_key[key_len] = '\0';
    if (config_trim("--set", raw_key, key, sizeof key) != DT_OK) return DT_ERR;
    const char *value = equals + 1;

    char *dot = strchr(key, '.');
    if (dot) {
        *dot = '\0';
        if (train_config_set_key(cfg, key, dot + 1, value) != DT_OK) return dt_error_context("--set");
        return DT_OK;
    }
    /* A bare key: the one section that has it. */
    const char *sections[3];
    int n = 0;
    if (model_config_has_key(key)) sections[n++] = "model";
    for (int i = 0; i < n_config_keys && n < 3; i++)
        if (!strcmp(config_keys[i].name, key)) sections[n++] = config_keys[i].section;
    if (n == 0) return dt_errorf("--set: unknown key '%s'", key);
    if (n > 1)
        return dt_errorf("--set: key '%s' is in [%s] and [%s]; write %s.%s", key, sections[0], sections[1], sections[0],
                         key);
    if (train_config_set_key(cfg, sections[0], key, value) != DT_OK) return dt_error_context("--set");
    return DT_OK;
}

/* ---- validation ---- */

dt_status train_config_validate(train_config *cfg) {
    if (model_config_validate(&cfg->model) != DT_OK) return dt_error_context("[model]");
    for (int i = 0; i < n_config_keys; i++) {
        const config_key *k = &config_keys[i];
        const void *field = (const char *)cfg + k->offset;
        if (k->kind == VALUE_INT && config_range_check(k->full_name, (double)*(const int64_t *)field, &k->range))
            return DT_ERR;
        if (k->kind == VALUE_REAL && config_range_check(k->full_name, *(const double *)field, &k->range)) return DT_ERR;
    }
    if (cfg->data_path[0] == '\0') return dt_errorf("data.path is not set (the token dataset to train on)");
    if (cfg->seq_len == 0) cfg->seq_len = cfg->model.block_size;
    if (cfg->precision == TRAIN_PRECISION_AUTO) cfg->precision = train_precision_auto(NULL);
    if (cfg->seq_len > cfg->model.block_size)
        return dt_errorf("train.seq_len = %lld exceeds model.block_size = %lld", (long long)cfg->seq_len,
                         (long long)cfg->model.block_size);
    /* Each factor is below 2^20 (the table), so neither product overflows; B*T indexes int arrays. */
    if (cfg->batch_size * cfg->seq_len > INT32_MAX)
        return dt_errorf("train.batch_size * train.seq_len = %lld exceeds 2^31 - 1 tokens per micro-batch",
                         (long long)(cfg->batch_size * cfg->seq_len));
    if (cfg->tokens <= 0)
        return dt_errorf("train.tokens = %lld: set the token budget (train.tokens or --tokens N)",
                         (long long)cfg->tokens);
    if (cfg->tokens < train_config_tokens_per_step(cfg))
        return dt_errorf("train.tokens = %lld is less than one step (batch_size * seq_len * grad_accum = %lld)",
                         (long long)cfg->tokens, (long long)train_config_tokens_per_step(cfg));
    if (cfg->min_lr > cfg->lr) return dt_errorf("train.min_lr = %g must be <= train.lr = %g", cfg->min_lr, cfg->lr);
    if (!cfg->model.feedback && train_pass_mix_max(&cfg->feedback_passes) > 1)
        return dt_errorf("train.feedback_passes asks for %lld passes, which needs model.feedback = 1 (SPEC §6.5)",
                         (long long)train_pass_mix_max(&cfg->feedback_passes));
    if (cfg->save_trunk && cfg->schedule != SCHEDULE_WSD)
        return dt_errorf("train.save_trunk = 1 needs train.schedule = wsd (the trunk is the state where its decay "
                         "begins), not %s",
                         optim_schedule_name(cfg->schedule));
    if (cfg->out_dir[0] == '\0') return dt_errorf("train.out_dir is empty");
    if (cfg->log_file[0] == '\0') return dt_errorf("train.log_file is empty");
    return DT_OK;
}

int64_t train_config_tokens_per_step(const train_config *cfg) {
    return cfg->batch_size * cfg->seq_len * cfg->grad_accum;
}

int64_t train_config_total_steps(const train_config *cfg) {
    int64_t per_step = train_config_tokens_per_step(cfg);
    int64_t steps = per_step > 0 ? cfg->tokens / per_step : 0;
    return steps > 0 ? steps : 1;
}

int train_config_single_pass_step(const train_config *cfg, int64_t step) {
    return !cfg->model.feedback || (double)step < cfg->feedback_start * (double)train_config_total_steps(cfg);
}

int64_t train_config_warmup_steps(const train_config *cfg) {
    if (cfg->warmup_steps >= 0) return cfg->warmup_steps;
    return (int64_t)llround(cfg->warmup_fraction * (double)train_config_total_steps(cfg));
}

/* ---- the INI text ---- */

typedef struct {
    char *text;
    size_t capacity;
    size_t length;
} text_builder;

static void append(text_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(text_builder *b, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    char *at = b->length < b->capacity ? b->text + b->length : NULL;
    size_t room = b->length < b->capacity ? b->capacity - b->length : 0;
    int n = vsnprintf(at, room, fmt, args);
    va_end(args);
    if (n > 0) b->length += (size_t)n;
}

size_t train_config_format(const train_config *cfg, char *text, size_t capacity) {
    text_builder b = {.text = text, .capacity = capacity, .length = 0};
    if (text && capacity) text[0] = '\0';
    append(&b, "[model]\n");
    for (int i = 0; i < model_config_key_count(); i++) {
        char value[MODEL_TEXT_MAX];
        const char *key = model_config_key(i);
        if (model_config_get(&cfg->model, key, value, sizeof value) == DT_OK) append(&b, "%s = %s\n", key, value);
    }
    const char *section = "";
    for (int i = 0; i < n_config_keys; i++) {
        const config_key *k = &config_keys[i];
        if (strcmp(section, k->section)) {
            section = k->section;
            append(&b, "\n[%s]\n", section);
        }
        char value[TRAIN_PATH_MAX];
        get_value(cfg, k, value, sizeof value);
        append(&b, "%s = %s\n", k->name, value);
    }
    return b.length;
}
