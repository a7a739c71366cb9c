/* dbranch bench train: tokens/s of full training steps (forward, backward,
 * global-norm clip, AdamW, zeroed gradients), the model FLOPs they stand for,
 * the achieved GFLOP/s beside the 2-thread GEMM rate measured in the same
 * run, and peak RSS beside a closed-form memory estimate.
 *
 * Why the GEMM probe runs between steps: on a shared machine the speed of the
 * cores changes from second to second, so a GEMM rate measured before or
 * after the run would make MFU a ratio of numbers taken under different
 * loads. Here one probe (the three products of the MLP's first linear map at
 * the step's own shape: forward, d_in, d_weight) runs after every step, and
 * both medians come from the same stretch of time. With --compare-branch the
 * baseline and its Decode-Branch twin alternate step by step for the same
 * reason, and their ratio is taken from those interleaved medians;
 * --compare-precision does the same for train.precision = fp32 and bf16 of
 * one model, with a second probe running the same products in bf16
 * (kernels/gemm_bf16.h), so each run's MFU is against its own precision's
 * GEMM rate.
 *
 * The step is the one train/parallel_step.h provides (the batch's rows split
 * over the threads, two parallel regions per step); --split ops runs one tape
 * with every kernel split over the threads instead, for comparison. Besides
 * wall time, thread 0's CPU time in forward + backward is kept: on a loaded
 * machine it is the steadier figure for comparing two models.
 *
 * FLOPs per token (the PaLM / nanoGPT convention): 6N + 12 L C T, N the
 * parameters without the position embeddings (a tied head counts once; MoE
 * experts at top_k / E); a decode branch adds 6 N_branch + 12 L C T, N_branch
 * the parameters of the matrices the branch applies (everything but the K/V
 * projections and the embeddings).
 *
 * Memory closed form: 4 bytes x parameters for the weights and again for the
 * gradients, 8 for Adam's two moments, and the activations an efficient
 * trainer keeps for the backward (llm.c's list: per layer and token 18 C for
 * the norm outputs, q/k/v, attention output, projections, residuals, MLP
 * pre-activation and activation, plus norm statistics and per-head
 * log-sum-exps; the logits). Peak RSS (getrusage) also holds the binary and
 * its libraries, which the report prints separately.
 *
 * Under mpirun (a build with -DDBRANCH_MPI=ON) the step is the data-parallel
 * one of `mpirun dbranch train`: each process draws the whole batch and
 * trains on its batch_size / N rows, the update sums the gradients over the
 * processes (train.reduce), tokens/s counts the global batch, and rank 0
 * alone prints; the GEMM probe is off (N processes would share the cores
 * with it). experiments/throughput/mpi.sh interleaves such runs with
 * one-process runs; docs/MPI.md has the figures. */
#include "bench/bench_train.h"
#include "bench/timing.h"

#include "models/model_info.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "autograd/tape.h"
#include "bench/bench.h"
#include "core/comm.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/tokens.h"
#include "kernels/attention_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "models/recurrent.h"
#include "optim/optim.h"
#include "train/parallel_step.h"
#include "train/run_config.h"
#include "train/trainer.h"

enum { MAX_SETS = 32 };

/* The processes of this benchmark (NULL: one; under mpirun: the MPI job). */
static const dt_comm *job = NULL;

/* The two presets: the [model] and [train] sections of
 * experiments/configs/nanogpt_baby.ini and nanogpt_char.ini (the data path
 * and budget do not matter to a benchmark). */
static const char *const preset_baby = "[model]\nfamily = nanogpt\nvocab_size = 256\nblock_size = 64\nn_layer = 4\n"
                                       "n_head = 4\nd_model = 128\n"
                                       "[train]\nbatch_size = 12\nseq_len = 64\nlr = 2e-3\nmin_lr = 2e-4\n"
                                       "weight_decay = 0.1\nbeta2 = 0.99\ngrad_clip = 1.0\noptimizer = adamw\n";
static const char *const preset_char = "[model]\nfamily = nanogpt\nvocab_size = 256\nblock_size = 256\nn_layer = 6\n"
                                       "n_head = 6\nd_model = 384\n"
                                       "[train]\nbatch_size = 16\nseq_len = 256\nlr = 1e-3\nmin_lr = 1e-4\n"
                                       "weight_decay = 0.1\nbeta2 = 0.99\ngrad_clip = 1.0\noptimizer = adamw\n";

typedef struct bench_options {
    const char *config_path; /* --config FILE.ini */
    const char *preset;      /* --preset baby|char (default baby) */
    const char *family;      /* --family: overrides model.family */
    const char *branch;      /* --branch none|decode */
    const char *data_path;   /* --data: token dataset instead of random tokens */
    const char *sets[MAX_SETS];
    int n_sets;
    int64_t steps, warmup;
    int threads;
    int json;
    int compare_branch;
    int compare_schedule;  /* recurrent models: scan vs tiled (models/recurrent.h) */
    int compare_precision; /* train.precision fp32 vs bf16 of the same model */
    int gemm_probe;        /* 0: --no-gemm-probe */
    int split_rows;        /* 0: --split ops (one tape, kernels threaded per op) */
    uint64_t seed;
} bench_options;

/* Median of x [n] (sorts a copy into work [n]). */
/* The median of x [n], which stays as it is (work [n] is sorted instead). */
static double median(const double *x, int64_t n, double *work) {
    if (n <= 0) return NAN;
    memcpy(work, x, (size_t)n * sizeof *work);
    return bench_median_sort(work, n);
}

