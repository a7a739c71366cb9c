/* Tests of the model figures (models/model_info.h): parameter counts against
 * the registry (model_create) and against published model sizes, FLOPs and
 * decode bytes against closed forms written out here from the formulas of the
 * brief, and the grouped-decode expert union of SPEC §2. When the dbranch
 * binary is built, `dbranch info` is run on a config file and a model file. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "models/model_info.h"
#include "models/model_io.h"
#include "support/run_dbranch.h"
#include "support/scratch.h"

static void set_pairs(model_config *c, const char *pairs) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pairs);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        cr_assert(eq);
        *eq = '\0';
        cr_assert_eq(model_config_set(c, tok, eq + 1), DT_OK, "%s: %s", tok, dt_error_message());
    }
}

static model_config config_of(model_family family, const char *pairs) {
    model_config c = model_config_default(family);
    set_pairs(&c, "vocab_size=40 block_size=12 n_layer=3 d_model=16 n_head=4");
    if (family != FAMILY_NANOGPT) set_pairs(&c, "n_kv_head=2 d_ff=24");
    if (family == FAMILY_MOE) set_pairs(&c, "n_expert=4 top_k=2");
    set_pairs(&c, pairs);
    return c;
}

/* Sum of the sizes of the registry's parameters whose names start with one of the prefixes. */
static int64_t registry_sum(const model *m, const char *prefix, const char *exclude) {
    int64_t total = 0;
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        if (strncmp(name, prefix, strlen(prefix)) != 0) continue;
        if (exclude && strstr(name, exclude)) continue;
        total += m->params[i].tensor->size;
    }
    return total;
}

Test(info, counts_match_the_registry) {
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    const char *variants[] = {"", "branch=decode", "branch=decode share=off", "branch=decode couple=off",
                              "branch=decode branch_emb=shared tie_embeddings=1", "branch=decode share=off couple=off",
                              /* SPEC §6.1 product FFNs and §6.2 per-layer heads */
                              "ffn=triplu branch=decode", "ffn=prod4 ffn_prod_norm=1 branch=decode share=off",
                              "ffn=prod2 ffn_prod_norm=1", "layer_heads=2,4,8 branch=decode",
                              /* SPEC §6.3 attention residuals */
                              "attn_res=full branch=decode", "attn_res=block attn_res_blocks=3 attn_res_heads=4",
                              /* SPEC §6.6 looped stack and DiscoLoop */
                              "n_loop=3", "n_loop=2 disco=1", "n_loop=2 disco=1 disco_gate=learned",
                              /* SPEC §6.4 ALiBi (no pos_emb for nanogpt) */
                              "alibi=1 branch=decode", "alibi=1 layer_heads=2,4,8 branch=decode share=off"};
    for (int f = 0; f < 3; f++) {
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            model_config c = config_of(families[f], variants[v]);
            model m;
            model_info info;
            cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
            cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK, "%s", dt_error_message());
            const char *what = variants[v];
            cr_assert_eq(info.params_primary, model_param_count(&m, PARAM_PRIMARY), "%d [%s]", f, what);
            cr_assert_eq(info.params_branch, model_param_count(&m, PARAM_BRANCH), "%d [%s]", f, what);
            cr_assert_eq(info.params_total, model_param_count(&m, -1), "%d [%s]", f, what);
            /* Per layer: layer 1's tensors; the branch's are its coupling vectors and its copies. */
            cr_assert_eq(info.layer_params_primary, registry_sum(&m, "layers.1.", ".branch."), "%d [%s]", f, what);
            cr_assert_eq(info.layer_params_branch,
                         registry_sum(&m, "layers.1.branch.", NULL) + registry_sum(&m, "branch.layers.1.", NULL),
                         "%d [%s]", f, what);
            cr_assert_eq(info.other_params_branch, registry_sum(&m, "branch.tok_emb", NULL));
            cr_assert_eq(info.context, 12, "context defaults to block_size");
            model_free(&m);
        }
    }
}

/* SPEC §6.6 by hand (llama, V = 40, C = 16, L = 3, rmsnorm, untied): K
 * applications stream the layers K times and read K·L caches; outside the
 * layers a step reads one embedding row, the final norm and the head. A
 * DiscoLoop boundary adds the final norm, the head, the disco_top kept rows
 * of W_out, disco.norm (and the gate [C] + [1]); FLOPs add the head and the
 * kept rows. */
