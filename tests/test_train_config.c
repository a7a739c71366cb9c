/* Run configuration: INI parsing (all three sections, any key order), --set
 * overrides, one-line errors naming the file/line/key/value, validation of
 * combinations, and the resolved text reading back as the same configuration. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/run_config.h"

static char config_path[64];

static void write_config(const char *text) {
    snprintf(config_path, sizeof config_path, "/tmp/dbranch_config_XXXXXX");
    int fd = mkstemp(config_path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
}

static void remove_config(void) {
    if (config_path[0]) unlink(config_path);
    config_path[0] = '\0';
}

static void assert_error_mentions(const char *a, const char *b) {
    const char *message = dt_error_message();
    cr_assert(strchr(message, '\n') == NULL, "message is not one line: %s", message);
    cr_assert(strstr(message, a) != NULL, "'%s' not in: %s", a, message);
    if (b) cr_assert(strstr(message, b) != NULL, "'%s' not in: %s", b, message);
}

static const char *full_config =
    "; a comment\n"
    "[train]\n"
    "batch_size = 12\n"
    "tokens = 2e6\n"
    "lr = 6e-4\n"
    "schedule = wsd\n"
    "optimizer = muon\n"
    "out_dir = runs/x\n"
    "\n"
    "[model]\n"
    "n_layer = 3\n"
    "d_model = 96\n"
    "n_head = 4\n"
    "block_size = 64\n"
    "family = llama\n" /* after the sizes: the sizes stay, the family defaults apply to the rest */
    "branch = decode\n"
    "\n"
    "[data]\n"
    "path = data_out/x.h5\n";

Test(train_config, parses_all_sections, .fini = remove_config) {
    write_config(full_config);
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.batch_size, 12);
    cr_assert_eq(cfg.tokens, 2000000);
    cr_assert_float_eq(cfg.lr, 6e-4, 1e-18);
    cr_assert_eq(cfg.schedule, SCHEDULE_WSD);
    cr_assert_eq(cfg.optimizer, OPTIM_MUON);
    cr_assert_str_eq(cfg.out_dir, "runs/x");
    cr_assert_str_eq(cfg.data_path, "data_out/x.h5");
    cr_assert_eq(cfg.model.family, FAMILY_LLAMA);
    cr_assert_eq(cfg.model.n_layer, 3);
    cr_assert_eq(cfg.model.d_model, 96);
    cr_assert_eq(cfg.model.branch, BRANCH_DECODE);
    cr_assert_eq(cfg.model.tie_embeddings, 0, "llama's default (untied) must apply");
    cr_assert_eq(cfg.grad_accum, 1, "unset keys keep their defaults");
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.seq_len, 64, "seq_len 0 resolves to block_size");
    /* 2e6 tokens / (12 * 64) per step = 2604 steps; warm-up 5% of them. */
    cr_assert_eq(train_config_tokens_per_step(&cfg), 768);
    cr_assert_eq(train_config_total_steps(&cfg), 2604);
    cr_assert_eq(train_config_warmup_steps(&cfg), 130);
}

Test(train_config, unknown_key_names_file_line_and_key, .fini = remove_config) {
    write_config("[train]\nbatch_size = 4\nlearning_rate = 1e-3\n");
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("train.learning_rate", "line 3");
    cr_assert(strstr(dt_error_message(), config_path) != NULL, "%s", dt_error_message());
}

Test(train_config, unknown_model_key, .fini = remove_config) {
    write_config("[model]\nn_layers = 4\n");
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("model.n_layers", "line 2");
}

Test(train_config, unknown_section, .fini = remove_config) {
    write_config("[optimizer]\nlr = 1\n");
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("[optimizer]", NULL);
}

Test(train_config, bad_values_name_key_and_value, .fini = remove_config) {
    write_config("[train]\nbatch_size = twelve\n");
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("train.batch_size", "twelve");
    remove_config();

    write_config("[train]\nschedule = exponential\n");
    cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("train.schedule", "exponential");
    remove_config();

    write_config("[model]\nd_model = 12.5\n");
    cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("d_model", "12.5");
    remove_config();

    write_config("[train]\nlr = 1e-3x\n");
    cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("train.lr", "1e-3x");
}

Test(train_config, missing_file_names_path) {
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, "/nonexistent/dir/run.ini"), DT_ERR);
    assert_error_mentions("/nonexistent/dir/run.ini", NULL);
}

Test(train_config, key_outside_section, .fini = remove_config) {
    write_config("lr = 1e-3\n");
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_ERR);
    assert_error_mentions("'lr'", "line 1");
}

