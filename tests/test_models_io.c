/* Tests of model files (SPEC §5): bit-exact save/load round trips, loading the
 * shared reference files, and every error path a user can hit (missing,
 * truncated or foreign files, wrong shapes, missing or extra parameters,
 * missing config keys), each a one-line error rather than a crash. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/h5.h"
#include "models/model_io.h"
#include "support/scratch.h"

static char tmp_dir[256];

static void make_tmp_dir(void) { test_scratch_dir(tmp_dir, sizeof tmp_dir, "models_io"); }

static void remove_tmp_dir(void) { test_remove_dir(tmp_dir); }

TestSuite(io, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return path;
}

static const char *reference_path(const char *name) {
    static char path[1024];
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/reference/%s", root ? root : ".", name);
    return path;
}

static void set_pairs(model_config *c, const char *pairs) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pairs);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        cr_assert_eq(model_config_set(c, tok, eq + 1), DT_OK, "%s: %s", tok, dt_error_message());
    }
}

static void make_model(model *m, model_family family, const char *pairs, uint64_t seed) {
    model_config c = model_config_default(family);
    set_pairs(&c, "vocab_size=40 block_size=12 n_layer=2 d_model=16 n_head=4");
    if (family != FAMILY_NANOGPT) set_pairs(&c, "n_kv_head=2 d_ff=24");
    if (family == FAMILY_MOE) set_pairs(&c, "n_expert=3 top_k=2");
    set_pairs(&c, pairs);
    cr_assert_eq(model_create(m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    model_init_weights(m, &rng);
    /* Non-trivial values everywhere (norms are ones, biases zero after init). */
    for (int i = 0; i < m->n_params; i++) {
        float *x = dt_f32(m->params[i].tensor);
        for (int64_t j = 0; j < m->params[i].tensor->size; j++)
            x[j] += 0.001f * (float)(j % 7) + 1e-7f * (float)i;
    }
}

static void assert_same_config(const model_config *a, const model_config *b) {
    for (int i = 0; i < model_config_key_count(); i++) {
        char ta[64], tb[64];
        model_config_get(a, model_config_key(i), ta, sizeof ta);
        model_config_get(b, model_config_key(i), tb, sizeof tb);
        cr_assert_str_eq(ta, tb, "config key %s", model_config_key(i));
    }
}

Test(io, save_load_round_trip_is_bit_exact) {
    const model_family families[] = {FAMILY_NANOGPT, FAMILY_LLAMA, FAMILY_MOE};
    const char *variants[] = {"", "branch=decode", "branch=decode share=off couple=off branch_emb=shared",
                              "branch=decode branch_routing=own top_k_branch=0 mix_alpha_min=0.3 alpha_detach=1"};
    for (int f = 0; f < 3; f++) {
        for (int v = 0; v < 4; v++) {
            model a, b;
            make_model(&a, families[f], variants[v], 100 + f * 10 + v);
            const char *path = tmp_path("round.h5");
            cr_assert_eq(model_save(&a, path), DT_OK, "%s", dt_error_message());
            char tmp[600];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            cr_assert_neq(access(tmp, F_OK), 0, "the .tmp file is renamed away");
            cr_assert_eq(model_load(&b, path), DT_OK, "%s", dt_error_message());
            assert_same_config(&a.config, &b.config);
            cr_assert_eq(a.n_params, b.n_params);
            for (int i = 0; i < a.n_params; i++) {
                cr_assert_str_eq(a.params[i].name, b.params[i].name);
                cr_assert(dt_same_shape(a.params[i].tensor, b.params[i].tensor));
                cr_assert_eq(
                    memcmp(a.params[i].tensor->data, b.params[i].tensor->data, 4 * (size_t)a.params[i].tensor->size), 0,
                    "%s differs after the round trip", a.params[i].name);
            }
            model_free(&a);
            model_free(&b);
        }
    }
}

