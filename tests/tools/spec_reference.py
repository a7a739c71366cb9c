#!/usr/bin/env python3
# Independent float64 implementation of docs/SPEC.md (written from the SPEC
# text only, not from the C code) that writes reference files in the SPEC §5
# layout. It exists to produce held-out reference files for the ablation
# switches the shipped files do not cover, so `dbranch check-reference` can be
# checked against a second implementation. Gradients are central finite
# differences in float64 (step 1e-6, error ~1e-8): numpy has no autograd, and a
# derivative-free check cannot share a mistake with hand-written backward code.
#
# Usage (needs python3-numpy and python3-h5py):
#   spec_reference.py verify FILE.h5...   recompute a reference file, compare
#   spec_reference.py heldout OUTDIR      write the held-out set (tests/reference/heldout)
import sys
import math
import itertools

import numpy as np
import h5py

# ---------------------------------------------------------------- config

DEFAULTS = dict(
    family="nanogpt", vocab_size=16, block_size=8, n_layer=1, n_head=2,
    n_kv_head=0, d_model=8, d_ff=0, n_expert=0, top_k=0, top_k_branch=0,
    branch="none", branch_routing="replay", mix_alpha_min=0.5,
    mix_alpha_max=1.0, aux_loss_coef=0.01, tie_embeddings=None,
    norm_eps=1e-5, rope_theta=10000.0, couple="on", share="on",
    branch_emb="own", detach_primary=0, alpha_detach=0,
)
INT_KEYS = {"vocab_size", "block_size", "n_layer", "n_head", "n_kv_head",
            "d_model", "d_ff", "n_expert", "top_k", "top_k_branch",
            "tie_embeddings", "detach_primary", "alpha_detach"}
REAL_KEYS = {"mix_alpha_min", "mix_alpha_max", "aux_loss_coef", "norm_eps",
             "rope_theta"}


def complete_config(cfg):
    """Fill derived/neutral values the way SPEC §4 says a checkpoint holds them."""
    c = dict(DEFAULTS)
    c.update(cfg)
    C = c["d_model"]
    if c["tie_embeddings"] is None:
        c["tie_embeddings"] = 1 if c["family"] == "nanogpt" else 0
    if c["family"] == "nanogpt":
        c["n_kv_head"] = c["n_head"]
        c["d_ff"] = 4 * C
    else:
        if c["n_kv_head"] == 0:
            c["n_kv_head"] = c["n_head"]
        if c["d_ff"] == 0:
            c["d_ff"] = 32 * math.ceil((2 * 4 * C / 3) / 32)
    if c["family"] != "moe":
        c["n_expert"] = c["top_k"] = c["top_k_branch"] = 0
    elif c["top_k_branch"] == 0:
        c["top_k_branch"] = c["top_k"]
    return c


def read_config(group):
    c = {}
    for k, v in group.attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        if k in INT_KEYS:
            v = int(v)
        elif k in REAL_KEYS:
            v = float(v)
        elif not isinstance(v, str):
            v = v.item() if hasattr(v, "item") else v
        c[k] = v
    return c


# ---------------------------------------------------------------- parameters

