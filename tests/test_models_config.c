/* Tests of the model configuration (SPEC §4) and the parameter registry
 * (SPEC §3): parsing, every validation rule, the parameter list of each family
 * and switch against a list written here from the SPEC text, closed-form
 * parameter counts, and the statistics of the initialisation. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "models/config.h"
#include "models/model.h"
#include "models/model_io.h"

/* ---------- configuration ---------- */

Test(config, defaults_follow_spec) {
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    for (int i = 0; i < 3; i++) {
        model_config c = model_config_default(families[i]);
        cr_assert_eq(c.family, families[i]);
        cr_assert_eq(c.branch, BRANCH_NONE);
        cr_assert_eq(c.branch_routing, ROUTING_REPLAY);
        cr_assert_float_eq(c.mix_alpha_min, 0.5, 0);
        cr_assert_float_eq(c.mix_alpha_max, 1.0, 0);
        cr_assert_float_eq(c.aux_loss_coef, 0.01, 0);
        cr_assert_float_eq(c.norm_eps, 1e-5, 0);
        cr_assert_float_eq(c.rope_theta, 10000.0, 0);
        cr_assert_eq(c.couple, 1);
        cr_assert_eq(c.share, 1);
        cr_assert_eq(c.branch_emb, BRANCH_EMB_OWN);
        cr_assert_eq(c.detach_primary, 0);
        cr_assert_eq(c.alpha_detach, 0);
        cr_assert_eq(c.tie_embeddings, families[i] == FAMILY_NANOGPT ? 1 : 0, "tie_embeddings for family %d", i);
        cr_assert_eq(model_config_validate(&c), DT_OK, "default of family %d invalid: %s", i, dt_error_message());
        cr_assert(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.d_model > 0);
    }
}

Test(config, validate_fills_neutral_values) {
    model_config c = model_config_default(FAMILY_NANOGPT);
    c.d_model = 48;
    c.n_head = 6;
    c.n_expert = 5; /* do not apply to a dense family: become 0 */
    c.top_k = 2;
    c.top_k_branch = 3;
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.n_kv_head, 6);
    cr_assert_eq(c.d_ff, 4 * 48);
    cr_assert_eq(c.n_expert, 0);
    cr_assert_eq(c.top_k, 0);
    cr_assert_eq(c.top_k_branch, 0);

    model_config m = model_config_default(FAMILY_MOE);
    m.branch = BRANCH_DECODE;
    m.n_expert = 6;
    m.top_k = 3;
    m.top_k_branch = 0;
    cr_assert_eq(model_config_validate(&m), DT_OK, "%s", dt_error_message());
    cr_assert_eq(m.top_k_branch, 3, "top_k_branch 0 means top_k");

    /* Without a branch the branch keys carry their defaults (SPEC §4). */
    model_config n = model_config_default(FAMILY_LLAMA);
    n.mix_alpha_min = 0.2;
    n.couple = 0;
    n.share = 0;
    n.branch_emb = BRANCH_EMB_SHARED;
    n.detach_primary = 1;
    cr_assert_eq(model_config_validate(&n), DT_OK, "%s", dt_error_message());
    cr_assert_float_eq(n.mix_alpha_min, 0.5, 0);
    cr_assert_eq(n.couple, 1);
    cr_assert_eq(n.share, 1);
    cr_assert_eq(n.branch_emb, BRANCH_EMB_OWN);
    cr_assert_eq(n.detach_primary, 0);
    /* llama's derived width: 2/3 of 4C rounded up to 32 (llama2.c), here C = 128 -> 341 -> 352. */
    cr_assert_eq(n.d_model, 128);
    cr_assert_eq(n.d_ff, 352);
}

Test(config, set_parses_every_key) {
    model_config c = model_config_default(FAMILY_NANOGPT);
    const char *pairs[][2] = {
        {"family", "moe"},
        {"vocab_size", "1000"},
        {"block_size", "64"},
        {"n_layer", "3"},
        {"n_head", "8"},
        {"n_kv_head", "2"},
        {"d_model", "64"},
        {"d_ff", "96"},
        {"n_expert", "8"},
        {"top_k", "2"},
        {"top_k_branch", "3"},
        {"branch", "decode"},
        {"branch_routing", "own"},
        {"mix_alpha_min", "0.25"},
        {"mix_alpha_max", "0.75"},
        {"aux_loss_coef", "0.02"},
        {"tie_embeddings", "1"},
        {"norm_eps", "1e-6"},
        {"rope_theta", "500000"},
        {"couple", "off"},
        {"share", "0"},
        {"branch_emb", "shared"},
        {"detach_primary", "1"},
        {"alpha_detach", "1"},
    };
    /* SPEC §6: parsed, and refused by validation until implemented (test below). */
    const char *options[][2] = {
        {"ffn", "triplu"},       {"ffn_prod_norm", "1"},    {"layer_heads", "4,4,8"}, {"attn_res", "block"},
        {"attn_res_heads", "2"}, {"attn_res_blocks", "3"},  {"recurrent", "1"},       {"alibi", "1"},
        {"feedback", "1"},       {"n_loop", "2"},           {"disco", "1"},           {"disco_tau", "0.5"},
        {"disco_alpha", "0.25"}, {"disco_gate", "learned"}, {"disco_top", "64"},      {"tok_emb_tables", "2"},
        {"tok_emb2_layer", "3"},
    };
    const int n = (int)(sizeof pairs / sizeof pairs[0]), n_options = (int)(sizeof options / sizeof options[0]);
    cr_assert_eq(n + n_options, model_config_key_count(), "the test lists every key of SPEC §4 and §6");
    model_config o = model_config_default(FAMILY_LLAMA);
    for (int i = 0; i < n_options; i++) {
        cr_assert(model_config_has_key(options[i][0]), "%s is a key", options[i][0]);
        cr_assert_eq(model_config_set(&o, options[i][0], options[i][1]), DT_OK, "%s: %s", options[i][0],
                     dt_error_message());
    }
    cr_assert_eq(o.ffn, FFN_TRIPLU);
    cr_assert_str_eq(o.layer_heads, "4,4,8");
    cr_assert_eq(o.attn_res, ATTN_RES_BLOCK);
    cr_assert_eq(o.disco_gate, DISCO_GATE_LEARNED);
    cr_assert_eq(o.n_loop, 2);
    cr_assert_float_eq(o.disco_tau, 0.5, 0);
    cr_assert_eq(o.tok_emb_tables, 2);
    cr_assert_eq(o.tok_emb2_layer, 3);
    for (int i = 0; i < n; i++) {
        cr_assert(model_config_has_key(pairs[i][0]), "%s is a key", pairs[i][0]);
        cr_assert_eq(model_config_set(&c, pairs[i][0], pairs[i][1]), DT_OK, "%s: %s", pairs[i][0], dt_error_message());
    }
    cr_assert_eq(c.family, FAMILY_MOE);
    cr_assert_eq(c.vocab_size, 1000);
    cr_assert_eq(c.block_size, 64);
    cr_assert_eq(c.n_layer, 3);
    cr_assert_eq(c.n_head, 8);
    cr_assert_eq(c.n_kv_head, 2);
    cr_assert_eq(c.d_model, 64);
    cr_assert_eq(c.d_ff, 96);
    cr_assert_eq(c.n_expert, 8);
    cr_assert_eq(c.top_k, 2);
    cr_assert_eq(c.top_k_branch, 3);
    cr_assert_eq(c.branch, BRANCH_DECODE);
    cr_assert_eq(c.branch_routing, ROUTING_OWN);
    cr_assert_float_eq(c.mix_alpha_min, 0.25, 0);
    cr_assert_float_eq(c.mix_alpha_max, 0.75, 0);
    cr_assert_float_eq(c.aux_loss_coef, 0.02, 0);
    cr_assert_eq(c.tie_embeddings, 1);
    cr_assert_float_eq(c.norm_eps, 1e-6, 0);
    cr_assert_float_eq(c.rope_theta, 500000.0, 0);
    cr_assert_eq(c.couple, 0);
    cr_assert_eq(c.share, 0);
    cr_assert_eq(c.branch_emb, BRANCH_EMB_SHARED);
    cr_assert_eq(c.detach_primary, 1);
    cr_assert_eq(c.alpha_detach, 1);
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());

    /* on/off also as 1/0, and surrounding blanks are forgiven. */
    cr_assert_eq(model_config_set(&c, "couple", "1"), DT_OK);
    cr_assert_eq(c.couple, 1);
    cr_assert_eq(model_config_set(&c, "share", " on "), DT_OK);
    cr_assert_eq(c.share, 1);
    cr_assert_eq(model_config_set(&c, "n_layer", " 7"), DT_OK);
    cr_assert_eq(c.n_layer, 7);
}

