/* Model configuration (SPEC §4, §6): the key table generated from
 * models/config_keys.def, defaults per family, parsing of the keys from text
 * (config files, --set, checkpoint attributes all go through
 * model_config_set), and validation that fills the neutral values and rejects
 * every inconsistent combination with a message naming the key and value.
 *
 * Checkpoints, `dbranch info`, the resume check and the parser all walk the
 * one table, so a key cannot be written but not read; the per-key work
 * (parse, format, range, default) is generic over the key's kind. */
#include "models/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/config_value.h"

typedef enum { KIND_INT, KIND_REAL, KIND_FLAG, KIND_ONOFF, KIND_WORD, KIND_TEXT } key_kind;

typedef struct {
    const char *name;
    key_kind kind;
    const char *words[8];    /* WORD: the enum's values in order, NULL-terminated */
    const char *defaults[3]; /* per family, as text */
    config_range range;      /* INT, REAL */
    int spec;                /* 4: required in /config; 6: optional (absent from older files) */
    int pending;             /* declared, math not implemented: only the default is accepted */
    const char *help;
    size_t offset, size; /* the field in model_config */
} key_spec;

#define WORDS(...)                                                                                                     \
    { __VA_ARGS__, NULL }
#define NO_WORDS                                                                                                       \
    { NULL }
#define BY_FAMILY(nanogpt, llama, moe)                                                                                 \
    { nanogpt, llama, moe }
#define ALL(value)                                                                                                     \
    { value, value, value }
#define DONE    0
#define PENDING 1
#define MODEL_KEY(name, kind, ctype, words, defaults, range, spec, status, help)                                       \
    {#name,                                                                                                            \
     KIND_##kind,                                                                                                      \
     words,                                                                                                            \
     defaults,                                                                                                         \
     {range},                                                                                                          \
     spec,                                                                                                             \
     status,                                                                                                           \
     help,                                                                                                             \
     offsetof(model_config, name),                                                                                     \
     sizeof(((model_config *)0)->name)},
static const key_spec keys[MODEL_KEY_COUNT] = {
#include "models/config_keys.def"
};
#undef MODEL_KEY

_Static_assert(MODEL_KEY_COUNT <= 64, "explicit_keys has one bit per key");

/* ---- values shared with the run keys (config_value.h) ---- */

dt_status config_trim(const char *key, const char *value, char *out, int capacity) {
    while (*value && isspace((unsigned char)*value))
        value++;
    size_t n = strlen(value);
    while (n > 0 && isspace((unsigned char)value[n - 1]))
        n--;
    if (n >= (size_t)capacity) return dt_errorf("%s: value longer than %d bytes", key, capacity - 1);
    memcpy(out, value, n);
    out[n] = '\0';
    return DT_OK;
}

dt_status config_parse_int(const char *key, const char *text, int allow_exponent, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] != '\0' && end != text && *end == '\0') {
        if (errno == ERANGE) return dt_errorf("%s = '%s' is out of range (beyond 64 bits)", key, text);
        *out = (int64_t)v;
        return DT_OK;
    }
    if (allow_exponent) {
        errno = 0;
        double d = strtod(text, &end);
        /* errno: "1e-400" underflows to 0 and "1e400" overflows; neither is the integer written. */
        if (text[0] != '\0' && end != text && *end == '\0' && errno == 0 && isfinite(d) && d == floor(d) &&
            fabs(d) <= 9007199254740992.0) {
            *out = (int64_t)d;
            return DT_OK;
        }
    }
    return dt_errorf("%s = '%s' is not an integer", key, text);
}

dt_status config_parse_real(const char *key, const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (text[0] == '\0' || end == text || *end != '\0') return dt_errorf("%s = '%s' is not a number", key, text);
    if (!isfinite(v) || errno == ERANGE) return dt_errorf("%s = '%s' is not a finite number", key, text);
    *out = v;
    return DT_OK;
}

void config_format_real(double value, char *text, int capacity) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(text, capacity, "%.*g", digits, value);
        if (strtod(text, NULL) == value) return;
    }
}

/* Integers as integers (2147483648, not 2.14748e+09). */
static void format_number(double value, char *text, int capacity) {
    if (value == floor(value) && fabs(value) < 1e17)
        snprintf(text, capacity, "%.0f", value);
    else
        config_format_real(value, text, capacity);
}

