/* Model configuration (SPEC §4): defaults per family, parsing of the keys from
 * text (config files, --set, checkpoint attributes all go through
 * model_config_set), and validation that fills the neutral values and rejects
 * every inconsistent combination with a message naming the key and value.
 *
 * One table lists the keys in SPEC order; checkpoints, `dbranch info` and the
 * parser all walk it, so a key cannot be written but not read. */
#include "models/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    KEY_FAMILY,
    KEY_VOCAB_SIZE,
    KEY_BLOCK_SIZE,
    KEY_N_LAYER,
    KEY_N_HEAD,
    KEY_N_KV_HEAD,
    KEY_D_MODEL,
    KEY_D_FF,
    KEY_N_EXPERT,
    KEY_TOP_K,
    KEY_TOP_K_BRANCH,
    KEY_BRANCH,
    KEY_BRANCH_ROUTING,
    KEY_MIX_ALPHA_MIN,
    KEY_MIX_ALPHA_MAX,
    KEY_AUX_LOSS_COEF,
    KEY_TIE_EMBEDDINGS,
    KEY_NORM_EPS,
    KEY_ROPE_THETA,
    KEY_COUPLE,
    KEY_SHARE,
    KEY_BRANCH_EMB,
    KEY_DETACH_PRIMARY,
    KEY_ALPHA_DETACH,
    KEY_COUNT
} key_id;

/* How a key's text is parsed: sizes are integers, flags 0/1, switches on/off. */
typedef enum { PARSE_SIZE, PARSE_REAL, PARSE_FLAG, PARSE_ONOFF, PARSE_ENUM } parse_kind;

typedef struct {
    const char *name;
    parse_kind parse;
    model_key_kind stored; /* attribute type in a checkpoint */
} key_spec;

static const key_spec keys[KEY_COUNT] = {
    [KEY_FAMILY] = {"family", PARSE_ENUM, MODEL_KEY_WORD},
    [KEY_VOCAB_SIZE] = {"vocab_size", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_BLOCK_SIZE] = {"block_size", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_N_LAYER] = {"n_layer", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_N_HEAD] = {"n_head", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_N_KV_HEAD] = {"n_kv_head", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_D_MODEL] = {"d_model", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_D_FF] = {"d_ff", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_N_EXPERT] = {"n_expert", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_TOP_K] = {"top_k", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_TOP_K_BRANCH] = {"top_k_branch", PARSE_SIZE, MODEL_KEY_INT},
    [KEY_BRANCH] = {"branch", PARSE_ENUM, MODEL_KEY_WORD},
    [KEY_BRANCH_ROUTING] = {"branch_routing", PARSE_ENUM, MODEL_KEY_WORD},
    [KEY_MIX_ALPHA_MIN] = {"mix_alpha_min", PARSE_REAL, MODEL_KEY_REAL},
    [KEY_MIX_ALPHA_MAX] = {"mix_alpha_max", PARSE_REAL, MODEL_KEY_REAL},
    [KEY_AUX_LOSS_COEF] = {"aux_loss_coef", PARSE_REAL, MODEL_KEY_REAL},
    [KEY_TIE_EMBEDDINGS] = {"tie_embeddings", PARSE_FLAG, MODEL_KEY_INT},
    [KEY_NORM_EPS] = {"norm_eps", PARSE_REAL, MODEL_KEY_REAL},
    [KEY_ROPE_THETA] = {"rope_theta", PARSE_REAL, MODEL_KEY_REAL},
    [KEY_COUPLE] = {"couple", PARSE_ONOFF, MODEL_KEY_WORD},
    [KEY_SHARE] = {"share", PARSE_ONOFF, MODEL_KEY_WORD},
    [KEY_BRANCH_EMB] = {"branch_emb", PARSE_ENUM, MODEL_KEY_WORD},
    [KEY_DETACH_PRIMARY] = {"detach_primary", PARSE_FLAG, MODEL_KEY_INT},
    [KEY_ALPHA_DETACH] = {"alpha_detach", PARSE_FLAG, MODEL_KEY_INT},
};