Test(config, get_round_trips_through_set) {
    model_config a = model_config_default(FAMILY_MOE);
    a.branch = BRANCH_DECODE;
    a.mix_alpha_min = 0.1 + 0.2; /* not exactly representable in short decimal */
    a.share = 0;
    a.norm_eps = 1.0 / 3.0;
    cr_assert_eq(model_config_validate(&a), DT_OK);
    model_config b = model_config_default(FAMILY_NANOGPT);
    for (int i = 0; i < model_config_key_count(); i++) {
        char text[64];
        cr_assert_eq(model_config_get(&a, model_config_key(i), text, sizeof text), DT_OK);
        cr_assert_eq(model_config_set(&b, model_config_key(i), text), DT_OK, "%s = %s: %s", model_config_key(i), text,
                     dt_error_message());
    }
    cr_assert_eq(model_config_validate(&b), DT_OK);
    cr_assert_eq(b.mix_alpha_min, a.mix_alpha_min, "reals round-trip exactly");
    cr_assert_eq(b.norm_eps, a.norm_eps);
    cr_assert_eq(b.family, FAMILY_MOE);
    cr_assert_eq(b.share, 0);
    cr_assert_eq(b.n_expert, a.n_expert);
    cr_assert_eq(b.d_ff, a.d_ff);
}

Test(config, family_defaults_do_not_depend_on_key_order) {
    /* family last: the explicit tie_embeddings survives, the rest takes llama's defaults. */
    model_config c = model_config_default(FAMILY_NANOGPT);
    cr_assert_eq(model_config_set(&c, "tie_embeddings", "1"), DT_OK);
    cr_assert_eq(model_config_set(&c, "family", "llama"), DT_OK);
    cr_assert_eq(c.tie_embeddings, 1);
    /* family first, nothing explicit: llama is untied; moe gets experts. */
    model_config d = model_config_default(FAMILY_NANOGPT);
    cr_assert_eq(model_config_set(&d, "family", "llama"), DT_OK);
    cr_assert_eq(d.tie_embeddings, 0);
    model_config e = model_config_default(FAMILY_NANOGPT);
    cr_assert_eq(model_config_set(&e, "d_model", "64"), DT_OK);
    cr_assert_eq(model_config_set(&e, "family", "moe"), DT_OK);
    cr_assert_eq(e.d_model, 64, "explicit key kept");
    cr_assert(e.n_expert > 0 && e.top_k > 0);
    cr_assert_eq(model_config_validate(&e), DT_OK, "%s", dt_error_message());
}

/* A bad text value: the error names the key and quotes the value. */
static void expect_set_error(const char *key, const char *value, const char *needle) {
    model_config c = model_config_default(FAMILY_LLAMA);
    model_config before = c;
    cr_assert_eq(model_config_set(&c, key, value), DT_ERR, "%s = '%s' accepted", key, value);
    const char *msg = dt_error_message();
    cr_assert(strstr(msg, key), "message '%s' names the key %s", msg, key);
    if (needle) cr_assert(strstr(msg, needle), "message '%s' contains '%s'", msg, needle);
    cr_assert_eq(memcmp(&c, &before, sizeof c), 0, "a failed set leaves the config unchanged");
}

Test(config, set_rejects_bad_text) {
    expect_set_error("n_layer", "12x", "12x");
    expect_set_error("n_layer", "1.5", "1.5");
    expect_set_error("n_layer", "", NULL);
    expect_set_error("n_layer", "0x10", "0x10");
    expect_set_error("vocab_size", "99999999999999999999", NULL);
    expect_set_error("norm_eps", "abc", "abc");
    expect_set_error("norm_eps", "1e-5e", "1e-5e");
    expect_set_error("norm_eps", "nan", "nan");
    expect_set_error("rope_theta", "inf", "inf");
    expect_set_error("family", "gpt2", "gpt2");
    expect_set_error("branch", "yes", "yes");
    expect_set_error("branch_routing", "random", "random");
    expect_set_error("branch_emb", "tied", "tied");
    expect_set_error("couple", "maybe", "maybe");
    expect_set_error("share", "2", NULL);
    expect_set_error("tie_embeddings", "2", NULL);
    expect_set_error("detach_primary", "true", NULL);
    expect_set_error("alpha_detach", "-1", NULL);
    expect_set_error("n_layers", "4", "unknown"); /* unknown key */
    cr_assert(!model_config_has_key("n_layers"));
    cr_assert(!model_config_has_key("lr"));
}

typedef struct {
    model_family family;
    const char *pairs; /* "key=value key=value" applied before validation */
    const char *key;   /* must appear in the message */
} bad_case;

static void apply_pairs(model_config *c, const char *pairs) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pairs);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        cr_assert(eq);
        *eq = '\0';
        cr_assert_eq(model_config_set(c, tok, eq + 1), DT_OK, "%s: %s", tok, dt_error_message());
    }
}

