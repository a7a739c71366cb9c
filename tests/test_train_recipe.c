/* The paper's training recipe (issue 16), its parts that live in train/ and
 * optim/:
 *  - AdamW parameter groups: each parameter's lr_scale scales its step (a
 *    closed form of AdamW's first step, not the code's output), and the
 *    trainer puts embeddings, the untied head and the 1-D vectors (coupling
 *    vectors included) in their groups from train.embed_lr / head_lr / vector_lr;
 *  - the eval records of the training log carry the coupling-vector and
 *    branch-embedding norms, finite, and equal to the norms of the weights
 *    the checkpoint holds at that step (computed here from the tensors by
 *    SPEC name); null for a model without a branch;
 *  - the two-table control (tok_emb_tables = 2) trains as the baseline with
 *    embed_lr doubled (untied head, no clipping), and not as the baseline. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "models/model_io.h"
#include "optim/optim.h"
#include "support/scratch.h"
#include "train/trainer.h"

/* ---- AdamW groups in the optimizer ---- */

/* At step 1 AdamW's update is lr * g / (|g| + eps) (the bias corrections
 * cancel the (1 - beta) factors); without decay that is the whole change. */
Test(train_recipe, adamw_lr_scale_scales_the_step) {
    enum { N = 40 };
    float data[2 * N], grad[2 * N], start[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        data[i] = start[i] = 0.01f * (float)(i % 7) - 0.03f;
        grad[i] = 0.05f * (float)((i * 13) % 11) - 0.25f;
    }
    float g0[2 * N];
    memcpy(g0, grad, sizeof grad);
    const optim_param params[2] = {
        {.name = "plain", .offset = 0, .ndim = 1, .shape = {N}, .size = N},
        {.name = "scaled", .offset = N, .ndim = 1, .shape = {N}, .size = N, .lr_scale = 3.0},
    };
    optimizer opt;
    optim_hparams hp = optim_hparams_default();
    cr_assert_eq(optim_init(&opt, OPTIM_ADAMW, params, 2, data, grad, 2 * N, &hp), DT_OK, "%s", dt_error_message());
    const double lr = 1e-3;
    const optim_update_args args = {.lr = lr, .muon_lr = 0.02, .grad_scale = 1.0f, .max_norm = 0.0};
    double norm;
    cr_assert_eq(optim_update(&opt, &args, &norm), DT_OK);
    for (int i = 0; i < 2 * N; i++) {
        const double scale = i < N ? 1.0 : 3.0;
        const double want = start[i] - lr * scale * g0[i] / (fabs(g0[i]) + hp.eps);
        cr_assert(fabs(data[i] - want) < 1e-6, "element %d: %.9g, want %.9g", i, data[i], want);
    }
    optim_free(&opt);

    /* A negative or non-finite scale is refused, naming the parameter. */
    optim_param bad[1] = {{.name = "bad", .offset = 0, .ndim = 1, .shape = {N}, .size = N, .lr_scale = -1.0}};
    cr_assert_eq(optim_init(&opt, OPTIM_ADAMW, bad, 1, data, grad, 2 * N, &hp), DT_ERR);
    cr_assert(strstr(dt_error_message(), "bad") != NULL, "%s", dt_error_message());
    bad[0].lr_scale = NAN;
    cr_assert_eq(optim_init(&opt, OPTIM_ADAMW, bad, 1, data, grad, 2 * N, &hp), DT_ERR);
}

