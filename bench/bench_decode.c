/* dbranch bench decode: baseline vs grouped vs un-grouped Decode-Branch decode
 * on the KV-cache engine (eval/decode.h), against the machine's read
 * bandwidth measured in the same run (bench/bandwidth.h).
 *
 * Decode at batch 1 is bound by memory traffic: every step streams all the
 * weights it touches. So beside ms/token we report the bytes a step reads
 * (counted from the shapes of what ran), the effective GB/s, and that as a
 * fraction of the probe. Steps of the three modes are interleaved token by
 * token (in a rotating order), with one probe pass per round, so slow drifts
 * of a shared machine hit all three modes and the yardstick alike and the
 * ratios are measured in one run.
 *
 * --weights fp32,bf16 adds a second weight type (eval/decode_weights.h): an
 * arm is a (weights, mode) pair and the arms' steps interleave the same way,
 * so the bf16 / fp32 ratio of each mode is measured in one run too. The bf16
 * view rounds the model's float32 matrices to bf16 values in place, so both
 * arms decode the same numbers (the fp32 arm reads them in 4 bytes). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bandwidth.h"
#include "bench/bench.h"
#include "bench/llama_table.h"
#include "bench/timing.h"
#include "core/rng.h"
#include "eval/decode.h"
#include "eval/decode_weights.h"
#include "eval/matvec.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "models/config_file.h"
#include "models/model_io.h"
#include "train/provenance.h"

enum { N_MODES = 3, MAX_WEIGHTS = 2, N_ARMS = N_MODES * MAX_WEIGHTS, MAX_SETS = 32, DEFAULT_PROBE_EVERY = 4 };

typedef struct bench_options {
    const char *model_path;
    const char *config_path;
    const char *sets[MAX_SETS]; /* KEY=VALUE overrides of the config file */
    int n_sets;
    int64_t prompt_len;
    int64_t n_tokens;
    int threads;
    int json;
    eval_matvec_path matvec;
    int64_t probe_mib;
    int64_t probe_every; /* decode rounds per interleaved probe pass; 0: probe only before and after */
    int probe_passes;
    int prefill_repeats;
    int matvec_check;
    uint64_t seed;
    int table_llama;               /* --table llama: the llama-bench markdown table on stdout (bench/llama_table.h) */
    int repetitions;               /* --repetitions R: prefill and tg repetitions of the table (default 5) */
    dt_dtype weights[MAX_WEIGHTS]; /* --weights fp32 | bf16 | fp32,bf16 (default fp32) */
    int n_weights;
    eval_feedback_mode feedback; /* --feedback: latent feedback decoding of every session (SPEC §6.5) */
} bench_options;

typedef struct mode_result {
    eval_decode_mode mode;
    dt_dtype weights;         /* the arm's weight type */
    char label[32];           /* "grouped" or, with two weight types, "grouped bf16" */
    double prefill_seconds;   /* median */
    double step_seconds;      /* median over decode steps */
    double best_step_seconds; /* fastest decode step */
    double mean_step_seconds; /* total decode time / steps: what a generation loop's tokens/s sees */
    double bytes_per_token;   /* mean weight + KV bytes read per step */
    double weight_bytes, kv_bytes;
    double matrix_loads, expert_loads; /* mean per step */
} mode_result;

static void usage(FILE *out) {
    fprintf(out,
            "usage: dbranch bench decode (--model CKPT.h5 | --config FILE.ini [--set KEY=VALUE]...)\n"
            "                            [--prompt-len P] [--tokens N] [--threads K] [--json]\n"
            "                            [--matvec own|blis] [--matvec-check] [--probe-mib M] [--probe-every R]\n"
            "                            [--seed S] [--table llama] [--repetitions R] [--weights fp32|bf16|fp32,bf16]\n"
            "                            [--feedback standard|soft|fused]\n\n"
            "Random weights (model_init_weights) with --config. Reports, for baseline (primary path only),\n"
            "grouped and un-grouped Decode-Branch decode: prefill tokens/s, decode ms/token (median),\n"
            "bytes read per token, effective GB/s against a read-bandwidth probe run in the same process,\n"
            "and the ratios to baseline. --json prints JSON on stdout (the table goes to stderr).\n"
            "--feedback (models with feedback = 1): soft steps fuse the previous top state into the input\n"
            "(two C x C products per step); fused also runs a feedback pass over the prompt.\n"
            "--matvec-check also times every primary matrix at M = 1, 2 with eval_matvec and with BLIS.\n"
            "--probe-every R: one probe pass every R decode rounds for a model larger than the last-level cache\n"
            "(default 4); 0 probes only before and after, so decoding runs uninterrupted like a generation loop.\n"
            "--table llama prints llama-bench's markdown table on stdout instead (rows pp<P> and tg<N> per mode,\n"
            "tokens/s mean ± sd over --repetitions R runs, default 5; build commit and CPU below; the usual\n"
            "table goes to stderr).\n"
            "--weights: the decode matrices in float32 (default) or bfloat16 (converted at load, rounded to nearest\n"
            "even; norms, biases and coupling vectors stay float32); fp32,bf16 runs both, interleaved, with the\n"
            "bf16 / fp32 ratio per mode. DBRANCH_ISA=avx512|avx2|scalar forces a lower kernel level.\n");
}

