/* dbranch info: parameter counts, FLOPs and decode bytes of a model, from a
 * model file's /config or from a `key = value` INI config, with --set
 * overrides. The figures come from model_info_compute (models/model_info.h);
 * this file only reads the inputs and prints. Config files go through the one
 * reader every subcommand uses (models/config_file.h). */
#include <hdf5.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/input_file.h"
#include "kernels/isa.h"
#include "models/config_file.h"
#include "models/model_info.h"
#include "models/model_io.h"
#include "train/provenance.h"
#include "train/run_config.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch info MODEL.h5|CONFIG.ini [--set key=value ...] [--context N]\n"
                 "       dbranch info --keys | --cpu\n"
                 "\n"
                 "Prints parameter counts (primary, branch-only, total; per layer), FLOPs per\n"
                 "token for prefill and per decode step, and the bytes of weights and KV cache\n"
                 "one decode step reads (baseline, Decode-Branch grouped and un-grouped).\n"
                 "\n"
                 "  MODEL.h5        a model file or checkpoint (only /config is read)\n"
                 "  CONFIG.ini      a config file as `dbranch train` reads it: the [model] keys give\n"
                 "                  the model ([data] and [train] are the run's); a file without\n"
                 "                  `family =` is nanogpt\n"
                 "  --set key=value override one model key (repeatable; model.key=value too)\n"
                 "  --context N     KV positions read per decode step (default block_size)\n"
                 "  --keys          list the config keys ([model], [data], [train]): values or range,\n"
                 "                  default, meaning\n"
                 "  --cpu           what this machine runs: the kernels' instruction-set level, the\n"
                 "                  bf16 matrix units and engines, what train.precision = auto means\n"
                 "                  here, threads, and what the build was compiled for\n");
}

static int is_hdf5_file(const char *path) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* a text file is not an error here */
    return H5Fis_hdf5(path) > 0;
}

static int has_suffix(const char *text, const char *suffix) {
    size_t n = strlen(text), k = strlen(suffix);
    return n >= k && !strcmp(text + n - k, suffix);
}

/* "1234567" -> "1.23 M" */
static const char *human(double x, char *buf, size_t capacity) {
    const char *units[] = {"", " K", " M", " G", " T", " P"};
    int u = 0;
    while (x >= 1000.0 && u < 5) {
        x /= 1000.0;
        u++;
    }
    snprintf(buf, capacity, u ? "%.3g%s" : "%.0f%s", x, units[u]);
    return buf;
}

static void print_config(const model_config *c) {
    printf("config:");
    int column = 7;
    for (int i = 0; i < model_config_key_count(); i++) {
        char text[64], item[96];
        model_config_get(c, model_config_key(i), text, sizeof text);
        int n = snprintf(item, sizeof item, " %s=%s", model_config_key(i), text);
        if (column + n > 100) {
            printf("\n       ");
            column = 7;
        }
        printf("%s", item);
        column += n;
    }
    printf("\n");
}