/* Sizes beyond this are typos, and keeping every size below 2^31 keeps the
 * products of three sizes (expert tensors) inside int64. */
static const int64_t max_size = INT64_C(1) << 31;

int model_config_key_count(void) { return KEY_COUNT; }
const char *model_config_key(int index) { return index >= 0 && index < KEY_COUNT ? keys[index].name : NULL; }
model_key_kind model_config_key_kind(int index) {
    return index >= 0 && index < KEY_COUNT ? keys[index].stored : MODEL_KEY_WORD;
}

static int find_key(const char *key) {
    for (int i = 0; i < KEY_COUNT; i++)
        if (!strcmp(keys[i].name, key)) return i;
    return -1;
}

int model_config_has_key(const char *key) { return key && find_key(key) >= 0; }

const char *model_family_name(model_family family) {
    switch (family) {
    case FAMILY_NANOGPT: return "nanogpt";
    case FAMILY_LLAMA: return "llama";
    case FAMILY_MOE: return "moe";
    }
    return "?";
}

const char *model_branch_name(model_branch branch) { return branch == BRANCH_DECODE ? "decode" : "none"; }
const char *model_routing_name(model_routing routing) { return routing == ROUTING_OWN ? "own" : "replay"; }
const char *model_branch_emb_name(model_branch_emb branch_emb) {
    return branch_emb == BRANCH_EMB_SHARED ? "shared" : "own";
}

model_config model_config_default(model_family family) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.family = family;
    c.vocab_size = 256; /* the byte tokenizer */
    c.block_size = 256;
    c.n_layer = 4;
    c.n_head = 4;
    c.n_kv_head = 0; /* derive: n_head */
    c.d_model = 128;
    c.d_ff = 0; /* derive: 4C (nanogpt) or the llama2.c width (llama, moe) */
    c.n_expert = family == FAMILY_MOE ? 4 : 0;
    c.top_k = family == FAMILY_MOE ? 2 : 0;
    c.top_k_branch = 0; /* derive: top_k */
    c.branch = BRANCH_NONE;
    c.branch_routing = ROUTING_REPLAY;
    c.mix_alpha_min = 0.5;
    c.mix_alpha_max = 1.0;
    c.aux_loss_coef = 0.01;
    c.tie_embeddings = family == FAMILY_NANOGPT; /* GPT-2 ties; llama and Mixtral do not */
    c.norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.couple = 1;
    c.share = 1;
    c.branch_emb = BRANCH_EMB_OWN;
    c.detach_primary = 0;
    c.alpha_detach = 0;
    c.explicit_keys = 0;
    return c;
}

/* Copies one key's value; used to re-apply family defaults. */
static void copy_key(model_config *dst, const model_config *src, key_id id) {
    switch (id) {
    case KEY_FAMILY: dst->family = src->family; break;
    case KEY_VOCAB_SIZE: dst->vocab_size = src->vocab_size; break;
    case KEY_BLOCK_SIZE: dst->block_size = src->block_size; break;
    case KEY_N_LAYER: dst->n_layer = src->n_layer; break;
    case KEY_N_HEAD: dst->n_head = src->n_head; break;
    case KEY_N_KV_HEAD: dst->n_kv_head = src->n_kv_head; break;
    case KEY_D_MODEL: dst->d_model = src->d_model; break;
    case KEY_D_FF: dst->d_ff = src->d_ff; break;
    case KEY_N_EXPERT: dst->n_expert = src->n_expert; break;
    case KEY_TOP_K: dst->top_k = src->top_k; break;
    case KEY_TOP_K_BRANCH: dst->top_k_branch = src->top_k_branch; break;
    case KEY_BRANCH: dst->branch = src->branch; break;
    case KEY_BRANCH_ROUTING: dst->branch_routing = src->branch_routing; break;
    case KEY_MIX_ALPHA_MIN: dst->mix_alpha_min = src->mix_alpha_min; break;
    case KEY_MIX_ALPHA_MAX: dst->mix_alpha_max = src->mix_alpha_max; break;
    case KEY_AUX_LOSS_COEF: dst->aux_loss_coef = src->aux_loss_coef; break;
    case KEY_TIE_EMBEDDINGS: dst->tie_embeddings = src->tie_embeddings; break;
    case KEY_NORM_EPS: dst->norm_eps = src->norm_eps; break;
    case KEY_ROPE_THETA: dst->rope_theta = src->rope_theta; break;
    case KEY_COUPLE: dst->couple = src->couple; break;
    case KEY_SHARE: dst->share = src->share; break;
    case KEY_BRANCH_EMB: dst->branch_emb = src->branch_emb; break;
    case KEY_DETACH_PRIMARY: dst->detach_primary = src->detach_primary; break;
    case KEY_ALPHA_DETACH: dst->alpha_detach = src->alpha_detach; break;
    case KEY_COUNT: break;
    }
}

