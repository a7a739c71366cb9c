/* What every export shares: the format names, the check of what a format can
 * express, the output directory and the branch side file. */
#include "interop/export.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "interop/safetensors.h"

static const char *const format_names[] = {"hf", "llama2c", "gguf"};

dt_status interop_format_parse(const char *word, interop_format *format) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(word, format_names[i])) return *format = (interop_format)i, DT_OK;
    return dt_errorf("unknown format '%s' (expected hf, llama2c or gguf)", word);
}

const char *interop_format_name(interop_format format) { return format_names[format]; }

dt_status interop_check_exportable(const model_config *c, interop_format format) {
    const char *name = interop_format_name(format);
    /* SPEC §6 architectures: none of the formats has a name for them */
    if (c->ffn != FFN_DEFAULT)
        return dt_errorf("ffn = %s cannot be exported to %s (no product FFN in its architectures)",
                         c->ffn == FFN_TRIPLU  ? "triplu"
                         : c->ffn == FFN_PROD2 ? "prod2"
                                               : "prod4",
                         name);
    if (c->layer_heads[0])
        return dt_errorf("layer_heads = %s cannot be exported to %s (one head count for every layer)", c->layer_heads,
                         name);
    if (c->attn_res != ATTN_RES_OFF)
        return dt_errorf("attn_res cannot be exported to %s (its architectures sum the residual stream)", name);
    if (c->n_loop > 1)
        return dt_errorf("n_loop = %lld cannot be exported to %s (its architectures apply each layer once)",
                         (long long)c->n_loop, name);
    if (c->alibi)
        return dt_errorf("alibi = 1 cannot be exported to %s (its architectures position by RoPE or pos_emb)", name);
    if (c->tok_emb_tables > 1)
        return dt_errorf("tok_emb_tables = %lld cannot be exported to %s (its architectures have one token embedding)",
                         (long long)c->tok_emb_tables, name);
    if (c->branch == BRANCH_DECODE && !c->share)
        return dt_errorf("share = off cannot be exported to %s (the branch's own matrices are a second model, "
                         "not side tensors)",
                         name);
    if (format == EXPORT_LLAMA2C) {
        if (c->family != FAMILY_LLAMA)
            return dt_errorf("family %s cannot be exported to llama2c (llama2.c runs the dense llama family only)",
                             model_family_name(c->family));
        if (c->rope_theta != 10000.0)
            return dt_errorf("rope_theta = %g cannot be exported to llama2c (run.c fixes theta at 10000)",
                             c->rope_theta);
        if (c->norm_eps != 1e-5)
            return dt_errorf("norm_eps = %g cannot be exported to llama2c (run.c fixes the RMSNorm eps at 1e-5)",
                             c->norm_eps);
    }
    if (c->family != FAMILY_NANOGPT && model_head_dim(c) % 2)
        return dt_errorf("head width %lld is odd: RoPE pairs need an even width", (long long)model_head_dim(c));
    return DT_OK;
}

void interop_branch_path(interop_format format, const char *out, char *path, size_t size) {
    if (format != EXPORT_GGUF) {
        snprintf(path, size, "%s/branch.safetensors", out);
        return;
    }
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        snprintf(path, size, "%.*s.branch.safetensors", (int)(n - 5), out);
    else
        snprintf(path, size, "%s.branch.safetensors", out);
}

dt_status interop_write_branch_file(const model *m, const char *path) {
    if (m->config.branch != BRANCH_DECODE) {
        /* A side file left by an earlier export of a branch model would make
         * import rebuild that branch around these weights: remove it. */
        if (remove(path) != 0 && errno != ENOENT) return dt_errorf("%s: cannot remove the stale side file", path);
        return DT_OK;
    }
    interop_tensors list = {0};
    dt_status status = DT_OK;
    for (int i = 0; i < m->n_params && status == DT_OK; i++)
        if (m->params[i].group == PARAM_BRANCH) status = interop_add(&list, m->params[i].name, m->params[i].tensor);
    enum { MAX_KEYS = 64 };
    char keys[MAX_KEYS][80], values[MAX_KEYS][64];
    const char *pairs[MAX_KEYS][2];
    int n = model_config_key_count() < MAX_KEYS ? model_config_key_count() : MAX_KEYS;
    for (int i = 0; i < n && status == DT_OK; i++) {
        snprintf(keys[i], sizeof keys[i], "dbranch.%s", model_config_key(i));
        status = model_config_get(&m->config, model_config_key(i), values[i], sizeof values[i]);
        pairs[i][0] = keys[i], pairs[i][1] = values[i];
    }
    if (status == DT_OK) status = interop_safetensors_write(path, &list, (const char *const(*)[2])pairs, n);
    interop_tensors_free(&list);
    return status;
}