Test(train_recipe, trainer_assigns_the_groups_by_parameter) {
    train_config cfg = train_config_default();
    cfg.model = model_config_default(FAMILY_LLAMA);
    cfg.model.vocab_size = 64;
    cfg.model.block_size = 8;
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.d_model = 16;
    cfg.model.branch = BRANCH_DECODE;
    cfg.model.tie_embeddings = 0;
    cfg.lr = 0.01;
    cfg.embed_lr = 0.6;
    cfg.head_lr = 0.008;
    cfg.vector_lr = 0.04;
    model m;
    cr_assert_eq(model_create(&m, &cfg.model), DT_OK, "%s", dt_error_message());
    optim_param *views = calloc((size_t)m.n_params, sizeof *views);
    trainer_describe_params(&m, views);
    trainer_assign_lr_groups(&m, &cfg, views);
    int seen[4] = {0, 0, 0, 0}; /* embedding, head, vector, matrix */
    for (int i = 0; i < m.n_params; i++) {
        const char *name = views[i].name;
        const int head = !strcmp(name, "lm_head.weight");
        const int embedding = strstr(name, "tok_emb") != NULL;
        const int vector = views[i].ndim == 1;
        const double want = head ? 0.8 : embedding ? 60.0 : vector ? 4.0 : 1.0;
        cr_assert(fabs(views[i].lr_scale - want) < 1e-12, "%s: lr_scale %g, want %g", name, views[i].lr_scale, want);
        seen[head ? 1 : embedding ? 0 : vector ? 2 : 3]++;
    }
    cr_assert(seen[0] == 2 && seen[1] == 1, "tok_emb and branch.tok_emb, lm_head");
    cr_assert(seen[2] >= 2 * 3 + 2 * 2 + 1, "coupling vectors (3 per layer), norms, the final norm: %d", seen[2]);
    cr_assert(seen[3] >= 2 * 4, "the attention and MLP matrices keep lr");

    /* tok_emb_tables = 2 (no branch): tok_emb2 is an embedding, at embed_lr. */
    model two;
    model_config c2 = cfg.model;
    c2.branch = BRANCH_NONE;
    c2.tok_emb_tables = 2;
    cr_assert_eq(model_create(&two, &c2), DT_OK, "%s", dt_error_message());
    optim_param *views2 = calloc((size_t)two.n_params, sizeof *views2);
    trainer_describe_params(&two, views2);
    trainer_assign_lr_groups(&two, &cfg, views2);
    int found = 0;
    for (int i = 0; i < two.n_params; i++)
        if (!strcmp(views2[i].name, "tok_emb2.weight")) {
            found = 1;
            cr_assert(fabs(views2[i].lr_scale - 60.0) < 1e-12, "tok_emb2: lr_scale %g", views2[i].lr_scale);
        }
    cr_assert(found, "no tok_emb2.weight");
    free(views2);
    model_free(&two);

    /* 0 means lr: every scale back to 1. */
    cfg.embed_lr = cfg.head_lr = cfg.vector_lr = 0.0;
    trainer_assign_lr_groups(&m, &cfg, views);
    for (int i = 0; i < m.n_params; i++)
        cr_assert_eq(views[i].lr_scale, 1.0, "%s", views[i].name);
    free(views);
    model_free(&m);
}

/* ---- the norms in the log ---- */

#define PATH_BUF 4096 /* trainer.log_path and out_dir + a file name */

static char work_dir[64];
static char data_path[128];

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "recipe");
    snprintf(data_path, sizeof data_path, "%s/words.h5", work_dir);
    static const char *const words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog "};
    enum { N_TRAIN = 6000, N_VAL = 600 };
    int32_t *stream = malloc((N_TRAIN + N_VAL) * sizeof *stream);
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    for (int64_t n = 0; n < N_TRAIN + N_VAL;)
        for (const char *w = words[dt_rng_below(&rng, 8)]; *w && n < N_TRAIN + N_VAL; w++)
            stream[n++] = (unsigned char)*w;
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data_path, &tok, stream, N_TRAIN, stream + N_TRAIN, N_VAL, "words"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);
    free(stream);
}

static void teardown(void) { test_remove_dir(work_dir); }

/* The value of "key": in a JSON line; *is_null set for null. */
static double json_field(const char *line, const char *key, int *is_null) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(line, pattern);
    cr_assert(at != NULL, "no %s in %s", key, line);
    at += strlen(pattern);
    *is_null = strncmp(at, "null", 4) == 0;
    return *is_null ? NAN : strtod(at, NULL);
}