Test(info, loop_and_disco_figures_by_hand) {
    const double C = 16, V = 40, outside = 4.0 * (C + C + V * C);
    model_info once, thrice, plain2, disco2, learned2;
    model_config c = config_of(FAMILY_LLAMA, "");
    cr_assert_eq(model_info_compute(&c, 6, &once), DT_OK, "%s", dt_error_message());
    c = config_of(FAMILY_LLAMA, "n_loop=3");
    cr_assert_eq(model_info_compute(&c, 6, &thrice), DT_OK, "%s", dt_error_message());
    c = config_of(FAMILY_LLAMA, "n_loop=2");
    cr_assert_eq(model_info_compute(&c, 6, &plain2), DT_OK, "%s", dt_error_message());
    c = config_of(FAMILY_LLAMA, "n_loop=2 disco=1 disco_top=5");
    cr_assert_eq(model_info_compute(&c, 6, &disco2), DT_OK, "%s", dt_error_message());
    c = config_of(FAMILY_LLAMA, "n_loop=2 disco=1 disco_top=5 disco_gate=learned");
    cr_assert_eq(model_info_compute(&c, 6, &learned2), DT_OK, "%s", dt_error_message());

    cr_expect_eq(thrice.params_total, once.params_total, "a loop reuses the weights");
    cr_expect_eq(thrice.weight_bytes_baseline - outside, 3.0 * (once.weight_bytes_baseline - outside));
    cr_expect_eq(thrice.kv_bytes_baseline, 3.0 * once.kv_bytes_baseline);
    cr_expect_eq(thrice.attention_flops_per_key, 3.0 * once.attention_flops_per_key);
    const double head_flops = 2.0 * V * C;
    cr_expect_eq(thrice.decode_flops_baseline - head_flops, 3.0 * (once.decode_flops_baseline - head_flops));

    cr_expect_eq(disco2.params_total, plain2.params_total + (int64_t)C, "disco.norm.weight");
    cr_expect_eq(learned2.params_total, plain2.params_total + 2 * (int64_t)C + 1, "and the gate [C], [1]");
    cr_expect_eq(disco2.weight_bytes_baseline - plain2.weight_bytes_baseline, 4.0 * (C + V * C + 5 * C + C));
    cr_expect_eq(learned2.weight_bytes_baseline - disco2.weight_bytes_baseline, 4.0 * (C + 1));
    cr_expect_eq(disco2.decode_flops_baseline - plain2.decode_flops_baseline, 2.0 * (V * C + 5 * C));
    cr_expect_eq(disco2.kv_bytes_baseline, plain2.kv_bytes_baseline);
}

/* SPEC §6.1's d_ff = 0 widths, computed by hand: llama/moe from the SwiGLU
 * width S = round32(8C/3) = 192 at C = 64: triplu round32(3S/4) = 160, prod2
 * S = 192, prod4 round32(3S/5) = round32(115.2) = 128; nanogpt round32(2C) =
 * 128, round32(8C/3) = 192, round32(8C/5) = round32(102.4) = 128. An explicit
 * d_ff is used as given, for nanogpt too. */
Test(info, product_ffn_widths_and_counts) {
    const char *words[] = {"triplu", "prod2", "prod4"};
    const int64_t llama_width[] = {160, 192, 128}, nanogpt_width[] = {128, 192, 128}, factors[] = {3, 2, 4};
    for (int i = 0; i < 3; i++) {
        char pairs[128];
        snprintf(pairs, sizeof pairs, "d_model=64 d_ff=0 ffn=%s", words[i]);
        model_config c = config_of(FAMILY_LLAMA, pairs);
        model_info info;
        cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK, "%s", dt_error_message());
        cr_assert_eq(info.config.d_ff, llama_width[i], "llama %s: d_ff %lld", words[i], (long long)info.config.d_ff);
        /* per layer: 2 norms, q 64x64, k v 32x64, o 64x64, the factors and w2 (F x 64 each) */
        const int64_t F = llama_width[i];
        cr_assert_eq(info.layer_params_primary, 2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + (factors[i] + 1) * F * 64);
        c = config_of(FAMILY_NANOGPT, pairs);
        cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK, "%s", dt_error_message());
        cr_assert_eq(info.config.d_ff, nanogpt_width[i], "nanogpt %s: d_ff %lld", words[i],
                     (long long)info.config.d_ff);
    }
    model_config c = config_of(FAMILY_NANOGPT, "d_ff=40 ffn=triplu ffn_prod_norm=1");
    model_info info;
    cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK, "%s", dt_error_message());
    cr_assert_eq(info.config.d_ff, 40, "an explicit d_ff is kept");
    /* nanogpt layer: 2 LayerNorms with biases, q k v o with biases, 4 matrices of 40 x 16, prod_norm [40] */
    cr_assert_eq(info.layer_params_primary, 4 * 16 + 4 * (16 * 16 + 16) + 4 * 40 * 16 + 40);
}

