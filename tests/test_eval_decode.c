/* The decode engine (eval/decode.h) against teacher-forced model_forward and
 * against the reference files: baseline, grouped and un-grouped decode must
 * reproduce the primary logits, the branch logits, alpha and the mixture at
 * every position, for every family and ablation; grouped and un-grouped must
 * agree with each other; the traffic counters must show that grouping loads
 * shared matrices (and replayed experts) once. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "eval/decode.h"
#include "kernels/gemm.h"
#include "models/model_info.h"
#include "models/model_io.h"
#include "test_eval_util.h"

static const eval_decode_mode all_modes[3] = {EVAL_DECODE_BASELINE, EVAL_DECODE_GROUPED, EVAL_DECODE_UNGROUPED};

/* What one decode run produced at positions first..T-1 (rows before `first` unused). */
typedef struct run_output {
    float *primary, *branch; /* [T,V] */
    float *alpha;            /* [T] */
    float *mixture;          /* [T,V] */
} run_output;

/* Prefills tokens[0..P-1], steps through the rest; checks the prefill's
 * teacher-forced logits and records every position's outputs. */
/* Which product path the engine uses in run_engine (the BLIS path runs the
 * step on the caller, the default one as a team: both must agree with
 * model_forward). */
static eval_matvec_path engine_matvec = EVAL_MATVEC_OWN;

static void run_engine(const model *m, eval_decode_mode mode, const int32_t *tokens, int64_t T, int64_t P,
                       const float *expected_primary, double tol_primary, run_output *out) {
    int64_t V = m->config.vocab_size;
    eval_decode_session s;
    cr_assert(eval_decode_init(&s, m, mode, 0) == DT_OK, "%s", dt_error_message());
    s.matvec = engine_matvec;
    float *logits_all = malloc((size_t)(P * V) * sizeof(float));
    cr_assert(eval_decode_prefill(&s, tokens, P, logits_all) == DT_OK, "%s", dt_error_message());
    double err = eval_test_max_diff(logits_all, expected_primary, P * V);
    cr_expect(err <= tol_primary, "%s P=%lld: prefill logits differ by %g (tol %g)", eval_decode_mode_name(mode),
              (long long)P, err, tol_primary);
    long mallocs = dt_arena_mallocs(&s.arena);
    for (int64_t t = P - 1; t < T; t++) {
        if (t > P - 1) cr_assert(eval_decode_step(&s, tokens[t]) == DT_OK, "%s", dt_error_message());
        cr_assert_eq(s.pos, t);
        memcpy(out->primary + t * V, eval_decode_logits_primary(&s), (size_t)V * sizeof(float));
        const float *branch = eval_decode_logits_branch(&s);
        if (branch) memcpy(out->branch + t * V, branch, (size_t)V * sizeof(float));
        out->alpha[t] = s.alpha;
        eval_decode_mixture(&s, out->mixture + t * V);
    }
    cr_expect_eq(dt_arena_mallocs(&s.arena), mallocs, "decode steps allocated");
    cr_expect_eq(atomic_load(&s.team.overflow), 0, "the step team ran out of stages");
    cr_expect_eq(mallocs, 1, "a session is one allocation");
    free(logits_all);
    eval_decode_free(&s);
}