Test(config, validate_rejects_every_inconsistency) {
    const bad_case cases[] = {
        {FAMILY_NANOGPT, "vocab_size=0", "vocab_size"},
        {FAMILY_NANOGPT, "block_size=-4", "block_size"},
        {FAMILY_NANOGPT, "n_layer=0", "n_layer"},
        {FAMILY_NANOGPT, "n_head=0", "n_head"},
        {FAMILY_NANOGPT, "d_model=0", "d_model"},
        {FAMILY_LLAMA, "n_kv_head=-1", "n_kv_head"},
        {FAMILY_LLAMA, "d_ff=-8", "d_ff"},
        {FAMILY_NANOGPT, "d_model=30 n_head=4", "n_head"},
        {FAMILY_LLAMA, "d_model=64 n_head=4 n_kv_head=3", "n_kv_head"},
        {FAMILY_LLAMA, "d_model=64 n_head=2 n_kv_head=4", "n_kv_head"},
        {FAMILY_LLAMA, "d_model=12 n_head=4", "d_model"}, /* head_dim 3 is odd: RoPE needs pairs */
        {FAMILY_MOE, "d_model=20 n_head=4", "RoPE"},
        {FAMILY_MOE, "n_expert=0", "n_expert"},
        {FAMILY_MOE, "n_expert=4 top_k=0", "top_k"},
        {FAMILY_MOE, "n_expert=4 top_k=5", "top_k"},
        {FAMILY_MOE, "branch=decode n_expert=4 top_k=2 top_k_branch=5", "top_k_branch"},
        {FAMILY_MOE, "branch=decode n_expert=4 top_k=2 top_k_branch=-1", "top_k_branch"},
        {FAMILY_NANOGPT, "branch=decode mix_alpha_min=-0.1", "mix_alpha_min"},
        {FAMILY_NANOGPT, "branch=decode mix_alpha_min=1.5 mix_alpha_max=1", "mix_alpha_min"},
        {FAMILY_NANOGPT, "branch=decode mix_alpha_max=1.2", "mix_alpha_max"},
        {FAMILY_NANOGPT, "branch=decode mix_alpha_min=0.8 mix_alpha_max=0.6", "mix_alpha_min"},
        {FAMILY_NANOGPT, "mix_alpha_max=-1", "mix_alpha_max"}, /* caught even without a branch */
        {FAMILY_NANOGPT, "n_head=4 n_kv_head=2", "n_kv_head"},
        {FAMILY_NANOGPT, "d_model=16 d_ff=100", "d_ff"},
        {FAMILY_NANOGPT, "aux_loss_coef=-0.01", "aux_loss_coef"},
        {FAMILY_LLAMA, "norm_eps=0", "norm_eps"},
        {FAMILY_LLAMA, "norm_eps=-1e-5", "norm_eps"},
        {FAMILY_LLAMA, "rope_theta=0", "rope_theta"},
        {FAMILY_LLAMA, "vocab_size=2000000000 d_model=1000000", "large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = model_config_default(cases[i].family);
        apply_pairs(&c, cases[i].pairs);
        cr_assert_eq(model_config_validate(&c), DT_ERR, "'%s' accepted", cases[i].pairs);
        cr_assert(strstr(dt_error_message(), cases[i].key), "'%s': message '%s' lacks '%s'", cases[i].pairs,
                  dt_error_message(), cases[i].key);
    }
    /* nanogpt's fixed MLP width is explained, not just refused. */
    model_config c = model_config_default(FAMILY_NANOGPT);
    apply_pairs(&c, "d_model=16 d_ff=100");
    cr_assert_eq(model_config_validate(&c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "4*d_model") && strstr(dt_error_message(), "100"), "%s", dt_error_message());

    /* Hand-filled structs: enums and flags out of range. */
    model_config d = model_config_default(FAMILY_LLAMA);
    d.tie_embeddings = 2;
    cr_assert_eq(model_config_validate(&d), DT_ERR);
    cr_assert(strstr(dt_error_message(), "tie_embeddings"));
    d = model_config_default(FAMILY_LLAMA);
    d.family = (model_family)7;
    cr_assert_eq(model_config_validate(&d), DT_ERR);
    cr_assert(strstr(dt_error_message(), "family"));
    d = model_config_default(FAMILY_LLAMA);
    d.branch = BRANCH_DECODE;
    d.couple = -1;
    cr_assert_eq(model_config_validate(&d), DT_ERR);
    cr_assert(strstr(dt_error_message(), "couple"));
}

/* ---------- parameters (SPEC §3) ---------- */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[3];
    int branch; /* branch-only group */
    int matrix; /* 2-D/3-D weight, not an embedding/head */
    int embedding;
} expected_param;

typedef struct {
    expected_param list[512];
    int n;
} expected_list;

static void expect(expected_list *e, int branch, int matrix, int embedding, int ndim, int64_t d0, int64_t d1,
                   int64_t d2, const char *fmt, ...) __attribute__((format(printf, 9, 10)));
static void expect(expected_list *e, int branch, int matrix, int embedding, int ndim, int64_t d0, int64_t d1,
                   int64_t d2, const char *fmt, ...) {
    expected_param *p = &e->list[e->n++];
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, args);
    va_end(args);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shape[2] = d2;
    p->branch = branch;
    p->matrix = matrix;
    p->embedding = embedding;
}

