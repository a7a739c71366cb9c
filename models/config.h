/* Model configuration (SPEC §4): the keys, their defaults and their validation. */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

#include <stdint.h>

#include "core/error.h"

typedef enum { FAMILY_NANOGPT = 0, FAMILY_LLAMA = 1, FAMILY_MOE = 2 } model_family;
typedef enum { BRANCH_NONE = 0, BRANCH_DECODE = 1 } model_branch;
typedef enum { ROUTING_REPLAY = 0, ROUTING_OWN = 1 } model_routing;
typedef enum { BRANCH_EMB_OWN = 0, BRANCH_EMB_SHARED = 1 } model_branch_emb;
/* SPEC §6 options (declared; only their defaults are implemented). */
typedef enum { FFN_DEFAULT = 0, FFN_TRIPLU = 1, FFN_PROD2 = 2, FFN_PROD4 = 3 } model_ffn;
typedef enum { ATTN_RES_OFF = 0, ATTN_RES_FULL = 1, ATTN_RES_BLOCK = 2 } model_attn_res;
typedef enum { DISCO_GATE_FIXED = 0, DISCO_GATE_LEARNED = 1 } model_disco_gate;

enum { MODEL_TEXT_MAX = 256 }; /* longest TEXT value (layer_heads) plus its NUL */

/* The fields come from models/config_keys.def, one per key, in its order
 * (the order of /config attributes and of `dbranch info`). */
#define MODEL_FIELD_INT(ctype, name)   ctype name;
#define MODEL_FIELD_REAL(ctype, name)  ctype name;
#define MODEL_FIELD_FLAG(ctype, name)  ctype name;
#define MODEL_FIELD_ONOFF(ctype, name) ctype name; /* 1 = on */
#define MODEL_FIELD_WORD(ctype, name)  ctype name;
#define MODEL_FIELD_TEXT(ctype, name)  ctype name[MODEL_TEXT_MAX];

typedef struct model_config {
#define MODEL_KEY(name, kind, ctype, ...) MODEL_FIELD_##kind(ctype, name)
#include "models/config_keys.def"
#undef MODEL_KEY
    /* Which keys model_config_set() has set (bit i = model_key_id i).
     * Setting `family` re-applies that family's defaults to the keys not set
     * explicitly, so a config file may name the family before or after the
     * other keys. */
    uint64_t explicit_keys;
} model_config;

/* MODEL_KEY_family, MODEL_KEY_vocab_size, ...: a key's index. */
typedef enum {
#define MODEL_KEY(name, ...) MODEL_KEY_##name,
#include "models/config_keys.def"
#undef MODEL_KEY
    MODEL_KEY_COUNT
} model_key_id;

/* Defaults of SPEC §4 for a family (small sizes; callers set the sizes).
 * n_kv_head = 0 and d_ff = 0 mean "derive" (validate fills n_kv_head =
 * n_head, d_ff = 4C for nanogpt and the llama2.c width for llama/moe), and
 * top_k_branch = 0 means top_k, so changing d_model or n_head alone keeps a
 * consistent config. */
model_config model_config_default(model_family family);

/* Sets one key from its text value ("nanogpt", "384", "0.5", "on", ...).
 * Unknown keys and unparsable values are errors naming the key and value. */
dt_status model_config_set(model_config *config, const char *key, const char *value);
/* Is this one of the model keys of SPEC §4? */
int model_config_has_key(const char *key);

/* Every inconsistent combination is an error naming the key and value. Fills
 * neutral values for keys that do not apply (SPEC §4) before checking: the
 * derived sizes above, n_expert = top_k = top_k_branch = 0 for dense
 * families, and without a branch the branch keys' defaults (moe:
 * top_k_branch = top_k). */
dt_status model_config_validate(model_config *config);

/* The keys of SPEC §4 in a fixed order (the order of /config attributes and
 * of `dbranch info`): i in 0..model_config_key_count()-1. */
typedef enum { MODEL_KEY_INT = 0, MODEL_KEY_REAL = 1, MODEL_KEY_WORD = 2 } model_key_kind;
int model_config_key_count(void);
const char *model_config_key(int index);
/* How the key is stored in a checkpoint: int64, float64 or string attribute
 * (couple/share as "on"/"off"; tie_embeddings, detach_primary, alpha_detach as 0/1). */
model_key_kind model_config_key_kind(int index);
/* One line of help: the key, its values or range, its default (per family
 * when they differ) and what it means. */
void model_config_key_describe(int index, char *text, int capacity);
/* Must a model file hold this key? SPEC §4 keys yes; keys added later (SPEC
 * §6) load with their default from files written before them. */
int model_config_key_required(int index);
/* The index of a key, or -1. */
int model_config_find_key(const char *key);
/* The value of a key as text, in the form model_config_set() accepts
 * (integers "%lld", reals in the shortest form that round-trips exactly, words). */
dt_status model_config_get(const model_config *config, const char *key, char *text, int capacity);

/* Words for the enums (as stored in checkpoints). */
const char *model_family_name(model_family family);
const char *model_branch_name(model_branch branch);
const char *model_routing_name(model_routing routing);
const char *model_branch_emb_name(model_branch_emb branch_emb);

static inline int64_t model_head_dim(const model_config *c) { return c->d_model / c->n_head; }

#endif