/* All three modes at several prompt lengths against model_forward. */
static void check_against_teacher_forced(const char *spec, uint64_t seed) {
    model m;
    eval_test_model(&m, spec, seed);
    int64_t T = m.config.block_size, V = m.config.vocab_size;
    int has_branch = m.config.branch == BRANCH_DECODE;
    int32_t *tokens = malloc((size_t)T * sizeof(int32_t));
    eval_test_tokens(tokens, T, V, seed + 100);
    eval_test_tf tf;
    eval_test_teacher_forced(&m, tokens, T, &tf);
    double tol_p = 1e-4 * eval_test_max_abs(tf.logits_primary, T * V);
    double tol_q = has_branch ? 1e-4 * eval_test_max_abs(tf.logits_branch, T * V) : 0.0;

    run_output runs[3];
    for (int i = 0; i < 3; i++) {
        runs[i].primary = calloc((size_t)(T * V), sizeof(float));
        runs[i].branch = calloc((size_t)(T * V), sizeof(float));
        runs[i].alpha = calloc((size_t)T, sizeof(float));
        runs[i].mixture = calloc((size_t)(T * V), sizeof(float));
    }
    const int64_t prompts[3] = {1, T / 3 + 1, T};
    for (int pi = 0; pi < 3; pi++) {
        int64_t P = prompts[pi];
        for (int i = 0; i < 3; i++) {
            eval_decode_mode mode = all_modes[i];
            run_engine(&m, mode, tokens, T, P, tf.logits_primary, tol_p, &runs[i]);
            int branch_runs = has_branch && mode != EVAL_DECODE_BASELINE;
            for (int64_t t = P - 1; t < T; t++) {
                double err = eval_test_max_diff(runs[i].primary + t * V, tf.logits_primary + t * V, V);
                cr_expect(err <= tol_p, "%s: %s P=%lld t=%lld primary logits off by %g (tol %g)", spec,
                          eval_decode_mode_name(mode), (long long)P, (long long)t, err, tol_p);
                if (branch_runs) {
                    err = eval_test_max_diff(runs[i].branch + t * V, tf.logits_branch + t * V, V);
                    cr_expect(err <= tol_q, "%s: %s P=%lld t=%lld branch logits off by %g (tol %g)", spec,
                              eval_decode_mode_name(mode), (long long)P, (long long)t, err, tol_q);
                    cr_expect(fabs(runs[i].alpha[t] - tf.alpha[t]) <= 1e-4, "%s: alpha %g vs %g at t=%lld", spec,
                              runs[i].alpha[t], tf.alpha[t], (long long)t);
                    /* Logits off by e move log-softmax by at most 2e, so each
                     * path's probability by a factor within 2e of 1, and the
                     * mixture a p + (1 - a) q by at most 2 max(e) of itself
                     * plus |da| |p - q|: the bound follows from the logits'
                     * own tolerance (the GEMM's summation order, which BLIS
                     * picks per CPU, moves them), per entry. */
                    const double d_alpha = fabs(runs[i].alpha[t] - tf.alpha[t]);
                    double worst = 0.0, at_entry = 0.0;
                    for (int64_t v = 0; v < V; v++) {
                        double want = tf.mixture[t * V + v];
                        double bound = 2.0 * fmax(tol_p, tol_q) * want + d_alpha + 1e-7;
                        double ratio = fabs(runs[i].mixture[t * V + v] - want) / bound;
                        if (ratio > worst) worst = ratio, at_entry = want;
                    }
                    cr_expect(worst <= 1.0, "%s: %s mixture off by %.3g of its bound at t=%lld (entry %g)", spec,
                              eval_decode_mode_name(mode), worst, (long long)t, at_entry);
                } else {
                    cr_expect_eq(runs[i].alpha[t], 1.0f);
                }
            }
        }
        if (has_branch) { /* grouped == un-grouped: the same arithmetic, grouped differently */
            for (int64_t t = P - 1; t < T; t++) {
                double err_q = eval_test_max_diff(runs[1].branch + t * V, runs[2].branch + t * V, V);
                double err_p = eval_test_max_diff(runs[1].primary + t * V, runs[2].primary + t * V, V);
                cr_expect(err_q <= 1e-5 * tol_q / 1e-4 && err_p <= 1e-5 * tol_p / 1e-4,
                          "%s: grouped vs ungrouped differ by %g (branch) %g (primary) at t=%lld", spec, err_q, err_p,
                          (long long)t);
            }
        }
    }
    for (int i = 0; i < 3; i++) {
        free(runs[i].primary);
        free(runs[i].branch);
        free(runs[i].alpha);
        free(runs[i].mixture);
    }
    eval_test_tf_free(&tf);
    free(tokens);
    model_free(&m);
}

#define NANOGPT    "family=nanogpt vocab_size=40 block_size=12 n_layer=2 n_head=2 d_model=16 "
#define LLAMA      "family=llama vocab_size=48 block_size=13 n_layer=2 n_head=4 n_kv_head=2 d_model=32 d_ff=40 "
#define MOE        "family=moe vocab_size=40 block_size=12 n_layer=2 n_head=4 n_kv_head=2 d_model=16 d_ff=24 n_expert=4 "
#define ALPHA_FREE "mix_alpha_min=0.02 mix_alpha_max=0.98 "

