/* Importing HuggingFace models (model.safetensors + config.json of a
 * GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM, fp32) into a dbranch model, through
 * the same name tables as export (name_map.c), so export -> import is the
 * identity. A branch.safetensors beside (written by dbranch export) restores
 * the Decode-Branch tensors and the full dbranch config. Strict: a config key
 * the model cannot honour, a missing, extra or mis-shaped tensor is an error
 * naming the file and the key or tensor. */
#ifndef INTEROP_IMPORT_H
#define INTEROP_IMPORT_H

#include "models/model.h"

/* Creates *m (the caller frees with model_free) from in_dir. */
dt_status interop_import_hf(model *m, const char *in_dir);

/* Only the config.json of in_dir as a validated dbranch config. */
dt_status interop_hf_read_config(const char *path, model_config *config);

#endif