/* Surrounding blanks are forgiven (INI values, hand-typed --set); nothing else is. */
static void trim(const char *value, char *out, size_t capacity) {
    while (*value && isspace((unsigned char)*value)) value++;
    size_t n = strlen(value);
    while (n > 0 && isspace((unsigned char)value[n - 1])) n--;
    if (n >= capacity) n = capacity - 1;
    memcpy(out, value, n);
    out[n] = '\0';
}

static dt_status parse_int(const char *key, const char *text, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] == '\0' || end == text || *end != '\0') return dt_errorf("%s = '%s' is not an integer", key, text);
    if (errno == ERANGE || v > max_size || v < -max_size) return dt_errorf("%s = '%s' is out of range", key, text);
    *out = (int64_t)v;
    return DT_OK;
}

static dt_status parse_real(const char *key, const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (text[0] == '\0' || end == text || *end != '\0') return dt_errorf("%s = '%s' is not a number", key, text);
    if (!isfinite(v) || errno == ERANGE) return dt_errorf("%s = '%s' is not a finite number", key, text);
    *out = v;
    return DT_OK;
}

/* Flags (tie_embeddings, detach_primary, alpha_detach) are 0|1 in SPEC §4;
 * the on/off switches (couple, share) are words. Each accepts the other
 * spelling too, because users mix them up and the meaning is unambiguous. */
static dt_status parse_bool(const char *key, const char *text, int *out) {
    if (!strcmp(text, "1") || !strcmp(text, "on")) *out = 1;
    else if (!strcmp(text, "0") || !strcmp(text, "off")) *out = 0;
    else return dt_errorf("%s = '%s' must be on|off (or 1|0)", key, text);
    return DT_OK;
}

/* The field behind a numeric key (NULL for the word keys). */
static int64_t *size_field(model_config *c, key_id id) {
    switch (id) {
    case KEY_VOCAB_SIZE: return &c->vocab_size;
    case KEY_BLOCK_SIZE: return &c->block_size;
    case KEY_N_LAYER: return &c->n_layer;
    case KEY_N_HEAD: return &c->n_head;
    case KEY_N_KV_HEAD: return &c->n_kv_head;
    case KEY_D_MODEL: return &c->d_model;
    case KEY_D_FF: return &c->d_ff;
    case KEY_N_EXPERT: return &c->n_expert;
    case KEY_TOP_K: return &c->top_k;
    case KEY_TOP_K_BRANCH: return &c->top_k_branch;
    default: return NULL;
    }
}

static double *real_field(model_config *c, key_id id) {
    switch (id) {
    case KEY_MIX_ALPHA_MIN: return &c->mix_alpha_min;
    case KEY_MIX_ALPHA_MAX: return &c->mix_alpha_max;
    case KEY_AUX_LOSS_COEF: return &c->aux_loss_coef;
    case KEY_NORM_EPS: return &c->norm_eps;
    case KEY_ROPE_THETA: return &c->rope_theta;
    default: return NULL;
    }
}