/* The SPEC §3 table, transcribed: which tensors a config has, and their shapes. */
static void spec_params(const model_config *c, expected_list *e) {
    const int64_t V = c->vocab_size, C = c->d_model, H = c->n_head, Hkv = c->n_kv_head, hd = C / H;
    const int64_t F = c->family == FAMILY_NANOGPT ? 4 * C : c->d_ff, E = c->n_expert;
    const int gpt = c->family == FAMILY_NANOGPT, moe = c->family == FAMILY_MOE, branch = c->branch == BRANCH_DECODE;
    e->n = 0;
    expect(e, 0, 0, 1, 2, V, C, 0, "tok_emb.weight");
    if (gpt) expect(e, 0, 0, 1, 2, c->block_size, C, 0, "pos_emb.weight");
    for (int64_t l = 0; l < c->n_layer; l++) {
        expect(e, 0, 0, 0, 1, C, 0, 0, "layers.%lld.attn_norm.weight", (long long)l);
        if (gpt) expect(e, 0, 0, 0, 1, C, 0, 0, "layers.%lld.attn_norm.bias", (long long)l);
        const char *proj[4] = {"wq", "wk", "wv", "wo"};
        int64_t out[4] = {H * hd, Hkv * hd, Hkv * hd, C}, in[4] = {C, C, C, H * hd};
        for (int i = 0; i < 4; i++) {
            expect(e, 0, 1, 0, 2, out[i], in[i], 0, "layers.%lld.attn.%s.weight", (long long)l, proj[i]);
            if (gpt) expect(e, 0, 0, 0, 1, out[i], 0, 0, "layers.%lld.attn.%s.bias", (long long)l, proj[i]);
        }
        expect(e, 0, 0, 0, 1, C, 0, 0, "layers.%lld.ffn_norm.weight", (long long)l);
        if (gpt) {
            expect(e, 0, 0, 0, 1, C, 0, 0, "layers.%lld.ffn_norm.bias", (long long)l);
            expect(e, 0, 1, 0, 2, 4 * C, C, 0, "layers.%lld.mlp.fc.weight", (long long)l);
            expect(e, 0, 0, 0, 1, 4 * C, 0, 0, "layers.%lld.mlp.fc.bias", (long long)l);
            expect(e, 0, 1, 0, 2, C, 4 * C, 0, "layers.%lld.mlp.proj.weight", (long long)l);
            expect(e, 0, 0, 0, 1, C, 0, 0, "layers.%lld.mlp.proj.bias", (long long)l);
        } else if (!moe) {
            expect(e, 0, 1, 0, 2, F, C, 0, "layers.%lld.mlp.w1.weight", (long long)l);
            expect(e, 0, 1, 0, 2, F, C, 0, "layers.%lld.mlp.w3.weight", (long long)l);
            expect(e, 0, 1, 0, 2, C, F, 0, "layers.%lld.mlp.w2.weight", (long long)l);
        } else {
            expect(e, 0, 1, 0, 2, E, C, 0, "layers.%lld.moe.router.weight", (long long)l);
            expect(e, 0, 1, 0, 3, E, F, C, "layers.%lld.moe.w1.weight", (long long)l);
            expect(e, 0, 1, 0, 3, E, F, C, "layers.%lld.moe.w3.weight", (long long)l);
            expect(e, 0, 1, 0, 3, E, C, F, "layers.%lld.moe.w2.weight", (long long)l);
        }
    }
    expect(e, 0, 0, 0, 1, C, 0, 0, "final_norm.weight");
    if (gpt) expect(e, 0, 0, 0, 1, C, 0, 0, "final_norm.bias");
    if (!c->tie_embeddings) expect(e, 0, 0, 1, 2, V, C, 0, "lm_head.weight");
    if (!branch) return;
    if (c->branch_emb == BRANCH_EMB_OWN) expect(e, 1, 0, 1, 2, V, C, 0, "branch.tok_emb.weight");
    for (int64_t l = 0; l < c->n_layer && c->couple; l++) {
        expect(e, 1, 0, 0, 1, H * hd, 0, 0, "layers.%lld.branch.couple_q", (long long)l);
        if (!moe) expect(e, 1, 0, 0, 1, F, 0, 0, "layers.%lld.branch.couple_hidden", (long long)l);
        expect(e, 1, 0, 0, 1, C, 0, 0, "layers.%lld.branch.couple_out", (long long)l);
    }
    /* share = off: own attn.wq, attn.wo (+ biases) and all FFN weights, prefixed "branch.". */
    for (int64_t l = 0; l < c->n_layer && !c->share; l++) {
        expect(e, 1, 1, 0, 2, H * hd, C, 0, "branch.layers.%lld.attn.wq.weight", (long long)l);
        if (gpt) expect(e, 1, 0, 0, 1, H * hd, 0, 0, "branch.layers.%lld.attn.wq.bias", (long long)l);
        expect(e, 1, 1, 0, 2, C, H * hd, 0, "branch.layers.%lld.attn.wo.weight", (long long)l);
        if (gpt) expect(e, 1, 0, 0, 1, C, 0, 0, "branch.layers.%lld.attn.wo.bias", (long long)l);
        if (gpt) {
            expect(e, 1, 1, 0, 2, 4 * C, C, 0, "branch.layers.%lld.mlp.fc.weight", (long long)l);
            expect(e, 1, 0, 0, 1, 4 * C, 0, 0, "branch.layers.%lld.mlp.fc.bias", (long long)l);
            expect(e, 1, 1, 0, 2, C, 4 * C, 0, "branch.layers.%lld.mlp.proj.weight", (long long)l);
            expect(e, 1, 0, 0, 1, C, 0, 0, "branch.layers.%lld.mlp.proj.bias", (long long)l);
        } else if (!moe) {
            expect(e, 1, 1, 0, 2, F, C, 0, "branch.layers.%lld.mlp.w1.weight", (long long)l);
            expect(e, 1, 1, 0, 2, F, C, 0, "branch.layers.%lld.mlp.w3.weight", (long long)l);
            expect(e, 1, 1, 0, 2, C, F, 0, "branch.layers.%lld.mlp.w2.weight", (long long)l);
        } else {
            expect(e, 1, 1, 0, 2, E, C, 0, "branch.layers.%lld.moe.router.weight", (long long)l);
            expect(e, 1, 1, 0, 3, E, F, C, "branch.layers.%lld.moe.w1.weight", (long long)l);
            expect(e, 1, 1, 0, 3, E, F, C, "branch.layers.%lld.moe.w3.weight", (long long)l);
            expect(e, 1, 1, 0, 3, E, C, F, "branch.layers.%lld.moe.w2.weight", (long long)l);
        }
    }
}

/* Small sizes with every dimension different, so a swapped shape shows. */
static model_config small_config(model_family family, const char *pairs) {
    model_config c = model_config_default(family);
    apply_pairs(&c, "vocab_size=40 block_size=12 n_layer=2 d_model=16 n_head=4");
    if (family != FAMILY_NANOGPT) apply_pairs(&c, "n_kv_head=2 d_ff=24");
    if (family == FAMILY_MOE) apply_pairs(&c, "n_expert=3 top_k=2");
    if (pairs && *pairs) apply_pairs(&c, pairs);
    return c;
}

static void check_params_against_spec(const model_config *c, const char *what) {
    model m;
    cr_assert_eq(model_create(&m, c), DT_OK, "%s: %s", what, dt_error_message());
    expected_list *e = malloc(sizeof *e);
    spec_params(&m.config, e);
    cr_assert_eq(m.n_params, e->n, "%s: %d params, SPEC lists %d", what, m.n_params, e->n);
    for (int i = 0; i < e->n; i++) {
        model_param *p = model_find_param(&m, e->list[i].name);
        cr_assert(p, "%s: missing %s", what, e->list[i].name);
        cr_assert_eq(p->tensor->ndim, e->list[i].ndim, "%s: %s rank", what, p->name);
        for (int d = 0; d < e->list[i].ndim; d++)
            cr_assert_eq(p->tensor->shape[d], e->list[i].shape[d], "%s: %s dim %d", what, p->name, d);
        cr_assert_eq(p->group == PARAM_BRANCH, e->list[i].branch, "%s: %s group", what, p->name);
        cr_assert_eq(p->is_matrix, e->list[i].matrix, "%s: %s is_matrix", what, p->name);
        cr_assert_eq(p->is_embedding, e->list[i].embedding, "%s: %s is_embedding", what, p->name);
        cr_assert(p->tensor->requires_grad && p->tensor->grad, "%s: %s has a gradient buffer", what, p->name);
        cr_assert_eq(p->tensor->dtype, DT_F32);
    }
    /* The primary parameters come in the SPEC's listing order. */
    int next = 0;
    for (int i = 0; i < m.n_params; i++) {
        if (m.params[i].group == PARAM_BRANCH) continue;
        while (next < e->n && e->list[next].branch)
            next++;
        cr_assert(next < e->n && !strcmp(m.params[i].name, e->list[next].name), "%s: param %d is %s, SPEC order has %s",
                  what, i, m.params[i].name, next < e->n ? e->list[next].name : "(end)");
        next++;
    }
    /* Names are unique. */
    for (int i = 0; i < m.n_params; i++)
        for (int j = i + 1; j < m.n_params; j++)
            cr_assert(strcmp(m.params[i].name, m.params[j].name));
    free(e);
    model_free(&m);
}