Test(decode_tf, nanogpt_baseline) { check_against_teacher_forced(NANOGPT "branch=none", 1); }
Test(decode_tf, nanogpt_branch) { check_against_teacher_forced(NANOGPT "branch=decode " ALPHA_FREE, 2); }
Test(decode_tf, nanogpt_branch_untied) {
    check_against_teacher_forced(NANOGPT "branch=decode tie_embeddings=0 branch_emb=shared", 3);
}
Test(decode_tf, llama_gqa_baseline) { check_against_teacher_forced(LLAMA "branch=none", 4); }
Test(decode_tf, llama_gqa_branch) { check_against_teacher_forced(LLAMA "branch=decode " ALPHA_FREE, 5); }
Test(decode_tf, llama_couple_off) { check_against_teacher_forced(LLAMA "branch=decode couple=off " ALPHA_FREE, 6); }
Test(decode_tf, llama_share_off) { check_against_teacher_forced(LLAMA "branch=decode share=off " ALPHA_FREE, 7); }
Test(decode_tf, llama_alpha_fixed) {
    check_against_teacher_forced(LLAMA "branch=decode mix_alpha_min=0.3 mix_alpha_max=0.3", 8);
}
Test(decode_tf, moe_baseline) { check_against_teacher_forced(MOE "branch=none top_k=2", 9); }
Test(decode_tf, moe_replay) {
    check_against_teacher_forced(MOE "branch=decode top_k=2 top_k_branch=2 " ALPHA_FREE, 10);
}
Test(decode_tf, moe_replay_subset) {
    check_against_teacher_forced(MOE "branch=decode top_k=2 top_k_branch=1 " ALPHA_FREE, 11);
}
Test(decode_tf, moe_replay_superset) {
    check_against_teacher_forced(MOE "branch=decode top_k=1 top_k_branch=3 " ALPHA_FREE, 12);
}
Test(decode_tf, moe_own) {
    check_against_teacher_forced(MOE "branch=decode branch_routing=own top_k=2 top_k_branch=1 " ALPHA_FREE, 13);
}
Test(decode_tf, moe_share_off_replay) {
    check_against_teacher_forced(MOE "branch=decode share=off top_k=2 top_k_branch=3 " ALPHA_FREE, 14);
}
Test(decode_tf, moe_share_off_own) {
    check_against_teacher_forced(MOE "branch=decode share=off branch_routing=own top_k=2 " ALPHA_FREE, 15);
}

/* The same checks on the BLIS path, and with one thread on the team path. */
/* SPEC §6.1 product FFNs and §6.2 per-layer heads, every decode mode. */
Test(decode_tf, nanogpt_triplu_branch) {
    check_against_teacher_forced(NANOGPT "ffn=triplu branch=decode " ALPHA_FREE, 41);
}
Test(decode_tf, llama_prod2_prodnorm_branch) {
    check_against_teacher_forced(LLAMA "ffn=prod2 ffn_prod_norm=1 branch=decode " ALPHA_FREE, 42);
}
Test(decode_tf, llama_prod4_share_off) {
    check_against_teacher_forced(LLAMA "ffn=prod4 ffn_prod_norm=1 branch=decode share=off " ALPHA_FREE, 43);
}
Test(decode_tf, moe_triplu_experts_replay) {
    check_against_teacher_forced(MOE "ffn=triplu ffn_prod_norm=1 branch=decode top_k=2 top_k_branch=1 " ALPHA_FREE, 44);
}
Test(decode_tf, moe_prod4_share_off_own) {
    check_against_teacher_forced(
        MOE "ffn=prod4 branch=decode share=off branch_routing=own top_k=2 top_k_branch=3 " ALPHA_FREE, 45);
}
Test(decode_tf, nanogpt_layer_heads_branch) {
    check_against_teacher_forced(NANOGPT "layer_heads=1,4 branch=decode " ALPHA_FREE, 46);
}
Test(decode_tf, llama_layer_heads_gqa_branch) {
    check_against_teacher_forced(LLAMA "layer_heads=2,8 branch=decode " ALPHA_FREE, 47);
}

/* SPEC §6.4 ALiBi: no pos_emb, no RoPE, the score bias in the prefill's tiled
 * attention and in the decode kernel (team items and the kernel's own
 * threads); the branch's query gets its head's bias over the primary's keys. */
Test(decode_tf, nanogpt_alibi_baseline) { check_against_teacher_forced(NANOGPT "alibi=1 branch=none", 61); }
Test(decode_tf, nanogpt_alibi_branch) { check_against_teacher_forced(NANOGPT "alibi=1 branch=decode " ALPHA_FREE, 62); }
Test(decode_tf, llama_alibi_gqa_branch) { check_against_teacher_forced(LLAMA "alibi=1 branch=decode " ALPHA_FREE, 63); }
Test(decode_tf, llama_alibi_layer_heads_share_off) {
    check_against_teacher_forced(LLAMA "alibi=1 layer_heads=2,8 branch=decode share=off " ALPHA_FREE, 64);
}
Test(decode_tf, nanogpt_alibi_layer_heads_branch) {
    check_against_teacher_forced(NANOGPT "alibi=1 layer_heads=1,4 branch=decode " ALPHA_FREE, 65);
}
Test(decode_tf, moe_alibi_replay) {
    check_against_teacher_forced(MOE "alibi=1 branch=decode top_k=2 top_k_branch=1 " ALPHA_FREE, 66);
}
Test(decode_tf, llama_alibi_blis_path) {
    engine_matvec = EVAL_MATVEC_BLIS; /* the decode kernel's own threads, not the team's items */
    check_against_teacher_forced(LLAMA "alibi=1 branch=decode " ALPHA_FREE, 67);
    engine_matvec = EVAL_MATVEC_OWN;
}