static int *bool_field(model_config *c, key_id id) {
    switch (id) {
    case KEY_TIE_EMBEDDINGS: return &c->tie_embeddings;
    case KEY_COUPLE: return &c->couple;
    case KEY_SHARE: return &c->share;
    case KEY_DETACH_PRIMARY: return &c->detach_primary;
    case KEY_ALPHA_DETACH: return &c->alpha_detach;
    default: return NULL;
    }
}

dt_status model_config_set(model_config *config, const char *key, const char *value) {
    if (!key) return dt_errorf("model key is NULL");
    int id = find_key(key);
    if (id < 0) return dt_errorf("unknown model key '%s'", key);
    if (!value) return dt_errorf("%s has no value", key);
    char text[256];
    trim(value, text, sizeof text);

    dt_status status = DT_OK;
    switch (keys[id].parse) {
    case PARSE_SIZE: status = parse_int(key, text, size_field(config, (key_id)id)); break;
    case PARSE_REAL: status = parse_real(key, text, real_field(config, (key_id)id)); break;
    case PARSE_FLAG:
    case PARSE_ONOFF: status = parse_bool(key, text, bool_field(config, (key_id)id)); break;
    case PARSE_ENUM:
        if (id == KEY_FAMILY) {
            model_family family;
            if (!strcmp(text, "nanogpt")) family = FAMILY_NANOGPT;
            else if (!strcmp(text, "llama")) family = FAMILY_LLAMA;
            else if (!strcmp(text, "moe")) family = FAMILY_MOE;
            else return dt_errorf("family = '%s' must be nanogpt|llama|moe", text);
            /* The keys not set explicitly take the new family's defaults
             * (tie_embeddings, n_expert, top_k), whatever order a file uses. */
            model_config defaults = model_config_default(family);
            for (int i = 0; i < KEY_COUNT; i++)
                if (!(config->explicit_keys & (UINT32_C(1) << i))) copy_key(config, &defaults, (key_id)i);
            config->family = family;
        } else if (id == KEY_BRANCH) {
            if (!strcmp(text, "none")) config->branch = BRANCH_NONE;
            else if (!strcmp(text, "decode")) config->branch = BRANCH_DECODE;
            else return dt_errorf("branch = '%s' must be none|decode", text);
        } else if (id == KEY_BRANCH_ROUTING) {
            if (!strcmp(text, "replay")) config->branch_routing = ROUTING_REPLAY;
            else if (!strcmp(text, "own")) config->branch_routing = ROUTING_OWN;
            else return dt_errorf("branch_routing = '%s' must be replay|own", text);
        } else { /* KEY_BRANCH_EMB */
            if (!strcmp(text, "own")) config->branch_emb = BRANCH_EMB_OWN;
            else if (!strcmp(text, "shared")) config->branch_emb = BRANCH_EMB_SHARED;
            else return dt_errorf("branch_emb = '%s' must be own|shared", text);
        }
        break;
    }
    if (status != DT_OK) return status;
    config->explicit_keys |= UINT32_C(1) << id;
    return DT_OK;
}

/* The shortest "%.Ng" that reads back as the same double: 1e-05, not 1.0000000000000001e-05. */
static void format_real(double value, char *text, int capacity) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(text, capacity, "%.*g", digits, value);
        if (strtod(text, NULL) == value) return;
    }
}