Test(params, names_and_shapes_match_spec) {
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    const char *variants[] = {
        "",
        "branch=decode",
        "branch=decode share=off",
        "branch=decode couple=off",
        "branch=decode branch_emb=shared",
        "branch=decode share=off couple=off branch_emb=shared",
        "tie_embeddings=1",
        "tie_embeddings=0 branch=decode",
    };
    for (int f = 0; f < 3; f++) {
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            char what[128];
            snprintf(what, sizeof what, "%s [%s]", model_family_name(families[f]), variants[v]);
            model_config c = small_config(families[f], variants[v]);
            check_params_against_spec(&c, what);
        }
    }
}

/* Closed forms, per family: the number of floats in each part. */
static int64_t closed_form_count(const model_config *c, int group) {
    const int64_t V = c->vocab_size, C = c->d_model, T = c->block_size, L = c->n_layer, hd = C / c->n_head;
    const int64_t q = c->n_head * hd, kv = c->n_kv_head * hd;
    int64_t primary = 0, branch = 0, per_layer = 0, ffn = 0, ffn_biases = 0, attn_biases_q_o = 0;
    switch (c->family) {
    case FAMILY_NANOGPT:
        /* GPT-2: 12 C^2 + 13 C per layer (with 4C MLP and all biases). */
        per_layer = 12 * C * C + 13 * C;
        primary = V * C + T * C + L * per_layer + 2 * C + (c->tie_embeddings ? 0 : V * C);
        ffn = 8 * C * C;
        ffn_biases = 5 * C;
        attn_biases_q_o = 2 * C;
        break;
    case FAMILY_LLAMA:
        per_layer = 2 * C + 2 * C * q + 2 * C * kv + 3 * C * c->d_ff;
        primary = V * C + L * per_layer + C + (c->tie_embeddings ? 0 : V * C);
        ffn = 3 * C * c->d_ff;
        break;
    case FAMILY_MOE:
        per_layer = 2 * C + 2 * C * q + 2 * C * kv + c->n_expert * C + 3 * c->n_expert * C * c->d_ff;
        primary = V * C + L * per_layer + C + (c->tie_embeddings ? 0 : V * C);
        ffn = c->n_expert * C + 3 * c->n_expert * C * c->d_ff;
        break;
    }
    if (c->branch == BRANCH_DECODE) {
        if (c->branch_emb == BRANCH_EMB_OWN) branch += V * C;
        if (c->couple)
            branch += L * (q + (c->family == FAMILY_MOE ? 0 : (c->family == FAMILY_NANOGPT ? 4 * C : c->d_ff)) + C);
        if (!c->share) branch += L * (2 * C * q + attn_biases_q_o + ffn + ffn_biases);
    }
    return group == PARAM_PRIMARY ? primary : group == PARAM_BRANCH ? branch : primary + branch;
}

Test(params, counts_equal_closed_forms) {
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    const char *variants[] = {"",
                              "branch=decode",
                              "branch=decode share=off",
                              "branch=decode couple=off",
                              "branch=decode branch_emb=shared",
                              "tie_embeddings=1 branch=decode share=off"};
    for (int f = 0; f < 3; f++) {
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            model_config c = small_config(families[f], variants[v]);
            model m;
            cr_assert_eq(model_create(&m, &c), DT_OK, "%s", dt_error_message());
            for (int g = -1; g <= 1; g++)
                cr_assert_eq(model_param_count(&m, g), closed_form_count(&m.config, g),
                             "%s [%s] group %d: %lld vs %lld", model_family_name(families[f]), variants[v], g,
                             (long long)model_param_count(&m, g), (long long)closed_form_count(&m.config, g));
            model_free(&m);
        }
    }
    /* GPT-2 small's well-known 124,439,808 parameters (tied head, V = 50257, T = 1024). */
    model_config gpt2 = model_config_default(FAMILY_NANOGPT);
    apply_pairs(&gpt2, "vocab_size=50257 block_size=1024 n_layer=12 n_head=12 d_model=768");
    cr_assert_eq(closed_form_count(&gpt2, -1), 124439808);
}

Test(params, pointers_follow_switches) {
    model m;
    model_config c = small_config(FAMILY_NANOGPT, "branch=decode");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    cr_assert_eq(m.lm_head, m.tok_emb, "tied head is tok_emb");
    cr_assert_null(model_find_param(&m, "lm_head.weight"));
    cr_assert_eq(m.branch_tok_emb, model_find_param(&m, "branch.tok_emb.weight")->tensor);
    cr_assert_neq(m.branch_tok_emb, m.tok_emb);
    cr_assert_eq(m.pos_emb, model_find_param(&m, "pos_emb.weight")->tensor);
    cr_assert_null(m.rope_table, "nanogpt has learned positions");
    for (int64_t l = 0; l < 2; l++) {
        model_layer *layer = &m.layers[l];
        char name[96];
        snprintf(name, sizeof name, "layers.%lld.attn.wq.weight", (long long)l);
        cr_assert_eq(layer->primary.wq, model_find_param(&m, name)->tensor);
        snprintf(name, sizeof name, "layers.%lld.mlp.proj.bias", (long long)l);
        cr_assert_eq(layer->primary.ffn[3], model_find_param(&m, name)->tensor, "gelu_mlp slot 3 is proj.bias");
        snprintf(name, sizeof name, "layers.%lld.ffn_norm.bias", (long long)l);
        cr_assert_eq(layer->ffn_norm_bias, model_find_param(&m, name)->tensor);
        cr_assert_eq(memcmp(&layer->branch, &layer->primary, sizeof layer->branch), 0, "share = on: same pointers");
        cr_assert_not_null(layer->couple_q);
        cr_assert_not_null(layer->couple_hidden);
        cr_assert_not_null(layer->couple_out);
        cr_assert_null(layer->primary.ffn[4], "gelu_mlp declares 4 tensors");
    }
    cr_assert_eq(m.final_norm_bias, model_find_param(&m, "final_norm.bias")->tensor);
    model_free(&m);

    c = small_config(FAMILY_MOE, "branch=decode share=off branch_emb=shared couple=off");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    cr_assert_eq(m.lm_head, model_find_param(&m, "lm_head.weight")->tensor, "moe is untied");
    cr_assert_eq(m.branch_tok_emb, m.tok_emb, "branch_emb = shared");
    cr_assert_null(m.pos_emb);
    cr_assert_null(m.final_norm_bias);
    for (int64_t l = 0; l < 2; l++) {
        model_layer *layer = &m.layers[l];
        char name[96];
        cr_assert_null(layer->couple_q);
        cr_assert_null(layer->couple_hidden);
        cr_assert_null(layer->couple_out);
        snprintf(name, sizeof name, "branch.layers.%lld.moe.router.weight", (long long)l);
        cr_assert_eq(layer->branch.ffn[0], model_find_param(&m, name)->tensor, "moe slot 0 is the router");
        snprintf(name, sizeof name, "branch.layers.%lld.attn.wq.weight", (long long)l);
        cr_assert_eq(layer->branch.wq, model_find_param(&m, name)->tensor);
        snprintf(name, sizeof name, "branch.layers.%lld.moe.w2.weight", (long long)l);
        cr_assert_eq(layer->branch.ffn[3], model_find_param(&m, name)->tensor, "moe slot 3 is w2");
        cr_assert_neq(layer->branch.wq, layer->primary.wq);
        cr_assert_neq(layer->branch.ffn[1], layer->primary.ffn[1]);
        cr_assert_null(layer->primary.wq_bias);
        cr_assert_null(layer->primary.ffn[4], "moe declares 4 tensors");
    }
    model_free(&m);

    c = small_config(FAMILY_LLAMA, "branch=decode");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    for (int64_t l = 0; l < 2; l++) {
        cr_assert_eq(m.layers[l].couple_hidden->shape[0], 24, "couple_hidden is [d_ff]");
        cr_assert_null(m.layers[l].primary.ffn[3], "swiglu declares 3 tensors");
    }
    model_free(&m);

    c = small_config(FAMILY_MOE, "branch=decode");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    for (int64_t l = 0; l < 2; l++) {
        cr_assert_null(m.layers[l].couple_hidden, "no couple_hidden in moe layers");
        cr_assert_not_null(m.layers[l].couple_q);
    }
    model_free(&m);

    /* Without a branch: no branch tensors at all. */
    c = small_config(FAMILY_LLAMA, "");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    cr_assert_null(m.branch_tok_emb);
    cr_assert_null(m.layers[0].couple_q);
    cr_assert_eq(model_param_count(&m, PARAM_BRANCH), 0);
    model_free(&m);
}

