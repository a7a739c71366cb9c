/* dbranch import: a HuggingFace model directory (model.safetensors +
 * config.json, GPT2LMHeadModel or LlamaForCausalLM, fp32) into a dbranch
 * model file. The format code lives in interop/import_hf.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "interop/import.h"
#include "models/model_io.h"

static void print_help(void) {
    printf(
        "usage: dbranch import --format hf --in DIR --out MODEL.h5\n"
        "\n"
        "Reads DIR/config.json and DIR/model.safetensors (F32, F16 or BF16) of a GPT2LMHeadModel (-> family nanogpt),\n"
        "LlamaForCausalLM (-> llama) or MixtralForCausalLM (-> moe) and writes a dbranch model file\n"
        "(/config + /params).\n"
        "DIR/branch.safetensors, as dbranch export writes it for a Decode-Branch model, restores the\n"
        "branch tensors and the full dbranch config, so export followed by import gives the model back.\n"
        "A missing, extra or mis-shaped tensor, a truncated file or a config key dbranch cannot honour\n"
        "(rope_scaling, attention biases on llama, ...) is an error naming the file and the tensor or key.\n"
        "docs/INTEROP.md has the name maps.\n");
}

int cmd_import(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    const char *format = NULL, *in_dir = NULL, *out_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--format") ? &format
                            : !strcmp(argv[i], "--in")   ? &in_dir
                            : !strcmp(argv[i], "--out")  ? &out_path
                                                         : NULL;
        if (!slot) {
            fprintf(stderr, "dbranch import: unknown argument '%s' (try dbranch import --help)\n", argv[i]);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dbranch import: %s needs a value\n", argv[i]);
            return 1;
        }
        *slot = argv[++i];
    }
    if (!format || strcmp(format, "hf")) {
        fprintf(stderr, "dbranch import: --format hf is required (the only format import reads)\n");
        return 1;
    }
    if (!in_dir || !out_path) {
        fprintf(stderr, "dbranch import: --in DIR and --out MODEL.h5 are required\n");
        return 1;
    }
    model m;
    if (interop_import_hf(&m, in_dir) != DT_OK) return cli_fail("import");
    int code = 0;
    if (model_save(&m, out_path) != DT_OK)
        code = cli_fail("import");
    else
        printf("dbranch import: %s -> %s (%s, %lld parameters)\n", in_dir, out_path, model_family_name(m.config.family),
               (long long)model_param_count(&m, -1));
    model_free(&m);
    return code;
}