/* SPEC §6.3 attention residuals (eval_test_model draws the route queries
 * too, so the routes are not the uniform mean they start as). */
Test(decode_tf, nanogpt_attnres_full_branch) {
    check_against_teacher_forced(NANOGPT "attn_res=full branch=decode " ALPHA_FREE, 51);
}
Test(decode_tf, llama_mhar_block_branch) {
    check_against_teacher_forced(LLAMA "attn_res=block attn_res_blocks=2 attn_res_heads=4 branch=decode " ALPHA_FREE,
                                 52);
}
Test(decode_tf, moe_attnres_full_share_off) {
    check_against_teacher_forced(MOE "attn_res=full attn_res_heads=2 branch=decode share=off top_k=2 " ALPHA_FREE, 53);
}

/* SPEC §6.6: the looped stack (K·L cache layers) and DiscoLoop between the
 * applications (the head, top-k softmax, Phi, the gate on the step's row),
 * every family; block_size 40 runs the prefill's DiscoLoop in three chunks. */
Test(decode_tf, llama_loop) { check_against_teacher_forced(LLAMA "n_loop=3", 54); }
Test(decode_tf, nanogpt_disco_top) {
    check_against_teacher_forced(NANOGPT "n_loop=2 disco=1 disco_top=5 disco_tau=0.7", 55);
}
Test(decode_tf, llama_disco_learned_all_v) {
    check_against_teacher_forced(LLAMA "n_loop=3 disco=1 disco_gate=learned disco_top=0 disco_alpha=0.3", 56);
}
Test(decode_tf, moe_disco_learned) {
    check_against_teacher_forced(MOE "top_k=2 n_loop=2 disco=1 disco_gate=learned disco_top=7", 57);
}
Test(decode_tf, nanogpt_disco_long_prompt) {
    check_against_teacher_forced(NANOGPT "block_size=40 n_loop=2 disco=1 disco_top=0", 58);
    check_against_teacher_forced(NANOGPT "block_size=40 n_loop=3 disco=1 disco_top=3 disco_gate=learned", 59);
}

/* SPEC §6.4 recurrent layers: the cache holds the persistent pairs, prefill is a scan. */
Test(decode_tf, nanogpt_recurrent) { check_against_teacher_forced(NANOGPT "recurrent=1 branch=none", 61); }
Test(decode_tf, nanogpt_recurrent_branch) {
    check_against_teacher_forced(NANOGPT "recurrent=1 branch=decode " ALPHA_FREE, 62);
}
Test(decode_tf, llama_recurrent_gqa_layer_heads_branch) {
    check_against_teacher_forced(LLAMA "recurrent=1 layer_heads=2,8 branch=decode " ALPHA_FREE, 63);
}
Test(decode_tf, moe_recurrent_replay) {
    check_against_teacher_forced(MOE "recurrent=1 branch=decode top_k=2 top_k_branch=1 " ALPHA_FREE, 64);
}
Test(decode_tf, moe_recurrent_share_off_own) {
    check_against_teacher_forced(MOE "recurrent=1 branch=decode share=off branch_routing=own top_k=2 " ALPHA_FREE, 65);
}

/* both §6.4 options: the slopes reach the recurrent kernels (the temporary pair at s = t has bias 0) */
Test(decode_tf, recurrent_alibi) {
    check_against_teacher_forced(LLAMA "recurrent=1 alibi=1 layer_heads=2,8 branch=decode " ALPHA_FREE, 68);
    check_against_teacher_forced(NANOGPT "recurrent=1 alibi=1 branch=none", 69);
}

Test(decode_tf, llama_recurrent_triplu_branch) {
    check_against_teacher_forced(LLAMA "recurrent=1 ffn=triplu branch=decode " ALPHA_FREE, 67);
}
/* tok_emb_tables = 2: prefill and step add the tok_emb2 row (nanogpt: after pos_emb, head tied to tok_emb). */
Test(decode_tf, nanogpt_two_tables) { check_against_teacher_forced(NANOGPT "tok_emb_tables=2", 81); }
Test(decode_tf, llama_two_tables) { check_against_teacher_forced(LLAMA "tok_emb_tables=2", 82); }
Test(decode_tf, moe_two_tables) { check_against_teacher_forced(MOE "tok_emb_tables=2 top_k=2", 83); }
/* tok_emb2_layer = 1: the row joins block 1's input (after block 0's residual, before its fused norm). */
Test(decode_tf, two_tables_later_entry) {
    check_against_teacher_forced(NANOGPT "tok_emb_tables=2 tok_emb2_layer=1", 84);
    check_against_teacher_forced(LLAMA "tok_emb_tables=2 tok_emb2_layer=1", 85);
    check_against_teacher_forced(MOE "tok_emb_tables=2 tok_emb2_layer=1 top_k=2", 86);
}