Test(params, rope_table_holds_cos_sin) {
    model m;
    model_config c = small_config(FAMILY_LLAMA, "");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    cr_assert_not_null(m.rope_table);
    const int64_t hd = 4, half = 2;
    for (int64_t t = 0; t < 12; t++)
        for (int64_t j = 0; j < half; j++) {
            double angle = (double)t * pow(10000.0, -2.0 * (double)j / (double)hd);
            cr_assert(fabs(m.rope_table[(t * half + j) * 2] - cos(angle)) < 1e-6);
            cr_assert(fabs(m.rope_table[(t * half + j) * 2 + 1] - sin(angle)) < 1e-6);
        }
    model_free(&m);
}

Test(params, create_rejects_bad_config_and_leaves_model_empty) {
    model m;
    model_config c = small_config(FAMILY_LLAMA, "n_kv_head=3");
    cr_assert_eq(model_create(&m, &c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "n_kv_head"));
    cr_assert_eq(m.n_params, 0);
    cr_assert_null(m.params);
    model_free(&m); /* safe on an empty model */
}

/* ---------- initialisation ---------- */

static void moments(const dt_tensor *t, double *mean, double *std) {
    double s = 0, s2 = 0;
    const float *x = dt_f32(t);
    for (int64_t i = 0; i < t->size; i++)
        s += x[i];
    *mean = s / (double)t->size;
    for (int64_t i = 0; i < t->size; i++)
        s2 += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(s2 / (double)t->size);
}

static int all_equal(const dt_tensor *t, float value) {
    for (int64_t i = 0; i < t->size; i++)
        if (dt_f32(t)[i] != value) return 0;
    return 1;
}

Test(init, statistics_follow_spec) {
    model m;
    model_config c = model_config_default(FAMILY_NANOGPT);
    apply_pairs(&c, "vocab_size=512 block_size=64 n_layer=8 d_model=128 n_head=4 branch=decode share=off");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    dt_rng rng;
    dt_rng_seed(&rng, 1234);
    model_init_weights(&m, &rng);

    double mean, std;
    /* tok_emb [512,128]: 65536 draws, std of the sample std ~ 0.02/sqrt(2*65536) = 5.5e-5. */
    moments(m.tok_emb, &mean, &std);
    cr_assert(fabs(std - 0.02) < 5e-4, "tok_emb std %g", std);
    cr_assert(fabs(mean) < 5e-4, "tok_emb mean %g", mean);
    moments(m.branch_tok_emb, &mean, &std);
    cr_assert(fabs(std - 0.02) < 5e-4, "branch.tok_emb std %g", std);
    moments(m.pos_emb, &mean, &std);
    cr_assert(fabs(std - 0.02) < 1e-3, "pos_emb std %g", std);

    /* branch.tok_emb: an independent draw, so uncorrelated with tok_emb. */
    double dot = 0;
    for (int64_t i = 0; i < m.tok_emb->size; i++)
        dot += (double)dt_f32(m.tok_emb)[i] * dt_f32(m.branch_tok_emb)[i];
    double corr = dot / (m.tok_emb->size * 0.02 * 0.02);
    cr_assert(fabs(corr) < 0.02, "correlation of tok_emb and branch.tok_emb %g", corr);

    const double residual = 0.02 / sqrt(2.0 * 8);
    for (int64_t l = 0; l < 8; l++) {
        model_layer *layer = &m.layers[l];
        moments(layer->primary.ffn[0], &mean, &std);
        cr_assert(fabs(std - 0.02) < 6e-4, "fc std %g", std);
        moments(layer->primary.wq, &mean, &std);
        cr_assert(fabs(std - 0.02) < 1e-3, "wq std %g", std);
        moments(layer->primary.ffn[2], &mean, &std);
        cr_assert(fabs(std - residual) < 0.03 * residual, "mlp.proj std %g, expected %g", std, residual);
        moments(layer->primary.wo, &mean, &std);
        cr_assert(fabs(std - residual) < 0.05 * residual, "attn.wo std %g, expected %g", std, residual);
        moments(layer->branch.ffn[2], &mean, &std);
        cr_assert(fabs(std - residual) < 0.03 * residual, "branch mlp.proj std %g", std);
        moments(layer->branch.ffn[0], &mean, &std);
        cr_assert(fabs(std - 0.02) < 6e-4, "branch fc std %g", std);
        cr_assert(memcmp(dt_f32(layer->branch.ffn[0]), dt_f32(layer->primary.ffn[0]), 4 * layer->branch.ffn[0]->size),
                  "share = off copies are independent draws");
        cr_assert(all_equal(layer->attn_norm, 1.0f) && all_equal(layer->ffn_norm, 1.0f), "norm weights are ones");
        cr_assert(all_equal(layer->attn_norm_bias, 0.0f) && all_equal(layer->ffn_norm_bias, 0.0f));
        cr_assert(all_equal(layer->primary.wq_bias, 0.0f) && all_equal(layer->primary.wk_bias, 0.0f) &&
                  all_equal(layer->primary.wv_bias, 0.0f) && all_equal(layer->primary.wo_bias, 0.0f));
        cr_assert(all_equal(layer->primary.ffn[1], 0.0f) && all_equal(layer->primary.ffn[3], 0.0f));
        cr_assert(all_equal(layer->branch.ffn[1], 0.0f) && all_equal(layer->branch.wo_bias, 0.0f));
        cr_assert(all_equal(layer->couple_q, 0.0f) && all_equal(layer->couple_hidden, 0.0f) &&
                      all_equal(layer->couple_out, 0.0f),
                  "coupling vectors start at zero");
    }
    cr_assert(all_equal(m.final_norm, 1.0f) && all_equal(m.final_norm_bias, 0.0f));
    model_free(&m);
}

