/* `--weights bf16` end to end through the dbranch binary (env
 * DBRANCH_BINARY): greedy `generate` with bf16 weights writes the text a
 * float32 `generate` writes for the model with its matrices rounded to bf16
 * by the test; `eval` through the decode engine reports the library's bf16
 * figure; `bench decode --weights fp32,bf16` reports the cost model's bf16
 * bytes; DBRANCH_ISA forces the kernel level; bad words are one-line errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/decode_weights.h"
#include "eval/eval_loss.h"
#include "kernels/type_traits.h"
#include "models/model_info.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"
#include "test_eval_util.h"

static char dir[256];

static void setup(void) { test_scratch_dir(dir, sizeof dir, "eval_cli_bf16"); }

static void teardown(void) { test_remove_dir(dir); }

static int run(const char *env, const char *args, char **out, char **err) {
    return test_run_dbranch(env, args, out, err);
}

#define BYTE_MODEL                                                                                                     \
    "family=llama vocab_size=256 block_size=24 n_layer=2 n_head=2 d_model=32 d_ff=40 branch=decode mix_alpha_min=0.05"

/* The model of BYTE_MODEL at seed 3, its matrices rounded to bf16 by the test when `round`. */
static void write_model(const char *name, int round, char *path, size_t size) {
    snprintf(path, size, "%s/%s", dir, name);
    model m;
    eval_test_model(&m, BYTE_MODEL, 3);
    for (int i = 0; round && i < m.n_params; i++) {
        const model_param *p = &m.params[i];
        if (!p->is_matrix && !p->is_embedding) continue;
        float *x = dt_f32(p->tensor);
        for (int64_t j = 0; j < p->tensor->size; j++)
            x[j] = k_bf16_to_float(k_bf16_from_float(x[j]));
    }
    cr_assert(model_save(&m, path) == DT_OK, "%s", dt_error_message());
    model_free(&m);
}

TestSuite(eval_cli_bf16, .init = setup, .fini = teardown);

Test(eval_cli_bf16, generate_bf16_is_float32_on_rounded_weights) {
    char plain[512], rounded[512], args[1600], *bf16_out, *want, *err;
    write_model("m.h5", 0, plain, sizeof plain);
    write_model("rounded.h5", 1, rounded, sizeof rounded);
    const char *common = "--prompt 'the fox' --tokens 16 --temperature 0";
    snprintf(args, sizeof args, "generate --model %s %s --weights bf16", plain, common);
    cr_assert_eq(run("OMP_NUM_THREADS=2", args, &bf16_out, &err), 0, "stderr: %s", err);
    free(err);
    snprintf(args, sizeof args, "generate --model %s %s", rounded, common);
    cr_assert_eq(run("OMP_NUM_THREADS=2", args, &want, &err), 0, "stderr: %s", err);
    cr_expect_str_eq(bf16_out, want, "bf16 weights and float32 on rounded weights generate different text");
    free(bf16_out);
    free(want);
    free(err);

    snprintf(args, sizeof args, "generate --model %s --prompt x --weights fp16", plain);
    cr_expect_eq(run(NULL, args, NULL, &err), 2);
    test_assert_one_line_error(err, "dbranch generate: ", "--weights fp16");
    free(err);
}