Test(info, counts_of_published_models) {
    /* LLaMA-2 7B: 6,738,415,616 parameters. */
    model_config llama = model_config_default(FAMILY_LLAMA);
    set_pairs(&llama, "vocab_size=32000 block_size=4096 n_layer=32 n_head=32 d_model=4096 d_ff=11008");
    model_info info;
    cr_assert_eq(model_info_compute(&llama, 0, &info), DT_OK, "%s", dt_error_message());
    cr_assert_eq(info.params_total, INT64_C(6738415616));
    cr_assert_eq(info.params_branch, 0);

    /* Mixtral 8x7B: 46,702,792,704 parameters; the matrices one token uses
     * (2 of 8 experts, router, attention, head) come to 12,748,587,008. */
    model_config mixtral = model_config_default(FAMILY_MOE);
    set_pairs(&mixtral, "vocab_size=32000 block_size=4096 n_layer=32 n_head=32 n_kv_head=8 d_model=4096 d_ff=14336 "
                        "n_expert=8 top_k=2 rope_theta=1000000");
    cr_assert_eq(model_info_compute(&mixtral, 0, &info), DT_OK, "%s", dt_error_message());
    cr_assert_eq(info.params_total, INT64_C(46702792704));
    cr_assert_eq(info.matmul_params_primary, INT64_C(12748587008));

    /* GPT-2 small: 124,439,808 (tied head). */
    model_config gpt2 = model_config_default(FAMILY_NANOGPT);
    set_pairs(&gpt2, "vocab_size=50257 block_size=1024 n_layer=12 n_head=12 d_model=768");
    cr_assert_eq(model_info_compute(&gpt2, 0, &info), DT_OK);
    cr_assert_eq(info.params_total, INT64_C(124439808));
    /* Prefill at T = 1024: 2 * (12 layers * 12 C^2 + V C) + 12 * 4 * 1024 * 768. */
    cr_assert_eq(info.prefill_flops_per_token, 2.0 * (12.0 * 12 * 768 * 768 + 50257.0 * 768) + 12.0 * 4 * 1024 * 768);
}

