/* dbranch analyze: probes of a model's internals on validation windows
 * (eval/probe.h): mean attention distance per layer, the RMS of every
 * sublayer's input stream, and with attn_res the routing weights; with
 * --bridge, the bridge-state probe of a looped model on two-hop records
 * (eval/bridge_probe.h, the DiscoLoop study). A trained
 * model (--model) or, from a config (--config), the SPEC init drawn from
 * --seed: the "at init" figures of the AttnRes study. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "data/tokens.h"
#include "eval/bridge_probe.h"
#include "eval/probe.h"
#include "kernels/gemm.h"
#include "models/config_file.h"
#include "models/model_io.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch analyze (--model MODEL.h5 | --config CONFIG.ini [--set key=value ...] [--seed S])\n"
                 "                       --data DATA.h5 [--split val|train] [--windows N] [--seq-len T]\n"
                 "                       [--threads K] [--bridge]\n\n"
                 "Teacher-forced probes over the first N windows of the split (default 16; --seq-len defaults\n"
                 "to the model's block_size), primary trajectory:\n"
                 "  layer L H D RA RF  per layer: its query heads H, the mean attention distance D (mean over\n"
                 "                     heads, positions and windows of sum_s a_ts (t - s)), and the RMS of the\n"
                 "                     stream entering its attention (RA) and FFN (RF) norms: the residual sum,\n"
                 "                     or with attn_res the route h_j\n"
                 "  final RMS          the RMS of the final norm's input\n"
                 "  route J N W...     attn_res only, one line per route (J = 2l attention, 2l+1 FFN, final):\n"
                 "                     the mean weight of each of its N sources, s_0 (the embedding) first,\n"
                 "                     over positions, windows and routing heads (1/N each at init)\n"
                 "--bridge: a looped model (n_loop = K > 1) on a two-hop record file (dbranch prepare --synthetic\n"
                 "two-hop), every two-hop query \"BOS e r1 r2 e''\" of the split (bridge b = r1(e), read off the\n"
                 "file's atomic facts; no --windows, --seq-len):\n"
                 "  bridge after k P E EO H HO LENS RMS  the stack's output after application k, at P = r1 (input\n"
                 "                     2) or r2 (input 3): mean cosine to tok_emb[b] (E), mean over the other\n"
                 "                     entities o of b's graph of the cosine to tok_emb[o] (EO), the same\n"
                 "                     against the LM head rows (H, HO), and the fraction of queries whose\n"
                 "                     head on Norm_f(state) has its argmax at b (LENS), and the state's\n"
                 "                     root mean square (RMS)\n"
                 "  bridge into k P ...  the same for the input of application k >= 2 (DiscoLoop's H~)\n"
                 "Lines starting with # are comments.\n\n"
                 "  --model MODEL.h5   a trained model or checkpoint\n"
                 "  --config FILE      a config as `dbranch train` reads it ([model] keys), initialised as SPEC\n"
                 "                     §3 from --seed (default 1); --set key=value overrides a model key\n");
}

/* Model from a config file: validated, SPEC init from seed. */
static dt_status model_from_config(model *m, const char *path, int argc, char **argv, uint64_t seed) {
    model_config config = model_config_default(FAMILY_NANOGPT);
    if (model_config_load_file(&config, path) != DT_OK) return DT_ERR;
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--set") && model_config_set_assignment(&config, argv[++i]) != DT_OK) return DT_ERR;
    if (model_create(m, &config) != DT_OK) return DT_ERR;
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    model_init_weights(m, &rng);
    return DT_OK;
}

static void print_result(const char *source, const char *data_path, const eval_probe_result *r) {
    const int64_t L = r->n_layer, J = 2 * L + 1;
    printf("# dbranch analyze %s on %s: %lld windows of %lld tokens\n", source, data_path, (long long)r->n_windows,
           (long long)r->seq_len);
    printf("# layer l heads attn_distance rms_attn_input rms_ffn_input\n");
    for (int64_t l = 0; l < L; l++)
        printf("layer %lld %lld %.4f %.6f %.6f\n", (long long)l, (long long)r->heads[l], r->attn_distance[l],
               r->input_rms[2 * l], r->input_rms[2 * l + 1]);
    printf("final %.6f\n", r->input_rms[2 * L]);
    if (!r->routed) return;
    printf("# route j n_sources weights (s_0 first), %lld routing heads\n", (long long)r->route_heads);
    for (int64_t j = 0; j < J; j++) {
        if (j == J - 1)
            printf("route final %lld", (long long)r->route_sources[j]);
        else
            printf("route %lld %lld", (long long)j, (long long)r->route_sources[j]);
        for (int64_t i = 0; i < r->route_sources[j]; i++)
            printf(" %.6f", r->route_weight[j * J + i]);
        printf("\n");
    }
}

