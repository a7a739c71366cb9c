/* Differentiable ops. Each returns a new arena tensor (or NULL on error, see
 * tape.h) and, when an input requires a gradient, records its backward.
 * "[..., C]" means any leading dims, flattened to rows. */
#ifndef AG_OPS_H
#define AG_OPS_H

#include "autograd/tape.h"

/* ---- linear algebra ---- */
/* x [..., K], weight [N, K], bias [N] or NULL -> [..., N] */
dt_tensor *ag_linear(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* Fused forms that keep less and pass over memory fewer times.
 * gelu(x W^T + b): the MLP's first map and its activation (the pre-activation
 * is kept for the backward, not a separate linear output). */
dt_tensor *ag_linear_gelu(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* residual + (x W^T + b), the same numbers as ag_add(residual, ag_linear(x,
 * weight, bias)) bit for bit, without keeping the linear output:
 * residual [..., N], x [..., K] with the same leading dims. */
dt_tensor *ag_linear_residual(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* The whole GPT-2 MLP on the residual stream: residual + proj(gelu(fc(x))),
 * the same numbers as ag_linear_residual(residual, ag_linear_gelu(x, fc,
 * fc_bias), proj, proj_bias) bit for bit. Keeps only the pre-activation
 * [..., F]: the backward recomputes the GELU output instead of storing it (one
 * [..., F] activation less per layer). fc [F, C], proj [C, F]. */
dt_tensor *ag_mlp_gelu(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *fc, dt_tensor *fc_bias,
                       dt_tensor *proj, dt_tensor *proj_bias);
/* The decode branch's coupled maps (SPEC §2: q2, z2, m2) in one op:
 *     out = [residual +] act(x W^T + b) + coupled ⊙ couple
 * act = GELU when gelu, else identity; residual [..., N] may be NULL;
 * coupled [..., N] and couple [N] may both be NULL. Keeps no intermediate but
 * the GELU's pre-activation. */
dt_tensor *ag_linear_coupled(ag_ctx *ctx, dt_tensor *residual, dt_tensor *x, dt_tensor *weight, dt_tensor *bias,
                             int gelu, dt_tensor *coupled, dt_tensor *couple);
/* For an input of several bf16 products (the normed x that q, k and v read;
 * each product's x is read again by its d_W): under bf16 products, x is
 * rounded to bf16 once, into tape scratch, and the copy kept on x (x->bf16),
 * which every linear op above then reads instead of rounding x itself,
 * forward and backward. The same bits as without it. x must not be written
 * afterwards (an op's output that is only read). Returns x; a no-op under
 * float32 products, for a heap tensor (a caller's, which may change between
 * steps), for NULL, and when scratch runs out (then each product rounds x). */
dt_tensor *ag_bf16_operand(ag_ctx *ctx, dt_tensor *x);

/* ---- elementwise ---- */
dt_tensor *ag_add(ag_ctx *ctx, dt_tensor *a, dt_tensor *b); /* same shapes */
dt_tensor *ag_mul(ag_ctx *ctx, dt_tensor *a, dt_tensor *b); /* same shapes */
dt_tensor *ag_scale(ag_ctx *ctx, dt_tensor *a, float s);
dt_tensor *ag_add_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *v);                   /* x [..., C] + v [C] */
dt_tensor *ag_mul_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *v);                   /* x [..., C] * v [C] */
dt_tensor *ag_add_mul_vec(ag_ctx *ctx, dt_tensor *x, dt_tensor *y, dt_tensor *v); /* x + y ⊙ v; x, y [..., C], v [C] */
dt_tensor *ag_scale_rows(ag_ctx *ctx, dt_tensor *x, dt_tensor *s);                /* x [M, C] * s [M] per row */
dt_tensor *ag_clip(ag_ctx *ctx, dt_tensor *x, float lo, float hi);                /* no gradient outside [lo, hi] */
/* log(exp a + exp b), elementwise, stable */
dt_tensor *ag_logsumexp2(ag_ctx *ctx, dt_tensor *a, dt_tensor *b);

/* ---- reductions ---- */
dt_tensor *ag_sum(ag_ctx *ctx, dt_tensor *x);  /* -> [1] */
dt_tensor *ag_mean(ag_ctx *ctx, dt_tensor *x); /* -> [1] */

/* ---- shape ---- */
/* Same data, new shape of equal size (gradient flows back unchanged). */
dt_tensor *ag_reshape(ag_ctx *ctx, dt_tensor *x, int ndim, const int64_t *shape);
/* a [..., Ca], b [..., Cb] (same leading dims) -> [..., Ca + Cb] */
dt_tensor *ag_concat_last(ag_ctx *ctx, dt_tensor *a, dt_tensor *b);
/* x [..., C] -> columns [start, start + width) as [..., width] */
dt_tensor *ag_slice_last(ag_ctx *ctx, dt_tensor *x, int64_t start, int64_t width);
/* Alias with no gradient: the value, treated as a constant. */
dt_tensor *ag_detach(ag_ctx *ctx, dt_tensor *x);

/* ---- indexing (embeddings, MoE dispatch and combine) ---- */
/* weight [V, C], tokens int32 [...] -> [..., C]; token ids are checked against V */
dt_tensor *ag_embedding(ag_ctx *ctx, dt_tensor *weight, dt_tensor *tokens);
/* weight[tokens] + pos_weight[positions] in one op, the same numbers as
 * ag_add of the two lookups: tokens, positions int32 of one shape [...]. */
dt_tensor *ag_embedding_pos(ag_ctx *ctx, dt_tensor *weight, dt_tensor *tokens, dt_tensor *pos_weight,
                            dt_tensor *positions);
