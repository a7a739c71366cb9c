/* Training configuration: defaults, INI parsing through Debian's libinih,
 * --set overrides, validation and the INI text of the resolved config.
 *
 * The [data] and [train] keys live in one table (name, type, field offset) so
 * the parser, the override lookup and the formatter cannot disagree; the
 * [model] keys are the models layer's (model_config_set / model_config_get). */
#include "train/run_config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { VALUE_INT, VALUE_REAL, VALUE_PATH, VALUE_SCHEDULE, VALUE_OPTIMIZER } value_kind;

typedef struct {
    const char *section;
    const char *name;
    value_kind kind;
    size_t offset;
} config_key;

#define KEY(section, field, kind)                                                                                      \
    { section, #field, kind, offsetof(train_config, field) }

static const config_key config_keys[] = {
    {"data", "path", VALUE_PATH, offsetof(train_config, data_path)},
    KEY("train", batch_size, VALUE_INT),
    KEY("train", seq_len, VALUE_INT),
    KEY("train", tokens, VALUE_INT),
    KEY("train", grad_accum, VALUE_INT),
    KEY("train", lr, VALUE_REAL),
    KEY("train", min_lr, VALUE_REAL),
    KEY("train", warmup_steps, VALUE_INT),
    KEY("train", warmup_fraction, VALUE_REAL),
    KEY("train", schedule, VALUE_SCHEDULE),
    KEY("train", decay_fraction, VALUE_REAL),
    KEY("train", weight_decay, VALUE_REAL),
    KEY("train", beta1, VALUE_REAL),
    KEY("train", beta2, VALUE_REAL),
    KEY("train", eps, VALUE_REAL),
    KEY("train", grad_clip, VALUE_REAL),
    KEY("train", optimizer, VALUE_OPTIMIZER),
    KEY("train", muon_lr, VALUE_REAL),
    KEY("train", muon_momentum, VALUE_REAL),
    KEY("train", muon_weight_decay, VALUE_REAL),
    KEY("train", seed, VALUE_INT),
    KEY("train", threads, VALUE_INT),
    KEY("train", eval_every, VALUE_INT),
    KEY("train", eval_windows, VALUE_INT),
    KEY("train", checkpoint_every, VALUE_INT),
    KEY("train", print_every, VALUE_INT),
    KEY("train", out_dir, VALUE_PATH),
    KEY("train", log_file, VALUE_PATH),
};
static const int n_config_keys = (int)(sizeof config_keys / sizeof config_keys[0]);

train_config train_config_default(void) {
    train_config c;
    memset(&c, 0, sizeof c);
    c.model = model_config_default(FAMILY_NANOGPT);
    c.batch_size = 16;
    c.seq_len = 0;
    c.tokens = 0;
    c.grad_accum = 1;
    c.lr = 1e-3;
    c.min_lr = 1e-4;
    c.warmup_steps = -1;
    c.warmup_fraction = 0.05;
    c.schedule = SCHEDULE_COSINE;
    c.decay_fraction = 0.2;
    c.weight_decay = 0.1;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.grad_clip = 1.0;
    c.optimizer = OPTIM_ADAMW;
    c.muon_lr = 0.02;
    c.muon_momentum = 0.95;
    c.muon_weight_decay = 0.0;
    c.seed = 1337;
    c.threads = 0;
    c.eval_every = 0;
    c.eval_windows = 64;
    c.checkpoint_every = 0;
    c.print_every = 0;
    snprintf(c.out_dir, sizeof c.out_dir, "runs/default");
    snprintf(c.log_file, sizeof c.log_file, "log.jsonl");
    return c;
}

/* ---- values ---- */

static void trim_copy(const char *value, char *out, size_t capacity) {
    while (*value && isspace((unsigned char)*value))
        value++;
    size_t n = strlen(value);
    while (n > 0 && isspace((unsigned char)value[n - 1]))
        n--;
    if (n >= capacity) n = capacity - 1;
    memcpy(out, value, n);
    out[n] = '\0';
}

/* Integers: "1000000", or an exactly integral real such as "2e6" (token budgets). */
static dt_status parse_int(const char *section, const char *key, const char *text, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] != '\0' && *end == '\0' && errno == 0) {
        *out = (int64_t)v;
        return DT_OK;
    }
    double d = strtod(text, &end);
    if (text[0] != '\0' && *end == '\0' && isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) {
        *out = (int64_t)d;
        return DT_OK;
    }
    return dt_errorf("%s.%s = '%s' is not an integer", section, key, text);
}