/* Reference 07: llama, C = 32, H = 4, Hkv = 2, hd = 8, F = 64, V = 56, L = 3, T = 16, branch decode. */
Test(info, llama_branch_figures_by_hand) {
    model_config c;
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/reference/07_llama_branch_alpha_fixed.h5", root ? root : ".");
    cr_assert_eq(model_load_config(&c, path), DT_OK, "%s", dt_error_message());
    model_info info;
    cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK);
    /* Matrices per token: q 32x32, k and v 16x32, o 32x32, w1 w3 w2 64x32 each; head 56x32. */
    const double primary = 3.0 * (32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 64 * 32) + 56 * 32; /* 29440 */
    const double branch = 3.0 * (32 * 32 + 32 * 32 + 3 * 64 * 32) + 56 * 32;                /* 26368 */
    cr_assert_eq((double)info.matmul_params_primary, primary);
    cr_assert_eq((double)info.matmul_params_branch, branch);
    const double attention = 3.0 * 4 * 16 * 32; /* L * 4 * T * H*hd */
    cr_assert_eq(info.prefill_flops_per_token, 2 * primary + attention);
    cr_assert_eq(info.decode_flops_baseline, 2 * primary + attention);
    cr_assert_eq(info.decode_flops_branch, 2 * primary + attention + 2 * branch + attention);

    /* Weights read (floats): per layer 2 norms of 32, q, k, v, o, the three FFN matrices;
     * one tok_emb row, final norm, head. */
    const double layer = 2 * 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 64 * 32; /* 9280 */
    const double baseline = 3 * layer + 32 + 32 + 56 * 32;
    cr_assert_eq(info.weight_bytes_baseline, 4 * baseline);
    /* Grouped: the same once, plus a branch.tok_emb row and the coupling vectors (32 + 64 + 32 per layer). */
    cr_assert_eq(info.weight_bytes_grouped, 4 * (baseline + 32 + 3 * (32 + 64 + 32)));
    /* Un-grouped: the branch pass reads norms, q, o, FFN, coupling, its row, final norm and head again. */
    const double branch_pass = 3 * (2 * 32 + 32 * 32 + 32 * 32 + 3 * 64 * 32 + 128) + 32 + 32 + 56 * 32;
    cr_assert_eq(info.weight_bytes_ungrouped, 4 * (baseline + branch_pass));
    /* bf16 decode weights: 2 bytes per matrix element (the layers' matrices and the head), 4 for the
     * vectors (two norms per layer, the final norm) and the tok_emb row (the decode step reads the
     * embedding row from the model's float32 copy, rounded in place: eval/decode_weights.h). */
    const double float32_part = 3 * 2 * 32 + 32 + 32;
    cr_assert_eq(info.weight_bytes_bf16_baseline, 2 * (baseline - float32_part) + 4 * float32_part);
    /* KV: 3 layers x (K and V) x 16 positions x Hkv*hd = 16 floats. */
    cr_assert_eq(info.kv_bytes_baseline, 4.0 * 3 * 2 * 16 * 16);
    cr_assert_eq(info.kv_bytes_grouped, info.kv_bytes_baseline);
    cr_assert_eq(info.kv_bytes_ungrouped, 2 * info.kv_bytes_baseline);

    /* A shorter context reads less cache and attends over fewer keys. */
    cr_assert_eq(model_info_compute(&c, 5, &info), DT_OK);
    cr_assert_eq(info.kv_bytes_baseline, 4.0 * 3 * 2 * 5 * 16);
    cr_assert_eq(info.decode_flops_baseline, 2 * primary + 3.0 * 4 * 5 * 32);
    cr_assert_eq(model_info_compute(&c, 17, &info), DT_ERR);
    cr_assert(strstr(dt_error_message(), "block_size"));
}

Test(info, nanogpt_includes_biases_and_position_row) {
    /* C = 16, H = 4 (hd 4), F = 64, V = 40, L = 3, T = 12, tied. */
    model_config c = config_of(FAMILY_NANOGPT, "");
    model_info info;
    cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK);
    const double layer = 4 * 16 /* 2 LayerNorms, weight + bias */ + 4 * (16 * 16 + 16) /* q k v o + biases */ +
                         (64 * 16 + 64) + (16 * 64 + 16) /* fc, proj + biases */;
    const double baseline = 3 * layer + 16 + 16 /* tok_emb and pos_emb rows */ + 2 * 16 /* final LN */ + 40 * 16;
    cr_assert_eq(info.weight_bytes_baseline, 4 * baseline);
    cr_assert_eq(info.weight_bytes_grouped, info.weight_bytes_baseline, "no branch: nothing added");
    cr_assert_eq(info.decode_flops_branch, info.decode_flops_baseline);
}

Test(info, recurrent_reads_norm1_and_kv_twice) {
    /* SPEC §6.4: per layer and step the persistent pair of the layer's output
     * reads the attention LayerNorm (weight + bias) and wk, wv (+ biases) again;
     * C = 16, kv width 16, L = 3; the matrices add 2 * 16 * 16 multiply-adds per layer. */
    model_config plain = config_of(FAMILY_NANOGPT, "branch=decode");
    model_config rec = config_of(FAMILY_NANOGPT, "branch=decode recurrent=1");
    model_info a, b;
    cr_assert_eq(model_info_compute(&plain, 0, &a), DT_OK);
    cr_assert_eq(model_info_compute(&rec, 0, &b), DT_OK, "%s", dt_error_message());
    const double extra = 3.0 * (2 * 16 + 2 * (16 * 16 + 16));
    cr_expect_eq(b.weight_bytes_baseline, a.weight_bytes_baseline + 4 * extra);
    cr_expect_eq(b.weight_bytes_grouped, a.weight_bytes_grouped + 4 * extra);
    cr_expect_eq(b.weight_bytes_ungrouped, a.weight_bytes_ungrouped + 4 * extra, "the branch pass reads no K/V");
    cr_expect_eq(b.decode_flops_baseline, a.decode_flops_baseline + 2.0 * 3 * 2 * 16 * 16);
    cr_expect_eq(b.params_total, a.params_total, "no new parameters");
    cr_expect_eq(b.kv_bytes_baseline, a.kv_bytes_baseline, "the cache holds one pair per position, as before");
}