/* ---- model from a config file ([model] section, SPEC §4 keys) ------------- */

static dt_status read_model_ini(const char *path, const char *const *sets, int n_sets, model_config *config) {
    /* The one config-file reader (models/config_file.h): the same model `train` and `info` see. */
    *config = model_config_default(FAMILY_NANOGPT);
    if (model_config_load_file(config, path) != DT_OK) return DT_ERR;
    for (int i = 0; i < n_sets; i++)
        if (model_config_set_assignment(config, sets[i]) != DT_OK) return DT_ERR;
    return model_config_validate(config);
}

/* ---- options ------------------------------------------------------------- */

static int parse_int64(const char *text, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno == ERANGE || v < min) return 0;
    *out = v;
    return 1;
}

static dt_status parse_options(int argc, char **argv, bench_options *o) {
    *o = (bench_options){.prompt_len = 64,
                         .n_tokens = 32,
                         .threads = 0,
                         .matvec = EVAL_MATVEC_OWN,
                         .probe_mib = BENCH_BANDWIDTH_DEFAULT_MIB,
                         .probe_every = DEFAULT_PROBE_EVERY,
                         .probe_passes = 3,
                         .prefill_repeats = 5,
                         .seed = 1234,
                         .weights = {DT_F32},
                         .n_weights = 1};
    int weights_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--matvec-check")) {
            o->matvec_check = 1;
            continue;
        }
        if (!v) return dt_errorf("option %s needs a value", a);
        i++;
        if (!strcmp(a, "--model")) {
            o->model_path = v;
        } else if (!strcmp(a, "--config")) {
            o->config_path = v;
        } else if (!strcmp(a, "--set")) {
            if (o->n_sets == MAX_SETS) return dt_errorf("more than %d --set options", MAX_SETS);
            o->sets[o->n_sets++] = v;
        } else if (!strcmp(a, "--prompt-len")) {
            if (!parse_int64(v, 1, &o->prompt_len)) return dt_errorf("--prompt-len %s: expected an integer >= 1", v);
        } else if (!strcmp(a, "--tokens")) {
            if (!parse_int64(v, 1, &o->n_tokens)) return dt_errorf("--tokens %s: expected an integer >= 1", v);
        } else if (!strcmp(a, "--threads")) {
            if (!parse_int64(v, 1, &n) || n > K_MAX_THREADS)
                return dt_errorf("--threads %s: expected an integer in [1, %d]", v, K_MAX_THREADS);
            o->threads = (int)n;
        } else if (!strcmp(a, "--probe-mib")) {
            if (!parse_int64(v, 1, &o->probe_mib)) return dt_errorf("--probe-mib %s: expected an integer >= 1", v);
        } else if (!strcmp(a, "--probe-every")) {
            if (!parse_int64(v, 0, &o->probe_every)) return dt_errorf("--probe-every %s: expected an integer >= 0", v);
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int64(v, 0, &n)) return dt_errorf("--seed %s: expected an integer >= 0", v);
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--table")) {
            if (strcmp(v, "llama")) return dt_errorf("--table %s: the one table format is llama", v);
            o->table_llama = 1;
        } else if (!strcmp(a, "--repetitions")) {
            if (!parse_int64(v, 1, &n) || n > 1000)
                return dt_errorf("--repetitions %s: expected an integer in [1, 1000]", v);
            o->repetitions = (int)n;
        } else if (!strcmp(a, "--weights")) {
            if (weights_given++) return dt_errorf("--weights given twice");
            if (!strcmp(v, "fp32,bf16")) {
                o->weights[0] = DT_F32;
                o->weights[1] = DT_BF16;
                o->n_weights = 2;
            } else if (eval_decode_weights_parse(v, &o->weights[0]) != DT_OK) {
                return dt_errorf("--weights %s: expected fp32, bf16 or fp32,bf16", v);
            }
        } else if (!strcmp(a, "--feedback")) {
            if (eval_feedback_mode_parse(v, &o->feedback) != DT_OK) return DT_ERR;
        } else if (!strcmp(a, "--matvec")) {
            if (!strcmp(v, "own"))
                o->matvec = EVAL_MATVEC_OWN;
            else if (!strcmp(v, "blis"))
                o->matvec = EVAL_MATVEC_BLIS;
            else
                return dt_errorf("--matvec %s: expected own or blis", v);
        } else {
            return dt_errorf("unknown option %s (try --help)", a);
        }
    }
    if (!o->model_path == !o->config_path) return dt_errorf("pass exactly one of --model CKPT.h5 or --config FILE.ini");
    if (o->n_sets && !o->config_path) return dt_errorf("--set applies to --config only");
    if (o->json && o->table_llama) return dt_errorf("--json and --table llama: choose one");
    if (o->repetitions && !o->table_llama) return dt_errorf("--repetitions applies to --table llama only");
    if (o->table_llama) o->prefill_repeats = o->repetitions ? o->repetitions : 5;
    if (o->table_llama && !o->repetitions) o->repetitions = 5;
    return DT_OK;
}