Test(train_config, set_overrides) {
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_set(&cfg, "train.lr=0.01"), DT_OK, "%s", dt_error_message());
    cr_assert_float_eq(cfg.lr, 0.01, 1e-15);
    cr_assert_eq(train_config_set(&cfg, "model.d_model = 256"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.model.d_model, 256);
    /* Bare keys, when only one section has them. */
    cr_assert_eq(train_config_set(&cfg, "n_layer=7"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.model.n_layer, 7);
    cr_assert_eq(train_config_set(&cfg, "path=some/data.h5"), DT_OK, "%s", dt_error_message());
    cr_assert_str_eq(cfg.data_path, "some/data.h5");
    cr_assert_eq(train_config_set(&cfg, "grad_accum=4"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.grad_accum, 4);
    /* Errors. */
    cr_assert_eq(train_config_set(&cfg, "train.momentum=0.9"), DT_ERR);
    assert_error_mentions("train.momentum", NULL);
    cr_assert_eq(train_config_set(&cfg, "warmup=10"), DT_ERR);
    assert_error_mentions("warmup", NULL);
    cr_assert_eq(train_config_set(&cfg, "lr"), DT_ERR);
    assert_error_mentions("lr", "key=value");
    cr_assert_eq(train_config_set(&cfg, "eval_every=soon"), DT_ERR);
    assert_error_mentions("eval_every", "soon");
}

Test(train_config, validation_errors) {
    train_config cfg = train_config_default();
    cfg.tokens = 100000;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("data.path", NULL);

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("train.tokens", NULL);

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cfg.model.block_size = 32;
    cfg.seq_len = 64;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("seq_len", "block_size");

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cfg.min_lr = 1.0;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("train.min_lr", NULL);

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cfg.beta2 = 1.0;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("train.beta2", NULL);

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100;
    cfg.batch_size = 4;
    cfg.seq_len = 64;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("less than one step", NULL);

    cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cfg.model.d_model = 128;
    cfg.model.n_head = 3; /* 128 is not divisible by 3 */
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("[model]", "n_head");
}

/* The text a checkpoint stores: parsing it back gives the same text (and the same values). */
Test(train_config, resolved_text_round_trips, .fini = remove_config) {
    write_config(full_config);
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_load(&cfg, config_path), DT_OK, "%s", dt_error_message());
    cfg.lr = 0.1 + 0.2; /* a value %.15g cannot print exactly */
    cfg.model.mix_alpha_min = 1.0 / 3.0;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    size_t n = train_config_format(&cfg, NULL, 0);
    char *text = malloc(n + 1);
    cr_assert_eq(train_config_format(&cfg, text, n + 1), n);
    cr_assert(strstr(text, "[model]\nfamily = llama\n") != NULL, "%s", text);
    cr_assert(strstr(text, "\n[train]\n") != NULL && strstr(text, "\n[data]\npath = data_out/x.h5\n") != NULL, "%s",
              text);

    train_config back = train_config_default();
    cr_assert_eq(train_config_parse_string(&back, text, "stored"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(train_config_validate(&back), DT_OK, "%s", dt_error_message());
    cr_assert_eq(back.lr, cfg.lr, "lr %.17g vs %.17g", back.lr, cfg.lr);
    cr_assert_eq(back.model.mix_alpha_min, cfg.model.mix_alpha_min);
    char *again = malloc(n + 1);
    cr_assert_eq(train_config_format(&back, again, n + 1), n);
    cr_assert_str_eq(again, text);
    free(text);
    free(again);
}

Test(train_config, integer_forms) {
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_set(&cfg, "tokens=1500000"), DT_OK);
    cr_assert_eq(cfg.tokens, 1500000);
    cr_assert_eq(train_config_set(&cfg, "tokens=1.5e6"), DT_OK);
    cr_assert_eq(cfg.tokens, 1500000);
    cr_assert_eq(train_config_set(&cfg, "tokens=1.5"), DT_ERR);
    assert_error_mentions("train.tokens", "1.5");
}

/* ---------- declared ranges and parsing holes (issue 18 items 6, 10, 12) ---------- */

static train_config valid_config(void) {
    train_config cfg = train_config_default();
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cfg.model.block_size = 64;
    return cfg;
}

Test(train_config, values_beyond_their_range_are_refused) {
    /* Each passed validation before: 2^63-1 windows overflowed B*T, and train
     * took any thread count while eval refused more than 1024. */
    const char *cases[][2] = {
        {"train.batch_size=9223372036854775807", "train.batch_size"},
        {"train.grad_accum=9223372036854775807", "train.grad_accum"},
        {"train.threads=10000", "train.threads"},
        {"train.threads=2147483648", "train.threads"},
        {"train.seq_len=2147483648", "train.seq_len"},
        {"train.eval_windows=-5", "train.eval_windows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config cfg = valid_config();
        cr_assert_eq(train_config_set(&cfg, cases[i][0]), DT_OK, "%s: %s", cases[i][0], dt_error_message());
        cr_assert_eq(train_config_validate(&cfg), DT_ERR, "'%s' accepted", cases[i][0]);
        assert_error_mentions(cases[i][1], "must be in");
    }
    train_config cfg = valid_config();
    cr_assert_eq(train_config_set(&cfg, "train.threads=1024"), DT_OK);
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    /* B*T inside an int even when each factor is in range. */
    cfg = valid_config();
    cfg.model.block_size = 1048576;
    cfg.batch_size = 1048576;
    cfg.seq_len = 1048576;
    cfg.tokens = 1000000000000000;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR);
    assert_error_mentions("batch_size * train.seq_len", NULL);
}

Test(train_config, integers_that_are_not_the_number_written_are_refused) {
    /* 1e-400 underflows to 0 (and was taken as seed 0); beyond 64 bits is not a seed. */
    const char *cases[] = {"train.seed=1e-400", "train.tokens=1e-400", "train.seed=18446744073709551616",
                           "train.seed=1e400", "train.batch_size=2.5"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config cfg = valid_config();
        cr_assert_eq(train_config_set(&cfg, cases[i]), DT_ERR, "'%s' accepted", cases[i]);
        assert_error_mentions(i == 1 ? "train.tokens" : i == 4 ? "train.batch_size" : "train.seed", "'");
    }
    train_config cfg = valid_config();
    cr_assert_eq(train_config_set(&cfg, "train.tokens=2e6"), DT_OK, "exact reals stay accepted");
    cr_assert_eq(cfg.tokens, 2000000);
}

Test(train_config, malformed_headers_are_refused) {
    const char *cases[] = {"[train]]\nseed = 3\n", "[train] x\nseed = 3\n", "[]\nseed = 3\n", "[train\nseed = 3\n",
                           "[model]\nn_layer = 2\n  [tra[in]\n"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config cfg = train_config_default();
        cr_assert_eq(train_config_parse_string(&cfg, cases[i], "test.ini"), DT_ERR, "accepted: %s", cases[i]);
        assert_error_mentions("test.ini line", "header");
    }
    train_config cfg = train_config_default();
    cr_assert_eq(
        train_config_parse_string(&cfg, "[train] ; the run\nseed = 3\n[model]  # the model\nn_layer = 2\n", "ok.ini"),
        DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.seed, 3);
    cr_assert_eq(cfg.model.n_layer, 2);
}

Test(train_config, stored_form_round_trips_every_run_key) {
    train_config cfg = valid_config(), back = train_config_default();
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "  runs/a ;b #c  ");
    snprintf(cfg.init_from, sizeof cfg.init_from, "x ; y.h5");
    cfg.lr = 0.1 + 0.2;
    cfg.seed = INT64_MAX;
    for (int i = 0; i < train_config_key_count(); i++) {
        char text[TRAIN_PATH_MAX];
        train_config_get_stored(&cfg, i, text, sizeof text);
        cr_assert_eq(train_config_set_stored(&back, i, text), DT_OK, "%s: %s", train_config_key_name(i),
                     dt_error_message());
    }
    cr_assert_str_eq(back.out_dir, cfg.out_dir, "paths verbatim");
    cr_assert_str_eq(back.init_from, cfg.init_from);
    cr_assert_eq(back.lr, cfg.lr);
    cr_assert_eq(back.seed, INT64_MAX);
    cr_assert_str_eq(train_config_key_name(0), "data.path");
}

/* train.feedback_passes (SPEC §6.5): a K:weight mix; bad mixes are one-line
 * errors naming the key; the stored form reads back; draws follow the
 * cumulative weights; K > 1 needs model.feedback = 1. */
Test(train_config, feedback_pass_mix) {
    train_config cfg = train_config_default();
    cr_assert_eq(cfg.feedback_passes.n, 1);
    cr_assert_eq(cfg.feedback_passes.passes[0], 1);
    cr_assert_float_eq(cfg.feedback_lambda, 1.0, 0.0);
    cr_assert_float_eq(cfg.feedback_jitter, 0.02, 1e-12);
    cr_assert_eq(train_config_set(&cfg, "feedback_passes=1:0.75,2:0.22,3:0.03"), DT_OK, "%s", dt_error_message());
    const train_pass_mix *mix = &cfg.feedback_passes;
    cr_assert_eq(mix->n, 3);
    cr_assert_eq(mix->passes[2], 3);
    cr_assert_float_eq(mix->weight[1], 0.22, 1e-15);
    cr_assert_eq(train_pass_mix_max(mix), 3);
    cr_assert_eq(train_pass_mix_pick(mix, 0.0), 1);
    cr_assert_eq(train_pass_mix_pick(mix, 0.7499), 1);
    cr_assert_eq(train_pass_mix_pick(mix, 0.75), 2);
    cr_assert_eq(train_pass_mix_pick(mix, 0.9699), 2);
    cr_assert_eq(train_pass_mix_pick(mix, 0.98), 3);
    cr_assert_eq(train_pass_mix_pick(mix, 0.9999999), 3);
    for (int i = 0; i < train_config_key_count(); i++) {
        if (strcmp(train_config_key_name(i), "train.feedback_passes")) continue;
        char text[256];
        train_config_get_stored(&cfg, i, text, sizeof text);
        cr_assert_str_eq(text, "1:0.75,2:0.22,3:0.03");
        train_config back = train_config_default();
        cr_assert_eq(train_config_set_stored(&back, i, text), DT_OK);
        cr_assert(memcmp(&back.feedback_passes, mix, sizeof *mix) == 0);
    }
    cr_assert_eq(train_config_set(&cfg, "feedback_passes=2"), DT_OK, "a single K");
    cr_assert_eq(cfg.feedback_passes.passes[0], 2);
    const char *bad[] = {"",  "0:1", "1:0.5,2:0.4", "1:0.5,1:0.5", "2:-1,1:2",   "1:0.5,2:0.5,",
                         "x", "1;1", "65:1.0",      "1:nan",       "1:0.5 2:0.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        train_config c = train_config_default();
        char assignment[64];
        snprintf(assignment, sizeof assignment, "feedback_passes=%s", bad[i]);
        cr_expect_eq(train_config_set(&c, assignment), DT_ERR, "'%s' accepted", bad[i]);
        assert_error_mentions("train.feedback_passes", NULL);
    }
    snprintf(cfg.data_path, sizeof cfg.data_path, "x.h5");
    cfg.tokens = 100000;
    cr_assert_eq(train_config_validate(&cfg), DT_ERR, "K = 2 on a model without feedback");
    assert_error_mentions("train.feedback_passes", "model.feedback");
    cfg.model.feedback = 1;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
}

Test(train_config, precision_key) {
    train_config cfg = train_config_default();
    cr_assert_eq(cfg.precision, TRAIN_PRECISION_AUTO, "auto is the default");
    cr_assert_eq(train_config_set(&cfg, "train.precision=bf16"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.precision, TRAIN_PRECISION_BF16);
    cr_assert_eq(train_config_set(&cfg, "train.precision=fp16"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "train.precision = 'fp16' must be auto|fp32|bf16"), "%s", dt_error_message());
    cr_assert_eq(cfg.precision, TRAIN_PRECISION_BF16, "a refused value changes nothing");
    char text[8192];
    train_config_format(&cfg, text, sizeof text);
    cr_assert(strstr(text, "precision = bf16\n"), "the resolved config shows it:\n%s", text);
}

Test(train_config, bf16_attention_key) {
    train_config cfg = train_config_default();
    cr_assert_eq(cfg.bf16_attention, TRAIN_BF16_ATTENTION_AUTO, "auto is the default");
    cr_assert_eq(train_config_set(&cfg, "train.bf16_attention=fp32"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.bf16_attention, TRAIN_BF16_ATTENTION_FP32);
    cr_assert_eq(train_config_set(&cfg, "train.bf16_attention=amx"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.bf16_attention, TRAIN_BF16_ATTENTION_AMX);
    cr_assert_eq(train_config_set(&cfg, "train.bf16_attention=tiles"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "train.bf16_attention = 'tiles' must be auto|amx|avx512_bf16|fp32"), "%s",
              dt_error_message());
    cr_assert_eq(cfg.bf16_attention, TRAIN_BF16_ATTENTION_AMX, "a refused value changes nothing");
    cr_assert_eq(train_bf16_attention_engine(&cfg), K_BF16_ATTENTION_FP32,
                 "float32 training never runs the bf16 attention");
    cr_assert_eq(train_config_set(&cfg, "train.bf16_attention=avx512_bf16"), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.bf16_attention, TRAIN_BF16_ATTENTION_AVX512_BF16);
    cr_assert_str_eq(train_bf16_attention_name(cfg.bf16_attention), "avx512_bf16");
    cfg.precision = TRAIN_PRECISION_BF16;
    cr_assert_eq(train_bf16_attention_engine(&cfg),
                 k_attention_avx512_bf16_available() ? K_BF16_ATTENTION_AVX512_BF16 : K_BF16_ATTENTION_FP32);
    cr_assert_eq(train_bf16_attention_check(&cfg), k_attention_avx512_bf16_available() ? DT_OK : DT_ERR);
}