dt_status model_config_get(const model_config *config, const char *key, char *text, int capacity) {
    int id = key ? find_key(key) : -1;
    if (id < 0) return dt_errorf("unknown model key '%s'", key ? key : "(null)");
    if (!text || capacity < 2) return dt_errorf("model key '%s': no room for its value", key);
    model_config *c = (model_config *)config; /* the field helpers are shared with the setter; nothing is written */
    switch (keys[id].parse) {
    case PARSE_SIZE: snprintf(text, capacity, "%lld", (long long)*size_field(c, (key_id)id)); break;
    case PARSE_REAL: format_real(*real_field(c, (key_id)id), text, capacity); break;
    case PARSE_FLAG: snprintf(text, capacity, "%d", *bool_field(c, (key_id)id)); break;
    case PARSE_ONOFF: snprintf(text, capacity, "%s", *bool_field(c, (key_id)id) ? "on" : "off"); break;
    case PARSE_ENUM:
        snprintf(text, capacity, "%s",
                 id == KEY_FAMILY           ? model_family_name(c->family)
                 : id == KEY_BRANCH         ? model_branch_name(c->branch)
                 : id == KEY_BRANCH_ROUTING ? model_routing_name(c->branch_routing)
                                            : model_branch_emb_name(c->branch_emb));
        break;
    }
    return DT_OK;
}

/* llama2.c's FFN width for d_ff = 0: two thirds of 4C (SwiGLU has three
 * matrices instead of two, so this keeps the MLP's parameter count at about
 * 8C^2), rounded up to a multiple of 32. */
static int64_t llama_ffn_width(int64_t d_model) {
    int64_t hidden = 2 * (4 * d_model) / 3;
    return (hidden + 31) / 32 * 32;
}

static dt_status check_positive(const char *key, int64_t value) {
    if (value <= 0) return dt_errorf("%s = %lld must be positive", key, (long long)value);
    if (value > max_size) return dt_errorf("%s = %lld is too large", key, (long long)value);
    return DT_OK;
}

static dt_status check_bool(const char *key, int value) {
    if (value != 0 && value != 1) return dt_errorf("%s = %d must be 0 or 1", key, value);
    return DT_OK;
}