static void print_info(const char *source, const model_info *info) {
    const model_config *c = &info->config;
    const int branch = c->branch == BRANCH_DECODE;
    char a[32], b[32], d[32];
    printf("model: %s (%s, branch %s)\n", source, model_family_name(c->family), model_branch_name(c->branch));
    print_config(c);

    printf("\nparameters                      primary         branch          total\n");
    printf("  per layer            %15lld %14lld %14lld\n", (long long)info->layer_params_primary,
           (long long)info->layer_params_branch, (long long)(info->layer_params_primary + info->layer_params_branch));
    char layers_label[32];
    snprintf(layers_label, sizeof layers_label, "x n_layer = %lld", (long long)c->n_layer);
    printf("  %-20s %15lld %14lld %14lld\n", layers_label, (long long)(c->n_layer * info->layer_params_primary),
           (long long)(c->n_layer * info->layer_params_branch),
           (long long)(c->n_layer * (info->layer_params_primary + info->layer_params_branch)));
    printf("  embeddings/head/norm %15lld %14lld %14lld\n", (long long)info->other_params_primary,
           (long long)info->other_params_branch, (long long)(info->other_params_primary + info->other_params_branch));
    printf("  total                %15lld %14lld %14lld   (%s, %s bytes fp32)\n", (long long)info->params_primary,
           (long long)info->params_branch, (long long)info->params_total,
           human((double)info->params_total, a, sizeof a), human(4.0 * (double)info->params_total, b, sizeof b));

    const int64_t hd = model_head_dim(c);
    printf("\nmatmul parameters per token: primary %lld", (long long)info->matmul_params_primary);
    if (branch) printf(", branch row %lld (no K/V projections)", (long long)info->matmul_params_branch);
    printf("\nprefill FLOPs/token (primary, T = block_size = %lld): 2 x %lld + %sn_layer x 4 x T x H*hd (%lld) = %.0f "
           "(%s)\n",
           (long long)c->block_size, (long long)info->matmul_params_primary, c->n_loop > 1 ? "n_loop x " : "",
           (long long)(c->n_head * hd), info->prefill_flops_per_token,
           human(info->prefill_flops_per_token, a, sizeof a));

    printf("\ndecode step at context %lld        FLOPs    weight bytes     KV bytes", (long long)info->context);
    if (c->family == FAMILY_MOE) printf("   experts/layer");
    printf("\n");
    printf("  baseline                %14s %15s %12s", human(info->decode_flops_baseline, a, sizeof a),
           human(info->weight_bytes_baseline, b, sizeof b), human(info->kv_bytes_baseline, d, sizeof d));
    if (c->family == FAMILY_MOE) printf("   %lld", (long long)info->experts_baseline);
    printf("\n");
    if (c->feedback) /* SPEC §6.5: soft and fused decoding fuse each step's input */
        printf("  soft feedback step      %14s %15s %12s\n",
               human(info->decode_flops_baseline + info->feedback_decode_flops, a, sizeof a),
               human(info->weight_bytes_baseline + info->feedback_weight_bytes, b, sizeof b),
               human(info->kv_bytes_baseline, d, sizeof d));
    if (branch) {
        printf("  Decode-Branch grouped   %14s %15s %12s", human(info->decode_flops_branch, a, sizeof a),
               human(info->weight_bytes_grouped, b, sizeof b), human(info->kv_bytes_grouped, d, sizeof d));
        if (c->family == FAMILY_MOE) printf("   %lld", (long long)info->experts_grouped);
        printf("\n  Decode-Branch un-grouped%14s %15s %12s", human(info->decode_flops_branch, a, sizeof a),
               human(info->weight_bytes_ungrouped, b, sizeof b), human(info->kv_bytes_ungrouped, d, sizeof d));
        if (c->family == FAMILY_MOE) printf("   %lld", (long long)info->experts_ungrouped);
        printf("\n  grouped / baseline: weight bytes x%.3f, FLOPs x%.3f; un-grouped / grouped (weights + KV) x%.3f\n",
               info->weight_bytes_grouped / info->weight_bytes_baseline,
               info->decode_flops_branch / info->decode_flops_baseline,
               (info->weight_bytes_ungrouped + info->kv_bytes_ungrouped) /
                   (info->weight_bytes_grouped + info->kv_bytes_grouped));
        if (c->family == FAMILY_MOE && c->share && c->branch_routing == ROUTING_OWN)
            printf("  (own routing: grouped experts are the upper bound min(n_expert, top_k + top_k_branch))\n");
    }
    printf("exact: prefill %.0f FLOPs/token; decode FLOPs %.0f", info->prefill_flops_per_token,
           info->decode_flops_baseline);
    if (branch) printf(" / %.0f", info->decode_flops_branch);
    printf("; weight bytes %.0f", info->weight_bytes_baseline);
    if (branch) printf(" / %.0f / %.0f", info->weight_bytes_grouped, info->weight_bytes_ungrouped);
    printf("; KV bytes %.0f", info->kv_bytes_baseline);
    if (branch) printf(" / %.0f / %.0f", info->kv_bytes_grouped, info->kv_bytes_ungrouped);
    printf("\n");
    /* --weights bf16 of generate / eval / bench decode: 2 bytes per matrix and embedding element */
    printf("bf16 decode weights (--weights bf16): weight bytes %.0f", info->weight_bytes_bf16_baseline);
    if (branch) printf(" / %.0f / %.0f", info->weight_bytes_bf16_grouped, info->weight_bytes_bf16_ungrouped);
    printf(" (x%.3f of float32)\n", info->weight_bytes_bf16_baseline / info->weight_bytes_baseline);
}