Test(io, checkpoint_layout_follows_spec) {
    model a;
    make_model(&a, FAMILY_LLAMA, "branch=decode share=off", 3);
    const char *path = tmp_path("layout.h5");
    cr_assert_eq(model_save(&a, path), DT_OK);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert(file >= 0);
    char text[64];
    cr_assert_eq(h5_read_attr_string(file, "format", text, sizeof text), DT_OK);
    cr_assert_str_eq(text, "dbranch-checkpoint");
    int64_t version = 0;
    cr_assert_eq(h5_read_attr_int(file, "format_version", &version), DT_OK);
    cr_assert_eq(version, 1);
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    /* Types of SPEC §4: integers int64, reals float64, words strings. */
    const char *ints[] = {"vocab_size",     "block_size",     "n_layer",     "n_head", "n_kv_head",
                          "d_model",        "d_ff",           "n_expert",    "top_k",  "top_k_branch",
                          "tie_embeddings", "detach_primary", "alpha_detach"};
    const char *reals[] = {"mix_alpha_min", "mix_alpha_max", "aux_loss_coef", "norm_eps", "rope_theta"};
    const char *words[][2] = {{"family", "llama"}, {"branch", "decode"}, {"branch_routing", "replay"},
                              {"couple", "on"},    {"share", "off"},     {"branch_emb", "own"}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        hid_t attr = H5Aopen(config, ints[i], H5P_DEFAULT);
        cr_assert(attr >= 0, "attribute %s", ints[i]);
        hid_t type = H5Aget_type(attr);
        cr_assert_eq(H5Tget_class(type), H5T_INTEGER, "%s is an integer", ints[i]);
        cr_assert_eq(H5Tget_size(type), 8, "%s is int64", ints[i]);
        H5Tclose(type);
        H5Aclose(attr);
    }
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        hid_t attr = H5Aopen(config, reals[i], H5P_DEFAULT);
        hid_t type = H5Aget_type(attr);
        cr_assert_eq(H5Tget_class(type), H5T_FLOAT, "%s is a real", reals[i]);
        cr_assert_eq(H5Tget_size(type), 8, "%s is float64", reals[i]);
        H5Tclose(type);
        H5Aclose(attr);
    }
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        cr_assert_eq(h5_read_attr_string(config, words[i][0], text, sizeof text), DT_OK, "%s", words[i][0]);
        cr_assert_str_eq(text, words[i][1], "%s", words[i][0]);
    }
    int64_t d_ff = 0;
    double eps = 0;
    h5_read_attr_int(config, "d_ff", &d_ff);
    h5_read_attr_double(config, "norm_eps", &eps);
    cr_assert_eq(d_ff, 24);
    cr_assert_eq(eps, 1e-5);
    H5Gclose(config);
    /* One float32 dataset per parameter, nothing else. */
    hid_t params = H5Gopen2(file, "params", H5P_DEFAULT);
    H5G_info_t info;
    H5Gget_info(params, &info);
    cr_assert_eq((int)info.nlinks, a.n_params);
    hid_t dset = H5Dopen2(params, "branch.layers.1.mlp.w2.weight", H5P_DEFAULT);
    cr_assert(dset >= 0);
    hid_t type = H5Dget_type(dset);
    cr_assert_eq(H5Tget_class(type), H5T_FLOAT);
    cr_assert_eq(H5Tget_size(type), 4);
    H5Tclose(type);
    H5Dclose(dset);
    H5Gclose(params);
    H5Fclose(file);
    model_free(&a);
}