/* x [N, C], idx int32 [M] -> [M, C] = x[idx] */
dt_tensor *ag_gather_rows(ag_ctx *ctx, dt_tensor *x, dt_tensor *idx);
/* src [M, C], idx int32 [M] -> [n_rows, C] with out[idx[m]] += src[m] */
dt_tensor *ag_scatter_add_rows(ag_ctx *ctx, dt_tensor *src, dt_tensor *idx, int64_t n_rows);
/* x [M, N], idx int32 [M, k] -> [M, k] = x[m, idx[m, j]] */
dt_tensor *ag_gather_cols(ag_ctx *ctx, dt_tensor *x, dt_tensor *idx);

/* ---- normalisation and activations ---- */
dt_tensor *ag_layernorm(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias, float eps);
dt_tensor *ag_rmsnorm(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, float eps);
dt_tensor *ag_gelu(ag_ctx *ctx, dt_tensor *x);
dt_tensor *ag_silu(ag_ctx *ctx, dt_tensor *x);
dt_tensor *ag_swiglu(ag_ctx *ctx, dt_tensor *gate, dt_tensor *up); /* silu(gate) * up */
dt_tensor *ag_softmax(ag_ctx *ctx, dt_tensor *x);                  /* over the last dim */
dt_tensor *ag_log_softmax(ag_ctx *ctx, dt_tensor *x);              /* over the last dim */

/* ---- attention ---- */
/* x [B, T, n_head*head_dim] rotated at positions 0..T-1 (interleaved pairs, SPEC §1). */
dt_tensor *ag_rope(ag_ctx *ctx, dt_tensor *x, int64_t n_head, double theta);
/* Causal GQA attention: q [B, T, H*hd]; k, v [B, T, Hkv*hd] -> [B, T, H*hd].
 * q may come from another path than k and v (the decode branch). */
dt_tensor *ag_attention(ag_ctx *ctx, dt_tensor *q, dt_tensor *k, dt_tensor *v, int64_t n_head, int64_t n_kv_head);
/* The same with ALiBi's bias (SPEC §6.4): -(t - s) * slopes[h] on the score of
 * query head h at t for the key at s; slopes [n_head] (copied), NULL: none. */
dt_tensor *ag_attention_biased(ag_ctx *ctx, dt_tensor *q, dt_tensor *k, dt_tensor *v, int64_t n_head, int64_t n_kv_head,
                               const float *slopes);

/* ---- losses ---- */
/* logits [..., V], targets int32 [...] -> per-row losses [rows] */
dt_tensor *ag_cross_entropy(ag_ctx *ctx, dt_tensor *logits, dt_tensor *targets);
/* Mixture readout NLL per row (kernels/mixture.h): logits_p, logits_q [..., V],
 * targets [...] -> nll [rows]; writes alpha [rows] into *alpha_out when
 * non-NULL (a constant tensor). detach_primary: no gradient to logits_p.
 * alpha_detach: no gradient through alpha. */
dt_tensor *ag_mixture_nll(ag_ctx *ctx, dt_tensor *logits_p, dt_tensor *logits_q, dt_tensor *targets, float alpha_min,
                          float alpha_max, int detach_primary, int alpha_detach, dt_tensor **alpha_out);
/* The same, also writing each row's cross-entropies -log p(y) and -log q(y)
 * [rows] into *ce_p_out, *ce_q_out when non-NULL (constants, from the same
 * pass over the logits: the reported per-path losses without another one). */
dt_tensor *ag_mixture_nll_ce(ag_ctx *ctx, dt_tensor *logits_p, dt_tensor *logits_q, dt_tensor *targets, float alpha_min,
                             float alpha_max, int detach_primary, int alpha_detach, dt_tensor **alpha_out,
                             dt_tensor **ce_p_out, dt_tensor **ce_q_out);
/* Switch load-balancing term: router_logits [N, E], assignment fractions f [E]
 * (constants) -> [1] = E * sum_e f_e * mean_n softmax(router_logits[n])_e */
dt_tensor *ag_moe_balance(ag_ctx *ctx, dt_tensor *router_logits, const float *fractions);
/* The same term, also exposing what a data-parallel step needs to make the
 * balance that of the whole batch when each thread sees only its rows:
 * *fractions_read points at the op's own copy of f [E], the one its backward
 * reads (overwrite it with the whole batch's f between forward and backward);
 * mean_probs [E] (NULL: not wanted) gets mean_n softmax(router_logits[n]). */
dt_tensor *ag_moe_balance_ex(ag_ctx *ctx, dt_tensor *router_logits, const float *fractions, float **fractions_read,
                             float *mean_probs);

/* ---- DiscoLoop (SPEC §6.6, autograd/ops_disco.c) ---- */
/* x [M, N] -> [M, N]: softmax over each row's `top` largest entries (ties:
 * lower index first; top >= N: all), zero elsewhere. The kept set is a
 * constant: the gradient flows through the kept probabilities only. */
dt_tensor *ag_topk_softmax(ag_ctx *ctx, dt_tensor *x, int64_t top);
/* p [M, N] (a distribution per row), table [N, C] -> [M, C] = p · table: the
 * expected row of the table (no transpose, unlike ag_linear). */
dt_tensor *ag_expected_rows(ag_ctx *ctx, dt_tensor *p, dt_tensor *table);
/* x [M, C], weight [C], bias [1] -> [M] = sigmoid(x · weight + bias): one gate per row. */
dt_tensor *ag_sigmoid_gate(ag_ctx *ctx, dt_tensor *x, dt_tensor *weight, dt_tensor *bias);

#endif