Test(init, llama_and_moe_residual_projections_scaled_and_seed_reproducible) {
    model_config c = model_config_default(FAMILY_MOE);
    apply_pairs(&c, "vocab_size=64 block_size=16 n_layer=2 d_model=64 n_head=4 d_ff=128 n_expert=4 top_k=2");
    model a, b;
    cr_assert_eq(model_create(&a, &c), DT_OK);
    cr_assert_eq(model_create(&b, &c), DT_OK);
    dt_rng r1, r2;
    dt_rng_seed(&r1, 7);
    dt_rng_seed(&r2, 7);
    model_init_weights(&a, &r1);
    model_init_weights(&b, &r2);
    for (int i = 0; i < a.n_params; i++)
        cr_assert_eq(memcmp(a.params[i].tensor->data, b.params[i].tensor->data, 4 * a.params[i].tensor->size), 0,
                     "same seed, same %s", a.params[i].name);
    double mean, std;
    const double residual = 0.02 / sqrt(4.0);
    moments(a.layers[0].primary.ffn[3], &mean, &std); /* [4,64,128]: 32768 draws */
    cr_assert(fabs(std - residual) < 0.03 * residual, "moe.w2 std %g", std);
    moments(a.layers[0].primary.ffn[1], &mean, &std);
    cr_assert(fabs(std - 0.02) < 6e-4, "moe.w1 std %g", std);
    moments(a.layers[1].primary.ffn[0], &mean, &std);
    cr_assert(fabs(std - 0.02) < 2e-3, "router std %g", std);
    moments(a.lm_head, &mean, &std);
    cr_assert(fabs(std - 0.02) < 2e-3, "lm_head std %g", std);
    cr_assert(all_equal(a.final_norm, 1.0f));
    model_free(&a);
    model_free(&b);
}

Test(params, zero_grad_clears_every_gradient) {
    model m;
    model_config c = small_config(FAMILY_LLAMA, "branch=decode");
    cr_assert_eq(model_create(&m, &c), DT_OK);
    for (int i = 0; i < m.n_params; i++)
        for (int64_t j = 0; j < m.params[i].tensor->size; j++)
            m.params[i].tensor->grad[j] = 1.5f;
    model_zero_grad(&m);
    for (int i = 0; i < m.n_params; i++)
        for (int64_t j = 0; j < m.params[i].tensor->size; j++)
            cr_assert_eq(m.params[i].tensor->grad[j], 0.0f);
    cr_assert_null(model_find_param(&m, "no.such.param"));
    model_free(&m);
}

/* ---------- declared ranges and SPEC §6 keys (issue 18 item 6, issue 11) ---------- */

Test(config, sizes_at_the_int_limit_are_refused) {
    /* n_layer = 2^31 used to pass (an off-by-one limit) and overflow an int downstream. */
    const char *cases[][2] = {{"n_layer", "2147483648"}, {"n_layer", "65537"},      {"vocab_size", "2147483648"},
                              {"d_model", "2147483648"}, {"n_head", "2147483648"},  {"block_size", "2147483648"},
                              {"d_ff", "2147483648"},    {"n_expert", "2147483648"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = model_config_default(FAMILY_LLAMA);
        cr_assert_eq(model_config_set(&c, cases[i][0], cases[i][1]), DT_OK);
        cr_assert_eq(model_config_validate(&c), DT_ERR, "%s = %s accepted", cases[i][0], cases[i][1]);
        cr_assert(strstr(dt_error_message(), cases[i][0]) && strstr(dt_error_message(), cases[i][1]), "%s",
                  dt_error_message());
    }
    model_config c = model_config_default(FAMILY_LLAMA);
    cr_assert_eq(model_config_set(&c, "n_layer", "99999999999999999999"), DT_ERR, "beyond 64 bits");
    cr_assert(strstr(dt_error_message(), "n_layer"), "%s", dt_error_message());
}

Test(config, spec6_defaults_are_the_spec_table) {
    /* SPEC §6's table, default first. */
    const char *expected[][2] = {{"ffn", "default"},     {"ffn_prod_norm", "0"},  {"layer_heads", ""},
                                 {"attn_res", "off"},    {"attn_res_heads", "1"}, {"attn_res_blocks", "0"},
                                 {"recurrent", "0"},     {"alibi", "0"},          {"feedback", "0"},
                                 {"n_loop", "1"},        {"disco", "0"},          {"disco_tau", "1"},
                                 {"disco_alpha", "0.5"}, {"disco_gate", "fixed"}, {"disco_top", "128"}};
    for (int f = FAMILY_NANOGPT; f <= FAMILY_MOE; f++) {
        model_config c = model_config_default((model_family)f);
        for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
            char text[64];
            cr_assert_eq(model_config_get(&c, expected[i][0], text, sizeof text), DT_OK);
            cr_assert_str_eq(text, expected[i][1], "%s", expected[i][0]);
        }
        cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    }
}