/* ---- the runs ------------------------------------------------------------ */

/* Every primary-path matrix of the model (what a baseline step streams). */
typedef struct matrix_ref {
    const float *data;
    int64_t rows, cols;
} matrix_ref;

static int64_t collect_matrices(const model *m, matrix_ref *out, int64_t capacity) {
    int64_t n = 0;
    for (int64_t l = 0; l < m->config.n_layer; l++) {
        const model_block_weights *w = &m->layers[l].primary;
        const dt_tensor *list[4 + MODEL_FFN_SLOTS] = {w->wq, w->wk, w->wv, w->wo};
        for (int slot = 0; slot < MODEL_FFN_SLOTS; slot++)
            list[4 + slot] = w->ffn[slot];
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
            const dt_tensor *t = list[i];
            if (!t || t->ndim != 2 || n == capacity) continue; /* vectors and 3-D expert tensors: skipped */
            out[n++] = (matrix_ref){(const float *)t->data, t->shape[0], t->shape[1]};
        }
    }
    if (n < capacity)
        out[n++] = (matrix_ref){(const float *)m->lm_head->data, m->lm_head->shape[0], m->lm_head->shape[1]};
    return n;
}

/* One pass over all matrices at M rows with eval_matvec (own) or BLIS; seconds. */
static double matvec_sweep_seconds(const matrix_ref *mats, int64_t n, int64_t M, int own, const float *in, float *out) {
    double t0 = bench_now_seconds();
    for (int64_t i = 0; i < n; i++) {
        if (own)
            eval_matvec(out, in, mats[i].data, NULL, M, mats[i].cols, mats[i].rows);
        else
            k_linear_forward(out, in, mats[i].data, NULL, M, mats[i].cols, mats[i].rows);
    }
    return bench_now_seconds() - t0;
}

/* gbps[own ? 0 : 1][M - 1]: best of 5 sweeps per variant, the variants interleaved
 * so a busy machine slows them alike. GB/s of weights streamed. */
static void matvec_check(const matrix_ref *mats, int64_t n, const float *in, float *out, double gbps[2][2]) {
    double bytes = 0.0, best[2][2] = {{INFINITY, INFINITY}, {INFINITY, INFINITY}};
    for (int64_t i = 0; i < n; i++)
        bytes += (double)(mats[i].rows * mats[i].cols) * 4.0;
    for (int rep = 0; rep < 5; rep++)
        for (int variant = 0; variant < 2; variant++)
            for (int64_t M = 1; M <= 2; M++) {
                double dt = matvec_sweep_seconds(mats, n, M, variant == 0, in, out);
                if (dt < best[variant][M - 1]) best[variant][M - 1] = dt;
            }
    for (int variant = 0; variant < 2; variant++)
        for (int M = 0; M < 2; M++)
            gbps[variant][M] = bytes / best[variant][M] * 1e-9;
}

static void print_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(out, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, out);
    }
    fputc('"', out);
}