Test(io, reference_files_load) {
    model m;
    cr_assert_eq(model_load(&m, reference_path("01_nanogpt_base.h5")), DT_OK, "%s", dt_error_message());
    cr_assert_eq(m.config.family, FAMILY_NANOGPT);
    cr_assert_eq(m.config.branch, BRANCH_NONE);
    cr_assert_eq(m.config.vocab_size, 40);
    cr_assert_eq(m.config.d_model, 16);
    cr_assert_eq(m.config.n_layer, 2);
    cr_assert_eq(m.tok_emb->shape[0], 40);
    cr_assert_eq(m.tok_emb->shape[1], 16);
    cr_assert_eq(m.pos_emb->shape[0], 12);
    cr_assert_eq(m.pos_emb->shape[1], 16);
    cr_assert_eq(m.layers[1].primary.ffn[0]->shape[0], 64);
    cr_assert_eq(m.layers[1].primary.ffn[0]->shape[1], 16);
    cr_assert_eq(m.lm_head, m.tok_emb, "tied");
    /* The values are the file's: compare against an independent float64 read. */
    hid_t file = H5Fopen(reference_path("01_nanogpt_base.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
    double *expected = malloc(64 * 16 * sizeof *expected);
    cr_assert_eq(h5_read_f64(file, "params/layers.1.mlp.fc.weight", expected, 2, (int64_t[]){64, 16}), DT_OK);
    for (int i = 0; i < 64 * 16; i++)
        cr_assert_eq((double)dt_f32(m.layers[1].primary.ffn[0])[i], expected[i]);
    free(expected);
    H5Fclose(file);
    model_free(&m);

    /* Every shared reference file is a valid model. */
    const char *names[] = {"02_nanogpt_branch.h5", "03_llama_base_gqa.h5",    "04_llama_branch.h5",
                           "05_moe_base.h5",       "06_moe_branch_replay.h5", "07_llama_branch_alpha_fixed.h5"};
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(model_load(&m, reference_path(names[i])), DT_OK, "%s: %s", names[i], dt_error_message());
        hid_t f = H5Fopen(reference_path(names[i]), H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t params = H5Gopen2(f, "params", H5P_DEFAULT);
        H5G_info_t info;
        H5Gget_info(params, &info);
        cr_assert_eq((int)info.nlinks, m.n_params, "%s: every dataset is a parameter", names[i]);
        H5Gclose(params);
        H5Fclose(f);
        model_free(&m);
    }
    cr_assert_eq(model_load(&m, reference_path("06_moe_branch_replay.h5")), DT_OK);
    cr_assert_eq(m.config.top_k, 1);
    cr_assert_eq(m.config.top_k_branch, 2);
    cr_assert_eq(m.layers[0].primary.ffn[3]->ndim, 3);
    cr_assert_null(m.layers[0].couple_hidden);
    model_free(&m);
}

/* Saves a valid model, then lets `edit` damage it through the raw HDF5 API. */
static const char *damaged_file(const char *name, void (*edit)(hid_t file)) {
    model a;
    make_model(&a, FAMILY_NANOGPT, "branch=decode", 5);
    const char *path = tmp_path(name);
    cr_assert_eq(model_save(&a, path), DT_OK);
    model_free(&a);
    if (edit) {
        hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        cr_assert(file >= 0);
        edit(file);
        cr_assert(H5Fclose(file) >= 0);
    }
    return path;
}

static void expect_load_error(const char *path, const char *needle1, const char *needle2) {
    model m;
    memset(&m, 0x5a, sizeof m);
    cr_assert_eq(model_load(&m, path), DT_ERR, "%s loaded", path);
    const char *msg = dt_error_message();
    cr_assert_null(strchr(msg, '\n'), "one line: %s", msg);
    cr_assert(strstr(msg, path), "message '%s' names the file", msg);
    if (needle1) cr_assert(strstr(msg, needle1), "message '%s' lacks '%s'", msg, needle1);
    if (needle2) cr_assert(strstr(msg, needle2), "message '%s' lacks '%s'", msg, needle2);
    cr_assert_eq(m.n_params, 0, "a failed load leaves an empty model");
    cr_assert_null(m.params);
    model_free(&m);
}

static void wrong_shape(hid_t file) {
    float zeros[16 * 8] = {0};
    cr_assert_eq(h5_write_f32(file, "params/layers.1.attn.wq.weight", zeros, 2, (int64_t[]){16, 8}), DT_OK);
}
static void missing_param(hid_t file) {
    cr_assert(H5Ldelete(file, "params/layers.0.branch.couple_out", H5P_DEFAULT) >= 0);
}
static void extra_param(hid_t file) {
    float zeros[4] = {0};
    cr_assert_eq(h5_write_f32(file, "params/layers.0.attn.wz.weight", zeros, 1, (int64_t[]){4}), DT_OK);
}
static void integer_param(hid_t file) {
    int32_t zeros[16] = {0};
    cr_assert_eq(h5_write_i32(file, "params/final_norm.weight", zeros, 1, (int64_t[]){16}), DT_OK);
}
static void token_format(hid_t file) { cr_assert_eq(h5_write_attr_string(file, "format", "dbranch-tokens"), DT_OK); }
static void no_format(hid_t file) { cr_assert(H5Adelete(file, "format") >= 0); }
static void future_version(hid_t file) { cr_assert_eq(h5_write_attr_int(file, "format_version", 2), DT_OK); }
static void missing_key(hid_t file) { cr_assert(H5Adelete_by_name(file, "config", "n_layer", H5P_DEFAULT) >= 0); }
static void bad_family(hid_t file) {
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    cr_assert_eq(h5_write_attr_string(config, "family", "gpt5"), DT_OK);
    H5Gclose(config);
}
static void fractional_size(hid_t file) {
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    cr_assert_eq(h5_write_attr_double(config, "d_model", 16.5), DT_OK);
    H5Gclose(config);
}
static void inconsistent_config(hid_t file) {
    hid_t config = H5Gopen2(file, "config", H5P_DEFAULT);
    cr_assert_eq(h5_write_attr_int(config, "n_head", 3), DT_OK); /* 16 % 3 != 0 */
    H5Gclose(config);
}
static void no_params(hid_t file) { cr_assert(H5Ldelete(file, "params", H5P_DEFAULT) >= 0); }

Test(io, damaged_files_are_one_line_errors) {
    expect_load_error(damaged_file("shape.h5", wrong_shape), "layers.1.attn.wq.weight", "[16, 8]");
    expect_load_error(damaged_file("missing.h5", missing_param), "layers.0.branch.couple_out", "missing");
    expect_load_error(damaged_file("extra.h5", extra_param), "layers.0.attn.wz.weight", "unexpected");
    expect_load_error(damaged_file("int.h5", integer_param), "final_norm.weight", "floating");
    expect_load_error(damaged_file("tokens.h5", token_format), "dbranch-tokens", "token dataset");
    expect_load_error(damaged_file("noformat.h5", no_format), "format", NULL);
    expect_load_error(damaged_file("version.h5", future_version), "format_version", NULL);
    expect_load_error(damaged_file("nokey.h5", missing_key), "n_layer", "missing");
    expect_load_error(damaged_file("family.h5", bad_family), "family", "gpt5");
    expect_load_error(damaged_file("fraction.h5", fractional_size), "d_model", NULL);
    expect_load_error(damaged_file("heads.h5", inconsistent_config), "n_head", NULL);
    expect_load_error(damaged_file("noparams.h5", no_params), "/params", NULL);
}

Test(io, missing_truncated_and_foreign_files) {
    expect_load_error(tmp_path("does_not_exist.h5"), "no such file", NULL);

    const char *path = damaged_file("truncated.h5", NULL);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size / 2), 0);
    expect_load_error(path, NULL, NULL);

    /* Not HDF5 at all. */
    const char *text = tmp_path("notes.txt");
    FILE *f = fopen(text, "w");
    fputs("family = llama\n", f);
    fclose(f);
    expect_load_error(text, "HDF5", NULL);

    /* An HDF5 file from elsewhere (no format attribute, no groups). */
    const char *other = tmp_path("other.h5");
    hid_t file = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_eq(h5_write_scalar(file, "x", 1.0), DT_OK);
    H5Fclose(file);
    expect_load_error(other, "format", NULL);

    /* A file with the right format attribute but no /config. */
    const char *empty = tmp_path("empty.h5");
    file = H5Fcreate(empty, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_attr_string(file, "format", "dbranch-checkpoint");
    h5_write_attr_int(file, "format_version", 1);
    H5Fclose(file);
    expect_load_error(empty, "/config", NULL);
}

static void float64_param(hid_t file) {
    /* Re-write tok_emb as float64 with exactly representable values. */
    double *values = malloc(40 * 16 * sizeof *values);
    for (int i = 0; i < 40 * 16; i++)
        values[i] = (double)(i - 300) / 1024.0;
    hid_t params = H5Gopen2(file, "params", H5P_DEFAULT);
    H5Ldelete(params, "tok_emb.weight", H5P_DEFAULT);
    hsize_t dims[2] = {40, 16};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(params, "tok_emb.weight", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
    H5Dclose(dset);
    H5Sclose(space);
    H5Gclose(params);
    free(values);
}

Test(io, float64_parameters_are_converted) {
    model m;
    const char *path = damaged_file("f64.h5", float64_param);
    cr_assert_eq(model_load(&m, path), DT_OK, "%s", dt_error_message());
    for (int i = 0; i < 40 * 16; i++)
        cr_assert_eq(dt_f32(m.tok_emb)[i], (float)(i - 300) / 1024.0f);
    model_free(&m);
}

Test(io, save_replaces_an_existing_file_and_load_config_reads_only_config) {
    model a, b;
    make_model(&a, FAMILY_LLAMA, "", 1);
    make_model(&b, FAMILY_MOE, "branch=decode", 2);
    const char *path = tmp_path("replace.h5");
    cr_assert_eq(model_save(&a, path), DT_OK);
    cr_assert_eq(model_save(&b, path), DT_OK);
    model_config c;
    cr_assert_eq(model_load_config(&c, path), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.family, FAMILY_MOE);
    cr_assert_eq(c.branch, BRANCH_DECODE);
    cr_assert_eq(c.n_expert, 3);
    model loaded;
    cr_assert_eq(model_load(&loaded, path), DT_OK);
    cr_assert_eq(loaded.n_params, b.n_params);
    model_free(&loaded);

    /* Saving into a directory that does not exist fails cleanly and names the path. */
    cr_assert_eq(model_save(&a, "/nonexistent_dir_for_dbranch/x.h5"), DT_ERR);
    cr_assert(strstr(dt_error_message(), "/nonexistent_dir_for_dbranch/x.h5"), "%s", dt_error_message());
    model_free(&a);
    model_free(&b);

    cr_assert_eq(model_load_config(&c, reference_path("05_moe_base.h5")), DT_OK, "%s", dt_error_message());
    cr_assert_eq(c.n_expert, 4);
    cr_assert_eq(c.d_ff, 24);
}