static double peak_rss_bytes(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return NAN;
    return (double)usage.ru_maxrss * 1024.0; /* Linux reports kilobytes */
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: dbranch bench train [--config FILE.ini | --preset baby|char] [--family F] [--branch none|decode]\n"
            "                           [--set SECTION.KEY=VALUE]... [--data TOKENS.h5] [--steps N] [--warmup W]\n"
            "                           [--threads K] [--split rows|ops] [--seed S] [--compare-branch | "
            "--compare-schedule |\n"
            "                           --compare-precision]\n"
            "                           [--no-gemm-probe] [--json]\n\n"
            "Times full training steps (forward, backward, global-norm clip, AdamW, zeroed gradients) on random\n"
            "tokens (or batches of --data) and reports tokens/s from the median step time, model FLOPs per token\n"
            "(6N + 12*L*C*T), the achieved GFLOP/s beside the GEMM rate of k_gemm measured between the steps of\n"
            "the same run (MFU = achieved / GEMM rate), and peak RSS (getrusage) beside the closed-form\n"
            "params + grads + Adam state + activations.\n\n"
            "  --preset baby|char  nanoGPT baby (V=256 T=64 B=12 L=4 H=4 C=128, the default) or char\n"
            "                      (V=256 T=256 B=16 L=6 H=6 C=384); --config reads [model] and [train] of an INI\n"
            "  --family F          nanogpt | llama | moe (same sizes)\n"
            "  --branch B          none | decode\n"
            "  --compare-branch    run the baseline and its Decode-Branch twin, steps interleaved, and print\n"
            "                      the time ratios (step and forward+backward)\n"
            "  --compare-schedule  recurrent = 1 models: the per-position scan and the tiled schedule\n"
            "                      (models/recurrent.h) on the same model, steps interleaved, and their ratios\n"
            "  --compare-precision train.precision = fp32 and bf16 on the same model, steps interleaved, each\n"
            "                      run's MFU against the GEMM rate of its own precision (bf16 products: oneDNN\n"
            "                      on AMX / AVX512_BF16, else float32 GEMMs of rounded operands)\n"
            "  --steps N           timed steps (default 20); --warmup W untimed steps first (default 3)\n"
            "  --threads K         threads for BLIS and OpenMP (default: OpenMP's default)\n"
            "  --split rows|ops    rows (default): each thread runs forward+backward of its share of the batch\n"
            "                      (train/parallel_step.h); ops: one tape, every kernel split over the threads\n"
            "  --no-gemm-probe     skip the GEMM rate probe\n"
            "  --json              JSON on stdout (the table goes to stderr)\n");
}

static int parse_int64(const char *text, int64_t min, int64_t *out) {
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min) return 0;
    *out = v;
    return 1;
}

static dt_status parse_options(int argc, char **argv, bench_options *o) {
    *o = (bench_options){.steps = 20, .warmup = 3, .gemm_probe = 1, .split_rows = 1, .seed = 1234};
    static const char *const value_options[] = {"--config", "--preset", "--family",  "--branch", "--data", "--set",
                                                "--steps",  "--warmup", "--threads", "--split",  "--seed"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--compare-branch")) {
            o->compare_branch = 1;
            continue;
        }
        if (!strcmp(a, "--compare-schedule")) {
            o->compare_schedule = 1;
            continue;
        }
        if (!strcmp(a, "--compare-precision")) {
            o->compare_precision = 1;
            continue;
        }
        if (!strcmp(a, "--no-gemm-probe")) {
            o->gemm_probe = 0;
            continue;
        }
        int takes_value = 0;
        for (size_t k = 0; k < sizeof value_options / sizeof value_options[0]; k++)
            takes_value |= !strcmp(a, value_options[k]);
        if (!takes_value)
            return strncmp(a, "--", 2) ? dt_errorf("unexpected argument '%s' (try --help)", a)
                                       : dt_errorf("unknown option %s (try --help)", a);
        if (!v) return dt_errorf("option %s needs a value", a);
        i++;
        if (!strcmp(a, "--config")) {
            o->config_path = v;
        } else if (!strcmp(a, "--preset")) {
            if (strcmp(v, "baby") && strcmp(v, "char")) return dt_errorf("--preset %s: expected baby or char", v);
            o->preset = v;
        } else if (!strcmp(a, "--family")) {
            o->family = v;
        } else if (!strcmp(a, "--branch")) {
            o->branch = v;
        } else if (!strcmp(a, "--data")) {
            o->data_path = v;
        } else if (!strcmp(a, "--set")) {
            if (o->n_sets == MAX_SETS) return dt_errorf("more than %d --set options", MAX_SETS);
            o->sets[o->n_sets++] = v;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_int64(v, 1, &o->steps) || o->steps > 1000000)
                return dt_errorf("--steps %s: expected an integer in 1..1000000", v);
        } else if (!strcmp(a, "--warmup")) {
            if (!parse_int64(v, 0, &o->warmup) || o->warmup > 1000000)
                return dt_errorf("--warmup %s: expected an integer in 0..1000000", v);
        } else if (!strcmp(a, "--threads")) {
            if (!parse_int64(v, 1, &n) || n > 1024) return dt_errorf("--threads %s: expected an integer in 1..1024", v);
            o->threads = (int)n;
        } else if (!strcmp(a, "--split")) {
            if (strcmp(v, "rows") && strcmp(v, "ops")) return dt_errorf("--split %s: expected rows or ops", v);
            o->split_rows = !strcmp(v, "rows");
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int64(v, 0, &n)) return dt_errorf("--seed %s: expected an integer >= 0", v);
            o->seed = (uint64_t)n;
        } else {
            return dt_errorf("unknown option %s (try --help)", a);
        }
    }
    if (o->config_path && o->preset) return dt_errorf("pass --config or --preset, not both");
    if (o->compare_branch && o->branch) return dt_errorf("--compare-branch runs both branch settings: drop --branch");
    if (o->compare_branch + o->compare_schedule + o->compare_precision > 1)
        return dt_errorf("pass one of --compare-branch, --compare-schedule and --compare-precision");
    return DT_OK;
}