/* The llama-bench table (bench/llama_table.h): pp and tg rows per mode from the per-repetition seconds
 * pp [mode * repetitions + r] and tg [same]. */
static void print_llama_table(const bench_options *o, const model *m, int threads, int n_arms,
                              const mode_result *results, const double *pp, const double *tg) {
    train_provenance build;
    train_provenance_collect(&build, threads);
    const model_config *c = &m->config;
    const int only_bf16 = o->n_weights == 1 && o->weights[0] == DT_BF16;
    bench_llama_header h = {.size_bytes = (only_bf16 ? 2.0 : 4.0) * (double)model_param_count(m, -1),
                            .params = model_param_count(m, -1),
                            .threads = threads,
                            .commit = build.commit,
                            .version = build.version,
                            .cpu = build.cpu,
                            .blis_version = build.blis_version};
    snprintf(h.model, sizeof h.model, "%s %.2fM %s%s", model_family_name(c->family), (double)h.params / 1e6,
             o->n_weights == 2 ? "F32+BF16"
             : only_bf16       ? "BF16"
                               : "F32",
             c->branch == BRANCH_DECODE ? " branch" : "");
    bench_llama_row rows[2 * N_ARMS];
    int n_rows = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_arms; i++) {
            bench_llama_row *row = &rows[n_rows++];
            row->mode = results[i].label;
            const int64_t n_test = pass ? o->n_tokens : o->prompt_len;
            snprintf(row->test, sizeof row->test, "%s%lld", pass ? "tg" : "pp", (long long)n_test);
            bench_llama_rate((pass ? tg : pp) + i * o->repetitions, o->repetitions, n_test, &row->mean, &row->sd);
        }
    bench_llama_table_print(stdout, &h, rows, n_rows);
}