dt_status model_config_validate(model_config *c) {
    /* The struct may have been filled by hand: enums and flags first. */
    if ((int)c->family < FAMILY_NANOGPT || (int)c->family > FAMILY_MOE)
        return dt_errorf("family = %d is not nanogpt|llama|moe", (int)c->family);
    if ((int)c->branch != BRANCH_NONE && (int)c->branch != BRANCH_DECODE)
        return dt_errorf("branch = %d is not none|decode", (int)c->branch);
    if ((int)c->branch_routing != ROUTING_REPLAY && (int)c->branch_routing != ROUTING_OWN)
        return dt_errorf("branch_routing = %d is not replay|own", (int)c->branch_routing);
    if ((int)c->branch_emb != BRANCH_EMB_OWN && (int)c->branch_emb != BRANCH_EMB_SHARED)
        return dt_errorf("branch_emb = %d is not own|shared", (int)c->branch_emb);
    if (check_bool("tie_embeddings", c->tie_embeddings) || check_bool("couple", c->couple) ||
        check_bool("share", c->share) || check_bool("detach_primary", c->detach_primary) ||
        check_bool("alpha_detach", c->alpha_detach))
        return DT_ERR;

    if (check_positive("vocab_size", c->vocab_size) || check_positive("block_size", c->block_size) ||
        check_positive("n_layer", c->n_layer) || check_positive("n_head", c->n_head) ||
        check_positive("d_model", c->d_model))
        return DT_ERR;
    /* 0 means "derive" for these (see model_config_default); negative never makes sense. */
    if (c->n_kv_head < 0) return dt_errorf("n_kv_head = %lld must be positive (or 0 for n_head)", (long long)c->n_kv_head);
    if (c->d_ff < 0) return dt_errorf("d_ff = %lld must be positive (or 0 for the family's width)", (long long)c->d_ff);

    const char *family = model_family_name(c->family);
    if (c->d_model % c->n_head != 0)
        return dt_errorf("d_model = %lld is not divisible by n_head = %lld", (long long)c->d_model, (long long)c->n_head);

    if (c->family == FAMILY_NANOGPT) {
        /* GPT-2 has no GQA and a fixed 4C MLP: these keys only carry neutral values. */
        if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
        if (c->n_kv_head != c->n_head)
            return dt_errorf("n_kv_head = %lld: family nanogpt has no grouped-query attention (n_kv_head must equal "
                             "n_head = %lld)",
                             (long long)c->n_kv_head, (long long)c->n_head);
        if (c->d_ff == 0) c->d_ff = 4 * c->d_model;
        if (c->d_ff != 4 * c->d_model)
            return dt_errorf("d_ff = %lld: family nanogpt's MLP width is fixed at 4*d_model = %lld (leave d_ff unset)",
                             (long long)c->d_ff, (long long)(4 * c->d_model));
    } else {
        if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
        if (c->d_ff == 0) c->d_ff = llama_ffn_width(c->d_model);
        if (check_positive("n_kv_head", c->n_kv_head) || check_positive("d_ff", c->d_ff)) return DT_ERR;
        if (c->n_head % c->n_kv_head != 0)
            return dt_errorf("n_head = %lld is not divisible by n_kv_head = %lld", (long long)c->n_head,
                             (long long)c->n_kv_head);
        if (model_head_dim(c) % 2 != 0)
            return dt_errorf("head_dim = d_model/n_head = %lld must be even for RoPE (family %s)",
                             (long long)model_head_dim(c), family);
    }

    if (c->family == FAMILY_MOE) {
        if (c->n_expert <= 0) return dt_errorf("n_expert = %lld must be positive for family moe", (long long)c->n_expert);
        if (c->n_expert > max_size) return dt_errorf("n_expert = %lld is too large", (long long)c->n_expert);
        if (c->top_k < 1 || c->top_k > c->n_expert)
            return dt_errorf("top_k = %lld must be in 1..n_expert (%lld)", (long long)c->top_k, (long long)c->n_expert);
        if (c->top_k_branch == 0 || c->branch == BRANCH_NONE) c->top_k_branch = c->top_k;
        if (c->top_k_branch < 1 || c->top_k_branch > c->n_expert)
            return dt_errorf("top_k_branch = %lld must be in 1..n_expert (%lld) (or 0 for top_k)",
                             (long long)c->top_k_branch, (long long)c->n_expert);
    } else {
        c->n_expert = c->top_k = c->top_k_branch = 0;
    }

    /* Reals: checked even without a branch, so a typo never hides. */
    if (!(c->mix_alpha_min >= 0.0 && c->mix_alpha_min <= 1.0))
        return dt_errorf("mix_alpha_min = %g must be in [0, 1]", c->mix_alpha_min);
    if (!(c->mix_alpha_max >= 0.0 && c->mix_alpha_max <= 1.0))
        return dt_errorf("mix_alpha_max = %g must be in [0, 1]", c->mix_alpha_max);
    if (c->mix_alpha_min > c->mix_alpha_max)
        return dt_errorf("mix_alpha_min = %g is larger than mix_alpha_max = %g", c->mix_alpha_min, c->mix_alpha_max);
    if (!(c->aux_loss_coef >= 0.0 && isfinite(c->aux_loss_coef)))
        return dt_errorf("aux_loss_coef = %g must be >= 0", c->aux_loss_coef);
    if (!(c->norm_eps > 0.0 && isfinite(c->norm_eps))) return dt_errorf("norm_eps = %g must be > 0", c->norm_eps);
    if (!(c->rope_theta > 0.0 && isfinite(c->rope_theta)))
        return dt_errorf("rope_theta = %g must be > 0", c->rope_theta);

    /* The largest tensor (expert weights, embeddings) must stay far inside int64 and memory. */
    double largest = (double)c->vocab_size * (double)c->d_model;
    double experts = (double)(c->n_expert > 0 ? c->n_expert : 1) * (double)c->d_ff * (double)c->d_model;
    if (experts > largest) largest = experts;
    if (largest > 1e13) return dt_errorf("model too large: one weight tensor would hold %.3g values", largest);

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