/* The run's configuration: preset or file, then --family, --branch, --set. */
static dt_status build_config(const bench_options *o, train_config *cfg) {
    *cfg = train_config_default();
    if (o->config_path) {
        if (train_config_load(cfg, o->config_path) != DT_OK) return DT_ERR;
    } else {
        const char *text = o->preset && !strcmp(o->preset, "char") ? preset_char : preset_baby;
        if (train_config_parse_string(cfg, text, "preset") != DT_OK) return DT_ERR;
    }
    if (o->family && model_config_set(&cfg->model, "family", o->family) != DT_OK) return dt_error_context("--family");
    if (o->branch && model_config_set(&cfg->model, "branch", o->branch) != DT_OK) return dt_error_context("--branch");
    for (int i = 0; i < o->n_sets; i++)
        if (train_config_set(cfg, o->sets[i]) != DT_OK) return dt_error_context("--set %s", o->sets[i]);
    /* A benchmark needs neither a dataset nor a budget: fill what validation asks for. */
    if (o->data_path) snprintf(cfg->data_path, sizeof cfg->data_path, "%s", o->data_path);
    if (cfg->data_path[0] == '\0') snprintf(cfg->data_path, sizeof cfg->data_path, "(random tokens)");
    if (cfg->seq_len == 0) cfg->seq_len = cfg->model.block_size;
    const int64_t per_step = cfg->batch_size * cfg->seq_len * cfg->grad_accum;
    if (cfg->tokens < per_step) cfg->tokens = per_step > 0 ? per_step : 1;
    return train_config_validate(cfg);
}

/* ---- closed-form cost ---------------------------------------------------- */

/* The cost model (models/model_info.h) at sequence length T, in bench
 * train's terms: 6N + 12 L C T FLOPs per token (the attention term is 3 x the
 * forward's q.k and p.v work over T keys), and the memory a step holds. */
void bench_train_cost_of(const model *m, int64_t B, int64_t T, bench_train_cost *cost) {
    memset(cost, 0, sizeof *cost);
    model_info info;
    if (model_info_compute(&m->config, T, &info) != DT_OK) return; /* a model that exists has a valid config */
    cost->params_total = info.params_total;
    cost->params_flop = (int64_t)llround(info.train_flop_params);
    cost->params_flop_branch = (int64_t)llround(info.train_flop_params_branch);
    const double attention_flops = 3.0 * info.attention_flops_per_key * (double)T;
    cost->flops_per_token = 6.0 * info.train_flop_params + attention_flops;
    if (m->arch.has_branch) cost->flops_per_token += 6.0 * info.train_flop_params_branch + attention_flops;

    const double bytes = sizeof(float);
    cost->bytes_params = bytes * (double)cost->params_total;
    cost->bytes_grads = cost->bytes_params;
    cost->bytes_adam = 2.0 * cost->bytes_params;
    cost->bytes_activations = bytes * (info.activation_floats + info.activation_floats_branch) * (double)(B * T);
    cost->bytes_total = cost->bytes_params + cost->bytes_grads + cost->bytes_adam + cost->bytes_activations;
}

/* ---- one model under training ------------------------------------------- */

typedef struct bench_run {
    const char *label; /* "baseline", "decode-branch" */
    train_config cfg;
    model model;
    optimizer opt;
    train_parallel parallel;             /* the step's forward+backward and update */
    dt_tensor *inputs, *targets;         /* int32 [B, T] */
    dt_tensor rank_inputs, rank_targets; /* views: this process's rows [B / N, T] */
    data_tokens tokens;
    data_loader loader;
    int has_data;
    dt_rng token_rng;
    bench_train_cost cost;
    /* per timed step */
    double *step_s, *forward_s, *backward_s, *optim_s;
    double *region_s;               /* forward + backward of all threads: the parallel region's wall time */
    double *forward_backward_cpu_s; /* thread 0's CPU time in forward + backward */
    double first_loss, last_loss;
    int ready;
} bench_run;

static void run_free(bench_run *r) {
    if (r->ready) {
        train_parallel_free(&r->parallel);
        optim_free(&r->opt);
        model_free(&r->model);
    }
    if (r->has_data) {
        data_loader_free(&r->loader);
        data_tokens_close(&r->tokens);
    }
    dt_tensor_free(r->inputs);
    dt_tensor_free(r->targets);
    free(r->step_s);
    free(r->forward_s);
    free(r->backward_s);
    free(r->optim_s);
    free(r->region_s);
    free(r->forward_backward_cpu_s);
    memset(r, 0, sizeof *r);
}