static dt_status parse_real(const char *section, const char *key, const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || !isfinite(v) || errno == ERANGE)
        return dt_errorf("%s.%s = '%s' is not a finite number", section, key, text);
    *out = v;
    return DT_OK;
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
    trim_copy(value, text, sizeof text);
    void *field = (char *)cfg + k->offset;
    switch (k->kind) {
    case VALUE_INT:
        return parse_int(section, key, text, field);
    case VALUE_REAL:
        return parse_real(section, key, text, field);
    case VALUE_PATH:
        if (strlen(value) >= TRAIN_PATH_MAX)
            return dt_errorf("%s.%s: path longer than %d bytes", section, key, TRAIN_PATH_MAX - 1);
        memcpy(field, text, strlen(text) + 1);
        return DT_OK;
    case VALUE_SCHEDULE:
        if (optim_schedule_parse(text, field) != DT_OK) return dt_error_context("%s.%s", section, key);
        return DT_OK;
    case VALUE_OPTIMIZER:
        if (!strcmp(text, "adamw"))
            *(optim_kind *)field = OPTIM_ADAMW;
        else if (!strcmp(text, "muon"))
            *(optim_kind *)field = OPTIM_MUON;
        else
            return dt_errorf("%s.%s = '%s' must be adamw|muon", section, key, text);
        return DT_OK;
    }
    return DT_ERR;
}

/* ---- INI files ---- */

enum { MAX_FILE_KEYS = 128 };

typedef struct {
    train_config *cfg;
    int failed;
    char message[512]; /* the first error; inih keeps parsing and reports its line */
    /* Keys set so far: a key given twice in one file is an error rather than
     * "the last one wins", which silently hides an edit. */
    int n_seen;
    char seen[MAX_FILE_KEYS][96];
} parse_state;

/* 1 when section.name was already set in this file (else records it). */
static int seen_before(parse_state *state, const char *section, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "%s.%s", section, name);
    for (int i = 0; i < state->n_seen; i++)
        if (!strcmp(state->seen[i], full)) return 1;
    if (state->n_seen < MAX_FILE_KEYS) snprintf(state->seen[state->n_seen++], sizeof state->seen[0], "%s", full);
    return 0;
}

static int on_ini_entry(void *user, const char *section, const char *name, const char *value) {
    parse_state *state = user;
    if (state->failed) return 0;
    dt_status status;
    if (section[0] == '\0')
        status = dt_errorf("key '%s' outside any section (put it under [model], [data] or [train])", name);
    else if (seen_before(state, section, name))
        status = dt_errorf("%s.%s is set twice (or a value is continued on an indented line)", section, name);
    else
        status = train_config_set_key(state->cfg, section, name, value);
    if (status != DT_OK) {
        state->failed = 1;
        snprintf(state->message, sizeof state->message, "%s", dt_error_message());
        return 0;
    }
    return 1;
}

static dt_status finish_parse(int rc, const parse_state *state, const char *origin) {
    if (rc == -1) return dt_errorf("%s: cannot open config file", origin);
    if (rc == -2) return dt_errorf("%s: out of memory while parsing", origin);
    if (rc > 0) {
        if (state->failed) return dt_errorf("%s line %d: %s", origin, rc, state->message);
        return dt_errorf("%s line %d: not a [section] or key = value line", origin, rc);
    }
    return DT_OK;
}