/* info --cpu: the machine as the kernels see it (the provenance record's fields). */
static int print_cpu(void) {
    train_provenance p;
    train_provenance_collect(&p, omp_get_max_threads());
    printf("cpu                %s\n", p.cpu);
    printf("kernel level       %s (this CPU runs up to %s; DBRANCH_ISA=avx2|scalar forces lower)\n", p.kernel_level,
           k_isa_name(k_isa_supported()));
    printf("avx512_bf16        %s\n", p.avx512_bf16 ? "yes" : "no");
    printf("amx_bf16           %s\n", p.amx_bf16 ? "yes" : "no");
    printf("bf16 products      %s\n", p.bf16_engine);
    printf("bf16 attention     %s\n", p.bf16_attention);
    const char *why;
    const train_precision decided = train_precision_auto(&why);
    printf("precision = auto   %s (%s)\n", train_precision_name(decided), why);
    printf("threads            %d (OpenMP's default; --threads or OMP_NUM_THREADS)\n", p.threads);
    printf("blis               %s\n", p.blis_version);
    printf("compiled for       avx512f %s, avx512_bf16 %s, amx_bf16 %s (-march; the kernels choose at run time)\n",
           p.built_avx512f ? "yes" : "no", p.built_avx512_bf16 ? "yes" : "no", p.built_amx_bf16 ? "yes" : "no");
    printf("source             %s (%s)\n", p.commit, p.version);
    return 0;
}

int cmd_info(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *path = NULL;
    long long context = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--cpu")) return print_cpu();
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--keys")) {
            char text[1024];
            printf("[model]\n");
            for (int k = 0; k < model_config_key_count(); k++) {
                model_config_key_describe(k, text, sizeof text);
                printf("%s\n", text);
            }
            printf("\n[data] and [train] (--set section.key=value)\n");
            for (int k = 0; k < train_config_key_count(); k++) {
                train_config_key_describe(k, text, sizeof text);
                printf("%s\n", text);
            }
            return 0;
        }
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--context")) {
            if (i + 1 >= argc) {
                dt_errorf("%s needs a value", argv[i]);
                return cli_fail("info");
            }
            if (!strcmp(argv[i], "--context")) {
                char *end = NULL;
                context = strtoll(argv[i + 1], &end, 10);
                if (argv[i + 1][0] == '\0' || *end != '\0' || context <= 0) {
                    dt_errorf("--context '%s' must be a positive integer", argv[i + 1]);
                    return cli_fail("info");
                }
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            dt_errorf("unknown option '%s' (try dbranch info --help)", argv[i]);
            return cli_fail("info");
        } else if (path) {
            dt_errorf("one model file or config expected, got '%s' and '%s'", path, argv[i]);
            return cli_fail("info");
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }

    model_config config = model_config_default(FAMILY_NANOGPT);
    if (access(path, F_OK) != 0) {
        dt_errorf("%s: no such file", path);
        return cli_fail("info");
    }
    if (dt_check_input_file(path) != DT_OK) return cli_fail("info"); /* before anything opens it (a FIFO would block) */
    if (has_suffix(path, ".h5") || has_suffix(path, ".hdf5") || is_hdf5_file(path)) {
        if (model_load_config(&config, path) != DT_OK) return cli_fail("info");
        /* nanogpt's n_kv_head and d_ff only mirror n_head and 4C: let them follow a --set of those. */
        if (config.family == FAMILY_NANOGPT) config.n_kv_head = config.d_ff = 0;
    } else if (model_config_load_file(&config, path) != DT_OK) {
        return cli_fail("info");
    }
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--set") && model_config_set_assignment(&config, argv[++i]) != DT_OK)
            return cli_fail("info");
    model_info info;
    if (model_info_compute(&config, context, &info) != DT_OK) return cli_fail("info");
    print_info(path, &info);
    return 0;
}
