/* The eval commands end to end through the dbranch binary (env
 * DBRANCH_BINARY): `eval`, `generate` and `bench decode` succeed on small
 * files, and bad inputs (missing model, vocabulary mismatch, missing
 * tokenizer, --feedback-passes without feedback) exit non-zero with one
 * "dbranch CMD: message" line. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/eval_loss.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "test_eval_util.h"

static char dir[256];

static void setup(void) { test_scratch_dir(dir, sizeof dir, "eval_cli"); }

static void teardown(void) { test_remove_dir(dir); }

/* Runs `dbranch ARGS` on one thread; returns the exit code, stdout/stderr in *out, *err (caller frees). */
static int run(const char *args, char **out, char **err) {
    return test_run_dbranch("OMP_NUM_THREADS=1", args, out, err);
}

static void write_model(const char *name, const char *spec, char *path, size_t size) {
    snprintf(path, size, "%s/%s", dir, name);
    model m;
    eval_test_model(&m, spec, 3);
    cr_assert(model_save(&m, path) == DT_OK, "%s", dt_error_message());
    model_free(&m);
}

static void write_data(char *path, size_t size) {
    snprintf(path, size, "%s/data.h5", dir);
    data_tokenizer tok;
    cr_assert(data_tokenizer_byte(&tok) == DT_OK);
    const char *text = "the quick brown fox jumps over the lazy dog; the dog sleeps while the fox runs away.";
    int64_t n = (int64_t)strlen(text);
    int32_t tokens[128];
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (uint8_t)text[i];
    cr_assert(data_tokens_write(path, &tok, tokens, n, tokens, n, "test") == DT_OK, "%s", dt_error_message());
    data_tokenizer_free(&tok);
}

#define BYTE_MODEL                                                                                                     \
    "family=llama vocab_size=256 block_size=16 n_layer=2 n_head=2 d_model=16 d_ff=32 branch=decode mix_alpha_min=0.05"

TestSuite(eval_cli, .init = setup, .fini = teardown);