/* Largest config file read: configs are a few hundred bytes; anything this
 * big is the wrong file. */
#define CONFIG_FILE_MAX (1 << 20)

dt_status train_config_load(train_config *cfg, const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) return dt_errorf("%s: no such config file (or not readable)", path);
    /* Read it whole first: a directory opens but reads nothing, and inih's
     * line reader would stop each line at a NUL byte, so both would parse as
     * an empty config and fail later with an error that does not name the file. */
    char *text = malloc(CONFIG_FILE_MAX + 1);
    if (!text) {
        fclose(file);
        return dt_errorf("%s: out of memory", path);
    }
    size_t n = fread(text, 1, CONFIG_FILE_MAX + 1, file);
    int read_error = ferror(file);
    fclose(file);
    dt_status status = DT_OK;
    if (read_error)
        status = dt_errorf("%s: cannot read (a directory?)", path);
    else if (n > CONFIG_FILE_MAX)
        status = dt_errorf("%s: larger than %d bytes, not a config file", path, CONFIG_FILE_MAX);
    else if (memchr(text, '\0', n))
        status = dt_errorf("%s: contains NUL bytes, not a text config file", path);
    if (status != DT_OK) {
        free(text);
        return status;
    }
    text[n] = '\0';
    parse_state *state = calloc(1, sizeof *state);
    if (!state) {
        free(text);
        return dt_errorf("%s: out of memory", path);
    }
    state->cfg = cfg;
    int rc = ini_parse_string(text, on_ini_entry, state);
    free(text);
    status = finish_parse(rc, state, path);
    if (status == DT_OK && state->n_seen == 0)
        status = dt_errorf("%s: sets no keys (an empty config file?); see experiments/configs/", path);
    free(state);
    return status;
}

dt_status train_config_parse_string(train_config *cfg, const char *text, const char *origin) {
    parse_state *state = calloc(1, sizeof *state);
    if (!state) return dt_errorf("%s: out of memory", origin);
    state->cfg = cfg;
    int rc = ini_parse_string(text, on_ini_entry, state);
    dt_status status = finish_parse(rc, state, origin);
    free(state);
    return status;
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
    trim_copy(raw_key, key, sizeof key);
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
    for (int i = 0; i < n_config_keys; i++)
        if (!strcmp(config_keys[i].name, key)) sections[n++] = config_keys[i].section;
    if (n == 0) return dt_errorf("--set: unknown key '%s'", key);
    if (n > 1)
        return dt_errorf("--set: key '%s' is in [%s] and [%s]; write %s.%s", key, sections[0], sections[1], sections[0],
                         key);
    if (train_config_set_key(cfg, sections[0], key, value) != DT_OK) return dt_error_context("--set");
    return DT_OK;
}

/* ---- validation ---- */

static dt_status check_int(const char *key, int64_t value, int64_t lo) {
    if (value < lo) return dt_errorf("train.%s = %lld must be >= %lld", key, (long long)value, (long long)lo);
    return DT_OK;
}

