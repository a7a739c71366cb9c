/* Name maps between dbranch's parameters (SPEC §3) and another format's
 * tensors, one table per (format, family), read in both directions: export
 * builds the format's tensors from the model, import fills the model's
 * parameters from the format's tensors, so the two cannot disagree on a name
 * or a layout. docs/INTEROP.md lists the tables. */
#ifndef INTEROP_NAME_MAP_H
#define INTEROP_NAME_MAP_H

#include "interop/export_tensors.h"
#include "models/model.h"

typedef enum {
    MAP_SAME = 0,  /* same shape and layout */
    MAP_TRANSPOSE, /* [out, in] written [in, out] (GPT-2 Conv1D) */
    MAP_ROPE_Q,    /* rows reordered per query head: interleaved pairs -> half-split (HF llama) */
    MAP_ROPE_K,    /* the same per kv head */
    MAP_QKV,       /* wq, wk, wv (or their biases) stacked: the '*' of `ours` is q, k, v */
    MAP_QKV_T,     /* stacked, then transposed (GPT-2 c_attn.weight) */
    MAP_EXPERTS,   /* our [E, rows, cols] as E tensors [rows, cols]; `theirs` has a second "%d", the expert */
} interop_map_kind;

typedef struct interop_map_entry {
    const char *theirs; /* the format's name; "%d" is the layer for per-layer entries */
    const char *ours;   /* the SPEC §3 name; "%d" likewise */
    interop_map_kind kind;
} interop_map_entry;

typedef struct interop_map {
    const char *format; /* for messages: "HF GPT2LMHeadModel", ... */
    const interop_map_entry *globals;
    int n_globals;
    const interop_map_entry *layer; /* per layer; "%d" is the layer */
    int n_layer;
    const interop_map_entry *layer_ffn; /* the FFN half when it is its own table (llama and moe share the rest) */
    int n_layer_ffn;
} interop_map;

typedef enum { MAP_HF = 0, MAP_GGUF = 1 } interop_map_format;

/* The table for a format and family (moe: HF MixtralForCausalLM, GGUF llama with experts). */
const interop_map *interop_map_for(interop_map_format format, model_family family);

/* Export: the model's primary path as the format's tensors. Entries whose
 * parameter the model lacks are skipped (lm_head when tied); a primary
 * parameter that no entry covers is an error (the map would drop it). */
dt_status interop_map_export(const model *m, const interop_map *map, interop_tensors *out);

/* Import: for each entry whose parameter the model has, fetch(theirs) gives
 * the format's tensor (NULL with an error set when it is missing); its shape
 * is checked against what the entry implies and its data, with the layout
 * change undone, is copied into the parameter. Errors name the tensor. */
typedef const interop_tensor *(*interop_fetch_fn)(void *context, const char *theirs);
dt_status interop_map_import(model *m, const interop_map *map, interop_fetch_fn fetch, void *context);

#endif