static dt_status run_init(bench_run *r, const char *label, const train_config *cfg, int64_t steps, int random_tokens,
                          uint64_t seed, int split_rows) {
    memset(r, 0, sizeof *r);
    r->label = label;
    r->cfg = *cfg;
    const train_config *c = &r->cfg;
    if (model_create(&r->model, &c->model) != DT_OK) return DT_ERR;
    dt_rng init_rng;
    dt_rng_seed(&init_rng, seed);
    model_init_weights(&r->model, &init_rng);
    if (trainer_optimizer_init(&r->opt, &r->model, c) != DT_OK) {
        model_free(&r->model);
        return DT_ERR;
    }
    const int processes = job ? job->size : 1, rank = job ? job->rank : 0;
    if (train_parallel_init(&r->parallel, &r->model, &r->opt, job, c->batch_size / processes, c->seq_len,
                            k_get_threads(), split_rows) != DT_OK) {
        optim_free(&r->opt);
        model_free(&r->model);
        return DT_ERR;
    }
    r->ready = 1;
    if (c->precision == TRAIN_PRECISION_BF16) {
        if (train_bf16_attention_check(c) != DT_OK) return DT_ERR;
        if (model_enable_bf16(&r->model) != DT_OK) return DT_ERR;
        r->parallel.bf16_products = 1;
        r->parallel.bf16_attention = train_bf16_attention_engine(c);
    }
    r->inputs = dt_tensor_new(DT_I32, DT_SHAPE(c->batch_size, c->seq_len));
    r->targets = dt_tensor_new(DT_I32, DT_SHAPE(c->batch_size, c->seq_len));
    r->step_s = calloc((size_t)steps, sizeof(double));
    r->forward_s = calloc((size_t)steps, sizeof(double));
    r->backward_s = calloc((size_t)steps, sizeof(double));
    r->optim_s = calloc((size_t)steps, sizeof(double));
    r->region_s = calloc((size_t)steps, sizeof(double));
    r->forward_backward_cpu_s = calloc((size_t)steps, sizeof(double));
    const int64_t rows = c->batch_size / processes, first = rank * rows * c->seq_len;
    if (r->inputs && r->targets &&
        (dt_tensor_init(&r->rank_inputs, DT_I32, DT_SHAPE(rows, c->seq_len), dt_i32(r->inputs) + first) != DT_OK ||
         dt_tensor_init(&r->rank_targets, DT_I32, DT_SHAPE(rows, c->seq_len), dt_i32(r->targets) + first) != DT_OK))
        return DT_ERR;
    if (!r->inputs || !r->targets || !r->step_s || !r->forward_s || !r->backward_s || !r->optim_s || !r->region_s ||
        !r->forward_backward_cpu_s)
        return dt_errorf("out of memory");
    if (!random_tokens) {
        if (data_tokens_open(&r->tokens, c->data_path) != DT_OK) return DT_ERR;
        if (data_loader_init(&r->loader, &r->tokens, c->batch_size, c->seq_len, seed + 1) != DT_OK) {
            data_tokens_close(&r->tokens);
            return DT_ERR;
        }
        r->has_data = 1;
        if (r->tokens.vocab_size > c->model.vocab_size)
            return dt_errorf("%s: its tokenizer has %lld tokens but model.vocab_size = %lld", c->data_path,
                             (long long)r->tokens.vocab_size, (long long)c->model.vocab_size);
    }
    dt_rng_seed(&r->token_rng, seed + 2);
    bench_train_cost_of(&r->model, c->batch_size, c->seq_len, &r->cost);
    return DT_OK;
}

/* inputs, targets [B, T]: random windows of T + 1 uniform tokens, or the loader's next batch. */
static dt_status next_batch(bench_run *r) {
    if (r->has_data) return data_loader_next(&r->loader, dt_i32(r->inputs), dt_i32(r->targets));
    const int64_t B = r->cfg.batch_size, T = r->cfg.seq_len, V = r->cfg.model.vocab_size;
    int32_t *in = dt_i32(r->inputs), *tg = dt_i32(r->targets);
    for (int64_t b = 0; b < B; b++) {
        int32_t previous = (int32_t)dt_rng_below(&r->token_rng, (uint64_t)V);
        for (int64_t t = 0; t < T; t++) {
            int32_t next = (int32_t)dt_rng_below(&r->token_rng, (uint64_t)V);
            in[b * T + t] = previous;
            tg[b * T + t] = next;
            previous = next;
        }
    }
    return DT_OK;
}

/* One optimizer step (grad_accum micro-batches), as trainer_step takes it.
 * index >= 0 records the phase times into slot index; the objective goes to
 * *loss. */
static dt_status run_step(bench_run *r, int64_t index, double *loss) {
    const train_config *c = &r->cfg;
    double forward = 0.0, backward = 0.0, region = 0.0, cpu = 0.0, objective = 0.0;
    const double start = bench_now_seconds();
    model_refresh_bf16(&r->model); /* as trainer_step: the weights rounded once per step (bf16 runs) */
    for (int64_t micro = 0; micro < c->grad_accum; micro++) {
        if (next_batch(r) != DT_OK) return DT_ERR;
        train_parallel_losses losses;
        const double region_start = bench_now_seconds();
        if (train_parallel_forward_backward(&r->parallel, &r->rank_inputs, &r->rank_targets, &losses) != DT_OK)
            return DT_ERR;
        region += bench_now_seconds() - region_start;
        forward += r->parallel.forward_seconds;
        backward += r->parallel.backward_seconds;
        cpu += r->parallel.forward_cpu_seconds + r->parallel.backward_cpu_seconds;
        objective += losses.objective;
    }
    const double t3 = bench_now_seconds();
    double norm;
    if (train_parallel_update(&r->parallel, c->lr, c->muon_lr, 1.0f / (float)c->grad_accum, c->grad_clip, &norm) !=
        DT_OK)
        return DT_ERR;
    if (!isfinite(norm)) return dt_errorf("%s: gradient norm is %g", r->label, norm);
    const double end = bench_now_seconds();
    if (index >= 0) {
        r->step_s[index] = end - start;
        r->forward_s[index] = forward;
        r->backward_s[index] = backward;
        r->optim_s[index] = end - t3;
        r->region_s[index] = region;
        r->forward_backward_cpu_s[index] = cpu;
    }
    *loss = objective / (double)c->grad_accum;
    if (!isfinite(*loss)) return dt_errorf("%s: loss is %g", r->label, *loss);
    return DT_OK;
}