Test(decode_tf, blis_path) {
    engine_matvec = EVAL_MATVEC_BLIS;
    check_against_teacher_forced(LLAMA "branch=decode share=off " ALPHA_FREE, 16);
    check_against_teacher_forced(MOE "branch=decode top_k=2 top_k_branch=3 " ALPHA_FREE, 17);
    check_against_teacher_forced(LLAMA "n_loop=2 disco=1 disco_top=9 disco_gate=learned", 60);
    check_against_teacher_forced(LLAMA "recurrent=1 branch=decode " ALPHA_FREE, 66);
    engine_matvec = EVAL_MATVEC_OWN;
}
Test(decode_tf, one_thread) {
    int threads = k_get_threads();
    k_set_threads(1);
    check_against_teacher_forced(NANOGPT "branch=decode " ALPHA_FREE, 18);
    check_against_teacher_forced(MOE "branch=decode branch_routing=own top_k=2 " ALPHA_FREE, 19);
    k_set_threads(threads);
}
/* Three threads on two cores: more team members than items in some stages. */
Test(decode_tf, three_threads) {
    int threads = k_get_threads();
    k_set_threads(3);
    check_against_teacher_forced(LLAMA "branch=decode " ALPHA_FREE, 20);
    check_against_teacher_forced(MOE "branch=decode top_k=2 top_k_branch=1 " ALPHA_FREE, 21);
    check_against_teacher_forced(MOE "top_k=2 n_loop=3 disco=1 disco_top=4", 61);
    k_set_threads(threads);
}

/* ---- reference files (an independent implementation's logits) ------------ */

static void check_reference(const char *name) {
    const char *root = getenv("DBRANCH_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/reference/%s", root ? root : ".", name);
    model m;
    cr_assert(model_load(&m, path) == DT_OK, "%s", dt_error_message());
    hid_t file;
    cr_assert(h5_open(path, 0, &file) == DT_OK, "%s", dt_error_message());
    int ndim;
    int64_t shape[4];
    cr_assert(h5_dataset_shape(file, "/ref/tokens", &ndim, shape) == DT_OK);
    int64_t B = shape[0], T = shape[1] - 1, V = m.config.vocab_size;
    int has_branch = m.config.branch == BRANCH_DECODE;
    int32_t *tokens = malloc((size_t)(B * (T + 1)) * sizeof(int32_t));
    float *ref_p = malloc((size_t)(B * T * V) * sizeof(float)), *ref_q = malloc((size_t)(B * T * V) * sizeof(float));
    float *ref_alpha = malloc((size_t)(B * T) * sizeof(float));
    cr_assert(h5_read_i32(file, "/ref/tokens", tokens, 2, (int64_t[]){B, T + 1}) == DT_OK);
    cr_assert(h5_read_f32(file, "/ref/logits_primary", ref_p, 3, (int64_t[]){B, T, V}) == DT_OK);
    if (has_branch) {
        cr_assert(h5_read_f32(file, "/ref/logits_branch", ref_q, 3, (int64_t[]){B, T, V}) == DT_OK);
        cr_assert(h5_read_f32(file, "/ref/alpha", ref_alpha, 2, (int64_t[]){B, T}) == DT_OK);
    }
    h5_close(file, path);
    double tol_p = 1e-4 * eval_test_max_abs(ref_p, B * T * V), tol_q = 1e-4 * eval_test_max_abs(ref_q, B * T * V);

    float *logits_all = malloc((size_t)(T * V) * sizeof(float));
    for (int i = 0; i < 3; i++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t P = 1; P <= T; P += T / 2) {
                eval_decode_session s;
                cr_assert(eval_decode_init(&s, &m, all_modes[i], 0) == DT_OK, "%s", dt_error_message());
                const int32_t *x = tokens + b * (T + 1);
                const float *rp = ref_p + b * T * V, *rq = ref_q + b * T * V;
                cr_assert(eval_decode_prefill(&s, x, P, logits_all) == DT_OK, "%s", dt_error_message());
                double err = eval_test_max_diff(logits_all, rp, P * V);
                cr_expect(err <= tol_p, "%s prefill: %g", name, err);
                for (int64_t t = P - 1; t < T; t++) {
                    if (t > P - 1) cr_assert(eval_decode_step(&s, x[t]) == DT_OK);
                    err = eval_test_max_diff(eval_decode_logits_primary(&s), rp + t * V, V);
                    cr_expect(err <= tol_p, "%s %s b=%lld P=%lld t=%lld: primary off by %g", name,
                              eval_decode_mode_name(all_modes[i]), (long long)b, (long long)P, (long long)t, err);
                    if (has_branch && all_modes[i] != EVAL_DECODE_BASELINE) {
                        err = eval_test_max_diff(eval_decode_logits_branch(&s), rq + t * V, V);
                        cr_expect(err <= tol_q, "%s %s b=%lld P=%lld t=%lld: branch off by %g", name,
                                  eval_decode_mode_name(all_modes[i]), (long long)b, (long long)P, (long long)t, err);
                        cr_expect(fabs(s.alpha - ref_alpha[b * T + t]) <= 1e-4, "%s alpha %g vs %g", name, s.alpha,
                                  ref_alpha[b * T + t]);
                    }
                }
                eval_decode_free(&s);
            }
    free(logits_all);
    free(tokens);
    free(ref_p);
    free(ref_q);
    free(ref_alpha);
    model_free(&m);
}