void config_range_format(const config_range *r, char *text, int capacity) {
    char lo[32], hi[32];
    format_number(r->lo, lo, sizeof lo);
    format_number(r->hi, hi, sizeof hi);
    snprintf(text, capacity, "%c%s, %s%c", r->lo_open ? '(' : '[', lo, hi, r->hi_open ? ')' : ']');
}

dt_status config_range_check(const char *key, double value, const config_range *r) {
    if (!config_range_is_set(r)) return DT_OK;
    int ok = (r->lo_open ? value > r->lo : value >= r->lo) && (r->hi_open ? value < r->hi : value <= r->hi);
    if (ok) return DT_OK;
    char range[80], shown[32];
    config_range_format(r, range, sizeof range);
    format_number(value, shown, sizeof shown);
    return dt_errorf("%s = %s must be in %s", key, shown, range);
}

/* ---- the table ---- */

int model_config_key_count(void) { return MODEL_KEY_COUNT; }
const char *model_config_key(int index) { return index >= 0 && index < MODEL_KEY_COUNT ? keys[index].name : NULL; }

model_key_kind model_config_key_kind(int index) {
    if (index < 0 || index >= MODEL_KEY_COUNT) return MODEL_KEY_WORD;
    switch (keys[index].kind) {
    case KIND_INT:
    case KIND_FLAG:
        return MODEL_KEY_INT;
    case KIND_REAL:
        return MODEL_KEY_REAL;
    default:
        return MODEL_KEY_WORD;
    }
}

int model_config_key_required(int index) { return index >= 0 && index < MODEL_KEY_COUNT && keys[index].spec == 4; }

int model_config_find_key(const char *key) {
    for (int i = 0; key && i < MODEL_KEY_COUNT; i++)
        if (!strcmp(keys[i].name, key)) return i;
    return -1;
}

int model_config_has_key(const char *key) { return model_config_find_key(key) >= 0; }

/* Word v of a WORD key, or NULL. */
static const char *word_at(int id, int v) {
    for (int i = 0; keys[id].words[i]; i++)
        if (i == v) return keys[id].words[i];
    return NULL;
}

static int word_index(int id, const char *text) {
    for (int i = 0; keys[id].words[i]; i++)
        if (!strcmp(keys[id].words[i], text)) return i;
    return -1;
}

/* "a|b|c" for messages and help. */
static void word_list(int id, char *text, int capacity) {
    text[0] = '\0';
    for (int i = 0; keys[id].words[i]; i++)
        snprintf(text + strlen(text), capacity - strlen(text), "%s%s", i ? "|" : "", keys[id].words[i]);
}

static const char *name_or_unknown(int id, int v) {
    const char *name = word_at(id, v);
    return name ? name : "?";
}

const char *model_family_name(model_family family) { return name_or_unknown(MODEL_KEY_family, (int)family); }
const char *model_branch_name(model_branch branch) { return name_or_unknown(MODEL_KEY_branch, (int)branch); }
const char *model_routing_name(model_routing routing) {
    return name_or_unknown(MODEL_KEY_branch_routing, (int)routing);
}
const char *model_branch_emb_name(model_branch_emb branch_emb) {
    return name_or_unknown(MODEL_KEY_branch_emb, (int)branch_emb);
}

/* ---- parsing and formatting one key ---- */

static void *field_of(model_config *c, int id) { return (char *)c + keys[id].offset; }
static const void *const_field_of(const model_config *c, int id) { return (const char *)c + keys[id].offset; }

/* Parses text for key id into its field; the config is unchanged on error.
 * Ranges are model_config_validate's (a struct may also be filled by hand). */