def param_shapes(c):
    """SPEC §3 names and shapes, in a fixed order."""
    V, C, L = c["vocab_size"], c["d_model"], c["n_layer"]
    H, Hkv, F, E = c["n_head"], c["n_kv_head"], c["d_ff"], c["n_expert"]
    hd = C // H
    nano = c["family"] == "nanogpt"
    moe = c["family"] == "moe"
    branch = c["branch"] == "decode"
    s = {"tok_emb.weight": (V, C)}
    if nano:
        s["pos_emb.weight"] = (c["block_size"], C)

    def attn_q_o(prefix):
        s[prefix + "attn.wq.weight"] = (H * hd, C)
        if nano:
            s[prefix + "attn.wq.bias"] = (H * hd,)
        s[prefix + "attn.wo.weight"] = (C, H * hd)
        if nano:
            s[prefix + "attn.wo.bias"] = (C,)

    def ffn(prefix):
        if nano:
            s[prefix + "mlp.fc.weight"] = (4 * C, C)
            s[prefix + "mlp.fc.bias"] = (4 * C,)
            s[prefix + "mlp.proj.weight"] = (C, 4 * C)
            s[prefix + "mlp.proj.bias"] = (C,)
        elif moe:
            s[prefix + "moe.router.weight"] = (E, C)
            s[prefix + "moe.w1.weight"] = (E, F, C)
            s[prefix + "moe.w3.weight"] = (E, F, C)
            s[prefix + "moe.w2.weight"] = (E, C, F)
        else:
            s[prefix + "mlp.w1.weight"] = (F, C)
            s[prefix + "mlp.w3.weight"] = (F, C)
            s[prefix + "mlp.w2.weight"] = (C, F)

    for l in range(L):
        p = "layers.%d." % l
        s[p + "attn_norm.weight"] = (C,)
        if nano:
            s[p + "attn_norm.bias"] = (C,)
        attn_q_o(p)
        s[p + "attn.wk.weight"] = (Hkv * hd, C)
        s[p + "attn.wv.weight"] = (Hkv * hd, C)
        if nano:
            s[p + "attn.wk.bias"] = (Hkv * hd,)
            s[p + "attn.wv.bias"] = (Hkv * hd,)
        s[p + "ffn_norm.weight"] = (C,)
        if nano:
            s[p + "ffn_norm.bias"] = (C,)
        ffn(p)
        if branch and c["couple"] == "on":
            s[p + "branch.couple_q"] = (H * hd,)
            if not moe:
                s[p + "branch.couple_hidden"] = (F,)
            s[p + "branch.couple_out"] = (C,)
        if branch and c["share"] == "off":
            attn_q_o("branch." + p)
            ffn("branch." + p)
    s["final_norm.weight"] = (C,)
    if nano:
        s["final_norm.bias"] = (C,)
    if not c["tie_embeddings"]:
        s["lm_head.weight"] = (V, C)
    if branch and c["branch_emb"] == "own":
        s["branch.tok_emb.weight"] = (V, C)
    return s


