/* dbranch: one program, many subcommands (prepare, train, eval, bench, ...). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"
#include "eval/matvec.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"

static const cli_command commands[] = {
    {"prepare", "tokenize a corpus into a token dataset file", cmd_prepare},
    {"train", "train a model (baseline or Decode-Branch)", cmd_train},
    {"eval", "validation loss of a model on a dataset", cmd_eval},
    {"generate", "sample text from a model", cmd_generate},
    {"bench", "benchmarks: kernels, decode, train", cmd_bench},
    {"info", "parameter counts, FLOPs and decode bytes of a model", cmd_info},
    {"export", "write a model as HF safetensors, llama2.c model.bin or GGUF", cmd_export},
    {"import", "read HF safetensors + config.json into a model file", cmd_import},
    {"analyze", "probes of a model: attention distance, sublayer input RMS, attn_res routing", cmd_analyze},
    {"compare", "paired comparison of runs' final validation losses by arm and seed; sweep fits", cmd_compare},
    {"check-reference", "compare a model against a reference file (SPEC §5)", cmd_check_reference},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch <command> [options]   (dbranch <command> --help for details)\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++)
        fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n  --version        print the version\n");
    fprintf(out, "\nenvironment (for measuring kernels against each other; the defaults follow the CPU):\n"
                 "  DBRANCH_ISA=avx512|avx2|scalar                run the kernels at a lower instruction-set level\n"
                 "  DBRANCH_MATVEC=interleaved|rowwise            the decode matvec's walk at the AVX-512 level\n"
                 "  DBRANCH_BF16_GEMM=onednn|widen                the engine of bf16 training's matrix products\n"
                 "  DBRANCH_BF16_ATTENTION=amx|avx512_bf16|fp32   the engine of bf16 training's attention\n");
}

int cli_wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int cli_fail(const char *command) {
    fprintf(stderr, "dbranch %s: %s\n", command, dt_error_message());
    return 1;
}

/* What a command printed must have reached its destination: `dbranch info >
 * /dev/full` (or a full disk under a redirected report) is an error, not exit 0. */
static int checked_stdout(int code) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "dbranch: cannot write standard output (%s)\n", errno ? strerror(errno) : "write error");
        return code ? code : 1;
    }
    return code;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return checked_stdout(0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("dbranch %s\n", DBRANCH_VERSION);
        return checked_stdout(0);
    }
    /* DBRANCH_ISA: a lower kernel level (kernels/isa.h); DBRANCH_BF16_GEMM, DBRANCH_BF16_ATTENTION: the
     * bf16 product and attention engines (kernels/gemm_bf16.h, kernels/attention_amx.h); DBRANCH_MATVEC:
     * the decode matvec's walk (eval/matvec.h) */
    if (k_isa_from_environment() != DT_OK || k_bf16_gemm_from_environment() != DT_OK ||
        k_bf16_attention_from_environment() != DT_OK || eval_matvec_walk_from_environment() != DT_OK) {
        fprintf(stderr, "dbranch: %s\n", dt_error_message());
        return 2;
    }
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return checked_stdout(commands[i].run(argc - 2, argv + 2));
    fprintf(stderr, "dbranch: unknown command '%s' (try dbranch --help)\n", argv[1]);
    return 2;
}