int bench_decode_main(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    bench_options o;
    model m;
    int have_model = 0, n_sessions = 0, code = 1, have_bf16 = 0;
    eval_decode_weights bf16_weights;
    eval_decode_session sessions[N_ARMS];
    mode_result results[N_ARMS];
    bench_read_probe probe;
    double *step_times = NULL, *prefill_times = NULL, *probe_gbps = NULL, *llama_pp = NULL, *llama_tg = NULL;
    int32_t *tokens = NULL;
    float *matvec_in = NULL, *matvec_out = NULL;
    matrix_ref *mats = NULL;
    memset(results, 0, sizeof results);
    memset(&probe, 0, sizeof probe);

    if (parse_options(argc, argv, &o) != DT_OK) goto fail;
    if (o.threads > 0) k_set_threads(o.threads);
    int threads = k_get_threads();
    if (o.model_path) {
        if (model_load(&m, o.model_path) != DT_OK) goto fail;
    } else {
        model_config config;
        if (read_model_ini(o.config_path, o.sets, o.n_sets, &config) != DT_OK) goto fail;
        if (model_create(&m, &config) != DT_OK) goto fail;
        dt_rng rng;
        dt_rng_seed(&rng, o.seed);
        model_init_weights(&m, &rng);
    }
    have_model = 1;
    const model_config *c = &m.config;
    if (o.prompt_len + o.n_tokens > c->block_size) {
        dt_errorf("--prompt-len %lld + --tokens %lld exceed block_size %lld", (long long)o.prompt_len,
                  (long long)o.n_tokens, (long long)c->block_size);
        goto fail;
    }

    /* Decoding tokens: the same pseudo-random sequence for every mode. */
    int64_t n_seq = o.prompt_len + o.n_tokens, max_probe_passes = o.probe_passes + o.prefill_repeats + o.n_tokens + 2;
    tokens = malloc((size_t)n_seq * sizeof(int32_t));
    step_times = malloc((size_t)(N_ARMS * o.n_tokens) * sizeof(double));
    prefill_times = malloc((size_t)(N_ARMS * o.prefill_repeats) * sizeof(double));
    probe_gbps = malloc((size_t)max_probe_passes * sizeof(double));
    if (!tokens || !step_times || !prefill_times || !probe_gbps) {
        dt_errorf("out of memory");
        goto fail;
    }
    dt_rng rng;
    dt_rng_seed(&rng, o.seed + 1);
    for (int64_t t = 0; t < n_seq; t++)
        tokens[t] = (int32_t)dt_rng_below(&rng, (uint64_t)c->vocab_size);

    /* A model without a branch has only the baseline. */
    int n_modes = c->branch == BRANCH_DECODE ? N_MODES : 1, n_arms = n_modes * o.n_weights;
    const eval_decode_mode modes[N_MODES] = {EVAL_DECODE_BASELINE, EVAL_DECODE_GROUPED, EVAL_DECODE_UNGROUPED};
    /* Arm i: weights o.weights[i / n_modes], mode modes[i % n_modes]. The bf16
     * view (if any) first: it rounds the model's matrices for every arm. */
    for (int w = 0; w < o.n_weights; w++)
        if (o.weights[w] == DT_BF16) {
            if (eval_decode_weights_init(&bf16_weights, &m, DT_BF16) != DT_OK) goto fail;
            have_bf16 = 1;
        }
    for (int i = 0; i < n_arms; i++) {
        mode_result *r = &results[i];
        r->mode = modes[i % n_modes];
        r->weights = o.weights[i / n_modes];
        snprintf(r->label, sizeof r->label, "%s%s%s", eval_decode_mode_name(r->mode), o.n_weights > 1 ? " " : "",
                 o.n_weights > 1 ? eval_decode_weights_name(r->weights) : "");
        if (eval_decode_init(&sessions[i], &m, r->mode, o.prompt_len) != DT_OK) goto fail;
        sessions[i].matvec = o.matvec;
        sessions[i].weights = r->weights == DT_BF16 ? &bf16_weights : NULL;
        sessions[i].feedback = o.feedback;
        n_sessions++;
    }

    /* The probe buffer lives through the run: a few passes first, then (for a
     * model larger than the last-level cache) one pass per prefill round and
     * one every --probe-every decode rounds, interleaved with the work, so the
     * yardstick sees the same machine as the measurement. Not every round: a
     * pass evicts the last-level cache, and steady decoding keeps part of the
     * weights there from one token to the next. A model that fits in the
     * cache is measured cache-resident, and --probe-every 0 runs decoding
     * uninterrupted (as a generation loop does): the probe passes then all
     * come before and after. */
    long llc_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc_bytes <= 0) llc_bytes = 32L << 20;
    int interleave = o.probe_every > 0 && (double)model_param_count(&m, PARAM_PRIMARY) * 4.0 > (double)llc_bytes;
    if (bench_read_probe_init(&probe, o.probe_mib << 20) != DT_OK) goto fail;
    int n_probe = 0;
    for (int p = 0; p < o.probe_passes; p++)
        probe_gbps[n_probe++] = bench_read_probe_pass(&probe);

    /* Prefill: one warm-up, then repeats; modes in a rotating order. */
    for (int i = 0; i < n_arms; i++)
        if (eval_decode_prefill(&sessions[i], tokens, o.prompt_len, NULL) != DT_OK) goto fail;
    for (int r = 0; r < o.prefill_repeats; r++) {
        for (int j = 0; j < n_arms; j++) {
            int i = (r + j) % n_arms;
            double t0 = bench_now_seconds();
            if (eval_decode_prefill(&sessions[i], tokens, o.prompt_len, NULL) != DT_OK) goto fail;
            prefill_times[i * o.prefill_repeats + r] = bench_now_seconds() - t0;
        }
        if (interleave) probe_gbps[n_probe++] = bench_read_probe_pass(&probe);
    }
    /* Decode: token by token, every mode at the same position in a rotating
     * order (none always runs right after the probe has flushed the caches). */
    for (int64_t t = 0; t < o.n_tokens; t++) {
        for (int j = 0; j < n_arms; j++) {
            int i = (int)((t + j) % n_arms);
            eval_decode_session *s = &sessions[i];
            double t0 = bench_now_seconds();
            if (eval_decode_step(s, tokens[o.prompt_len + t]) != DT_OK) goto fail;
            step_times[i * o.n_tokens + t] = bench_now_seconds() - t0;
            results[i].weight_bytes += s->traffic.weight_bytes / (double)o.n_tokens;
            results[i].kv_bytes += s->traffic.kv_read_bytes / (double)o.n_tokens;
            results[i].matrix_loads += (double)s->traffic.matrix_loads / (double)o.n_tokens;
            results[i].expert_loads += (double)s->traffic.expert_loads / (double)o.n_tokens;
        }
        if (interleave && t % o.probe_every == o.probe_every - 1) probe_gbps[n_probe++] = bench_read_probe_pass(&probe);
    }
    for (int p = 0; p < (interleave ? 2 : o.probe_passes); p++)
        probe_gbps[n_probe++] = bench_read_probe_pass(&probe);
    /* --table llama: per repetition, pp from the prefill rounds above, tg from the decode round above
     * plus repetitions - 1 more (each after an untimed prefill), before the medians below sort the times. */
    if (o.table_llama) {
        llama_pp = malloc((size_t)(N_ARMS * o.repetitions) * sizeof(double));
        llama_tg = calloc((size_t)(N_ARMS * o.repetitions), sizeof(double));
        if (!llama_pp || !llama_tg) {
            dt_errorf("out of memory");
            goto fail;
        }
        memcpy(llama_pp, prefill_times, (size_t)(N_ARMS * o.repetitions) * sizeof(double));
        for (int i = 0; i < n_arms; i++)
            for (int64_t t = 0; t < o.n_tokens; t++)
                llama_tg[i * o.repetitions] += step_times[i * o.n_tokens + t];
        for (int r = 1; r < o.repetitions; r++) {
            for (int i = 0; i < n_arms; i++)
                if (eval_decode_prefill(&sessions[i], tokens, o.prompt_len, NULL) != DT_OK) goto fail;
            for (int64_t t = 0; t < o.n_tokens; t++)
                for (int j = 0; j < n_arms; j++) {
                    int i = (int)((t + j) % n_arms);
                    double t0 = bench_now_seconds();
                    if (eval_decode_step(&sessions[i], tokens[o.prompt_len + t]) != DT_OK) goto fail;
                    llama_tg[i * o.repetitions + r] += bench_now_seconds() - t0;
                }
        }
    }
    double probe_best = bench_read_probe_best_gbps(&probe), probe_median = bench_median_sort(probe_gbps, n_probe);
    for (int i = 0; i < n_arms; i++) {
        double total = 0.0;
        for (int64_t t = 0; t < o.n_tokens; t++)
            total += step_times[i * o.n_tokens + t];
        results[i].mean_step_seconds = total / (double)o.n_tokens;
        results[i].prefill_seconds = bench_median_sort(prefill_times + i * o.prefill_repeats, o.prefill_repeats);
        results[i].step_seconds =
            bench_median_sort(step_times + i * o.n_tokens, o.n_tokens); /* sorts: [0] is the fastest */
        results[i].best_step_seconds = step_times[i * o.n_tokens];
        results[i].bytes_per_token = results[i].weight_bytes + results[i].kv_bytes;
    }

    /* Optional: the M = 1, 2 products alone, eval_matvec vs BLIS, over every primary matrix. */
    double matvec_gbps[2][2] = {{0}}; /* [own/blis][M-1] */
    if (o.matvec_check) {
        int64_t capacity = 16 * c->n_layer + 1,
                widest = c->vocab_size > 4 * c->d_model ? c->vocab_size : 4 * c->d_model;
        if (c->d_ff > widest) widest = c->d_ff;
        mats = malloc((size_t)capacity * sizeof *mats);
        matvec_in = calloc((size_t)(2 * widest), sizeof(float));
        matvec_out = calloc((size_t)(2 * widest), sizeof(float));
        if (!mats || !matvec_in || !matvec_out) {
            dt_errorf("out of memory");
            goto fail;
        }
        for (int64_t j = 0; j < 2 * widest; j++)
            matvec_in[j] = 0.01f * (float)(j % 7);
        int64_t n_mats = collect_matrices(&m, mats, capacity);
        matvec_check(mats, n_mats, matvec_in, matvec_out, matvec_gbps);
    }

    /* ---- report ---- */
    int64_t n_params = model_param_count(&m, -1);
    const k_cpu_bf16 cpu_bf16 = k_cpu_bf16_features();
    char weights_list[16];
    snprintf(weights_list, sizeof weights_list, "%s%s%s", eval_decode_weights_name(o.weights[0]),
             o.n_weights > 1 ? "," : "", o.n_weights > 1 ? eval_decode_weights_name(o.weights[1]) : "");
    FILE *table = o.json || o.table_llama ? stderr : stdout;
    fprintf(table, "decode bench: %s %s model (%s), %.1fM parameters (%.0f MB fp32), block %lld, threads %d\n",
            model_family_name(c->family), c->branch == BRANCH_DECODE ? "Decode-Branch" : "baseline",
            o.model_path ? o.model_path : o.config_path, (double)n_params / 1e6, (double)n_params * 4e-6,
            (long long)c->block_size, threads);
    fprintf(table,
            "prompt %lld tokens, %lld decode tokens per mode, matvec %s; read probe %.1f GB/s best, %.1f median "
            "(%d passes of %lld MiB, %s)\n",
            (long long)o.prompt_len, (long long)o.n_tokens, o.matvec == EVAL_MATVEC_OWN ? "own" : "blis", probe_best,
            probe_median, n_probe, (long long)o.probe_mib,
            interleave           ? "interleaved with the run"
            : o.probe_every == 0 ? "before and after: --probe-every 0"
                                 : "before and after: the model fits in the last-level cache");
    fprintf(table,
            "weights %s, kernels %s (DBRANCH_ISA forces lower), matvec walk %s (DBRANCH_MATVEC); this CPU: "
            "avx512_bf16 %s, amx_bf16 %s (bf16 training's matrix units)\n",
            weights_list, k_isa_name(k_isa_active()), eval_matvec_walk_name(eval_matvec_walk_active()),
            cpu_bf16.avx512_bf16 ? "yes" : "no", cpu_bf16.amx_bf16 ? "yes" : "no");
    fprintf(table, "%-15s %14s %14s %10s %12s %10s %8s %10s %8s%s\n", "mode", "prefill tok/s", "decode ms/tok", "tok/s",
            "MB read/tok", "GB/s", "% probe", "x baseline", "experts", o.n_weights > 1 ? "   x fp32" : "");
    for (int i = 0; i < n_arms; i++) {
        const mode_result *r = &results[i], *base = &results[i / n_modes * n_modes], *fp32 = &results[i % n_modes];
        double gbps = r->bytes_per_token / r->step_seconds * 1e-9;
        fprintf(table, "%-15s %14.1f %14.3f %10.2f %12.2f %10.2f %7.1f%% %10.3f %8.1f", r->label,
                (double)o.prompt_len / r->prefill_seconds, r->step_seconds * 1e3, 1.0 / r->step_seconds,
                r->bytes_per_token * 1e-6, gbps, 100.0 * gbps / probe_best, r->step_seconds / base->step_seconds,
                r->expert_loads);
        if (o.n_weights > 1) fprintf(table, " %8.3f", r->step_seconds / fp32->step_seconds);
        fprintf(table, "\n");
    }
    fprintf(table,
            "(ms/token: median over the run; GB/s: bytes read per token / median time; %% probe: of the best "
            "probe pass; fastest steps: %.1f%% of the probe for baseline)\n",
            100.0 * results[0].bytes_per_token / results[0].best_step_seconds * 1e-9 / probe_best);
    fprintf(table, "mean over all decode steps (total time / steps), tok/s:");
    for (int i = 0; i < n_arms; i++)
        fprintf(table, " %s %.2f", results[i].label, 1.0 / results[i].mean_step_seconds);
    fprintf(table, "\n");
    if (o.matvec_check)
        fprintf(
            table,
            "matvec sweep over all primary matrices, GB/s: eval_matvec M=1 %.2f M=2 %.2f | BLIS M=1 %.2f M=2 %.2f\n",
            matvec_gbps[0][0], matvec_gbps[0][1], matvec_gbps[1][0], matvec_gbps[1][1]);

    if (o.json) {
        printf("{\"bench\": \"decode\", \"source\": ");
        print_json_string(stdout, o.model_path ? o.model_path : o.config_path);
        printf(", \"family\": \"%s\", \"branch\": \"%s\", \"params\": %lld, \"d_model\": %lld, \"n_layer\": %lld, "
               "\"n_head\": %lld, \"n_kv_head\": %lld, \"d_ff\": %lld, \"n_expert\": %lld, \"top_k\": %lld, "
               "\"top_k_branch\": %lld, \"vocab_size\": %lld, \"block_size\": %lld,\n",
               model_family_name(c->family), model_branch_name(c->branch), (long long)n_params, (long long)c->d_model,
               (long long)c->n_layer, (long long)c->n_head, (long long)c->n_kv_head, (long long)c->d_ff,
               (long long)c->n_expert, (long long)c->top_k, (long long)c->top_k_branch, (long long)c->vocab_size,
               (long long)c->block_size);
        printf(" \"threads\": %d, \"prompt_len\": %lld, \"tokens\": %lld, \"matvec\": \"%s\",\n", threads,
               (long long)o.prompt_len, (long long)o.n_tokens, o.matvec == EVAL_MATVEC_OWN ? "own" : "blis");
        printf(" \"weights\": \"%s\", \"isa\": \"%s\", \"matvec_walk\": \"%s\", \"cpu_avx512_bf16\": %s, "
               "\"cpu_amx_bf16\": %s,\n",
               weights_list, k_isa_name(k_isa_active()), eval_matvec_walk_name(eval_matvec_walk_active()),
               cpu_bf16.avx512_bf16 ? "true" : "false", cpu_bf16.amx_bf16 ? "true" : "false");
        printf(" \"probe\": {\"best_gbps\": %.3f, \"median_gbps\": %.3f, \"mib\": %lld, \"passes\": %d, "
               "\"interleaved\": %s, \"every\": %lld, \"llc_bytes\": %ld},\n",
               probe_best, probe_median, (long long)o.probe_mib, n_probe, interleave ? "true" : "false",
               (long long)o.probe_every, llc_bytes);
        printf(" \"modes\": [");
        for (int i = 0; i < n_arms; i++) {
            const mode_result *r = &results[i], *base = &results[i / n_modes * n_modes], *fp32 = &results[i % n_modes];
            double gbps = r->bytes_per_token / r->step_seconds * 1e-9;
            double gbps_best = r->bytes_per_token / r->best_step_seconds * 1e-9;
            printf(
                "%s\n  {\"mode\": \"%s\", \"weights\": \"%s\", \"prefill_tokens_per_s\": %.2f, \"prefill_ms\": %.3f, "
                "\"decode_ms_per_token\": %.4f, \"decode_ms_best\": %.4f, \"decode_tokens_per_s\": %.3f, "
                "\"decode_ms_mean\": %.4f, \"decode_tokens_per_s_mean\": %.3f, "
                "\"bytes_per_token\": %.0f, \"weight_bytes_per_token\": %.0f, \"kv_read_bytes_per_token\": %.0f, "
                "\"matrix_loads_per_token\": %.1f, \"expert_loads_per_token\": %.2f, \"effective_gbps\": %.3f, "
                "\"fraction_of_probe\": %.4f, \"fraction_of_probe_fastest_step\": %.4f, "
                "\"ms_ratio_to_baseline\": %.4f, \"ms_ratio_to_fp32\": %.4f}",
                i ? "," : "", eval_decode_mode_name(r->mode), eval_decode_weights_name(r->weights),
                (double)o.prompt_len / r->prefill_seconds, r->prefill_seconds * 1e3, r->step_seconds * 1e3,
                r->best_step_seconds * 1e3, 1.0 / r->step_seconds, r->mean_step_seconds * 1e3,
                1.0 / r->mean_step_seconds, r->bytes_per_token, r->weight_bytes, r->kv_bytes, r->matrix_loads,
                r->expert_loads, gbps, gbps / probe_best, gbps_best / probe_best, r->step_seconds / base->step_seconds,
                r->step_seconds / fp32->step_seconds);
        }
        printf("\n ]");
        if (n_modes == N_MODES)
            printf(",\n \"ratios\": {\"grouped_over_baseline\": %.4f, \"ungrouped_over_baseline\": %.4f, "
                   "\"prefill_grouped_over_baseline\": %.4f}",
                   results[1].step_seconds / results[0].step_seconds, results[2].step_seconds / results[0].step_seconds,
                   results[1].prefill_seconds / results[0].prefill_seconds);
        if (o.matvec_check)
            printf(
                ",\n \"matvec_sweep_gbps\": {\"own_m1\": %.3f, \"own_m2\": %.3f, \"blis_m1\": %.3f, \"blis_m2\": %.3f}",
                matvec_gbps[0][0], matvec_gbps[0][1], matvec_gbps[1][0], matvec_gbps[1][1]);
        printf("\n}\n");
    }
    if (o.table_llama) print_llama_table(&o, &m, threads, n_arms, results, llama_pp, llama_tg);
    code = 0;
    goto done;
fail:
    fprintf(stderr, "dbranch bench decode: %s\n", dt_error_message());
done:
    for (int i = 0; i < n_sessions; i++)
        eval_decode_free(&sessions[i]);
    if (have_bf16) eval_decode_weights_free(&bf16_weights);
    if (have_model) model_free(&m);
    bench_read_probe_free(&probe);
    free(tokens);
    free(step_times);
    free(prefill_times);
    free(probe_gbps);
    free(llama_pp);
    free(llama_tg);
    free(mats);
    free(matvec_in);
    free(matvec_out);
    return code;
}