static dt_status parse_value(model_config *c, int id, const char *text) {
    const key_spec *k = &keys[id];
    void *field = field_of(c, id);
    switch (k->kind) {
    case KIND_INT: {
        int64_t v = 0;
        if (config_parse_int(k->name, text, 0, &v) != DT_OK) return DT_ERR;
        *(int64_t *)field = v;
        return DT_OK;
    }
    case KIND_REAL: {
        double v = 0.0;
        if (config_parse_real(k->name, text, &v) != DT_OK) return DT_ERR;
        *(double *)field = v;
        return DT_OK;
    }
    case KIND_FLAG:
    case KIND_ONOFF:
        /* Flags are 0|1 in SPEC §4, switches on|off; each accepts the other
         * spelling, because users mix them up and the meaning is unambiguous. */
        if (!strcmp(text, "1") || !strcmp(text, "on"))
            *(int *)field = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "off"))
            *(int *)field = 0;
        else
            return dt_errorf("%s = '%s' must be on|off (or 1|0)", k->name, text);
        return DT_OK;
    case KIND_WORD: {
        int v = word_index(id, text);
        if (v < 0) {
            char words[128];
            word_list(id, words, sizeof words);
            return dt_errorf("%s = '%s' must be %s", k->name, text, words);
        }
        memcpy(field, &v, sizeof v); /* enums are int-sized (static assert below) */
        return DT_OK;
    }
    case KIND_TEXT:
        if (strlen(text) >= k->size) return dt_errorf("%s: value longer than %d bytes", k->name, (int)k->size - 1);
        memcpy(field, text, strlen(text) + 1);
        return DT_OK;
    }
    return DT_ERR;
}

_Static_assert(sizeof(model_family) == sizeof(int) && sizeof(model_ffn) == sizeof(int), "WORD fields are ints");

static void format_value(const model_config *c, int id, char *text, int capacity) {
    const key_spec *k = &keys[id];
    const void *field = const_field_of(c, id);
    int v;
    switch (k->kind) {
    case KIND_INT:
        snprintf(text, capacity, "%lld", (long long)*(const int64_t *)field);
        break;
    case KIND_REAL:
        config_format_real(*(const double *)field, text, capacity);
        break;
    case KIND_FLAG:
        snprintf(text, capacity, "%d", *(const int *)field);
        break;
    case KIND_ONOFF:
        snprintf(text, capacity, "%s", *(const int *)field ? "on" : "off");
        break;
    case KIND_WORD:
        memcpy(&v, field, sizeof v);
        if (word_at(id, v))
            snprintf(text, capacity, "%s", word_at(id, v));
        else
            snprintf(text, capacity, "%d", v);
        break;
    case KIND_TEXT:
        snprintf(text, capacity, "%s", (const char *)field);
        break;
    }
}

model_config model_config_default(model_family family) {
    model_config c;
    memset(&c, 0, sizeof c);
    int f = (int)family >= FAMILY_NANOGPT && (int)family <= FAMILY_MOE ? (int)family : FAMILY_NANOGPT;
    for (int i = 0; i < MODEL_KEY_COUNT; i++)
        parse_value(&c, i, keys[i].defaults[f]); /* the table's defaults parse (tests/test_models_config.c) */
    c.family = family;
    c.explicit_keys = 0;
    return c;
}

dt_status model_config_set(model_config *config, const char *key, const char *value) {
    if (!key) return dt_errorf("model key is NULL");
    int id = model_config_find_key(key);
    if (id < 0) return dt_errorf("unknown model key '%s'", key);
    if (!value) return dt_errorf("%s has no value", key);
    char text[MODEL_TEXT_MAX];
    if (config_trim(key, value, text, sizeof text) != DT_OK) return DT_ERR;
    model_config next = *config;
    if (parse_value(&next, id, text) != DT_OK) return DT_ERR;
    if (id == MODEL_KEY_family) {
        /* The keys not set explicitly take the new family's defaults
         * (tie_embeddings, n_expert, top_k), whatever order a file uses. */
        model_config defaults = model_config_default(next.family);
        for (int i = 0; i < MODEL_KEY_COUNT; i++)
            if (!(config->explicit_keys & (UINT64_C(1) << i)))
                memcpy(field_of(&next, i), const_field_of(&defaults, i), keys[i].size);
    }
    next.explicit_keys |= UINT64_C(1) << id;
    *config = next;
    return DT_OK;
}

dt_status model_config_get(const model_config *config, const char *key, char *text, int capacity) {
    int id = model_config_find_key(key);
    if (id < 0) return dt_errorf("unknown model key '%s'", key ? key : "(null)");
    if (!text || capacity < 2) return dt_errorf("model key '%s': no room for its value", key);
    format_value(config, id, text, capacity);
    return DT_OK;
}

