#!/usr/bin/env python3
# Independent float64 implementation of SPEC §6.5 (latent feedback, the
# full-bandwidth transformer), written from the SPEC text only, on top of the
# §1-§6.4 model code of spec_reference.py (imported, not copied). It writes
# held-out reference files for feedback models in the SPEC §5 layout with the
# §6.5 /ref attributes (passes, feedback_lambda, loss_passes), so
# `dbranch check-reference` is checked against a second implementation.
#
# The math, as SPEC §6.5 states it:
#   e_t = tok_emb[x_t] (+ pos_emb[t])
#   F(u): the model of §1 run on input vectors u; returns logits and the top
#         state h_t = Norm_f(h_L)_t (the vector that multiplies W_out)
#   pass 1: h^(1) = F(e)
#   pass k: u_0 = e_0, u_t = RMSNorm_in((h^(k-1)_{t-1} W_u^T) * sigmoid(RMSNorm_tok(e_t) W_g^T))
#   objective: CE(1) + lambda/(K-1) sum_{k=2..K} CE(k) (+ aux_loss_coef * aux,
#              aux the mean over every application of every MoE layer, K*L terms)
#   /ref/logits_primary: pass K's logits; /ref/loss_primary: CE(pass K)
# Gradients are central finite differences in float64 (step 1e-6), as in
# spec_reference.py.
#
# Usage (needs python3-numpy and python3-h5py):
#   spec_reference_feedback.py write OUTDIR [NAME...]   write the feedback held-out files
#   spec_reference_feedback.py verify FILE.h5...         recompute files (the shipped
#                                                      12_llama_feedback.h5 too)
import os
import sys

import numpy as np
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_reference as sr  # noqa: E402  (the §1-§6.4 model)

FEEDBACK_NAMES = ("feedback.w_u.weight", "feedback.w_g.weight",
                  "feedback.norm_tok.weight", "feedback.norm_in.weight")


def feedback_config(cfg):
    """A complete config with feedback = 1. spec_reference.py refuses
    feedback, so the rest is completed (and checked) with it off; §6 then
    allows feedback with no branch, no attn_res, no recurrent, no loop."""
    c = sr.complete_config(dict(cfg, feedback=0))
    assert c["branch"] == "none" and c["attn_res"] == "off"
    assert not c["recurrent"] and c["n_loop"] == 1
    c["feedback"] = 1
    return c


def without_feedback(c):
    return dict(c, feedback=0)


def shapes(c):
    s = sr.param_shapes(without_feedback(c))
    C = c["d_model"]
    s.update({FEEDBACK_NAMES[0]: (C, C), FEEDBACK_NAMES[1]: (C, C),
              FEEDBACK_NAMES[2]: (C,), FEEDBACK_NAMES[3]: (C,)})
    return s