Test(decode_reference, nanogpt_base) { check_reference("01_nanogpt_base.h5"); }
Test(decode_reference, nanogpt_branch) { check_reference("02_nanogpt_branch.h5"); }
Test(decode_reference, llama_base_gqa) { check_reference("03_llama_base_gqa.h5"); }
Test(decode_reference, llama_branch) { check_reference("04_llama_branch.h5"); }
Test(decode_reference, moe_base) { check_reference("05_moe_base.h5"); }
Test(decode_reference, moe_branch_replay) { check_reference("06_moe_branch_replay.h5"); }
Test(decode_reference, llama_branch_alpha_fixed) { check_reference("07_llama_branch_alpha_fixed.h5"); }
/* SPEC §6 options (tests/reference/options: copies of ../shared/reference/options) */
Test(decode_reference, llama_triplu_branch) { check_reference("options/08_llama_triplu_branch.h5"); }
Test(decode_reference, nanogpt_prism) { check_reference("options/09_nanogpt_prism.h5"); }
Test(decode_reference, moe_triplu_prodnorm) { check_reference("options/16_moe_triplu_prodnorm.h5"); }
Test(decode_reference, llama_attnres_mhar_branch) { check_reference("options/10_llama_attnres_mhar_branch.h5"); }
Test(decode_reference, llama_attnres_block) { check_reference("options/15_llama_attnres_block.h5"); }
Test(decode_reference, nanogpt_disco) { check_reference("options/13_nanogpt_disco.h5"); }
Test(decode_reference, loop_heldout) {
    check_reference("options_heldout/llama_loop3.h5");
    check_reference("options_heldout/nanogpt_disco_learned_top5.h5");
    check_reference("options_heldout/moe_disco_learned_loop3.h5");
    check_reference("options_heldout/llama_disco_tied_top64.h5");
}
Test(decode_reference, llama_recurrent) { check_reference("options/11_llama_recurrent.h5"); }
Test(decode_reference, nanogpt_recurrent_branch) { check_reference("options/17_nanogpt_recurrent_branch.h5"); }
Test(decode_reference, llama_alibi_branch) { check_reference("options/14_llama_alibi_branch.h5"); }
Test(decode_reference, nanogpt_alibi_prism) { check_reference("options_heldout/nanogpt_alibi_prism.h5"); }
Test(decode_reference, llama_recurrent_alibi_triplu_branch) {
    check_reference("options_heldout/llama_recurrent_alibi_triplu_branch.h5");
}

/* ---- what grouping saves ------------------------------------------------- */

/* One cost model: the bytes the decode step counts as it runs equal what the
 * cost model (models/model_info.h, read by `dbranch info`) computes from the
 * configuration alone, in every mode, for every family and SPEC §6 option
 * (router replay: the union of the experts is max(top_k, top_k_branch)), with
 * float32 and with bf16 decode weights (eval/decode_weights.h). */