Test(eval_cli, eval_reports_the_library_figures) {
    char model_path[512], data_path[512], args[1600], *out, *err;
    write_model("m.h5", BYTE_MODEL, model_path, sizeof model_path);
    write_data(data_path, sizeof data_path);
    snprintf(args, sizeof args, "eval --model %s --data %s --json", model_path, data_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    double loss = 0.0;
    char *at = strstr(out, "\"loss\": ");
    cr_assert(at && sscanf(at, "\"loss\": %lf", &loss) == 1, "%s", out);

    model m;
    data_tokens data;
    cr_assert(model_load(&m, model_path) == DT_OK);
    cr_assert(data_tokens_open(&data, data_path) == DT_OK);
    eval_loss_options o = eval_loss_default_options();
    eval_loss_result r;
    cr_assert(eval_loss_run(&m, &data, &o, &r) == DT_OK);
    cr_expect(fabs(loss - r.loss) < 1e-5, "cli %g library %g", loss, r.loss);
    data_tokens_close(&data);
    model_free(&m);
    free(out);
    free(err);

    /* decode path with a prompt: same positions teacher-forced, same figure */
    double tf = 0.0, dec = 0.0;
    snprintf(args, sizeof args, "eval --model %s --data %s --prompt-len 4 --method tf --json", model_path, data_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    cr_assert(sscanf(strstr(out, "\"loss\": "), "\"loss\": %lf", &tf) == 1);
    free(out);
    free(err);
    snprintf(args, sizeof args, "eval --model %s --data %s --prompt-len 4", model_path, data_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    cr_assert(strstr(out, "loss ") && sscanf(strstr(out, "loss "), "loss %lf", &dec) == 1, "%s", out);
    cr_expect(fabs(tf - dec) < 2e-4, "teacher-forced %g decode %g", tf, dec);
    free(out);
    free(err);
}

Test(eval_cli, eval_bad_inputs) {
    char model_path[512], data_path[512], args[1600], *out, *err;
    write_data(data_path, sizeof data_path);
    snprintf(args, sizeof args, "eval --model %s/missing.h5 --data %s", dir, data_path);
    cr_expect_eq(run(args, &out, &err), 1);
    test_assert_one_line_error(err, "dbranch eval: ", "missing.h5");
    free(out);
    free(err);

    write_model("v128.h5", "family=llama vocab_size=128 block_size=16 n_layer=1 n_head=2 d_model=16", model_path,
                sizeof model_path);
    snprintf(args, sizeof args, "eval --model %s --data %s", model_path, data_path);
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strncmp(err, "dbranch eval: ", 14) == 0 && strstr(err, "vocab_size"), "%s", err);
    free(out);
    free(err);

    snprintf(args, sizeof args, "eval --model %s", model_path);
    cr_expect_neq(run(args, &out, &err), 0, "--data is required");
    free(out);
    free(err);
}

Test(eval_cli, generate) {
    char model_path[512], data_path[512], args[1600], *out, *err, *again;
    write_model("m.h5", BYTE_MODEL, model_path, sizeof model_path);
    snprintf(args, sizeof args, "generate --model %s --prompt 'the fox' --tokens 8 --temperature 0", model_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    cr_expect(strncmp(out, "the fox", 7) == 0, "%s", out);
    free(err);
    cr_assert_eq(run(args, &again, &err), 0);
    cr_expect_str_eq(out, again, "greedy generation differs between runs");
    free(out);
    free(again);
    free(err);

    write_data(data_path, sizeof data_path);
    snprintf(args, sizeof args, "generate --model %s --prompt 'a' --tokens 4 --data %s --seed 3", model_path,
             data_path);
    cr_expect_eq(run(args, &out, &err), 0, "stderr: %s", err);
    free(out);
    free(err);

    snprintf(args, sizeof args, "generate --model %s/none.h5 --prompt x", dir);
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strncmp(err, "dbranch generate: ", 18) == 0, "%s", err);
    free(out);
    free(err);

    /* vocabulary 128: no byte tokenizer by default, and the byte dataset's does not fit */
    write_model("v128.h5", "family=llama vocab_size=128 block_size=16 n_layer=1 n_head=2 d_model=16", model_path,
                sizeof model_path);
    snprintf(args, sizeof args, "generate --model %s --prompt x", model_path);
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strstr(err, "--tokenizer") != NULL, "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "generate --model %s --prompt x --data %s", model_path, data_path);
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strstr(err, "vocab_size") != NULL, "%s", err);
    free(out);
    free(err);
}

Test(eval_cli, bench_decode_json) {
    char ini[512], args[1600], *out, *err;
    snprintf(ini, sizeof ini, "%s/tiny.ini", dir);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fprintf(f, "[model]\nfamily = moe\nvocab_size = 64\nblock_size = 32\nn_layer = 2\nn_head = 2\nd_model = 16\n"
               "n_expert = 4\ntop_k = 2\nbranch = decode\n[train]\nsteps = 5\n");
    fclose(f);
    snprintf(args, sizeof args, "bench decode --config %s --prompt-len 4 --tokens 3 --probe-mib 1 --json", ini);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    cr_expect(strstr(out, "\"grouped_over_baseline\"") && strstr(out, "\"mode\": \"ungrouped\""), "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench decode --config %s --set n_layer=x", ini);
    cr_expect_eq(run(args, &out, &err), 1);
    cr_expect(strstr(err, "n_layer") != NULL, "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench decode --prompt-len 4");
    cr_expect_neq(run(args, &out, &err), 0);
    free(out);
    free(err);
}

/* --feedback-passes: the N = 0 figure is the plain eval's; a model without
 * feedback and a bad list each get one error line. */
Test(eval_cli, eval_feedback_passes) {
    char model_path[512], data_path[512], args[1600], *out, *err;
    write_data(data_path, sizeof data_path);
    write_model("fb.h5", "family=llama vocab_size=256 block_size=16 n_layer=1 n_head=2 d_model=16 feedback=1",
                model_path, sizeof model_path);
    snprintf(args, sizeof args, "eval --model %s --data %s --json", model_path, data_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    double plain = 0.0, fused0 = 0.0;
    cr_assert(sscanf(strstr(out, "\"loss\": "), "\"loss\": %lf", &plain) == 1, "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "eval --model %s --data %s --feedback-passes 0,1,3 --json", model_path, data_path);
    cr_assert_eq(run(args, &out, &err), 0, "stderr: %s", err);
    char *at = strstr(out, "{\"fused\": 0, \"loss\": ");
    cr_assert(at && sscanf(at, "{\"fused\": 0, \"loss\": %lf", &fused0) == 1, "%s", out);
    cr_expect(fabs(fused0 - plain) < 1e-6, "N = 0 %g, plain %g", fused0, plain);
    cr_expect(strstr(out, "\"fused\": 3") != NULL, "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof args, "eval --model %s --data %s --feedback-passes 0,2,1", model_path, data_path);
    cr_expect_eq(run(args, &out, &err), 2);
    test_assert_one_line_error(err, "dbranch eval: ", "--feedback-passes");
    free(out);
    free(err);
    write_model("plain.h5", "family=llama vocab_size=256 block_size=16 n_layer=1 n_head=2 d_model=16", model_path,
                sizeof model_path);
    snprintf(args, sizeof args, "eval --model %s --data %s --feedback-passes 0,1", model_path, data_path);
    cr_expect_eq(run(args, &out, &err), 1);
    test_assert_one_line_error(err, "dbranch eval: ", "feedback = 1");
    free(out);
    free(err);
}
