/* dbranch export: a model file into another tool's format (HF safetensors +
 * config.json, llama2.c model.bin + tokenizer.bin, GGUF). The formats live
 * in interop/; this file reads the arguments, loads the inputs and reports. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "data/tokens.h"
#include "interop/export.h"
#include "models/model_io.h"

static void print_help(void) {
    printf("usage: dbranch export --format hf|llama2c|gguf --model MODEL.h5 --out DIR|FILE [--tokens DATA.h5]\n"
           "\n"
           "Writes the model in another tool's format, fp32 (docs/INTEROP.md has the name maps):\n"
           "\n"
           "  --format hf       DIR/model.safetensors + DIR/config.json (GPT2LMHeadModel for nanogpt,\n"
           "                    LlamaForCausalLM for llama, MixtralForCausalLM for moe)\n"
           "  --format llama2c  DIR/model.bin (llama2.c's run.c, llama only) + DIR/tokenizer.bin with --tokens\n"
           "  --format gguf     FILE, GGUF v3 for llama.cpp (gpt2; llama, with experts for moe); the tokenizer\n"
           "                    (tokenizer.ggml.*) with --tokens\n"
           "  --model PATH      a model file or checkpoint\n"
           "  --out PATH        the directory (hf, llama2c; created) or file (gguf) to write\n"
           "  --tokens PATH     a token dataset file (dbranch prepare) whose tokenizer to export\n"
           "\n"
           "A Decode-Branch model exports its primary path; its branch tensors and its dbranch config go\n"
           "to branch.safetensors beside (DIR/branch.safetensors, or FILE with .gguf replaced by\n"
           ".branch.safetensors). share = off cannot be exported; llama2c needs the (dense) llama family\n"
           "with rope_theta 10000 and norm_eps 1e-5.\n");
}

static int fail(const char *message) {
    fprintf(stderr, "dbranch export: %s\n", message);
    return 1;
}

int cmd_export(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    const char *format_word = NULL, *model_path = NULL, *out_path = NULL, *tokens_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--format")   ? &format_word
                            : !strcmp(argv[i], "--model")  ? &model_path
                            : !strcmp(argv[i], "--out")    ? &out_path
                            : !strcmp(argv[i], "--tokens") ? &tokens_path
                                                           : NULL;
        if (!slot) {
            fprintf(stderr, "dbranch export: unknown argument '%s' (try dbranch export --help)\n", argv[i]);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dbranch export: %s needs a value\n", argv[i]);
            return 1;
        }
        *slot = argv[++i];
    }
    if (!format_word) return fail("--format hf|llama2c|gguf is required");
    if (!model_path) return fail("--model PATH is required");
    if (!out_path) return fail("--out PATH is required");
    interop_format format;
    if (interop_format_parse(format_word, &format) != DT_OK) return cli_fail("export");
    if (tokens_path && format == EXPORT_HF)
        return fail("--tokens: the hf export writes no tokenizer (only llama2c and gguf do)");

    /* What the format can express is checked on the config alone, before loading weights. */
    model_config config;
    if (model_load_config(&config, model_path) != DT_OK) return cli_fail("export");
    if (interop_check_exportable(&config, format) != DT_OK) {
        dt_error_context("%s: cannot export to %s", model_path, format_word);
        return cli_fail("export");
    }
    data_tokens tokens;
    memset(&tokens, 0, sizeof tokens);
    if (tokens_path && data_tokens_open(&tokens, tokens_path) != DT_OK) return cli_fail("export");
    model m;
    if (model_load(&m, model_path) != DT_OK) {
        if (tokens_path) data_tokens_close(&tokens);
        return cli_fail("export");
    }
    const data_tokenizer *tok = tokens_path ? &tokens.tokenizer : NULL;
    dt_status status = format == EXPORT_HF        ? interop_export_hf(&m, out_path)
                       : format == EXPORT_LLAMA2C ? interop_export_llama2c(&m, tok, out_path)
                                                  : interop_export_gguf(&m, tok, out_path);
    int code = 0;
    if (status != DT_OK) {
        code = cli_fail("export");
    } else {
        printf("dbranch export: %s -> %s (%s, %lld parameters of the primary path%s)\n", model_path, out_path,
               format_word, (long long)model_param_count(&m, PARAM_PRIMARY),
               m.config.branch == BRANCH_DECODE ? "; branch tensors in branch.safetensors" : "");
    }
    model_free(&m);
    if (tokens_path) data_tokens_close(&tokens);
    return code;
}