/* Mean over the parameters whose name contains `part` of their L2 norms. */
static double mean_norm(const model *m, const char *part) {
    double sum = 0.0;
    int count = 0;
    for (int i = 0; i < m->n_params; i++) {
        if (!strstr(m->params[i].name, part)) continue;
        const dt_tensor *t = m->params[i].tensor;
        double squares = 0.0;
        for (int64_t k = 0; k < t->size; k++)
            squares += (double)dt_f32(t)[k] * (double)dt_f32(t)[k];
        sum += sqrt(squares);
        count++;
    }
    cr_assert(count > 0, "no parameter named *%s*", part);
    return sum / count;
}

/* The tiny llama both recipe tests train (untied head, Muon + AdamW groups, WSD), into work_dir/name. */
static train_config tiny_recipe_config(const char *name) {
    train_config cfg = train_config_default();
    cfg.precision = TRAIN_PRECISION_FP32; /* the checks compare runs to float32 rounding */
    cfg.model = model_config_default(FAMILY_LLAMA);
    cfg.model.vocab_size = 256;
    cfg.model.block_size = 16;
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.d_model = 16;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data_path);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s/%s", work_dir, name);
    cfg.batch_size = 2;
    cfg.seq_len = 16;
    cfg.lr = 1e-2;
    cfg.optimizer = OPTIM_MUON;
    cfg.schedule = SCHEDULE_WSD;
    cfg.threads = 1;
    return cfg;
}

/* Validates and trains cfg to its end; log_path (or NULL) gets the log's path. */
static void run_recipe(train_config *cfg, char *log_path) {
    cr_assert_eq(train_config_validate(cfg), DT_OK, "%s", dt_error_message());
    trainer t;
    trainer_options options = {0};
    cr_assert_eq(trainer_init(&t, cfg, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
    if (log_path) snprintf(log_path, PATH_BUF, "%s", t.log_path);
    trainer_free(&t);
}

static void train_tiny(const char *name, int branch, char *log_path, char *checkpoint_path) {
    train_config cfg = tiny_recipe_config(name);
    cfg.model.branch = branch ? BRANCH_DECODE : BRANCH_NONE;
    cfg.tokens = 6 * 2 * 16; /* 6 steps: evals at 3 and 6 */
    cfg.eval_every = 3;
    cfg.eval_windows = 2;
    cfg.vector_lr = 3e-2;
    run_recipe(&cfg, log_path);
    snprintf(checkpoint_path, PATH_BUF, "%s/checkpoint.h5", cfg.out_dir);
}

/* The last eval line of a log (and how many there were). */
static int last_eval_line(const char *path, char *line, size_t size) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "no log %s", path);
    char buffer[4096];
    int n = 0;
    while (fgets(buffer, sizeof buffer, f))
        if (strstr(buffer, "\"type\":\"eval\"")) {
            snprintf(line, size, "%s", buffer);
            n++;
        }
    fclose(f);
    return n;
}

static const char *const norm_keys[4] = {"couple_q_norm", "couple_hidden_norm", "couple_out_norm", "branch_emb_norm"};