void model_config_key_describe(int index, char *text, int capacity) {
    if (index < 0 || index >= MODEL_KEY_COUNT) {
        snprintf(text, capacity, "?");
        return;
    }
    const key_spec *k = &keys[index];
    char values[96] = "", defaults[96];
    switch (k->kind) {
    case KIND_INT:
    case KIND_REAL:
        snprintf(values, sizeof values, "%s in ", k->kind == KIND_INT ? "integer" : "real");
        config_range_format(&k->range, values + strlen(values), (int)(sizeof values - strlen(values)));
        break;
    case KIND_FLAG:
        snprintf(values, sizeof values, "0|1");
        break;
    case KIND_ONOFF:
        snprintf(values, sizeof values, "on|off");
        break;
    case KIND_WORD:
        word_list(index, values, sizeof values);
        break;
    case KIND_TEXT:
        snprintf(values, sizeof values, "text");
        break;
    }
    if (!strcmp(k->defaults[0], k->defaults[1]) && !strcmp(k->defaults[0], k->defaults[2]))
        snprintf(defaults, sizeof defaults, "'%s'", k->defaults[0]);
    else
        snprintf(defaults, sizeof defaults, "nanogpt '%s', llama '%s', moe '%s'", k->defaults[0], k->defaults[1],
                 k->defaults[2]);
    snprintf(text, capacity, "%-16s %s; default %s%s: %s", k->name, values, defaults,
             k->pending ? " (not implemented yet)" : "", k->help);
}

/* ---- validation ---- */

/* llama2.c's FFN width for d_ff = 0: two thirds of 4C (SwiGLU has three
 * matrices instead of two, so this keeps the MLP's parameter count at about
 * 8C^2), rounded up to a multiple of 32. */
static int64_t llama_ffn_width(int64_t d_model) {
    int64_t hidden = 2 * (4 * d_model) / 3;
    return (hidden + 31) / 32 * 32;
}

/* n rounded up to a multiple of 32 (SPEC §6.1's round32), for n = num / den. */
static int64_t round32_ratio(int64_t num, int64_t den) { return (num + 32 * den - 1) / (32 * den) * 32; }

/* SPEC §6.1: d_ff = 0 with a product FFN derives the width that matches the
 * parameters of the family's default FFN: llama/moe from the SwiGLU width
 * S = round32(8C/3): round32(3S/4) (triplu), S (prod2), round32(3S/5) (prod4);
 * nanogpt round32(2C), round32(8C/3), round32(8C/5). */
static int64_t product_ffn_width(const model_config *c) {
    const int64_t C = c->d_model;
    if (c->family == FAMILY_NANOGPT) {
        switch (c->ffn) {
        case FFN_TRIPLU:
            return round32_ratio(2 * C, 1);
        case FFN_PROD2:
            return round32_ratio(8 * C, 3);
        default:
            return round32_ratio(8 * C, 5);
        }
    }
    const int64_t S = round32_ratio(8 * C, 3);
    switch (c->ffn) {
    case FFN_TRIPLU:
        return round32_ratio(3 * S, 4);
    case FFN_PROD2:
        return S;
    default:
        return round32_ratio(3 * S, 5);
    }
}

/* Every field holds a value of its kind inside its declared range (the
 * struct may have been filled by hand, not through model_config_set). */
static dt_status check_declared(const model_config *c) {
    for (int i = 0; i < MODEL_KEY_COUNT; i++) {
        const key_spec *k = &keys[i];
        const void *field = const_field_of(c, i);
        int v;
        char words[128];
        switch (k->kind) {
        case KIND_INT:
            if (config_range_check(k->name, (double)*(const int64_t *)field, &k->range)) return DT_ERR;
            break;
        case KIND_REAL:
            if (!isfinite(*(const double *)field))
                return dt_errorf("%s = %g is not a finite number", k->name, *(const double *)field);
            if (config_range_check(k->name, *(const double *)field, &k->range)) return DT_ERR;
            break;
        case KIND_FLAG:
        case KIND_ONOFF:
            if (*(const int *)field != 0 && *(const int *)field != 1)
                return dt_errorf("%s = %d must be 0 or 1", k->name, *(const int *)field);
            break;
        case KIND_WORD:
            memcpy(&v, field, sizeof v);
            if (!word_at(i, v)) {
                word_list(i, words, sizeof words);
                return dt_errorf("%s = %d is not %s", k->name, v, words);
            }
            break;
        case KIND_TEXT:
            if (!memchr(field, '\0', k->size)) return dt_errorf("%s is not a terminated string", k->name);
            break;
        }
    }
    return DT_OK;
}

