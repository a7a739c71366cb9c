/* Exporting a dbranch model to other tools' formats (docs/INTEROP.md):
 * HuggingFace (model.safetensors + config.json), llama2.c (model.bin +
 * tokenizer.bin) and GGUF v3, all fp32. A Decode-Branch model exports its
 * primary path; its branch tensors and its dbranch config go to a side file
 * branch.safetensors. A model the format cannot express is an error naming
 * the reason, checked before anything is written. */
#ifndef INTEROP_EXPORT_H
#define INTEROP_EXPORT_H

#include "data/tokenizer.h"
#include "models/model.h"

typedef enum { EXPORT_HF = 0, EXPORT_LLAMA2C = 1, EXPORT_GGUF = 2 } interop_format;

/* "hf", "llama2c", "gguf" -> format; DT_ERR naming the word otherwise. */
dt_status interop_format_parse(const char *word, interop_format *format);
const char *interop_format_name(interop_format format);

/* Can this config be written in that format? DT_ERR with the reason. */
dt_status interop_check_exportable(const model_config *c, interop_format format);

/* HF: out_dir/model.safetensors, out_dir/config.json (out_dir is created); moe as Mixtral. */
dt_status interop_export_hf(const model *m, const char *out_dir);
/* llama2.c: out_dir/model.bin, and out_dir/tokenizer.bin when tok is given. */
dt_status interop_export_llama2c(const model *m, const data_tokenizer *tok, const char *out_dir);
/* GGUF: out_path; the tokenizer (tokenizer.ggml.*) when tok is given. */
dt_status interop_export_gguf(const model *m, const data_tokenizer *tok, const char *out_path);

/* The branch side file (PARAM_BRANCH tensors under their SPEC names, every
 * config key as __metadata__ "dbranch.<key>"). For a model without a branch
 * it removes a side file an earlier export left there. Called by the exporters. */
dt_status interop_write_branch_file(const model *m, const char *path);
/* Where the side file of an export goes: out_dir/branch.safetensors for the
 * directory formats, the GGUF path with ".gguf" replaced (or suffixed). */
void interop_branch_path(interop_format format, const char *out, char *path, size_t size);

#endif