/* lo <= value <= hi, or lo <= value < hi when hi_open. */
static dt_status check_real(const char *key, double value, double lo, double hi, int lo_open, int hi_open) {
    int ok = (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
    if (!ok)
        return dt_errorf("train.%s = %g must be in %c%g, %g%c", key, value, lo_open ? '(' : '[', lo, hi,
                         hi_open ? ')' : ']');
    return DT_OK;
}

dt_status train_config_validate(train_config *cfg) {
    if (model_config_validate(&cfg->model) != DT_OK) return dt_error_context("[model]");
    if (cfg->data_path[0] == '\0') return dt_errorf("data.path is not set (the token dataset to train on)");
    if (cfg->seq_len == 0) cfg->seq_len = cfg->model.block_size;
    if (check_int("batch_size", cfg->batch_size, 1) || check_int("seq_len", cfg->seq_len, 1) ||
        check_int("grad_accum", cfg->grad_accum, 1) || check_int("warmup_steps", cfg->warmup_steps, -1) ||
        check_int("seed", cfg->seed, 0) || check_int("threads", cfg->threads, 0) ||
        check_int("eval_every", cfg->eval_every, 0) || check_int("eval_windows", cfg->eval_windows, 0) ||
        check_int("checkpoint_every", cfg->checkpoint_every, 0) || check_int("print_every", cfg->print_every, 0))
        return DT_ERR;
    if (cfg->seq_len > cfg->model.block_size)
        return dt_errorf("train.seq_len = %lld exceeds model.block_size = %lld", (long long)cfg->seq_len,
                         (long long)cfg->model.block_size);
    if (cfg->tokens <= 0)
        return dt_errorf("train.tokens = %lld: set the token budget (train.tokens or --tokens N)",
                         (long long)cfg->tokens);
    if (cfg->tokens < train_config_tokens_per_step(cfg))
        return dt_errorf("train.tokens = %lld is less than one step (batch_size * seq_len * grad_accum = %lld)",
                         (long long)cfg->tokens, (long long)train_config_tokens_per_step(cfg));
    if (check_real("lr", cfg->lr, 0, INFINITY, 1, 1) || check_real("min_lr", cfg->min_lr, 0, cfg->lr, 0, 0) ||
        check_real("warmup_fraction", cfg->warmup_fraction, 0, 1, 0, 1) ||
        check_real("decay_fraction", cfg->decay_fraction, 0, 1, 1, 0) ||
        check_real("weight_decay", cfg->weight_decay, 0, INFINITY, 0, 1) ||
        check_real("beta1", cfg->beta1, 0, 1, 0, 1) || check_real("beta2", cfg->beta2, 0, 1, 0, 1) ||
        check_real("eps", cfg->eps, 0, INFINITY, 1, 1) || check_real("grad_clip", cfg->grad_clip, 0, INFINITY, 0, 1) ||
        check_real("muon_lr", cfg->muon_lr, 0, INFINITY, 1, 1) ||
        check_real("muon_momentum", cfg->muon_momentum, 0, 1, 0, 1) ||
        check_real("muon_weight_decay", cfg->muon_weight_decay, 0, INFINITY, 0, 1))
        return DT_ERR;
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

/* The shortest of %.15g / %.17g that reads back as the same double. */
static void format_real(double value, char *out, size_t capacity) {
    snprintf(out, capacity, "%.15g", value);
    if (strtod(out, NULL) != value) snprintf(out, capacity, "%.17g", value);
}

size_t train_config_format(const train_config *cfg, char *text, size_t capacity) {
    text_builder b = {.text = text, .capacity = capacity, .length = 0};
    if (text && capacity) text[0] = '\0';
    append(&b, "[model]\n");
    for (int i = 0; i < model_config_key_count(); i++) {
        char value[128];
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
        const void *field = (const char *)cfg + k->offset;
        switch (k->kind) {
        case VALUE_INT:
            append(&b, "%s = %lld\n", k->name, (long long)*(const int64_t *)field);
            break;
        case VALUE_REAL: {
            char real[64];
            format_real(*(const double *)field, real, sizeof real);
            append(&b, "%s = %s\n", k->name, real);
            break;
        }
        case VALUE_PATH:
            append(&b, "%s = %s\n", k->name, (const char *)field);
            break;
        case VALUE_SCHEDULE:
            append(&b, "%s = %s\n", k->name, optim_schedule_name(*(const optim_schedule_kind *)field));
            break;
        case VALUE_OPTIMIZER:
            append(&b, "%s = %s\n", k->name, optim_kind_name(*(const optim_kind *)field));
            break;
        }
    }
    return b.length;
}