static void check_cost_model(const char *spec, uint64_t seed) {
    model m;
    eval_test_model(&m, spec, seed);
    const int64_t P = 5;
    int32_t tokens[8];
    eval_test_tokens(tokens, 8, m.config.vocab_size, seed);
    model_info info;
    cr_assert_eq(model_info_compute(&m.config, P + 1, &info), DT_OK, "%s", dt_error_message());
    const double weights[2][3] = {
        {info.weight_bytes_baseline, info.weight_bytes_grouped, info.weight_bytes_ungrouped},
        {info.weight_bytes_bf16_baseline, info.weight_bytes_bf16_grouped, info.weight_bytes_bf16_ungrouped}};
    eval_decode_weights bf16;
    cr_assert(eval_decode_weights_init(&bf16, &m, DT_BF16) == DT_OK, "%s", dt_error_message());
    const double kv[3] = {info.kv_bytes_baseline, info.kv_bytes_grouped, info.kv_bytes_ungrouped};
    const int64_t experts[3] = {info.experts_baseline, info.experts_grouped, info.experts_ungrouped};
    const int has_branch = m.config.branch == BRANCH_DECODE;
    for (int i = 0; i < 6; i++) {
        const int w = i / 3; /* 0: float32 weights, 1: bf16 */
        eval_decode_session s;
        cr_assert(eval_decode_init(&s, &m, all_modes[i % 3], 0) == DT_OK);
        s.weights = w ? &bf16 : NULL;
        cr_assert(eval_decode_prefill(&s, tokens, P, NULL) == DT_OK);
        cr_assert(eval_decode_step(&s, tokens[P]) == DT_OK);
        const int j = has_branch ? i % 3 : 0; /* without a branch every mode is the baseline */
        cr_expect_eq(s.traffic.weight_bytes, weights[w][j], "%s %s %s: counted %.0f weight bytes, the cost model %.0f",
                     spec, eval_decode_mode_name(all_modes[i % 3]), eval_decode_weights_name(w ? DT_BF16 : DT_F32),
                     s.traffic.weight_bytes, weights[w][j]);
        cr_expect_eq(s.traffic.kv_read_bytes, kv[j], "%s %s: counted %.0f KV bytes, the cost model %.0f", spec,
                     eval_decode_mode_name(all_modes[i % 3]), s.traffic.kv_read_bytes, kv[j]);
        const int64_t applied_layers = m.config.n_layer * m.config.n_loop; /* SPEC §6.6: every application */
        cr_expect_eq(s.traffic.expert_loads, experts[j] * applied_layers, "%s %s: %lld expert loads vs %lld", spec,
                     eval_decode_mode_name(all_modes[i % 3]), (long long)s.traffic.expert_loads,
                     (long long)(experts[j] * applied_layers));
        eval_decode_free(&s);
    }
    eval_decode_weights_free(&bf16);
    model_free(&m);
}