Test(eval_cli_bf16, eval_decode_bf16_is_the_library_figure) {
    char model_path[512], data_path[512], args[1600], *out, *err;
    write_model("m.h5", 0, model_path, sizeof model_path);
    snprintf(data_path, sizeof data_path, "%s/data.h5", dir);
    data_tokenizer tok;
    cr_assert(data_tokenizer_byte(&tok) == DT_OK);
    const char *text = "the quick brown fox jumps over the lazy dog; the dog sleeps while the fox runs away.";
    int32_t tokens[128];
    const int64_t n = (int64_t)strlen(text);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (uint8_t)text[i];
    cr_assert(data_tokens_write(data_path, &tok, tokens, n, tokens, n, "test") == DT_OK, "%s", dt_error_message());
    data_tokenizer_free(&tok);

    snprintf(args, sizeof args, "eval --model %s --data %s --prompt-len 4 --weights bf16 --json", model_path,
             data_path);
    cr_assert_eq(run("OMP_NUM_THREADS=1", args, &out, &err), 0, "stderr: %s", err);
    cr_expect(strstr(out, "\"weights\": \"bf16\""), "%s", out);
    const double loss = test_json_number(out, "loss");
    free(out);
    free(err);

    model m;
    data_tokens data;
    cr_assert(model_load(&m, model_path) == DT_OK);
    cr_assert(data_tokens_open(&data, data_path) == DT_OK);
    eval_decode_weights w;
    cr_assert(eval_decode_weights_init(&w, &m, DT_BF16) == DT_OK);
    eval_loss_options o = eval_loss_default_options();
    o.prompt_len = 4;
    o.method = EVAL_DECODE;
    o.decode_weights = &w;
    eval_loss_result r;
    cr_assert(eval_loss_run(&m, &data, &o, &r) == DT_OK, "%s", dt_error_message());
    cr_expect(fabs(loss - r.loss) < 1e-5, "cli %g library %g", loss, r.loss);
    eval_decode_weights_free(&w);
    model_free(&m);
    /* and it is not the float32 figure (the CLI used the bf16 copy) */
    cr_assert(model_load(&m, model_path) == DT_OK);
    o.decode_weights = NULL;
    eval_loss_result fp32;
    cr_assert(eval_loss_run(&m, &data, &o, &fp32) == DT_OK, "%s", dt_error_message());
    cr_expect(fabs(loss - fp32.loss) > 1e-4, "bf16 %g float32 %g: the bf16 weights changed nothing", loss, fp32.loss);
    data_tokens_close(&data);
    model_free(&m);

    snprintf(args, sizeof args, "eval --model %s --data %s --weights bf16", model_path, data_path);
    cr_expect_eq(run(NULL, args, NULL, &err), 2);
    test_assert_one_line_error(err, "dbranch eval: ", "teacher-forced");
    free(err);
}

Test(eval_cli_bf16, bench_decode_both_weights_and_forced_levels) {
    char ini[512], args[1600], *out, *err;
    snprintf(ini, sizeof ini, "%s/m.ini", dir);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fprintf(f, "[model]\nfamily = llama\nvocab_size = 256\nblock_size = 24\nn_layer = 2\nn_head = 2\nd_model = 32\n"
               "d_ff = 40\nbranch = decode\n");
    cr_assert_eq(fclose(f), 0);
    snprintf(args, sizeof args,
             "bench decode --config %s --weights fp32,bf16 --prompt-len 2 --tokens 3 --probe-mib 1 --json", ini);
    cr_assert_eq(run("OMP_NUM_THREADS=2 DBRANCH_ISA=scalar", args, &out, &err), 0, "stderr: %s", err);
    model_info info;
    model_config c = eval_test_config(
        "family=llama vocab_size=256 block_size=24 n_layer=2 n_head=2 d_model=32 d_ff=40 branch=decode");
    cr_assert(model_info_compute(&c, 0, &info) == DT_OK);
    /* arms in order: fp32 baseline, grouped, ungrouped, then the same in bf16 */
    const char *bf16_arm = strstr(out, "\"weights\": \"bf16\", ");
    cr_assert(bf16_arm, "%s", out);
    cr_expect_eq(test_json_number(bf16_arm, "weight_bytes_per_token"), info.weight_bytes_bf16_baseline, "%s", out);
    cr_expect_eq(test_json_number(out, "weight_bytes_per_token"), info.weight_bytes_baseline, "%s", out);
    cr_expect(strstr(out, "\"isa\": \"scalar\""), "%s", out);
    free(out);
    free(err);

    snprintf(args, sizeof args, "bench decode --config %s --tokens 2 --probe-mib 1", ini);
    cr_expect_eq(run("DBRANCH_ISA=sse9", args, NULL, &err), 2);
    test_assert_one_line_error(err, "dbranch: ", "DBRANCH_ISA");
    free(err);
    snprintf(args, sizeof args, "bench decode --config %s --weights int8", ini);
    cr_expect_eq(run(NULL, args, NULL, &err), 1);
    test_assert_one_line_error(err, "dbranch bench decode: ", "--weights int8");
    free(err);
}