/* layer_heads: "" or n_layer comma-separated positive integers. */
static dt_status check_layer_heads(const model_config *c) {
    if (c->layer_heads[0] == '\0') return DT_OK;
    int64_t count = 0;
    const char *p = c->layer_heads;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno == ERANGE || v < 1 || v > 65536)
            return dt_errorf("layer_heads = '%s' must be n_layer comma-separated integers in [1, 65536]",
                             c->layer_heads);
        count++;
        if (*end == '\0') break;
        if (*end != ',') return dt_errorf("layer_heads = '%s': expected a comma after %lld", c->layer_heads, v);
        p = end + 1;
    }
    if (count != c->n_layer)
        return dt_errorf("layer_heads = '%s' has %lld entries, n_layer = %lld", c->layer_heads, (long long)count,
                         (long long)c->n_layer);
    return DT_OK;
}

/* Per-layer heads (SPEC §6.2): each H_l divides d_model, gives an even head
 * width for RoPE, and keeps the GQA ratio with an integer Hkv_l >= 1. */
static dt_status check_layer_head_shapes(const model_config *c) {
    if (c->layer_heads[0] == '\0') return DT_OK;
    const char *p = c->layer_heads;
    for (int64_t l = 0; l < c->n_layer; l++) {
        char *end = NULL;
        const long long h = strtoll(p, &end, 10);
        p = end + (*end == ',');
        if (c->d_model % h)
            return dt_errorf("layer_heads = '%s': layer %lld's %lld heads do not divide d_model = %lld", c->layer_heads,
                             (long long)l, h, (long long)c->d_model);
        if (c->family != FAMILY_NANOGPT && !c->alibi && (c->d_model / h) % 2)
            return dt_errorf("layer_heads = '%s': layer %lld's head width %lld must be even for RoPE", c->layer_heads,
                             (long long)l, (long long)(c->d_model / h));
        if ((h * c->n_kv_head) % c->n_head)
            return dt_errorf("layer_heads = '%s': layer %lld's %lld heads keep no integer kv-head count at the GQA "
                             "ratio n_head/n_kv_head = %lld/%lld",
                             c->layer_heads, (long long)l, h, (long long)c->n_head, (long long)c->n_kv_head);
    }
    return DT_OK;
}

/* SPEC §6.6: the disco_* keys only qualify disco = 1 (away from their
 * defaults they are errors without it), and a learned gate starts at
 * logit(disco_alpha), which needs 0 < disco_alpha < 1. */
static dt_status check_disco(const model_config *c) {
    if (!c->disco) {
        model_config d = model_config_default(c->family);
        const char *key = c->disco_tau != d.disco_tau       ? "disco_tau"
                          : c->disco_alpha != d.disco_alpha ? "disco_alpha"
                          : c->disco_gate != d.disco_gate   ? "disco_gate"
                          : c->disco_top != d.disco_top     ? "disco_top"
                                                            : NULL;
        if (key) return dt_errorf("%s is set but disco = 0 (it only qualifies disco = 1)", key);
        return DT_OK;
    }
    if (c->disco_gate == DISCO_GATE_LEARNED && (c->disco_alpha <= 0.0 || c->disco_alpha >= 1.0))
        return dt_errorf("disco_alpha = %g with disco_gate = learned: the gate starts at logit(disco_alpha), which "
                         "needs 0 < disco_alpha < 1",
                         c->disco_alpha);
    return DT_OK;
}

/* SPEC §6's combination rules, then "not implemented yet" for any PENDING
 * key away from its default (so no model silently ignores one). */