/* ALiBi (SPEC §6.4) replaces nanogpt's pos_emb: T_max * C = 12 * 16 fewer
 * parameters, one C-row fewer read per decode step (each row of grouped
 * decode), the same FLOPs (the bias is not a matrix product). */
Test(info, nanogpt_alibi_drops_the_position_table) {
    model_config plain = config_of(FAMILY_NANOGPT, "branch=decode"),
                 alibi = config_of(FAMILY_NANOGPT, "branch=decode alibi=1");
    model_info a, b;
    cr_assert_eq(model_info_compute(&plain, 0, &a), DT_OK);
    cr_assert_eq(model_info_compute(&alibi, 0, &b), DT_OK, "%s", dt_error_message());
    cr_assert_eq(a.params_total - b.params_total, 12 * 16);
    cr_assert_eq(a.params_primary - b.params_primary, 12 * 16);
    cr_assert_eq(a.weight_bytes_baseline - b.weight_bytes_baseline, 4 * 16);
    cr_assert_eq(a.weight_bytes_grouped - b.weight_bytes_grouped, 4 * 16, "the two rows share one pos_emb row");
    cr_assert_eq(a.decode_flops_baseline, b.decode_flops_baseline);
    model m;
    cr_assert_eq(model_create(&m, &alibi), DT_OK, "%s", dt_error_message());
    cr_assert_null(m.pos_emb);
    for (int i = 0; i < m.n_params; i++)
        cr_assert(strcmp(m.params[i].name, "pos_emb.weight"), "pos_emb in an ALiBi model");
    model_free(&m);
}

Test(info, moe_grouped_decode_loads_the_union_of_experts) {
    /* E = 4, F = 24, C = 16, L = 3. One expert = 3 * 24 * 16 floats. */
    const double expert = 3.0 * 24 * 16, couple = 16 + 16; /* couple_q [H*hd] and couple_out [C]; no couple_hidden */
    const struct {
        const char *pairs;
        int64_t grouped, ungrouped;
    } cases[] = {
        {"branch=decode top_k=1 top_k_branch=2", 2, 3},                    /* superset: the union is 2 */
        {"branch=decode top_k=2 top_k_branch=1", 2, 3},                    /* subset */
        {"branch=decode top_k=2 top_k_branch=2", 2, 4},                    /* exactly the primary's */
        {"branch=decode top_k=2 top_k_branch=3 branch_routing=own", 4, 5}, /* own: bound min(E, 2 + 3) */
        {"branch=decode top_k=1 top_k_branch=1 branch_routing=own", 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = config_of(FAMILY_MOE, cases[i].pairs);
        model_info info;
        cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK, "%s", dt_error_message());
        cr_assert_eq(info.experts_baseline, info.config.top_k);
        cr_assert_eq(info.experts_grouped, cases[i].grouped, "%s", cases[i].pairs);
        cr_assert_eq(info.experts_ungrouped, cases[i].ungrouped, "%s", cases[i].pairs);
        /* Grouped reads the extra experts, the coupling vectors and one branch row beyond the baseline. */
        double extra = 3 * ((double)(cases[i].grouped - info.config.top_k) * expert + couple) + 16;
        cr_assert_eq(info.weight_bytes_grouped - info.weight_bytes_baseline, 4 * extra, "%s", cases[i].pairs);
        cr_assert(info.weight_bytes_ungrouped > info.weight_bytes_grouped);
        /* The branch row's FLOPs: q, o, router and top_k_branch experts per layer, and the head. */
        double branch = 3 * (16 * 16 + 16 * 16 + 4 * 16 + (double)info.config.top_k_branch * expert) + 40 * 16;
        cr_assert_eq((double)info.matmul_params_branch, branch, "%s", cases[i].pairs);
    }

    /* share = off: the branch's own router and experts are other tensors; nothing is shared but norms and head. */
    model_config c = config_of(FAMILY_MOE, "branch=decode share=off top_k=2 top_k_branch=1");
    model_info info;
    cr_assert_eq(model_info_compute(&c, 0, &info), DT_OK);
    cr_assert_eq(info.experts_grouped, 3);
    double own = 3 * (16 * 16 + 16 * 16 + 4 * 16 + 1 * expert + couple) + 16;
    cr_assert_eq(info.weight_bytes_grouped - info.weight_bytes_baseline, 4 * own);
}