Test(train_recipe, eval_lines_carry_the_branch_norms_of_the_weights, .init = setup, .fini = teardown, .timeout = 120) {
    static char log_path[PATH_BUF], checkpoint_path[PATH_BUF], line[4096];
    train_tiny("branch", 1, log_path, checkpoint_path);
    cr_assert_eq(last_eval_line(log_path, line, sizeof line), 2, "evals at steps 3 and 6");
    cr_assert(strstr(line, "\"step\":6,") != NULL, "%s", line);
    model m;
    cr_assert_eq(model_load(&m, checkpoint_path), DT_OK, "%s", dt_error_message());
    const double want[4] = {mean_norm(&m, "branch.couple_q"), mean_norm(&m, "branch.couple_hidden"),
                            mean_norm(&m, "branch.couple_out"), mean_norm(&m, "branch.tok_emb")};
    for (int k = 0; k < 4; k++) {
        int is_null;
        const double got = json_field(line, norm_keys[k], &is_null);
        cr_assert(!is_null && isfinite(got), "%s: %s", norm_keys[k], line);
        /* The coupling vectors start at zero: after 6 steps they have moved. */
        cr_assert(want[k] > 0.0, "%s is %g in the checkpoint", norm_keys[k], want[k]);
        cr_assert(fabs(got - want[k]) <= 1e-7 * want[k], "%s: log %.9g, checkpoint %.9g", norm_keys[k], got, want[k]);
    }
    model_free(&m);

    train_tiny("base", 0, log_path, checkpoint_path);
    cr_assert_eq(last_eval_line(log_path, line, sizeof line), 2);
    for (int k = 0; k < 4; k++) {
        int is_null;
        json_field(line, norm_keys[k], &is_null);
        cr_assert(is_null, "no branch: %s must be null: %s", norm_keys[k], line);
    }
}

/* ---- the two-table control (tok_emb_tables = 2, docs/DECISIONS.md) ---- */

/* Trains the tiny llama (untied head, Muon + AdamW groups, no clipping) and
 * loads its checkpoint into *m. */
static void train_embed(const char *name, int tables, double embed_lr, model *m) {
    train_config cfg = tiny_recipe_config(name);
    cfg.model.tok_emb_tables = tables;
    cfg.tokens = 8 * 2 * 16;
    cfg.eval_every = 8;
    cfg.eval_windows = 1;
    cfg.embed_lr = embed_lr;
    cfg.grad_clip = 0.0; /* the global norm would count the embedding gradient twice */
    run_recipe(&cfg, NULL);
    char path[PATH_BUF];
    snprintf(path, sizeof path, "%s/checkpoint.h5", cfg.out_dir);
    cr_assert_eq(model_load(m, path), DT_OK, "%s", dt_error_message());
}

/* Largest |a - b| over the tok_emb table(s) and every other shared tensor,
 * relative to the largest |b|: the two-table model's tok_emb + tok_emb2
 * against the baseline's tok_emb. */
static double embed_difference(const model *two, const model *base) {
    double worst = 0.0, largest = 0.0;
    for (int i = 0; i < base->n_params; i++) {
        const dt_tensor *b = base->params[i].tensor;
        const model_param *p = model_find_param(two, base->params[i].name);
        cr_assert_not_null(p, "%s", base->params[i].name);
        const int is_tok_emb = b == base->tok_emb;
        for (int64_t k = 0; k < b->size; k++) {
            const double a = dt_f32(p->tensor)[k] + (is_tok_emb ? dt_f32(two->tok_emb2)[k] : 0.0f);
            worst = fmax(worst, fabs(a - dt_f32(b)[k]));
            largest = fmax(largest, fabs(dt_f32(b)[k]));
        }
    }
    return worst / largest;
}

/* With an untied head both tables get the same gradient, so AdamW moves
 * their sum twice as far per step: the control trains as the baseline with
 * embed_lr doubled (to rounding), and not as the baseline itself. */
Test(train_recipe, two_tables_train_as_one_table_at_twice_the_embed_lr, .init = setup, .fini = teardown,
     .timeout = 120) {
    model two, doubled, plain;
    train_embed("two", 2, 0.02, &two);
    train_embed("doubled", 1, 0.04, &doubled);
    train_embed("plain", 1, 0.02, &plain);
    const double same = embed_difference(&two, &doubled), other = embed_difference(&two, &plain);
    cr_assert(same < 1e-4, "tok_emb + tok_emb2 vs the baseline at 2x embed_lr: %g", same);
    cr_assert(other > 1e-2, "vs the baseline at the same embed_lr: %g (the check could not fail)", other);
    model_free(&two);
    model_free(&doubled);
    model_free(&plain);
}