static dt_status check_options(const model_config *c) {
    if (check_layer_heads(c) != DT_OK) return DT_ERR;
    if (c->ffn_prod_norm && c->ffn == FFN_DEFAULT) return dt_errorf("ffn_prod_norm = 1 needs ffn != default");
    if (c->attn_res_heads != 1 && c->attn_res == ATTN_RES_OFF)
        return dt_errorf("attn_res_heads = %lld needs attn_res != off", (long long)c->attn_res_heads);
    if (c->attn_res_blocks != 0 && c->attn_res != ATTN_RES_BLOCK)
        return dt_errorf("attn_res_blocks = %lld needs attn_res = block", (long long)c->attn_res_blocks);
    if (c->disco && c->n_loop == 1) return dt_errorf("disco = 1 needs n_loop > 1");
    if (check_disco(c) != DT_OK) return DT_ERR;
    const char *exclusive[4];
    int n = 0;
    if (c->attn_res != ATTN_RES_OFF) exclusive[n++] = "attn_res";
    if (c->recurrent) exclusive[n++] = "recurrent";
    if (c->feedback) exclusive[n++] = "feedback";
    if (c->n_loop > 1) exclusive[n++] = "n_loop";
    if (n > 1)
        return dt_errorf("%s and %s cannot be combined (at most one of attn_res, recurrent, feedback, n_loop)",
                         exclusive[0], exclusive[1]);
    if (c->branch == BRANCH_DECODE && (c->feedback || c->n_loop > 1))
        return dt_errorf("%s is not defined with branch = decode", c->feedback ? "feedback = 1" : "n_loop > 1");
    /* The second table is a baseline's stand-in for branch.tok_emb (a control
     * arm); latent feedback fuses e_t, and its decode keeps one table. */
    if (c->tok_emb_tables > 1 && (c->branch == BRANCH_DECODE || c->feedback))
        return dt_errorf("tok_emb_tables = %lld is not defined with %s (the second table is a baseline's stand-in "
                         "for branch.tok_emb)",
                         (long long)c->tok_emb_tables, c->branch == BRANCH_DECODE ? "branch = decode" : "feedback = 1");
    /* A later entry point is defined on the plain stack only: a routed stack has no single residual stream, a
     * recurrent layer scans its input, and a looped stack would meet the table once per application. */
    if (c->tok_emb2_layer > 0 && c->tok_emb_tables != 2)
        return dt_errorf("tok_emb2_layer = %lld needs tok_emb_tables = 2", (long long)c->tok_emb2_layer);
    if (c->tok_emb2_layer > 0 && c->tok_emb2_layer >= c->n_layer)
        return dt_errorf("tok_emb2_layer = %lld must be below n_layer = %lld (the block whose input tok_emb2 joins)",
                         (long long)c->tok_emb2_layer, (long long)c->n_layer);
    if (c->tok_emb2_layer > 0 && (c->attn_res != ATTN_RES_OFF || c->recurrent || c->n_loop > 1))
        return dt_errorf("tok_emb2_layer = %lld is not defined with %s (only on the plain stack)",
                         (long long)c->tok_emb2_layer,
                         c->attn_res != ATTN_RES_OFF ? "attn_res"
                         : c->recurrent              ? "recurrent = 1"
                                                     : "n_loop > 1");
    if (check_layer_head_shapes(c) != DT_OK) return DT_ERR;
    if (c->attn_res == ATTN_RES_BLOCK && (c->attn_res_blocks < 1 || (2 * c->n_layer) % c->attn_res_blocks))
        return dt_errorf("attn_res_blocks = %lld must divide the 2*n_layer = %lld sublayers (attn_res = block)",
                         (long long)c->attn_res_blocks, (long long)(2 * c->n_layer));
    if (c->attn_res != ATTN_RES_OFF && c->d_model % c->attn_res_heads)
        return dt_errorf("attn_res_heads = %lld does not divide d_model = %lld", (long long)c->attn_res_heads,
                         (long long)c->d_model);
    model_config defaults = model_config_default(c->family);
    for (int i = 0; i < MODEL_KEY_COUNT; i++) {
        if (!keys[i].pending || !memcmp(const_field_of(c, i), const_field_of(&defaults, i), keys[i].size)) continue;
        char text[MODEL_TEXT_MAX];
        format_value(c, i, text, sizeof text);
        return dt_errorf("%s = %s: not implemented yet (SPEC §6)", keys[i].name, text);
    }
    return DT_OK;
}