Test(config, spec6_options_are_refused_until_implemented) {
    const char *cases[][3] = {
        /* pairs, a word the message must hold */
        /* SPEC §6.6: the disco_* keys only qualify disco = 1; a learned gate starts at logit(disco_alpha) */
        {"disco_tau=2", "disco_tau", "disco = 1"},
        {"disco_top=0", "disco_top", "disco = 1"},
        {"disco_gate=learned", "disco_gate", "disco = 1"},
        {"n_loop=2 disco_alpha=0.25", "disco_alpha", "disco = 1"},
        {"n_loop=2 disco=1 disco_gate=learned disco_alpha=0", "disco_alpha", "logit"},
        {"n_loop=2 disco=1 disco_gate=learned disco_alpha=1", "disco_alpha", "logit"},
        /* SPEC §6's combination rules */
        {"ffn_prod_norm=1", "ffn_prod_norm", "ffn"},
        {"attn_res_heads=2", "attn_res_heads", "attn_res"},
        {"attn_res=full attn_res_blocks=2", "attn_res_blocks", "block"},
        {"disco=1", "disco", "n_loop"},
        {"recurrent=1 feedback=1", "recurrent", "feedback"},
        {"attn_res=block n_loop=2", "attn_res", "n_loop"},
        {"branch=decode feedback=1", "feedback", "branch"},
        {"branch=decode n_loop=2", "n_loop", "branch"},
        /* values outside the table */
        {"layer_heads=4,4", "layer_heads", "n_layer"},
        {"layer_heads=4,x,4,4", "layer_heads", "integers"},
        /* SPEC §6.2's shape rules: heads divide d_model, RoPE head widths even, integer kv heads */
        {"d_model=48 layer_heads=4,5,4,4", "layer_heads", "divide d_model"},
        {"d_model=48 n_head=4 layer_heads=4,16,4,4", "layer_heads", "even"},
        {"d_model=64 n_head=4 n_kv_head=2 layer_heads=4,1,4,4", "layer_heads", "kv-head"},
        /* SPEC §6.3: blocks divide the 2L sublayers, routing heads divide d_model */
        {"n_layer=3 attn_res=block attn_res_blocks=4", "attn_res_blocks", "divide"},
        {"attn_res=block", "attn_res_blocks", "divide"},
        {"d_model=48 n_head=4 attn_res=full attn_res_heads=5", "attn_res_heads", "divide"},
        {"n_loop=0", "n_loop", "[1,"},
        {"disco_alpha=1.5", "disco_alpha", "[0, 1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = model_config_default(FAMILY_LLAMA);
        apply_pairs(&c, cases[i][0]);
        cr_assert_eq(model_config_validate(&c), DT_ERR, "'%s' accepted", cases[i][0]);
        cr_assert(strstr(dt_error_message(), cases[i][1]) && strstr(dt_error_message(), cases[i][2]),
                  "'%s': '%s' lacks '%s' or '%s'", cases[i][0], dt_error_message(), cases[i][1], cases[i][2]);
    }
    model_config c = model_config_default(FAMILY_LLAMA);
    cr_assert_eq(model_config_set(&c, "ffn", "quadratic"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "default|triplu|prod2|prod4"), "%s", dt_error_message());
}

/* The implemented SPEC §6 options validate (and keep their values). */
Test(config, spec6_implemented_options_validate) {
    const char *cases[] = {"ffn=triplu",
                           "ffn=prod2 ffn_prod_norm=1",
                           "ffn=prod4 d_ff=96",
                           "layer_heads=1,2,4,8",
                           "family=moe n_expert=4 top_k=2 ffn=triplu ffn_prod_norm=1",
                           "family=nanogpt ffn=triplu d_ff=100",
                           "family=nanogpt layer_heads=2,4,8,16",
                           "attn_res=full attn_res_heads=8",
                           "attn_res=block attn_res_blocks=4",
                           "family=moe n_expert=4 top_k=2 attn_res=block attn_res_blocks=8 branch=decode",
                           "n_loop=3",
                           "family=nanogpt n_loop=2 disco=1 disco_top=0",
                           "family=moe n_expert=4 top_k=2 n_loop=2 disco=1 disco_gate=learned disco_alpha=0.3",
                           "n_loop=2 disco=1 disco_alpha=0 disco_top=100000"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = model_config_default(FAMILY_LLAMA);
        apply_pairs(&c, "d_model=64 n_head=4 n_kv_head=4 n_layer=4");
        apply_pairs(&c, cases[i]);
        cr_assert_eq(model_config_validate(&c), DT_OK, "'%s': %s", cases[i], dt_error_message());
    }
}

/* SPEC §6.4 ALiBi combines with everything and replaces RoPE (so odd head
 * widths are allowed: 64 heads of width 1); the model description then holds
 * the alibi scheme and each layer's slopes 2^(-8(h+1)/H_l), H_l its own heads. */
Test(config, alibi_validates_with_everything) {
    const char *cases[] = {"alibi=1",
                           "family=nanogpt alibi=1 layer_heads=1,2,4,8 branch=decode",
                           "alibi=1 n_head=64 n_kv_head=16",
                           "alibi=1 layer_heads=4,64,4,4 attn_res=full",
                           "family=moe n_expert=4 top_k=2 alibi=1 ffn=triplu ffn_prod_norm=1 branch=decode",
                           "alibi=1 attn_res=block attn_res_blocks=2 branch=decode share=off"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c = model_config_default(FAMILY_LLAMA);
        apply_pairs(&c, "d_model=64 n_head=4 n_kv_head=4 n_layer=4");
        apply_pairs(&c, cases[i]);
        cr_assert_eq(model_config_validate(&c), DT_OK, "'%s': %s", cases[i], dt_error_message());
        model_arch a;
        cr_assert_eq(model_arch_build(&a, &c), DT_OK, "%s", dt_error_message());
        cr_assert_str_eq(a.position->name, "alibi");
        cr_assert(!a.position->learned_table && !a.position->rotary, "'%s': pos_emb or RoPE kept", cases[i]);
        for (int64_t l = 0; l < a.L; l++) {
            const int64_t H = a.layers[l].n_head;
            cr_assert_not_null(a.layers[l].score_slopes);
            for (int64_t h = 0; h < H; h++)
                cr_assert_float_eq(a.layers[l].score_slopes[h], powf(2.0f, -8.0f * (float)(h + 1) / (float)H), 1e-7f,
                                   "'%s' layer %lld head %lld", cases[i], (long long)l, (long long)h);
        }
        model_arch_free(&a);
    }
    /* without it, RoPE's even widths still bind, and no slopes exist */
    model_config c = model_config_default(FAMILY_LLAMA);
    apply_pairs(&c, "d_model=64 n_head=64 n_kv_head=16 n_layer=4");
    cr_assert_eq(model_config_validate(&c), DT_ERR);
    cr_assert(strstr(dt_error_message(), "even for RoPE"), "%s", dt_error_message());
    c = model_config_default(FAMILY_LLAMA);
    cr_assert_eq(model_config_validate(&c), DT_OK, "%s", dt_error_message());
    model_arch a;
    cr_assert_eq(model_arch_build(&a, &c), DT_OK, "%s", dt_error_message());
    cr_assert_null(a.layers[0].score_slopes);
    model_arch_free(&a);
}

Test(config, every_key_has_a_description_with_its_range) {
    char text[256];
    for (int i = 0; i < model_config_key_count(); i++) {
        model_config_key_describe(i, text, sizeof text);
        cr_assert(!strncmp(text, model_config_key(i), strlen(model_config_key(i))), "%s", text);
        cr_assert(strstr(text, "default"), "%s", text);
    }
    model_config_key_describe(model_config_find_key("n_layer"), text, sizeof text);
    cr_assert(strstr(text, "[1, 65536]"), "%s", text);
    model_config_key_describe(model_config_find_key("tie_embeddings"), text, sizeof text);
    cr_assert(strstr(text, "nanogpt '1', llama '0', moe '0'"), "%s", text);
    cr_assert_eq(model_config_key_required(model_config_find_key("family")), 1);
    cr_assert_eq(model_config_key_required(model_config_find_key("ffn")), 0);
}

/* Every SPEC §6 key is implemented: none is declared PENDING any more (a
 * pending key is described as "not implemented yet" and accepts only its
 * default, models/config.c), so a file using any of them loads as itself. */
Test(config, every_spec6_option_is_implemented) {
    static const char *const keys[] = {
        "ffn",         "ffn_prod_norm", "layer_heads", "attn_res", "attn_res_heads", "attn_res_blocks",
        "recurrent",   "alibi",         "feedback",    "n_loop",   "disco",          "disco_tau",
        "disco_alpha", "disco_gate",    "disco_top"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char text[512];
        const int key = model_config_find_key(keys[i]);
        cr_assert_geq(key, 0, "%s is not a key", keys[i]);
        model_config_key_describe(key, text, sizeof text);
        cr_expect(strstr(text, "not implemented") == NULL, "%s: %s", keys[i], text);
    }
}