/* ---- GEMM probe ------------------------------------------------------------ */

/* The MLP's first linear map at the step's shape: y [M,N] = x [M,K] W^T,
 * d_x [M,K] += d_y W, d_W [N,K] += d_y^T x; M = B*T, K = C, N = d_ff.
 * Split by rows (the step's default), each thread runs the three products on
 * its share of the M rows with single-threaded k_gemm calls in one parallel
 * region, into a d_W of its own: the GEMMs exactly as the data-parallel step
 * runs them. Split by ops, the three k_gemm calls split themselves. A bf16
 * probe runs the same products through k_gemm_bf16 (W from its bf16 copy,
 * as the step reads weights). */
typedef struct gemm_probe {
    int64_t M, N, K;
    int split_rows, n_threads;
    int bf16;      /* products through k_gemm_bf16 */
    uint16_t *w16; /* [N,K] W rounded (bf16 probes) */
    float *x, *w, *y, *dx;
    float *dw;    /* [n_threads, N, K] */
    double flops; /* of the three products */
} gemm_probe;

static dt_status probe_init(gemm_probe *p, int64_t M, int64_t N, int64_t K, int split_rows, int bf16, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->bf16 = bf16;
    p->M = M;
    p->N = N;
    p->K = K;
    p->split_rows = split_rows;
    p->n_threads = split_rows ? k_get_threads() : 1;
    if (p->n_threads > M) p->n_threads = (int)M;
    p->x = malloc((size_t)(M * K) * sizeof(float));
    p->w = malloc((size_t)(N * K) * sizeof(float));
    p->y = malloc((size_t)(M * N) * sizeof(float));
    p->dx = calloc((size_t)(M * K), sizeof(float));
    p->dw = calloc((size_t)(N * K) * (size_t)p->n_threads, sizeof(float));
    if (!p->x || !p->w || !p->y || !p->dx || !p->dw) return dt_errorf("out of memory for the GEMM probe");
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    dt_rng_fill_normal(&rng, p->x, M * K, 1.0f);
    dt_rng_fill_normal(&rng, p->w, N * K, 0.02f);
    if (bf16) {
        p->w16 = malloc((size_t)(N * K) * sizeof(uint16_t));
        if (!p->w16) return dt_errorf("out of memory for the GEMM probe");
        k_bf16_round(p->w16, p->w, N * K);
    }
    p->flops = 3.0 * 2.0 * (double)M * (double)N * (double)K;
    return DT_OK;
}

static void probe_free(gemm_probe *p) {
    free(p->x);
    free(p->w);
    free(p->y);
    free(p->dx);
    free(p->dw);
    free(p->w16);
    memset(p, 0, sizeof *p);
}

/* The three products on rows [first, first + rows) into d_W buffer dw. */
static void probe_products(gemm_probe *p, int64_t first, int64_t rows, float *dw) {
    const int64_t N = p->N, K = p->K;
    const float *x = p->x + first * K;
    float *y = p->y + first * N, *dx = p->dx + first * K;
    if (p->bf16) {
        k_gemm_bf16(0, 1, rows, N, K, 1.0f, x, NULL, K, p->w, p->w16, K, 0.0f, y, N);  /* y = x W^T */
        k_gemm_bf16(0, 0, rows, K, N, 1.0f, y, NULL, N, p->w, p->w16, K, 1.0f, dx, K); /* d_x += d_y W */
        k_gemm_bf16(1, 0, N, K, rows, 1.0f, y, NULL, N, x, NULL, K, 1.0f, dw, K);      /* d_W += d_y^T x */
        return;
    }
    k_gemm(0, 1, rows, N, K, 1.0f, x, K, p->w, K, 0.0f, y, N);  /* y = x W^T */
    k_gemm(0, 0, rows, K, N, 1.0f, y, N, p->w, K, 1.0f, dx, K); /* d_x += d_y W */
    k_gemm(1, 0, N, K, rows, 1.0f, y, N, x, K, 1.0f, dw, K);    /* d_W += d_y^T x */
}

/* Seconds for the three products. */
static double probe_run(gemm_probe *p) {
    const double start = bench_now_seconds();
    if (p->n_threads > 1) {
#pragma omp parallel num_threads(p->n_threads)
        {
            const int64_t thread = omp_get_thread_num(), n = omp_get_num_threads();
            for (int64_t part = thread; part < p->n_threads; part += n) {
                const int64_t first = p->M * part / p->n_threads, last = p->M * (part + 1) / p->n_threads;
                probe_products(p, first, last - first, p->dw + part * p->N * p->K);
            }
        }
    } else {
        probe_products(p, 0, p->M, p->dw);
    }
    return bench_now_seconds() - start;
}

/* ---- report ------------------------------------------------------------------ */

typedef struct run_summary {
    double step_s, forward_s, backward_s, optim_s; /* medians */
    double region_s;                               /* median forward+backward wall time, all threads */
    double forward_backward_cpu_s;                 /* median, thread 0's CPU time */
    double tokens_per_s, gflops;
} run_summary;