static void print_bridge(const char *source, const char *data_path, data_split split, const eval_bridge_result *r) {
    static const char *position[EVAL_BRIDGE_POSITIONS] = {"r1", "r2"};
    printf("# dbranch analyze --bridge %s on %s (%s): %lld two-hop queries, %lld entities per graph, %lld relations, "
           "n_loop %lld, head %s\n",
           source, data_path, split == SPLIT_VAL ? "val" : "train", (long long)r->n_queries, (long long)r->entities,
           (long long)r->relations, (long long)r->n_loop, r->tied ? "tied (H = E)" : "untied");
    printf("# bridge after|into k position cos_emb cos_emb_other cos_head cos_head_other lens rms\n");
    for (int64_t s = 0; s < 2 * r->n_loop - 1; s++)
        for (int p = 0; p < EVAL_BRIDGE_POSITIONS; p++) {
            printf("bridge %s %lld %s", s < r->n_loop ? "after" : "into",
                   (long long)(s < r->n_loop ? s + 1 : s - r->n_loop + 2), position[p]);
            for (int k = 0; k < EVAL_BRIDGE_METRICS; k++)
                printf(" %.4f", eval_bridge_value(r, s, p, k));
            printf("\n");
        }
}

int cmd_analyze(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *model_path = NULL, *config_path = NULL, *data_path = NULL;
    eval_probe_options options = eval_probe_default_options();
    options.n_windows = 16;
    int64_t threads = 0, seed = 1;
    int seed_given = 0, sets = 0, bridge = 0, windowed = 0;
    cli_seen seen = {0};
    for (int i = 0; i < argc; i++) {
        const char *a, *v;
        if (!strcmp(argv[i], "--bridge")) {
            bridge = 1;
            continue;
        }
        if (cli_option_pair(argc, argv, &i, &seen, "--set", &a, &v) != DT_OK) {
            fprintf(stderr, "dbranch analyze: %s\n", dt_error_message());
            return 2;
        }
        dt_status ok = DT_OK;
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--config"))
            config_path = v;
        else if (!strcmp(a, "--data"))
            data_path = v;
        else if (!strcmp(a, "--set"))
            sets = 1;
        else if (!strcmp(a, "--split")) {
            if (!strcmp(v, "val"))
                options.split = SPLIT_VAL;
            else if (!strcmp(v, "train"))
                options.split = SPLIT_TRAIN;
            else
                ok = dt_errorf("--split '%s': expected val or train", v);
        } else if (!strcmp(a, "--windows") || !strcmp(a, "--seq-len")) {
            windowed = 1;
            ok = cli_parse_int(a, v, 1, INT64_MAX, a[2] == 'w' ? &options.n_windows : &options.seq_len);
        } else if (!strcmp(a, "--threads"))
            ok = cli_parse_int(a, v, 1, K_MAX_THREADS, &threads);
        else if (!strcmp(a, "--seed")) {
            seed_given = 1;
            ok = cli_parse_int(a, v, 0, INT64_MAX, &seed);
        } else {
            fprintf(stderr, "dbranch analyze: unknown option %s (try --help)\n", a);
            return 2;
        }
        if (ok != DT_OK) {
            fprintf(stderr, "dbranch analyze: %s\n", dt_error_message());
            return 2;
        }
    }
    if (!model_path == !config_path || !data_path) {
        fprintf(stderr, "dbranch analyze: --data and one of --model or --config are required (try --help)\n");
        return 2;
    }
    if (model_path && (sets || seed_given)) {
        fprintf(stderr, "dbranch analyze: --set and --seed apply to --config only (a model file is used as stored)\n");
        return 2;
    }
    if (bridge && windowed) {
        fprintf(stderr, "dbranch analyze: --bridge probes every two-hop query of the split; --windows and --seq-len do "
                        "not apply\n");
        return 2;
    }
    if (threads > 0) k_set_threads((int)threads);

    const char *source = model_path ? model_path : config_path;
    if (dt_check_input_file(source) != DT_OK) return cli_fail("analyze");
    model m;
    if ((model_path ? model_load(&m, model_path) : model_from_config(&m, config_path, argc, argv, (uint64_t)seed)) !=
        DT_OK)
        return cli_fail("analyze");
    data_tokens data;
    if (data_tokens_open(&data, data_path) != DT_OK) {
        model_free(&m);
        return cli_fail("analyze");
    }
    dt_status status;
    if (bridge) {
        eval_bridge_result r;
        if ((status = eval_bridge_run(&m, &data, options.split, &r)) == DT_OK) {
            print_bridge(source, data_path, options.split, &r);
            eval_bridge_result_free(&r);
        }
    } else {
        eval_probe_result r;
        if ((status = eval_probe_run(&m, &data, &options, &r)) == DT_OK) {
            print_result(source, data_path, &r);
            eval_probe_result_free(&r);
        }
    }
    data_tokens_close(&data);
    model_free(&m);
    return status == DT_OK ? 0 : cli_fail("analyze");
}