def random_params(c, rng, emb_scale):
    P = sr.init_params(without_feedback(c), rng, emb_scale)
    C = c["d_model"]
    # matrices ~ N(0, 1/C) so the gate is neither saturated nor flat; norm
    # weights near one (as spec_reference.py draws its norms)
    for name in FEEDBACK_NAMES:
        if name.endswith("norm_tok.weight") or name.endswith("norm_in.weight"):
            a = 1.0 + 0.1 * rng.standard_normal((C,))
        else:
            a = rng.standard_normal((C, C)) / np.sqrt(C)
        P[name] = a.astype(np.float32).astype(np.float64)
    return P


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def model_on_inputs(c, P, u):
    """F(u): the §1 stack on input vectors u [B,T,C] -> (logits, top state,
    the aux term of each MoE layer of this application)."""
    L = c["n_layer"]
    saved = [dict() for _ in range(L)]

    def attn_fn(l, x):
        return sr.attn_primary(c, P, l, x, saved[l])

    def ffn_fn(l, a):
        z1, m1, rl = sr.ffn_primary(c, P, l, a)
        saved[l]["rl"] = rl
        return m1

    hL = sr.run_stack(c, P, u, attn_fn, ffn_fn)
    top = sr.norm(c, P, "final_norm", hL)
    w_out = P["tok_emb.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    auxes = []
    if c["family"] == "moe":
        auxes = [sr.switch_aux(c, st["rl"].reshape(-1, c["n_expert"])) for st in saved]
    return top @ w_out.T, top, auxes


def fuse(c, P, top_prev, e):
    """u_0 = e_0; u_t = RMSNorm_in((h_{t-1} W_u^T) * sigmoid(RMSNorm_tok(e_t) W_g^T))."""
    eps = c["norm_eps"]
    gate = sigmoid(sr.rmsnorm(e, P["feedback.norm_tok.weight"], eps) @ P["feedback.w_g.weight"].T)
    carried = top_prev @ P["feedback.w_u.weight"].T
    u = np.empty_like(e)
    u[:, 0] = e[:, 0]
    u[:, 1:] = sr.rmsnorm(carried[:, :-1] * gate[:, 1:], P["feedback.norm_in.weight"], eps)
    return u


def cross_entropy(logits, y):
    return float(-np.take_along_axis(sr.log_softmax(logits), y[..., None], -1).mean())


def evaluate(c, P, tokens_all, K, lam):
    x, y = tokens_all[:, :-1], tokens_all[:, 1:]
    e = sr.embed(c, P, P["tok_emb.weight"], x)
    ces, auxes, top, logits = [], [], None, None
    for k in range(1, K + 1):
        u = e if k == 1 else fuse(c, P, top, e)
        logits, top, aux_k = model_on_inputs(c, P, u)
        ces.append(cross_entropy(logits, y))
        auxes += aux_k
    loss = ces[0] + (lam / (K - 1) * sum(ces[1:]) if K > 1 else 0.0)
    out = {"logits_primary": logits, "loss_primary": ces[-1], "loss_passes": np.array(ces)}
    if c["family"] == "moe":
        assert len(auxes) == K * c["n_layer"]
        out["aux"] = float(np.mean(auxes))
        loss += c["aux_loss_coef"] * out["aux"]
    out["loss"] = loss
    return out


def finite_difference_grads(c, P, tokens, K, lam, step=1e-6):
    """Central differences of the K-pass objective for every parameter element."""
    def loss_shifted(flat, i, delta):
        old = flat[i]
        flat[i] = old + delta
        try:
            return evaluate(c, P, tokens, K, lam)["loss"]
        finally:
            flat[i] = old

    G = {}
    for name, arr in P.items():
        flat = arr.reshape(-1)
        G[name] = np.array([(loss_shifted(flat, i, step) - loss_shifted(flat, i, -step)) / (2 * step)
                            for i in range(flat.size)]).reshape(arr.shape)
    return G


def write(path, c, P, tokens, K, lam):
    res = evaluate(c, P, tokens, K, lam)
    G = finite_difference_grads(c, P, tokens, K, lam)
    sr.write_reference(path, c, P, tokens, res, G)
    with h5py.File(path, "a") as f:
        f["ref"].attrs["passes"] = np.int64(K)
        f["ref"].attrs["feedback_lambda"] = np.float64(lam)
        f["ref"].attrs["loss_passes"] = res["loss_passes"].astype(np.float64)
        f["ref"].attrs["generator"] = "tests/tools/spec_reference_feedback.py"
    print("%s: loss %.6f  passes %s" % (path, res["loss"], np.round(res["loss_passes"], 6)))
    sys.stdout.flush()


def cases():
    nano = dict(family="nanogpt", vocab_size=16, block_size=8, n_layer=2, n_head=2, d_model=8)
    llama = dict(family="llama", vocab_size=16, block_size=8, n_layer=2, n_head=2, n_kv_head=1,
                 d_model=8, d_ff=12)
    moe = dict(family="moe", vocab_size=16, block_size=8, n_layer=2, n_head=2, n_kv_head=1,
               d_model=8, d_ff=6, n_expert=4, top_k=2)
    B, T = 2, 6
    # (name, config, B, T, K, lambda)
    return [
        ("llama_feedback_k2", llama, B, T, 2, 1.0),
        ("nanogpt_feedback_k3", nano, B, T, 3, 1.0),
        ("moe_feedback_k2_aux", dict(moe, aux_loss_coef=0.5), B, T, 2, 1.0),
        ("llama_feedback_k3_lambda_triplu_prism", dict(llama, ffn="triplu", d_model=16, n_head=4,
                                                       n_kv_head=2, layer_heads="2,4"), B, T, 3, 0.4),
    ]


def write_all(outdir, only=None):
    os.makedirs(outdir, exist_ok=True)
    for i, (name, cfg, B, T, K, lam) in enumerate(cases()):
        if only and name not in only:
            continue
        c = feedback_config(cfg)
        rng = np.random.default_rng(3000 + i)
        P = random_params(c, rng, 1.5 * np.sqrt(8.0 / c["d_model"]))
        tokens = rng.integers(0, c["vocab_size"], size=(B, T + 1))
        write(os.path.join(outdir, name + ".h5"), c, P, tokens, K, lam)


def verify(path):
    with h5py.File(path, "r") as f:
        c = dict(sr.DEFAULTS)
        c.update(sr.read_config(f["config"]))
        P = {k: f["params"][k][()].astype(np.float64) for k in f["params"]}
        tokens = f["ref/tokens"][()].astype(np.int64)
        K, lam = int(f["ref"].attrs["passes"]), float(f["ref"].attrs["feedback_lambda"])
        ref = {k: f["ref"][k][()] for k in f["ref"] if k not in ("grads", "tokens")}
        ref_passes = f["ref"].attrs.get("loss_passes")
        ref_grads = {n: f["ref/grads"][n][()] for n in f["ref/grads"]}
    assert set(P) == set(shapes(c)), "parameter names differ"
    res = evaluate(c, P, tokens, K, lam)
    ok = True
    for k in ("loss", "loss_primary", "aux"):
        if k in ref:
            d = abs(res[k] - float(ref[k]))
            print("  %-14s |diff| %.2e" % (k, d))
            ok &= d < 1e-9
    d = np.abs(res["logits_primary"] - ref["logits_primary"]).max()
    print("  logits_primary max |diff| %.2e" % d)
    ok &= d < 1e-8
    if ref_passes is not None:
        d = np.abs(res["loss_passes"] - ref_passes).max()
        print("  loss_passes    max |diff| %.2e" % d)
        ok &= d < 1e-9
    G = finite_difference_grads(c, P, tokens, K, lam)
    gmax = max(np.abs(v).max() for v in ref_grads.values())
    worst = max(np.abs(G[n] - g).max() / max(np.abs(g).max(), 0.1 * gmax) for n, g in ref_grads.items())
    print("  grads worst rel diff %.2e" % worst)
    ok &= worst < 1e-5 and set(G) == set(ref_grads)
    print("%s: %s" % (path, "MATCH" if ok else "MISMATCH"))
    return ok


def main(argv):
    if len(argv) >= 3 and argv[1] == "write":
        write_all(argv[2], set(argv[3:]) or None)
        return 0
    if len(argv) >= 3 and argv[1] == "verify":
        return 0 if all([verify(p) for p in argv[2:]]) else 1
    print("usage: spec_reference_feedback.py write OUTDIR [NAME...] | verify FILE.h5...")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