static run_summary summarize(const bench_run *r, int64_t steps, double *work) {
    run_summary s;
    s.step_s = median(r->step_s, steps, work);
    s.forward_s = median(r->forward_s, steps, work);
    s.backward_s = median(r->backward_s, steps, work);
    s.optim_s = median(r->optim_s, steps, work);
    s.region_s = median(r->region_s, steps, work);
    s.forward_backward_cpu_s = median(r->forward_backward_cpu_s, steps, work);
    const double tokens = (double)(r->cfg.batch_size * r->cfg.seq_len * r->cfg.grad_accum);
    s.tokens_per_s = tokens / s.step_s;
    s.gflops = s.tokens_per_s * r->cost.flops_per_token * 1e-9;
    return s;
}

static void print_run_table(FILE *out, const bench_run *r, const run_summary *s, double gemm_gflops) {
    const bench_train_cost *cost = &r->cost;
    fprintf(out, "%s:\n", r->label);
    fprintf(out, "  parameters           %.3f M (N for FLOPs %.3f M", (double)cost->params_total * 1e-6,
            (double)cost->params_flop * 1e-6);
    if (cost->params_flop_branch) fprintf(out, ", branch %.3f M", (double)cost->params_flop_branch * 1e-6);
    fprintf(out, ")\n");
    fprintf(
        out,
        "  step time (median)   %.2f ms  (forward+backward %.2f, of which thread 0's forward %.2f and backward %.2f; "
        "update %.2f; thread 0's CPU time in forward+backward %.2f)\n",
        1e3 * s->step_s, 1e3 * s->region_s, 1e3 * s->forward_s, 1e3 * s->backward_s, 1e3 * s->optim_s,
        1e3 * s->forward_backward_cpu_s);
    fprintf(out, "  tokens/s             %.0f\n", s->tokens_per_s);
    fprintf(out, "  model FLOPs/token    %.3f MFLOP (6N + 12*L*C*T%s)\n", cost->flops_per_token * 1e-6,
            cost->params_flop_branch ? ", + the branch's" : "");
    fprintf(out, "  achieved             %.1f GFLOP/s", s->gflops);
    if (gemm_gflops > 0) fprintf(out, "  = %.0f%% of the GEMM rate (MFU)", 100.0 * s->gflops / gemm_gflops);
    fprintf(out, "\n");
    fprintf(out, "  loss                 %.4f at the first timed step, %.4f at the last\n", r->first_loss,
            r->last_loss);
}

static void print_run_json(FILE *out, const bench_run *r, const run_summary *s, double gemm_gflops) {
    const bench_train_cost *cost = &r->cost;
    fprintf(
        out,
        "{\"label\": \"%s\", \"branch\": \"%s\", \"precision\": \"%s\", \"params\": %lld, \"params_flop\": %lld, "
        "\"params_flop_branch\": %lld, \"flops_per_token\": %.0f, \"step_ms\": %.4f, \"forward_ms\": %.4f, "
        "\"backward_ms\": %.4f, \"forward_backward_ms\": %.4f, \"optim_ms\": %.4f, \"forward_backward_cpu_ms\": %.4f, "
        "\"tokens_per_s\": %.2f, \"gflops\": %.3f, \"mfu\": %.4f, "
        "\"first_loss\": %.9g, \"last_loss\": %.9g, \"closed_form_bytes\": %.0f}",
        r->label, model_branch_name(r->cfg.model.branch), train_precision_name(r->cfg.precision),
        (long long)cost->params_total, (long long)cost->params_flop, (long long)cost->params_flop_branch,
        cost->flops_per_token, 1e3 * s->step_s, 1e3 * s->forward_s, 1e3 * s->backward_s, 1e3 * s->region_s,
        1e3 * s->optim_s, 1e3 * s->forward_backward_cpu_s, s->tokens_per_s, s->gflops,
        gemm_gflops > 0 ? s->gflops / gemm_gflops : 0.0, r->first_loss, r->last_loss, cost->bytes_total);
}

static int fail(void) {
    fprintf(stderr, "dbranch bench train: %s\n", dt_error_message());
    return 1;
}

