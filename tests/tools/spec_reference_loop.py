#!/usr/bin/env python3
# SPEC §6.6 (looped stack, DiscoLoop) on top of tests/tools/spec_reference.py:
# an independent float64 implementation written from the SPEC text only (not
# from the C code), writing held-out reference files in the SPEC §5 layout.
#
# spec_reference.py holds the model of §1-§6.4 and refuses n_loop / disco;
# this file imports it unchanged and replaces three of its functions for the
# process it runs in: check_options (accepts n_loop > 1 and disco under the
# §6 combination rules), param_shapes (adds disco.norm.weight, and
# disco.gate.weight / disco.gate.bias for disco_gate = learned) and primary
# (the looped stack). Everything else -- the blocks, the head, the MoE balance
# term, finite-difference gradients, the file layout -- is the imported code.
#
#   n_loop = K: H~(0) = embeddings, H(k) = Blocks(H~(k-1)), logits = head(H(K));
#   each application has its own K/V (the blocks recompute them from their input).
#   disco = 1, between applications k < K:
#     p   = softmax(head(H(k)) / disco_tau) kept at its disco_top largest
#           entries (ties: lower index first; 0: all V) and renormalised
#     Phi = p W_out;  H~(k) = H(k) + a * RMSNorm(Phi; disco.norm.weight)
#     a   = disco_alpha, or sigmoid(H(k)_t . disco.gate.weight + disco.gate.bias)
#   MoE: aux is the mean over every application of every MoE layer (K*L terms).
#
# Usage (needs python3-numpy and python3-h5py):
#   spec_reference_loop.py verify [--sample=N] FILE.h5...
#   spec_reference_loop.py options OUTDIR [NAME...]   (tests/reference/options_heldout)
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_reference as sr  # noqa: E402

_check_options = sr.check_options
_param_shapes = sr.param_shapes


def check_options(c):
    """SPEC §6: n_loop > 1 excludes attn_res, recurrent, feedback and the
    decode branch; disco needs n_loop > 1; the disco_* keys qualify disco."""
    K = c["n_loop"]
    assert K >= 1, "n_loop"
    if K > 1:
        assert c["attn_res"] == "off" and not c["recurrent"] and not c["feedback"], "n_loop exclusive"
        assert c["branch"] != "decode", "n_loop with branch = decode"
    assert not c["disco"] or K > 1, "disco needs n_loop > 1"
    assert c["disco_tau"] > 0 and 0 <= c["disco_alpha"] <= 1 and c["disco_top"] >= 0
    assert c["disco_gate"] in ("fixed", "learned")
    if c["disco_gate"] == "learned":
        assert 0 < c["disco_alpha"] < 1, "logit(disco_alpha)"
    rest = dict(c, n_loop=1, disco=0)
    _check_options(rest)


def param_shapes(c):
    s = _param_shapes(c)
    if c["disco"]:
        C = c["d_model"]
        s["disco.norm.weight"] = (C,)
        if c["disco_gate"] == "learned":
            s["disco.gate.weight"] = (C,)
            s["disco.gate.bias"] = (1,)
    return s


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def disco(c, P, h):
    """H~ = H + a * RMSNorm_d(p W_out) with p the kept, renormalised softmax."""
    W = P["tok_emb.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    V = c["vocab_size"]
    logits = sr.head(c, P, h) / c["disco_tau"]
    top = V if c["disco_top"] == 0 else min(c["disco_top"], V)
    kept = sr.topk_indices(logits, top)                      # ties: lower index first
    p = np.zeros_like(logits)
    np.put_along_axis(p, kept, sr.softmax(np.take_along_axis(logits, kept, -1)), -1)
    phi = p @ W                                              # [B,T,C]
    injected = sr.rmsnorm(phi, P["disco.norm.weight"], c["norm_eps"])
    if c["disco_gate"] == "learned":
        a = sigmoid(h @ P["disco.gate.weight"] + P["disco.gate.bias"][0])[..., None]
    else:
        a = c["disco_alpha"]
    return h + a * injected


def primary(c, P, tokens):
    """SPEC §1 with §6.1-6.2 and §6.6: the stack applied n_loop times with the
    same weights. Returns logits, the last application's saved states and
    the aux values of every application of every MoE layer."""
    L, K = c["n_layer"], c["n_loop"]
    h = sr.embed(c, P, P["tok_emb.weight"], tokens)
    auxes = []
    saved = None
    for k in range(K):
        saved = [dict() for _ in range(L)]

        def ffn_fn(l, a, saved=saved):
            z1, m1, rl = sr.ffn_primary(c, P, l, a)
            saved[l].update(z1=z1, m1=m1, rl=rl)
            return m1

        h = sr.run_stack(c, P, h, lambda l, x, saved=saved: sr.attn_primary(c, P, l, x, saved[l]), ffn_fn)
        if c["family"] == "moe":
            auxes += [sr.switch_aux(c, st["rl"].reshape(-1, c["n_expert"])) for st in saved]
        if k + 1 < K and c["disco"]:
            h = disco(c, P, h)
    return sr.head(c, P, h), saved, auxes


sr.check_options = check_options
sr.param_shapes = param_shapes
sr.primary = primary


def options_cases():
    """Held-out §6.6 files: a plain loop, DiscoLoop with the learned gate and
    top-k, with disco_top = 0 (all V), and MoE with loops (aux over K*L)."""
    nano = dict(family="nanogpt", vocab_size=16, block_size=8, n_layer=2,
                n_head=2, d_model=8)
    llama = dict(family="llama", vocab_size=16, block_size=8, n_layer=2,
                 n_head=2, n_kv_head=1, d_model=8, d_ff=12)
    moe = dict(family="moe", vocab_size=16, block_size=8, n_layer=2,
               n_head=2, n_kv_head=1, d_model=8, d_ff=6, n_expert=4, top_k=2)
    B, T = 2, 6
    return [
        ("llama_loop3", dict(llama, n_loop=3), B, T),
        ("nanogpt_disco_learned_top5", dict(nano, n_loop=2, disco=1, disco_gate="learned",
                                            disco_alpha=0.3, disco_tau=0.7, disco_top=5), B, T),
        ("llama_disco_top0_loop3", dict(llama, n_loop=3, disco=1, disco_top=0, disco_tau=1.5,
                                        disco_alpha=0.6), B, T),
        ("moe_loop2_aux", dict(moe, n_loop=2, aux_loss_coef=0.5), B, T),
        ("moe_disco_learned_loop3", dict(moe, n_loop=3, disco=1, disco_gate="learned",
                                         disco_top=3, aux_loss_coef=0.3, n_layer=1), B, T),
        ("llama_disco_tied_top64", dict(llama, n_loop=2, disco=1, disco_top=64,
                                        tie_embeddings=1, n_layer=1), B, T),
    ]


def main(argv):
    if len(argv) >= 3 and argv[1] == "verify":
        sample = 0
        if argv[2].startswith("--sample="):
            sample = int(argv[2].split("=")[1])
            argv = argv[:2] + argv[3:]
        return 0 if all([sr.verify(p, sample) for p in argv[2:]]) else 1
    if len(argv) >= 3 and argv[1] == "options":
        sr.write_set(argv[2], options_cases(), 6600, set(argv[3:]) or None, scale_emb=True)
        return 0
    print("usage: spec_reference_loop.py verify [--sample=N] FILE... | options OUTDIR [NAME...]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