def init_params(c, rng):
    """Random float32 values (rounded, then used in float64). Couplings are
    non-zero so their terms and gradients are exercised."""
    out = {}
    for name, shape in param_shapes(c).items():
        if name.endswith("norm.weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.15 * rng.standard_normal(shape)
        elif "couple" in name:
            a = 0.4 * rng.standard_normal(shape)
        elif name in ("tok_emb.weight", "branch.tok_emb.weight", "lm_head.weight"):
            # Sharp enough output distributions that the primary's confidence
            # sum p^2 falls inside [mix_alpha_min, mix_alpha_max] at many
            # positions, so alpha and its gradient are exercised (a near-uniform
            # p would clip alpha to its lower bound everywhere).
            a = 1.5 * rng.standard_normal(shape)
        elif "emb" in name:
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = a.astype(np.float32).astype(np.float64)
    return out


# ---------------------------------------------------------------- math

def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def rope(x, theta):
    """x [B,T,nh,hd]: interleaved pairs, angle = t * theta^(-2j/hd)."""
    B, T, nh, hd = x.shape
    j = np.arange(hd // 2)
    freq = theta ** (-2.0 * j / hd)
    ang = np.arange(T)[:, None] * freq[None, :]            # [T, hd/2]
    cos = np.cos(ang)[None, :, None, :]
    sin = np.sin(ang)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def attention(q, k, v, H, Hkv):
    """q [B,T,H,hd]; k, v [B,T,Hkv,hd]; query t sees keys s <= t."""
    B, T, _, hd = q.shape
    group = H // Hkv
    kk = np.repeat(k, group, axis=2)                        # head i -> kv head i // group
    vv = np.repeat(v, group, axis=2)
    s = np.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(hd)
    mask = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(mask[None, None], s, -np.inf)
    a = softmax(s)
    y = np.einsum("bhts,bshd->bthd", a, vv)
    return y.reshape(B, T, H * hd)


def linear(P, name, x):
    y = x @ P[name + ".weight"].T
    if name + ".bias" in P:
        y = y + P[name + ".bias"]
    return y


def topk_indices(logits, k):
    """Descending; ties: lower index first (stable sort of the negation)."""
    return np.argsort(-logits, axis=-1, kind="stable")[..., :k]


def swiglu_expert(P, prefix, e, x):
    w1 = P[prefix + "moe.w1.weight"][e]
    w3 = P[prefix + "moe.w3.weight"][e]
    w2 = P[prefix + "moe.w2.weight"][e]
    return (silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def moe_ffn(P, prefix, x, chosen, gate_logits):
    """x [N,C]; chosen [N,k] expert ids; gates = softmax of gate_logits [N,E]
    restricted to the chosen experts."""
    N = x.shape[0]
    sel = np.take_along_axis(gate_logits, chosen, axis=-1)
    gates = softmax(sel)
    out = np.zeros_like(x)
    E = gate_logits.shape[-1]
    for e in range(E):
        w = (gates * (chosen == e)).sum(-1)                  # [N]
        rows = np.nonzero((chosen == e).any(-1))[0]
        if rows.size:
            out[rows] += w[rows, None] * swiglu_expert(P, prefix, e, x[rows])
    return out


# ---------------------------------------------------------------- model

def norm(c, P, name, x):
    if c["family"] == "nanogpt":
        return layernorm(x, P[name + ".weight"], P[name + ".bias"], c["norm_eps"])
    return rmsnorm(x, P[name + ".weight"], c["norm_eps"])


def head(c, P, x):
    w = P["tok_emb.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    return norm(c, P, "final_norm", x) @ w.T


def primary(c, P, tokens):
    """SPEC §1. Returns logits [B,T,V], per-layer saved (q1, K, V, z1, m1,
    router logits) and the aux values per MoE layer."""
    B, T = tokens.shape
    C, H, Hkv = c["d_model"], c["n_head"], c["n_kv_head"]
    hd = C // H
    fam = c["family"]
    h = P["tok_emb.weight"][tokens]
    if fam == "nanogpt":
        h = h + P["pos_emb.weight"][:T]
    saved, auxes = [], []
    for l in range(c["n_layer"]):
        p = "layers.%d." % l
        x = norm(c, P, p + "attn_norm", h)
        q1 = linear(P, p + "attn.wq", x)
        k = linear(P, p + "attn.wk", x).reshape(B, T, Hkv, hd)
        v = linear(P, p + "attn.wv", x).reshape(B, T, Hkv, hd)
        q = q1.reshape(B, T, H, hd)
        if fam != "nanogpt":
            q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        a = h + linear(P, p + "attn.wo", attention(q, k, v, H, Hkv))
        x2 = norm(c, P, p + "ffn_norm", a)
        z1, rl = None, None
        if fam == "nanogpt":
            z1 = gelu(linear(P, p + "mlp.fc", x2))
            m1 = linear(P, p + "mlp.proj", z1)
        elif fam == "llama":
            z1 = silu(linear(P, p + "mlp.w1", x2)) * linear(P, p + "mlp.w3", x2)
            m1 = linear(P, p + "mlp.w2", z1)
        else:
            E, kk = c["n_expert"], c["top_k"]
            xf = x2.reshape(B * T, C)
            rl = xf @ P[p + "moe.router.weight"].T
            chosen = topk_indices(rl, kk)
            m1 = moe_ffn(P, p, xf, chosen, rl).reshape(B, T, C)
            f = np.array([(chosen == e).sum() for e in range(E)]) / (B * T * kk)
            Pe = softmax(rl).mean(0)
            auxes.append(E * float((f * Pe).sum()))
            rl = rl.reshape(B, T, E)
        saved.append(dict(q1=q1, k=k, v=v, z1=z1, m1=m1, rl=rl))
        h = a + m1
    return head(c, P, h), saved, auxes


def branch(c, P, tokens, saved):
    """SPEC §2: the branch trajectory over every position, reading the
    primary's saved states (q1, K, V, z1, m1, router logits)."""
    B, T = tokens.shape
    C, H, Hkv = c["d_model"], c["n_head"], c["n_kv_head"]
    hd = C // H
    fam = c["family"]
    couple = c["couple"] == "on"
    emb = P["branch.tok_emb.weight"] if c["branch_emb"] == "own" else P["tok_emb.weight"]
    g = emb[tokens]
    if fam == "nanogpt":
        g = g + P["pos_emb.weight"][:T]
    for l in range(c["n_layer"]):
        p = "layers.%d." % l
        w = ("branch." + p) if c["share"] == "off" else p   # own copies of wq, wo, FFN
        st = saved[l]
        q2 = linear(P, w + "attn.wq", norm(c, P, p + "attn_norm", g))
        if couple:
            q2 = q2 + P[p + "branch.couple_q"] * st["q1"]
        q2 = q2.reshape(B, T, H, hd)
        if fam != "nanogpt":
            q2 = rope(q2, c["rope_theta"])
        g = g + linear(P, w + "attn.wo", attention(q2, st["k"], st["v"], H, Hkv))
        x2 = norm(c, P, p + "ffn_norm", g)
        if fam == "moe":
            xf = x2.reshape(B * T, C)
            brl = xf @ P[w + "moe.router.weight"].T
            kb = c["top_k_branch"]
            if c["branch_routing"] == "replay":
                chosen = topk_indices(st["rl"].reshape(B * T, -1), kb)
            else:
                chosen = topk_indices(brl, kb)
            m2 = moe_ffn(P, w, xf, chosen, brl).reshape(B, T, C)
        else:
            if fam == "nanogpt":
                z2 = gelu(linear(P, w + "mlp.fc", x2))
            else:
                z2 = silu(linear(P, w + "mlp.w1", x2)) * linear(P, w + "mlp.w3", x2)
            if couple:
                z2 = z2 + P[p + "branch.couple_hidden"] * st["z1"]
            m2 = linear(P, w + ("mlp.proj" if fam == "nanogpt" else "mlp.w2"), z2)
        if couple:
            m2 = m2 + P[p + "branch.couple_out"] * st["m1"]
        g = g + m2
    return head(c, P, g)


def alpha_of(c, logits_p):
    S = (softmax(logits_p) ** 2).sum(-1)
    return np.clip(S, c["mix_alpha_min"], c["mix_alpha_max"])


def mixture_nll(alpha, lp_y, lq_y):
    """-log(alpha p + (1-alpha) q), log space; zero-weight terms dropped."""
    out = np.empty_like(alpha)
    for i in np.ndindex(alpha.shape):
        a = alpha[i]
        if a == 1.0:
            out[i] = -lp_y[i]
        elif a == 0.0:
            out[i] = -lq_y[i]
        else:
            u, w = math.log(a) + lp_y[i], math.log1p(-a) + lq_y[i]
            m = max(u, w)
            out[i] = -(m + math.log(math.exp(u - m) + math.exp(w - m)))
    return out


def evaluate(c, P, tokens_all, P0=None, frozen=None):
    """Every SPEC §5 quantity for params P. With detach switches, the detached
    primary quantities come from P0 (the unperturbed parameters), whose primary
    pass is `frozen` (cached)."""
    x, y = tokens_all[:, :-1], tokens_all[:, 1:]
    lp_live, saved_live, auxes = primary(c, P, x)
    out = {"logits_primary": lp_live}
    logp = log_softmax(lp_live)
    ce_p = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    out["loss_primary"] = ce_p.mean()
    aux_term = 0.0
    if c["family"] == "moe":
        out["aux"] = float(np.mean(auxes))
        aux_term = c["aux_loss_coef"] * out["aux"]
    if c["branch"] != "decode":
        out["loss"] = out["loss_primary"] + aux_term
        return out
    dp, ad = c["detach_primary"], c["alpha_detach"]
    if (dp or ad) and frozen is None:
        frozen = primary(c, P0 if P0 is not None else P, x)
    lp_ctx, saved_ctx = (frozen[0], frozen[1]) if dp else (lp_live, saved_live)
    lq = branch(c, P, x, saved_ctx)
    out["logits_branch"] = lq
    logq = log_softmax(lq)
    ce_q = -np.take_along_axis(logq, y[..., None], -1)[..., 0]
    out["loss_branch"] = ce_q.mean()
    out["alpha"] = alpha_of(c, lp_live)
    alpha = alpha_of(c, frozen[0]) if (dp or ad) else out["alpha"]
    lp_mix = log_softmax(lp_ctx)
    lp_y = np.take_along_axis(lp_mix, y[..., None], -1)[..., 0]
    mix = mixture_nll(alpha, lp_y, -ce_q).mean()
    out["mixture"] = mix
    out["loss"] = mix + aux_term + (out["loss_primary"] if dp else 0.0)
    return out


def grads_fd(c, P, tokens, step=1e-6):
    """Central differences of /ref/loss for every parameter element."""
    x = tokens[:, :-1]
    P0 = {k: v.copy() for k, v in P.items()}
    frozen = primary(c, P0, x) if (c["branch"] == "decode" and
                                   (c["detach_primary"] or c["alpha_detach"])) else None
    G = {}
    # An embedding row no input token (or position) selects cannot change the
    # loss (SPEC: a row lookup), so its gradient is exactly zero; skipping it
    # only saves time. tok_emb tied to the head is read whole.
    used_rows = {"branch.tok_emb.weight": set(x.ravel().tolist()),
                 "pos_emb.weight": set(range(x.shape[1]))}
    if not c["tie_embeddings"]:
        used_rows["tok_emb.weight"] = set(x.ravel().tolist())
    for name in P:
        arr = P[name]
        g = np.zeros_like(arr)
        flat, gflat = arr.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            if name in used_rows and i // arr.shape[-1] not in used_rows[name]:
                continue
            old = flat[i]
            flat[i] = old + step
            lp = evaluate(c, P, tokens, P0, frozen)["loss"]
            flat[i] = old - step
            lm = evaluate(c, P, tokens, P0, frozen)["loss"]
            flat[i] = old
            gflat[i] = (lp - lm) / (2 * step)
        G[name] = g
    return G


# ---------------------------------------------------------------- files

def write_reference(path, c, P, tokens, res, G):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "dbranch-checkpoint"
        f.attrs["format_version"] = np.int64(1)
        cg = f.create_group("config")
        for k in sorted(c):
            v = c[k]
            if k in INT_KEYS:
                cg.attrs[k] = np.int64(v)
            elif k in REAL_KEYS:
                cg.attrs[k] = np.float64(v)
            else:
                cg.attrs[k] = str(v)
        pg = f.create_group("params")
        for k, v in P.items():
            pg.create_dataset(k, data=v.astype(np.float32))
        r = f.create_group("ref")
        r.create_dataset("tokens", data=tokens.astype(np.int32))
        keys = ["loss", "loss_primary", "logits_primary"]
        if c["family"] == "moe":
            keys.append("aux")
        if c["branch"] == "decode":
            keys += ["loss_branch", "alpha", "logits_branch"]
        for k in keys:
            r.create_dataset(k, data=np.asarray(res[k], dtype=np.float64))
        gg = r.create_group("grads")
        for k, v in G.items():
            gg.create_dataset(k, data=v.astype(np.float64))


def load_reference(path):
    with h5py.File(path, "r") as f:
        c = read_config(f["config"])
        P = {k: f["params"][k][()].astype(np.float64) for k in f["params"]}
        tokens = f["ref/tokens"][()].astype(np.int64)
        ref = {}
        for k in f["ref"]:
            if k == "grads":
                ref["grads"] = {n: f["ref/grads"][n][()] for n in f["ref/grads"]}
            elif k != "tokens":
                ref[k] = f["ref"][k][()]
    return c, P, tokens, ref


def verify(path):
    c, P, tokens, ref = load_reference(path)
    res = evaluate(c, P, tokens)
    worst = 0.0
    ok = True
    for k in ["loss", "loss_primary", "loss_branch", "aux"]:
        if k in ref:
            d = abs(float(res[k]) - float(ref[k]))
            print("  %-16s ours %.12f ref %.12f  |diff| %.2e" % (k, res[k], ref[k], d))
            ok &= d < 1e-9
    for k in ["alpha", "logits_primary", "logits_branch"]:
        if k in ref:
            d = np.abs(res[k] - ref[k]).max() / max(np.abs(ref[k]).max(), 1e-30)
            print("  %-16s max rel diff %.2e" % (k, d))
            ok &= d < 1e-9
    G = grads_fd(c, P, tokens)
    gmax = max(np.abs(v).max() for v in ref["grads"].values())
    for n, rg in ref["grads"].items():
        d = np.abs(G[n] - rg).max() / max(np.abs(rg).max(), 0.1 * gmax)
        worst = max(worst, d)
    print("  grads            worst rel diff %.2e over %d tensors" % (worst, len(G)))
    ok &= worst < 1e-5 and set(G) == set(ref["grads"])
    print("%s: %s" % (path, "MATCH" if ok else "MISMATCH"))
    return ok


# ---------------------------------------------------------------- held-out set

def heldout_cases():
    """One small model per switch setting the shipped files do not cover."""
    nano = dict(family="nanogpt", vocab_size=12, block_size=6, n_layer=2,
                n_head=2, d_model=8, branch="decode")
    llama = dict(family="llama", vocab_size=12, block_size=6, n_layer=2,
                 n_head=2, n_kv_head=1, d_model=8, d_ff=12, branch="decode")
    moe = dict(family="moe", vocab_size=12, block_size=6, n_layer=2,
               n_head=2, n_kv_head=1, d_model=8, d_ff=6, n_expert=4,
               top_k=2, top_k_branch=2, branch="decode")
    B, T = 2, 5
    cases = [
        ("nanogpt_share_off", dict(nano, share="off"), B, T),
        ("llama_share_off", dict(llama, share="off"), B, T),
        ("moe_share_off", dict(moe, share="off"), B, T),
        ("nanogpt_branch_emb_shared", dict(nano, branch_emb="shared"), B, T),
        ("llama_branch_emb_shared", dict(llama, branch_emb="shared"), B, T),
        ("nanogpt_detach_primary", dict(nano, detach_primary=1), B, T),
        ("llama_detach_primary", dict(llama, detach_primary=1), B, T),
        ("moe_detach_primary", dict(moe, detach_primary=1), B, T),
        ("nanogpt_alpha_detach", dict(nano, alpha_detach=1), B, T),
        ("llama_alpha_detach", dict(llama, alpha_detach=1), B, T),
        ("moe_routing_own", dict(moe, branch_routing="own"), B, T),
        ("moe_routing_own_k1", dict(moe, branch_routing="own", top_k_branch=1), B, T),
        ("nanogpt_couple_off", dict(nano, couple="off"), B, T),
        ("llama_couple_off", dict(llama, couple="off"), B, T),
        ("moe_couple_off", dict(moe, couple="off"), B, T),
        ("moe_top_k_branch_lt", dict(moe, top_k=3, top_k_branch=1), B, T),
        ("nanogpt_untied", dict(nano, tie_embeddings=0), B, T),
        ("nanogpt_base_untied", dict(nano, branch="none", tie_embeddings=0), B, T),
        ("llama_tied", dict(llama, tie_embeddings=1), B, T),
        ("llama_base_tied", dict(llama, branch="none", tie_embeddings=1), B, T),
        ("llama_alpha_zero", dict(llama, mix_alpha_min=0.0, mix_alpha_max=0.0), B, T),
        ("nanogpt_alpha_zero", dict(nano, mix_alpha_min=0.0, mix_alpha_max=0.0), B, T),
        ("llama_alpha_one", dict(llama, mix_alpha_min=1.0, mix_alpha_max=1.0), B, T),
        ("llama_alpha_wide", dict(llama, mix_alpha_min=0.2, mix_alpha_max=0.9), B, T),
        ("nanogpt_n_layer1", dict(nano, n_layer=1), B, T),
        ("llama_n_layer1_T1", dict(llama, n_layer=1), 3, 1),
        ("nanogpt_T1", dict(nano), 3, 1),
        ("moe_T1", dict(moe, top_k_branch=3), 3, 1),
        ("llama_sizes", dict(llama, vocab_size=20, d_model=12, n_head=3,
                             n_kv_head=1, d_ff=20, n_layer=3, block_size=8), 2, 7),
        ("moe_sizes_aux", dict(moe, n_head=4, n_kv_head=2, n_expert=5, top_k=2,
                               top_k_branch=4, aux_loss_coef=0.5), 3, 4),
        ("moe_base_k1", dict(moe, branch="none", top_k=1), B, T),
        ("llama_all_switches", dict(llama, share="off", branch_emb="shared",
                                    couple="off", alpha_detach=1,
                                    tie_embeddings=1), B, T),
        ("moe_all_switches", dict(moe, share="off", branch_emb="shared",
                                  detach_primary=1, branch_routing="own",
                                  top_k_branch=1, couple="off"), B, T),
    ]
    return cases


def heldout(outdir, only=None):
    import os
    os.makedirs(outdir, exist_ok=True)
    for i, (name, cfg, B, T) in enumerate(heldout_cases()):
        path = os.path.join(outdir, "%s.h5" % name)
        if (only and name not in only) or (not only and os.path.exists(path)):
            continue
        c = complete_config(cfg)
        rng = np.random.default_rng(1000 + i)
        P = init_params(c, rng)
        tokens = rng.integers(0, c["vocab_size"], size=(B, T + 1))
        res = evaluate(c, P, tokens)
        G = grads_fd(c, P, tokens)
        write_reference(path, c, P, tokens, res, G)
        print("%s: loss %.6f  params %d" % (path, res["loss"],
                                            sum(v.size for v in P.values())))


def main(argv):
    if len(argv) >= 3 and argv[1] == "verify":
        ok = all([verify(p) for p in argv[2:]])
        return 0 if ok else 1
    if len(argv) >= 3 and argv[1] == "heldout":
        heldout(argv[2], set(argv[3:]) or None)
        return 0
    print(__doc__ if __doc__ else "usage: spec_reference.py verify FILE... | heldout OUTDIR [NAME...]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