/* ---------- dbranch info (when the binary is built) ---------- */

/* Runs `dbranch info ARGS`; returns the exit code, stdout / stderr in *out, *err (caller frees). */
static int run_info(const char *args, char **out, char **err) {
    char line[2048];
    snprintf(line, sizeof line, "info %s", args);
    return test_run_dbranch(NULL, line, out, err);
}

static char dir[64];

static void make_dir(void) { test_scratch_dir(dir, sizeof dir, "info"); }

static void remove_dir(void) { test_remove_dir(dir); }

Test(info, cli_reads_config_files_and_models, .init = make_dir, .fini = remove_dir) {
    const char *binary = getenv("DBRANCH_BINARY");
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    if (!binary || access(binary, X_OK) != 0 || !root) cr_skip_test("dbranch binary not built");
    char ini[300], args[1024], *out, *err;
    snprintf(ini, sizeof ini, "%s/model.ini", dir);
    FILE *f = fopen(ini, "w");
    fputs("# model of a run\n[model]\nfamily = llama\nvocab_size = 56\nblock_size = 16\nn_layer = 3\n"
          "n_head = 4\nn_kv_head = 2\nd_model = 32\nd_ff = 64\nbranch = decode\n[train]\nseed = 3\ntokens = 10\n",
          f);
    fclose(f);

    /* Same config as reference 07: the exact figures of llama_branch_figures_by_hand. */
    snprintf(args, sizeof args, "'%s'", ini);
    cr_assert_eq(run_info(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "decode FLOPs 65024 / 123904"), "%s", out);
    cr_assert(strstr(out, "KV bytes 6144 / 6144 / 12288"), "%s", out);
    /* 2 (3 x 9216 + 1792) + 4 (3 x 64 + 32 + 32), by hand as in llama_branch_figures_by_hand */
    cr_assert(strstr(out, "bf16 decode weights (--weights bf16): weight bytes 59904 / "), "%s", out);
    free(out);
    free(err);

    snprintf(args, sizeof args, "'%s' --set share=off --context 8", ini);
    cr_assert_eq(run_info(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "share=off"), "%s", out);
    cr_assert(strstr(out, "decode step at context 8"), "%s", out);
    free(out);
    free(err);

    snprintf(args, sizeof args, "'%s/tests/reference/05_moe_base.h5'", root);
    cr_assert_eq(run_info(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "family=moe"), "%s", out);
    free(out);
    free(err);

    /* Bad inputs: one line naming the problem, non-zero exit, nothing on stdout. */
    const char *bad[][2] = {{"--set n_layer=12x", "n_layer"},
                            {"--set bogus=1", "bogus"},
                            {"--context 99", "block_size"},
                            {"--set n_head=3", "n_head"}};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "'%s' %s", ini, bad[i][0]);
        cr_assert_neq(run_info(args, &out, &err), 0, "%s accepted", bad[i][0]);
        test_assert_one_line_error(err, "dbranch info: ", bad[i][1]);
        cr_assert_str_empty(out, "%s: stdout: %s", bad[i][0], out);
        free(out);
        free(err);
    }
    snprintf(args, sizeof args, "'%s/missing.h5'", dir);
    cr_assert_neq(run_info(args, &out, &err), 0);
    cr_assert(strstr(err, "no such file"), "%s", err);
    free(out);
    free(err);
    f = fopen(ini, "w");
    fputs("[model]\nn_layers = 3\n", f);
    fclose(f);
    snprintf(args, sizeof args, "'%s'", ini);
    cr_assert_neq(run_info(args, &out, &err), 0);
    cr_assert(strstr(err, "n_layers") && strstr(err, "line 2:"), "%s", err);
    free(out);
    free(err);
}