Test(decode_traffic, counters_equal_the_cost_model) {
    const char *specs[] = {
        NANOGPT "branch=none",
        NANOGPT "branch=decode",
        NANOGPT "branch=decode share=off",
        LLAMA "branch=decode",
        LLAMA "branch=decode couple=off branch_emb=shared",
        MOE "branch=decode top_k=2 top_k_branch=2",
        MOE "branch=decode top_k=1 top_k_branch=3",
        MOE "branch=decode top_k=2 share=off",
        LLAMA "ffn=triplu ffn_prod_norm=1 branch=decode",
        NANOGPT "layer_heads=1,4 branch=decode",
        LLAMA "attn_res=block attn_res_blocks=2 attn_res_heads=2 branch=decode",
        MOE "ffn=prod4 top_k=2 branch=decode",
        LLAMA "n_loop=3",
        NANOGPT "n_loop=2 disco=1 disco_top=5",
        LLAMA "n_loop=3 disco=1 disco_top=0 disco_gate=learned",
        MOE "top_k=2 n_loop=2 disco=1 disco_gate=learned disco_top=7",
        MOE "ffn=triplu ffn_prod_norm=1 top_k=2 branch=decode", /* prod_norm rows read with the experts */
        NANOGPT "recurrent=1 branch=decode",
        LLAMA "recurrent=1 layer_heads=2,8 branch=decode share=off",
        MOE "recurrent=1 top_k=2 top_k_branch=1 branch=decode",
        NANOGPT "alibi=1 branch=decode", /* no pos_emb row to read */
        MOE "alibi=1 layer_heads=2,4 top_k=2 branch=decode",
        NANOGPT "tok_emb_tables=2", /* one more embedding row per step */
        LLAMA "tok_emb_tables=2",
        LLAMA "tok_emb_tables=2 tok_emb2_layer=1", /* the same row, read at block 1 */
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_cost_model(specs[i], 70 + i);
}

/* Traffic of one step at position P for each mode. */
static void step_traffic(const model *m, const int32_t *tokens, int64_t P, eval_decode_traffic out[3]) {
    for (int i = 0; i < 3; i++) {
        eval_decode_session s;
        cr_assert(eval_decode_init(&s, m, all_modes[i], 0) == DT_OK);
        cr_assert(eval_decode_prefill(&s, tokens, P, NULL) == DT_OK);
        cr_assert(eval_decode_step(&s, tokens[P]) == DT_OK);
        out[i] = s.traffic;
        eval_decode_free(&s);
    }
}

Test(decode_traffic, grouped_loads_shared_matrices_once) {
    model m;
    eval_test_model(&m, LLAMA "branch=decode", 21);
    int32_t tokens[8];
    eval_test_tokens(tokens, 8, m.config.vocab_size, 5);
    eval_decode_traffic tr[3];
    step_traffic(&m, tokens, 5, tr);
    const model_config *c = &m.config;
    int64_t C = c->d_model, kv = c->n_kv_head * (C / c->n_head);
    /* The branch row adds only its embedding row and the coupling vectors to what the primary reads. */
    const double coupling = (double)c->n_layer * (double)(C + c->d_ff + C); /* couple_q [H*hd = C], hidden, out */
    cr_expect_eq(tr[1].weight_bytes, tr[0].weight_bytes + 4.0 * ((double)C + coupling));
    cr_expect_eq(tr[1].matrix_loads, tr[0].matrix_loads);
    /* Un-grouped reads every shared matrix twice (all but Wk, Wv), and the cache twice. */
    cr_expect_eq(tr[2].matrix_loads, 2 * tr[0].matrix_loads - 2 * c->n_layer);
    cr_expect_eq(tr[0].kv_read_bytes, (double)(c->n_layer * 2 * 6 * kv * 4));
    cr_expect_eq(tr[1].kv_read_bytes, tr[0].kv_read_bytes);
    cr_expect_eq(tr[2].kv_read_bytes, 2 * tr[0].kv_read_bytes);
    model_free(&m);
}

Test(decode_traffic, share_off_stacks_only_the_head) {
    model m;
    eval_test_model(&m, LLAMA "branch=decode share=off", 22);
    int32_t tokens[8];
    eval_test_tokens(tokens, 8, m.config.vocab_size, 6);
    eval_decode_traffic tr[3];
    step_traffic(&m, tokens, 5, tr);
    /* per layer the branch has its own wq, wo, w1, w3, w2; only the LM head is shared */
    cr_expect_eq(tr[1].matrix_loads, tr[0].matrix_loads + 5 * m.config.n_layer);
    cr_expect_eq(tr[2].matrix_loads, tr[1].matrix_loads + 1);
    model_free(&m);
}

/* Experts run per step: the union of both rows' sets when grouped. */
static void check_expert_union(const char *spec, uint64_t seed) {
    model m;
    eval_test_model(&m, spec, seed);
    const model_config *c = &m.config;
    int32_t tokens[8];
    eval_test_tokens(tokens, 8, c->vocab_size, seed);
    eval_decode_traffic tr[3];
    step_traffic(&m, tokens, 5, tr);
    int64_t union_size = c->top_k > c->top_k_branch ? c->top_k : c->top_k_branch; /* replay: nested sets */
    cr_expect_eq(tr[0].expert_loads, c->n_layer * c->top_k);
    if (c->branch_routing == ROUTING_REPLAY && c->share) cr_expect_eq(tr[1].expert_loads, c->n_layer * union_size);
    cr_expect_leq(tr[1].expert_loads, c->n_layer * (c->top_k + c->top_k_branch));
    cr_expect_geq(tr[1].expert_loads, c->n_layer * union_size);
    cr_expect_eq(tr[2].expert_loads, c->n_layer * (c->top_k + c->top_k_branch));
    model_free(&m);
}

Test(decode_traffic, moe_replay_union) { check_expert_union(MOE "branch=decode top_k=2 top_k_branch=2", 31); }
Test(decode_traffic, moe_replay_superset_union) { check_expert_union(MOE "branch=decode top_k=1 top_k_branch=3", 32); }
Test(decode_traffic, moe_own_union) {
    check_expert_union(MOE "branch=decode branch_routing=own top_k=2 top_k_branch=2", 33);
}

/* ---- bad use ------------------------------------------------------------- */

Test(decode_errors, bad_tokens_and_positions) {
    model m;
    eval_test_model(&m, LLAMA "branch=decode", 41);
    eval_decode_session s;
    cr_assert(eval_decode_init(&s, &m, EVAL_DECODE_GROUPED, 4) == DT_OK);
    cr_expect_eq(eval_decode_step(&s, 1), DT_ERR, "step before any prefill");
    int32_t tokens[13] = {0};
    cr_expect_eq(eval_decode_prefill(&s, tokens, 0, NULL), DT_ERR);
    cr_expect_eq(eval_decode_prefill(&s, tokens, 5, NULL), DT_ERR, "longer than max_prompt");
    tokens[2] = (int32_t)m.config.vocab_size;
    cr_expect_eq(eval_decode_prefill(&s, tokens, 3, NULL), DT_ERR);
    cr_expect(strstr(dt_error_message(), "vocabulary") != NULL, "%s", dt_error_message());
    tokens[2] = 1;
    cr_assert(eval_decode_prefill(&s, tokens, 4, NULL) == DT_OK);
    cr_expect_eq(eval_decode_step(&s, -1), DT_ERR);
    for (int64_t t = 4; t < m.config.block_size; t++)
        cr_assert(eval_decode_step(&s, 2) == DT_OK);
    cr_expect_eq(eval_decode_step(&s, 2), DT_ERR, "cache full");
    cr_expect(strstr(dt_error_message(), "context full") != NULL, "%s", dt_error_message());
    eval_decode_free(&s);
    cr_expect_eq(eval_decode_init(&s, &m, EVAL_DECODE_GROUPED, m.config.block_size + 1), DT_ERR);
    model_free(&m);
}