int bench_train_main(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    const double rss_at_start = peak_rss_bytes(); /* the binary and its libraries, before any model */
    bench_options o;
    train_config cfg;
    if (parse_options(argc, argv, &o) != DT_OK || build_config(&o, &cfg) != DT_OK) return fail();
#ifdef DBRANCH_MPI
    if (dt_comm_mpi_launched()) {
        if (dt_comm_mpi_init(NULL, NULL, cfg.reduce, &job) != DT_OK) return fail();
        if (cfg.batch_size % job->size != 0) {
            dt_errorf("train.batch_size = %lld does not split evenly over %d processes", (long long)cfg.batch_size,
                      job->size);
            fail();
            dt_comm_mpi_finalize();
            return 1;
        }
        o.gemm_probe = 0;
        /* One voice for the job: the other ranks' reports would repeat rank 0's. */
        if (job->rank != 0 && !freopen("/dev/null", "w", stdout)) return fail();
    }
#endif
    if (o.threads > 0)
        k_set_threads(o.threads);
    else if (cfg.threads > 0)
        k_set_threads((int)cfg.threads);
    const int threads = k_get_threads();

    /* The runs: one model, or the baseline and its Decode-Branch twin. */
    enum { MAX_RUNS = 2 };
    bench_run runs[MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int n_runs = 0, status = 1;
    gemm_probe probe, probe16; /* float32 and (runs in bf16) bf16 products */
    memset(&probe, 0, sizeof probe);
    memset(&probe16, 0, sizeof probe16);
    const int any_bf16 = o.compare_precision || cfg.precision == TRAIN_PRECISION_BF16;
    double *probe_s = calloc((size_t)o.steps, sizeof(double)), *work = calloc((size_t)o.steps, sizeof(double));
    double *probe16_s = calloc((size_t)o.steps, sizeof(double));
    if (!probe_s || !work || !probe16_s) {
        dt_errorf("out of memory");
        goto done;
    }
    if (o.compare_branch) {
        train_config base = cfg, twin = cfg;
        base.model.branch = BRANCH_NONE;
        twin.model.branch = BRANCH_DECODE;
        if (model_config_validate(&base.model) != DT_OK || model_config_validate(&twin.model) != DT_OK) goto done;
        if (run_init(&runs[n_runs++], "baseline", &base, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK)
            goto done;
        if (run_init(&runs[n_runs++], "decode-branch", &twin, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK)
            goto done;
    } else if (o.compare_precision) {
        train_config fp32 = cfg, bf16 = cfg;
        fp32.precision = TRAIN_PRECISION_FP32;
        bf16.precision = TRAIN_PRECISION_BF16;
        if (run_init(&runs[n_runs++], "fp32", &fp32, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK) goto done;
        if (run_init(&runs[n_runs++], "bf16", &bf16, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK) goto done;
    } else if (o.compare_schedule) {
        if (!cfg.model.recurrent) {
            dt_errorf("--compare-schedule needs a recurrent model (--set model.recurrent=1)");
            goto done;
        }
        if (run_init(&runs[n_runs++], "scan", &cfg, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK) goto done;
        if (run_init(&runs[n_runs++], "tiled", &cfg, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK) goto done;
    } else {
        const char *label = cfg.model.branch == BRANCH_DECODE ? "decode-branch" : "baseline";
        if (run_init(&runs[n_runs++], label, &cfg, o.steps, !o.data_path, o.seed, o.split_rows) != DT_OK) goto done;
    }
    const int64_t B = cfg.batch_size, T = cfg.seq_len, C = cfg.model.d_model;
    if (o.gemm_probe && (probe_init(&probe, B * T, runs[0].model.config.d_ff, C, runs[0].parallel.n_workers > 1, 0,
                                    o.seed + 7) != DT_OK ||
                         (any_bf16 && probe_init(&probe16, B * T, runs[0].model.config.d_ff, C,
                                                 runs[0].parallel.n_workers > 1, 1, o.seed + 7) != DT_OK)))
        goto done;
    const int probe_bf16 = o.gemm_probe && any_bf16;

    /* Warm-up: the arena finds its size, BLIS its buffers, the pages their frames. */
    double loss;
    for (int64_t w = 0; w < o.warmup; w++) {
        for (int i = 0; i < n_runs; i++) {
            if (o.compare_schedule) model_recurrent_set_schedule(i ? MODEL_RECURRENT_TILED : MODEL_RECURRENT_SCAN);
            if (run_step(&runs[i], -1, &loss) != DT_OK) goto done;
        }
        if (o.gemm_probe) probe_run(&probe);
        if (probe_bf16) probe_run(&probe16);
    }
    for (int64_t s = 0; s < o.steps; s++) {
        for (int i = 0; i < n_runs; i++) {
            if (o.compare_schedule) model_recurrent_set_schedule(i ? MODEL_RECURRENT_TILED : MODEL_RECURRENT_SCAN);
            if (run_step(&runs[i], s, &loss) != DT_OK) goto done;
            if (s == 0) runs[i].first_loss = loss;
            runs[i].last_loss = loss;
        }
        if (o.gemm_probe) probe_s[s] = probe_run(&probe);
        if (probe_bf16) probe16_s[s] = probe_run(&probe16);
    }
    const double rss = peak_rss_bytes();
    double arena_bytes = 0.0; /* per-step memory the runs' arenas settled at */
    for (int i = 0; i < n_runs; i++)
        for (int w = 0; w < runs[i].parallel.n_workers; w++)
            arena_bytes += (double)dt_arena_capacity(&runs[i].parallel.contexts[w].arena);
    const double gemm_gflops = o.gemm_probe ? probe.flops / median(probe_s, o.steps, work) * 1e-9 : 0.0;
    const double gemm16_gflops = probe_bf16 ? probe16.flops / median(probe16_s, o.steps, work) * 1e-9 : 0.0;

    run_summary summaries[MAX_RUNS];
    double closed_form = 0.0;
    for (int i = 0; i < n_runs; i++) {
        summaries[i] = summarize(&runs[i], o.steps, work);
        closed_form += runs[i].cost.bytes_total;
    }

    FILE *table = o.json ? stderr : stdout;
    const model_config *mc = &cfg.model;
    fprintf(table,
            "bench train: %s V=%lld T=%lld B=%lld L=%lld H=%lld C=%lld%s, %s, %d processes (%s sums) x %d threads, "
            "%lld timed steps after %lld warm-up, %s, split by %s\n",
            model_family_name(mc->family), (long long)mc->vocab_size, (long long)T, (long long)B,
            (long long)mc->n_layer, (long long)mc->n_head, (long long)C, cfg.grad_accum > 1 ? " (with grad_accum)" : "",
            optim_kind_name(cfg.optimizer), job ? job->size : 1, dt_comm_reduce_name(cfg.reduce), threads,
            (long long)o.steps, (long long)o.warmup, o.data_path ? o.data_path : "random tokens",
            runs[0].parallel.n_workers > 1 ? "rows" : "ops");
    if (o.gemm_probe)
        fprintf(table,
                "GEMM rate (k_gemm, M=%lld N=%lld K=%lld forward + d_in + d_weight%s, median between steps): %.1f "
                "GFLOP/s\n",
                (long long)probe.M, (long long)probe.N, (long long)probe.K,
                probe.n_threads > 1 ? ", rows split over the threads as in the step" : "", gemm_gflops);
    if (any_bf16) {
        const k_bf16_gemm_engine engine = k_bf16_gemm_active();
        fprintf(table, "bf16 products: %s%s%s%s", k_bf16_gemm_name(engine),
                engine == K_BF16_GEMM_ONEDNN ? " (" : " (float32 GEMMs of bf16-rounded operands",
                engine == K_BF16_GEMM_ONEDNN ? k_bf16_gemm_onednn_kernel() : "", ")");
        if (probe_bf16) fprintf(table, ", the same GEMMs in bf16: %.1f GFLOP/s", gemm16_gflops);
        fprintf(table, "; attention: %s\n", k_bf16_attention_name(train_bf16_attention_engine(&runs[n_runs - 1].cfg)));
    }
    for (int i = 0; i < n_runs; i++)
        print_run_table(table, &runs[i], &summaries[i],
                        runs[i].cfg.precision == TRAIN_PRECISION_BF16 ? gemm16_gflops : gemm_gflops);
    const bench_train_cost *c0 = &runs[0].cost;
    fprintf(table,
            "peak RSS %.1f MB vs closed form %.1f MB (params %.1f + grads %.1f + Adam %.1f + activations %.1f%s): "
            "%.2fx\n",
            rss / 1e6, closed_form / 1e6, c0->bytes_params / 1e6, c0->bytes_grads / 1e6, c0->bytes_adam / 1e6,
            c0->bytes_activations / 1e6, n_runs > 1 ? ", for the first model; both models summed" : "",
            rss / closed_form);
    fprintf(table, "  of which: %.1f MB at start (binary and libraries), %.1f MB in the step arenas\n",
            rss_at_start / 1e6, arena_bytes / 1e6);
    double step_ratio = 0.0, fwd_bwd_ratio = 0.0, fwd_bwd_cpu_ratio = 0.0;
    if (n_runs == 2) {
        step_ratio = summaries[1].step_s / summaries[0].step_s;
        fwd_bwd_ratio =
            (summaries[1].forward_s + summaries[1].backward_s) / (summaries[0].forward_s + summaries[0].backward_s);
        fwd_bwd_cpu_ratio = summaries[1].forward_backward_cpu_s / summaries[0].forward_backward_cpu_s;
        fprintf(table, "%s / %s time: step %.3fx, forward+backward %.3fx (CPU time of thread 0: %.3fx)\n",
                runs[1].label, runs[0].label, step_ratio, fwd_bwd_ratio, fwd_bwd_cpu_ratio);
    }
    if (o.json) {
        printf("{\"bench\": \"train\", \"family\": \"%s\", \"vocab_size\": %lld, \"seq_len\": %lld, \"batch_size\": "
               "%lld, \"n_layer\": %lld, \"n_head\": %lld, \"d_model\": %lld, \"grad_accum\": %lld, \"threads\": %d, "
               "\"processes\": %d, \"reduce\": \"%s\", \"steps\": %lld, \"warmup\": %lld,\n",
               model_family_name(mc->family), (long long)mc->vocab_size, (long long)T, (long long)B,
               (long long)mc->n_layer, (long long)mc->n_head, (long long)C, (long long)cfg.grad_accum, threads,
               job ? job->size : 1, dt_comm_reduce_name(cfg.reduce), (long long)o.steps, (long long)o.warmup);
        printf(" \"gemm\": {\"M\": %lld, \"N\": %lld, \"K\": %lld, \"gflops\": %.3f, \"gflops_bf16\": %.3f, "
               "\"bf16_engine\": \"%s\", \"onednn_kernel\": \"%s\", \"bf16_attention\": \"%s\"},\n",
               (long long)probe.M, (long long)probe.N, (long long)probe.K, gemm_gflops, gemm16_gflops,
               k_bf16_gemm_name(k_bf16_gemm_active()), k_bf16_gemm_onednn_kernel(),
               k_bf16_attention_name(train_bf16_attention_engine(&runs[n_runs - 1].cfg)));
        printf(
            " \"peak_rss_bytes\": %.0f, \"closed_form_bytes\": %.0f, \"rss_ratio\": %.4f, \"start_rss_bytes\": %.0f, "
            "\"arena_bytes\": %.0f,\n",
            rss, closed_form, rss / closed_form, rss_at_start, arena_bytes);
        printf(" \"runs\": [");
        for (int i = 0; i < n_runs; i++) {
            printf("%s\n  ", i ? "," : "");
            print_run_json(stdout, &runs[i], &summaries[i],
                           runs[i].cfg.precision == TRAIN_PRECISION_BF16 ? gemm16_gflops : gemm_gflops);
        }
        printf("\n ]");
        if (n_runs == 2)
            printf(",\n \"ratios\": {\"step\": %.4f, \"forward_backward\": %.4f, \"forward_backward_cpu\": %.4f}",
                   step_ratio, fwd_bwd_ratio, fwd_bwd_cpu_ratio);
        printf("\n}\n");
    }
    status = 0;
done:
    model_recurrent_set_schedule(MODEL_RECURRENT_SCAN);
    if (status) fail();
#ifdef DBRANCH_MPI
    /* A failed rank takes the job down: the others may wait in the gradient sum. */
    if (status && job && job->size > 1) {
        fflush(NULL);
        dt_comm_mpi_abort(status);
    }
#endif
    for (int i = 0; i < n_runs; i++)
        run_free(&runs[i]);
    probe_free(&probe);
    probe_free(&probe16);
    free(probe_s);
    free(probe16_s);
    free(work);
#ifdef DBRANCH_MPI
    if (job) dt_comm_mpi_finalize();
    job = NULL;
#endif
    return status;
}