dt_status model_config_validate(model_config *c) {
    if (check_declared(c) != DT_OK) return DT_ERR;
    const char *family = model_family_name(c->family);
    if (c->d_model % c->n_head != 0)
        return dt_errorf("d_model = %lld is not divisible by n_head = %lld", (long long)c->d_model,
                         (long long)c->n_head);

    if (c->family == FAMILY_NANOGPT) {
        /* GPT-2 has no GQA and a fixed 4C MLP: these keys only carry neutral values. */
        if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
        if (c->n_kv_head != c->n_head)
            return dt_errorf("n_kv_head = %lld: family nanogpt has no grouped-query attention (n_kv_head must equal "
                             "n_head = %lld)",
                             (long long)c->n_kv_head, (long long)c->n_head);
        if (c->d_ff == 0) c->d_ff = c->ffn == FFN_DEFAULT ? 4 * c->d_model : product_ffn_width(c);
        if (c->ffn == FFN_DEFAULT && c->d_ff != 4 * c->d_model)
            return dt_errorf("d_ff = %lld: family nanogpt's MLP width is fixed at 4*d_model = %lld (leave d_ff unset)",
                             (long long)c->d_ff, (long long)(4 * c->d_model));
    } else {
        if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
        if (c->d_ff == 0) c->d_ff = c->ffn == FFN_DEFAULT ? llama_ffn_width(c->d_model) : product_ffn_width(c);
        if (c->n_head % c->n_kv_head != 0)
            return dt_errorf("n_head = %lld is not divisible by n_kv_head = %lld", (long long)c->n_head,
                             (long long)c->n_kv_head);
        if (!c->alibi && model_head_dim(c) % 2 != 0) /* alibi = 1 replaces RoPE (SPEC §6.4) */
            return dt_errorf("head_dim = d_model/n_head = %lld must be even for RoPE (family %s)",
                             (long long)model_head_dim(c), family);
    }

    if (c->family == FAMILY_MOE) {
        if (c->n_expert <= 0)
            return dt_errorf("n_expert = %lld must be positive for family moe", (long long)c->n_expert);
        if (c->top_k < 1 || c->top_k > c->n_expert)
            return dt_errorf("top_k = %lld must be in 1..n_expert (%lld)", (long long)c->top_k, (long long)c->n_expert);
        if (c->top_k_branch == 0 || c->branch == BRANCH_NONE) c->top_k_branch = c->top_k;
        if (c->top_k_branch < 1 || c->top_k_branch > c->n_expert)
            return dt_errorf("top_k_branch = %lld must be in 1..n_expert (%lld) (or 0 for top_k)",
                             (long long)c->top_k_branch, (long long)c->n_expert);
    } else {
        c->n_expert = c->top_k = c->top_k_branch = 0;
    }

    if (c->mix_alpha_min > c->mix_alpha_max)
        return dt_errorf("mix_alpha_min = %g is larger than mix_alpha_max = %g", c->mix_alpha_min, c->mix_alpha_max);

    /* The largest tensor (expert weights, embeddings) must stay far inside int64 and memory. */
    double largest = (double)c->vocab_size * (double)c->d_model;
    double experts = (double)(c->n_expert > 0 ? c->n_expert : 1) * (double)c->d_ff * (double)c->d_model;
    if (experts > largest) largest = experts;
    if (largest > 1e13) return dt_errorf("model too large: one weight tensor would hold %.3g values", largest);

    if (check_options(c) != DT_OK) return DT_ERR;

    if (c->branch == BRANCH_NONE) {
        /* SPEC §4: the branch keys of a model without a branch carry their defaults. */
        model_config defaults = model_config_default(c->family);
        c->branch_routing = defaults.branch_routing;
        c->mix_alpha_min = defaults.mix_alpha_min;
        c->mix_alpha_max = defaults.mix_alpha_max;
        c->couple = defaults.couple;
        c->share = defaults.share;
        c->branch_emb = defaults.branch_emb;
        c->detach_primary = defaults.detach_primary;
        c->alpha_detach = defaults.alpha_detach;
    }
    return DT_OK;
}
