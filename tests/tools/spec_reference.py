#!/usr/bin/env python3
# Independent float64 implementation of SPEC §1-§5 and of the architecture
# options §6.1-§6.4 (product FFN, per-layer heads, attention residuals,
# recurrent layers, ALiBi), written from the SPEC text only (not from the C
# code), that writes reference files in the SPEC §5 layout. It exists to
# produce held-out reference files for the settings the shipped files do not
# cover, so `dbranch check-reference` can be checked against a second
# implementation. (§6.5 feedback and §6.6 loops are not implemented here.) Gradients are central finite
# differences in float64 (step 1e-6, error ~1e-8): numpy has no autograd, and a
# derivative-free check cannot share a mistake with hand-written backward code.
#
# Usage (needs python3-numpy and python3-h5py):
#   spec_reference.py verify [--sample=N] FILE.h5...
#                                         recompute a reference file, compare
#                                         (gradients of N random elements per
#                                         tensor; default all)
#   spec_reference.py heldout OUTDIR      write the held-out set (tests/reference/heldout)
#   spec_reference.py options OUTDIR      write the §6 option set (tests/reference/options_heldout)
import sys
import math

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
# SPEC §6 keys and their defaults (a file without them loads with these).
OPTION_DEFAULTS = dict(
    ffn="default", ffn_prod_norm=0, layer_heads="", attn_res="off",
    attn_res_heads=1, attn_res_blocks=0, recurrent=0, alibi=0, feedback=0,
    n_loop=1, disco=0, disco_tau=1.0, disco_alpha=0.5, disco_gate="fixed",
    disco_top=128,
)
DEFAULTS.update(OPTION_DEFAULTS)
INT_KEYS = {"vocab_size", "block_size", "n_layer", "n_head", "n_kv_head",
            "d_model", "d_ff", "n_expert", "top_k", "top_k_branch",
            "tie_embeddings", "detach_primary", "alpha_detach",
            "ffn_prod_norm", "attn_res_heads", "attn_res_blocks", "recurrent",
            "alibi", "feedback", "n_loop", "disco", "disco_top"}
REAL_KEYS = {"mix_alpha_min", "mix_alpha_max", "aux_loss_coef", "norm_eps",
             "rope_theta", "disco_tau", "disco_alpha"}
# SPEC §6.1: the factor projections of each product FFN (w2 is the down map).
PROD_FACTORS = {"prod2": ("w1", "w3"), "triplu": ("w1", "w3", "w4"),
                "prod4": ("w1", "w3", "w4", "w5")}


def round32(num, den=1):
    """num/den rounded up to a multiple of 32, in integers."""
    return 32 * (-(-num // (32 * den)))


def ffn_width(c):
    """F: nanogpt's default FFN is 4C; otherwise d_ff, and d_ff = 0 derives
    it (SPEC §1 for SwiGLU, §6.1 for the product FFNs)."""
    C, kind = c["d_model"], c["ffn"]
    if c["family"] == "nanogpt" and kind == "default":
        return 4 * C
    if c["d_ff"]:
        return c["d_ff"]
    if c["family"] == "nanogpt":
        return {"triplu": round32(2 * C), "prod2": round32(8 * C, 3),
                "prod4": round32(8 * C, 5)}[kind]
    S = round32(8 * C, 3)
    return {"default": S, "triplu": round32(3 * S, 4), "prod2": S,
            "prod4": round32(3 * S, 5)}[kind]


def check_options(c):
    """The §6 combinations this script implements (it refuses the rest, so
    it never writes a file for an undefined model)."""
    if c["feedback"] or c["n_loop"] != 1 or c["disco"]:
        raise SystemExit("spec_reference.py: feedback / n_loop / disco (SPEC "
                         "§6.5-6.6) are not implemented here")
    L, C = c["n_layer"], c["d_model"]
    assert c["ffn"] in ("default",) + tuple(PROD_FACTORS), c["ffn"]
    assert not (c["ffn_prod_norm"] and c["ffn"] == "default"), "ffn_prod_norm"
    assert c["attn_res"] in ("off", "full", "block"), c["attn_res"]
    assert c["attn_res"] != "off" or c["attn_res_heads"] == 1, "attn_res_heads"
    assert C % c["attn_res_heads"] == 0, "attn_res_heads"
    if c["attn_res"] == "block":
        assert c["attn_res_blocks"] > 0 and (2 * L) % c["attn_res_blocks"] == 0
    else:
        assert c["attn_res_blocks"] == 0, "attn_res_blocks"
    assert not (c["recurrent"] and c["attn_res"] != "off"), "recurrent+attn_res"
    if c["layer_heads"]:
        hs = [int(x) for x in c["layer_heads"].split(",")]
        assert len(hs) == L, "layer_heads length"
        for h in hs:
            assert C % h == 0 and (h * c["n_kv_head"]) % c["n_head"] == 0
            assert c["family"] == "nanogpt" or c["alibi"] or (C // h) % 2 == 0


def complete_config(cfg, store_dff0=False):
    """Fill derived/neutral values the way SPEC §4 says a checkpoint holds them.
    store_dff0 keeps d_ff = 0 (the reader derives F, SPEC §6.1)."""
    c = dict(DEFAULTS)
    c.update(cfg)
    if c["tie_embeddings"] is None:
        c["tie_embeddings"] = 1 if c["family"] == "nanogpt" else 0
    if c["family"] == "nanogpt":
        c["n_kv_head"] = c["n_head"]
    elif c["n_kv_head"] == 0:
        c["n_kv_head"] = c["n_head"]
    if not (store_dff0 and c["d_ff"] == 0):
        c["d_ff"] = ffn_width(c)
    if c["family"] != "moe":
        c["n_expert"] = c["top_k"] = c["top_k_branch"] = 0
    elif c["top_k_branch"] == 0:
        c["top_k_branch"] = c["top_k"]
    check_options(c)
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
    """SPEC §3 and §6 names and shapes, in a fixed order."""
    V, C, L = c["vocab_size"], c["d_model"], c["n_layer"]
    H, Hkv, E = c["n_head"], c["n_kv_head"], c["n_expert"]
    F = ffn_width(c)
    hd = C // H          # H*hd and Hkv*hd keep these shapes under §6.2 too
    nano = c["family"] == "nanogpt"
    moe = c["family"] == "moe"
    branch = c["branch"] == "decode"
    s = {"tok_emb.weight": (V, C)}
    if nano and not c["alibi"]:
        s["pos_emb.weight"] = (c["block_size"], C)

    def attn_q_o(prefix):
        s[prefix + "attn.wq.weight"] = (H * hd, C)
        if nano:
            s[prefix + "attn.wq.bias"] = (H * hd,)
        s[prefix + "attn.wo.weight"] = (C, H * hd)
        if nano:
            s[prefix + "attn.wo.bias"] = (C,)

    def ffn(prefix):
        if c["ffn"] != "default":
            ffn_product(prefix)
        elif nano:
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

    def ffn_product(prefix):
        # SPEC §6.1: no biases, also in nanogpt; moe experts stack along E.
        grp, ex = ("moe.", (E,)) if moe else ("mlp.", ())
        if moe:
            s[prefix + "moe.router.weight"] = (E, C)
        for w in PROD_FACTORS[c["ffn"]]:
            s[prefix + grp + w + ".weight"] = ex + (F, C)
        s[prefix + grp + "w2.weight"] = ex + (C, F)
        if c["ffn_prod_norm"]:
            s[prefix + grp + "prod_norm.weight"] = ex + (F,)

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
        if c["attn_res"] != "off":
            for sub in ("attn", "ffn"):
                s[p + "attn_res.%s_query" % sub] = (C,)
                s[p + "attn_res.%s_norm.weight" % sub] = (C,)
        if branch and c["couple"] == "on":
            s[p + "branch.couple_q"] = (H * hd,)
            if not moe:
                s[p + "branch.couple_hidden"] = (F,)
            s[p + "branch.couple_out"] = (C,)
        if branch and c["share"] == "off":
            attn_q_o("branch." + p)
            ffn("branch." + p)
    if c["attn_res"] != "off":
        s["attn_res.final_query"] = (C,)
        s["attn_res.final_norm.weight"] = (C,)
    s["final_norm.weight"] = (C,)
    if nano:
        s["final_norm.bias"] = (C,)
    if not c["tie_embeddings"]:
        s["lm_head.weight"] = (V, C)
    if branch and c["branch_emb"] == "own":
        s["branch.tok_emb.weight"] = (V, C)
    return s


def init_params(c, rng, emb_scale=1.5):
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
        elif name.endswith("_query"):
            # Non-zero (training starts them at zero) so the routing weights
            # differ from the mean and their gradients are exercised.
            a = 0.5 * rng.standard_normal(shape)
        elif name in ("tok_emb.weight", "branch.tok_emb.weight", "lm_head.weight"):
            # Sharp enough output distributions that the primary's confidence
            # sum p^2 falls inside [mix_alpha_min, mix_alpha_max] at many
            # positions, so alpha and its gradient are exercised (a near-uniform
            # p would clip alpha to its lower bound everywhere).
            a = emb_scale * rng.standard_normal(shape)
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


def alibi_bias(H, T):
    """SPEC §6.4: -(t - s) * 2^(-8(h+1)/H) on query head h's score, [H,T,T]."""
    t = np.arange(T)
    slope = 2.0 ** (-8.0 * (np.arange(H) + 1) / H)
    return -(t[:, None] - t[None, :])[None] * slope[:, None, None]


def attention(c, q, k, v, H, Hkv, kd=None, vd=None):
    """q [B,T,H,hd]; k, v [B,T,Hkv,hd]; query t sees keys s <= t. With kd, vd
    (recurrent layers, SPEC §6.4) the key and value at s = t are kd[t], vd[t]
    instead of k[t], v[t]."""
    B, T, _, hd = q.shape
    group = H // Hkv
    kk = np.repeat(k, group, axis=2)                        # head i -> kv head i // group
    vv = np.repeat(v, group, axis=2)
    s = np.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(hd)
    diag = np.arange(T)
    if kd is not None:
        s[:, :, diag, diag] = np.einsum("bthd,bthd->bht", q,
                                        np.repeat(kd, group, axis=2)) / math.sqrt(hd)
    if c["alibi"]:
        s = s + alibi_bias(H, T)[None]
    mask = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(mask[None, None], s, -np.inf)
    a = softmax(s)
    if vd is None:
        y = np.einsum("bhts,bshd->bthd", a, vv)
    else:
        a_diag = a[:, :, diag, diag]                        # [B,H,T]
        a = a.copy()
        a[:, :, diag, diag] = 0.0
        y = (np.einsum("bhts,bshd->bthd", a, vv) +
             np.einsum("bht,bthd->bthd", a_diag, np.repeat(vd, group, axis=2)))
    return y.reshape(B, T, H * hd)


def linear(P, name, x):
    y = x @ P[name + ".weight"].T
    if name + ".bias" in P:
        y = y + P[name + ".bias"]
    return y


def topk_indices(logits, k):
    """Descending; ties: lower index first (stable sort of the negation)."""
    return np.argsort(-logits, axis=-1, kind="stable")[..., :k]


def product_hidden(c, factors, x, prod_norm):
    """SPEC §6.1: z = (x W1^T) * (x W3^T) [* (x W4^T) [* (x W5^T)]], no
    biases; ffn_prod_norm RMS-normalises z with weight prod_norm."""
    z = x @ factors[0].T
    for w in factors[1:]:
        z = z * (x @ w.T)
    if c["ffn_prod_norm"]:
        z = rmsnorm(z, prod_norm, c["norm_eps"])
    return z


def moe_expert(c, P, prefix, e, x):
    """Expert e of a MoE layer: SwiGLU (§1) or the product FFN (§6.1)."""
    w2 = P[prefix + "moe.w2.weight"][e]
    if c["ffn"] == "default":
        w1 = P[prefix + "moe.w1.weight"][e]
        w3 = P[prefix + "moe.w3.weight"][e]
        return (silu(x @ w1.T) * (x @ w3.T)) @ w2.T
    factors = [P[prefix + "moe.%s.weight" % w][e] for w in PROD_FACTORS[c["ffn"]]]
    pn = P[prefix + "moe.prod_norm.weight"][e] if c["ffn_prod_norm"] else None
    return product_hidden(c, factors, x, pn) @ w2.T


def moe_ffn(c, P, prefix, x, chosen, gate_logits):
    """x [N,C]; chosen [N,k] expert ids; gates = softmax of gate_logits [N,E]
    restricted to the chosen experts."""
    sel = np.take_along_axis(gate_logits, chosen, axis=-1)
    gates = softmax(sel)
    out = np.zeros_like(x)
    E = gate_logits.shape[-1]
    for e in range(E):
        w = (gates * (chosen == e)).sum(-1)                  # [N]
        rows = np.nonzero((chosen == e).any(-1))[0]
        if rows.size:
            out[rows] += w[rows, None] * moe_expert(c, P, prefix, e, x[rows])
    return out


def switch_aux(c, rl):
    """SPEC §1 load-balancing term of one MoE layer from its router logits [N,E]."""
    E, k = c["n_expert"], c["top_k"]
    chosen = topk_indices(rl, k)
    f = np.array([(chosen == e).sum() for e in range(E)]) / (rl.shape[0] * k)
    return E * float((f * softmax(rl).mean(0)).sum())


def dense_hidden(c, P, w, x2):
    """z, the MLP hidden activation of a dense layer (weights under prefix w)."""
    if c["ffn"] != "default":
        factors = [P[w + "mlp.%s.weight" % f] for f in PROD_FACTORS[c["ffn"]]]
        return product_hidden(c, factors, x2, P.get(w + "mlp.prod_norm.weight"))
    if c["family"] == "nanogpt":
        return gelu(linear(P, w + "mlp.fc", x2))
    return silu(linear(P, w + "mlp.w1", x2)) * linear(P, w + "mlp.w3", x2)


def dense_down(c, P, w, z):
    nano_default = c["family"] == "nanogpt" and c["ffn"] == "default"
    return linear(P, w + ("mlp.proj" if nano_default else "mlp.w2"), z)


# ---------------------------------------------------------------- model

def norm(c, P, name, x):
    if c["family"] == "nanogpt":
        return layernorm(x, P[name + ".weight"], P[name + ".bias"], c["norm_eps"])
    return rmsnorm(x, P[name + ".weight"], c["norm_eps"])


def head(c, P, x):
    w = P["tok_emb.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    return norm(c, P, "final_norm", x) @ w.T


def layer_heads(c, l):
    """SPEC §6.2: layer l's (H_l, Hkv_l, hd_l)."""
    H, Hkv, C = c["n_head"], c["n_kv_head"], c["d_model"]
    if c["layer_heads"]:
        Hl = int(c["layer_heads"].split(",")[l])
        return Hl, Hl * Hkv // H, C // Hl
    return H, Hkv, C // H


def place(c, x):
    """Positions on q or k [B,T,nh,hd]: RoPE for llama/moe unless ALiBi
    (nanogpt's learned positions are added to the embedding instead)."""
    if c["family"] == "nanogpt" or c["alibi"]:
        return x
    return rope(x, c["rope_theta"])


def embed(c, P, emb, tokens):
    h = emb[tokens]
    if c["family"] == "nanogpt" and not c["alibi"]:
        h = h + P["pos_emb.weight"][:tokens.shape[1]]
    return h


def route(c, P, query, norm_w, sources):
    """SPEC §6.3 Route: per routing head, a softmax over the sources of the
    pseudo-query's dot product with the RMS-normed source slice; values are
    the raw sources."""
    S = np.stack(sources)                                   # [n, ..., C]
    R, C = c["attn_res_heads"], c["d_model"]
    k = rmsnorm(S, P[norm_w], c["norm_eps"])
    sl = S.shape[:-1] + (R, C // R)
    logit = (k * P[query]).reshape(sl).sum(-1)              # [n, ..., R]
    e = np.exp(logit - logit.max(0))
    alpha = e / e.sum(0)
    return (alpha[..., None] * S.reshape(sl)).sum(0).reshape(S.shape[1:])


class Routes:
    """The sources of SPEC §6.3 for one trajectory: s_0, the completed block
    sums and the running partial sum of the current block (full = blocks of
    one sublayer)."""

    def __init__(self, c, P, s0):
        self.c, self.P, self.s0 = c, P, s0
        n = c["attn_res_blocks"] if c["attn_res"] == "block" else 2 * c["n_layer"]
        self.size = 2 * c["n_layer"] // n
        self.blocks, self.partial, self.j = [], None, 0

    def input(self):
        """h_j for the next sublayer j."""
        l, sub = divmod(self.j, 2)
        name = "layers.%d.attn_res.%s_" % (l, ("attn", "ffn")[sub])
        src = [self.s0] + self.blocks + ([] if self.partial is None else [self.partial])
        return route(self.c, self.P, name + "query", name + "norm.weight", src)

    def add(self, out):
        self.partial = out if self.partial is None else self.partial + out
        self.j += 1
        if self.j % self.size == 0:
            self.blocks.append(self.partial)
            self.partial = None

    def final(self):
        return route(self.c, self.P, "attn_res.final_query",
                     "attn_res.final_norm.weight", [self.s0] + self.blocks)


def run_stack(c, P, h0, attn_fn, ffn_fn):
    """The L blocks over sublayer functions attn_fn(l, h) -> o and
    ffn_fn(l, a) -> m (each applies its own pre-norm): the residual stream
    of §1, or the attention residuals of §6.3."""
    if c["attn_res"] == "off":
        h = h0
        for l in range(c["n_layer"]):
            h = h + attn_fn(l, h)
            h = h + ffn_fn(l, h)
        return h
    r = Routes(c, P, h0)
    for l in range(c["n_layer"]):
        r.add(attn_fn(l, r.input()))
        r.add(ffn_fn(l, r.input()))
    return r.final()


def attn_primary(c, P, l, h, st):
    """Primary attention sublayer; saves q1 (before RoPE), K, V in st."""
    p = "layers.%d." % l
    H, Hkv, hd = layer_heads(c, l)
    B, T, _ = h.shape
    x = norm(c, P, p + "attn_norm", h)
    q1 = linear(P, p + "attn.wq", x)
    k = place(c, linear(P, p + "attn.wk", x).reshape(B, T, Hkv, hd))
    v = linear(P, p + "attn.wv", x).reshape(B, T, Hkv, hd)
    st.update(q1=q1, k=k, v=v)
    return linear(P, p + "attn.wo", attention(c, place(c, q1.reshape(B, T, H, hd)), k, v, H, Hkv))


def ffn_primary(c, P, l, a):
    """Primary FFN sublayer on rows a [..., C]: (z1, m1, router logits)."""
    p = "layers.%d." % l
    x2 = norm(c, P, p + "ffn_norm", a)
    if c["family"] != "moe":
        z1 = dense_hidden(c, P, p, x2)
        return z1, dense_down(c, P, p, z1), None
    xf = x2.reshape(-1, c["d_model"])
    rl = xf @ P[p + "moe.router.weight"].T
    m1 = moe_ffn(c, P, p, xf, topk_indices(rl, c["top_k"]), rl)
    return None, m1.reshape(a.shape), rl.reshape(a.shape[:-1] + (-1,))


def recurrent_stack(c, P, h0, saved):
    """SPEC §6.4 recurrent layers, in the straightforward order: a scan over
    positions per layer; the persistent K/V of position t come from Norm1 of
    the layer's output at t."""
    B, T, C = h0.shape
    x = h0
    for l in range(c["n_layer"]):
        p = "layers.%d." % l
        H, Hkv, hd = layer_heads(c, l)
        xn = norm(c, P, p + "attn_norm", x)
        q1 = linear(P, p + "attn.wq", xn)
        q = place(c, q1.reshape(B, T, H, hd))
        kt = place(c, linear(P, p + "attn.wk", xn).reshape(B, T, Hkv, hd))
        vt = linear(P, p + "attn.wv", xn).reshape(B, T, Hkv, hd)
        k_raw = np.zeros((B, T, Hkv, hd))                   # persistent keys before RoPE
        vp = np.zeros((B, T, Hkv, hd))
        out = np.zeros_like(x)
        z1s, m1s, rls = [], [], []
        for t in range(T):
            y = attention(c, q[:, :t + 1], place(c, k_raw[:, :t + 1]), vp[:, :t + 1],
                          H, Hkv, kt[:, :t + 1], vt[:, :t + 1])[:, t]
            a = x[:, t] + linear(P, p + "attn.wo", y)
            z1, m1, rl = ffn_primary(c, P, l, a)
            out[:, t] = a + m1
            on = norm(c, P, p + "attn_norm", out[:, t])
            k_raw[:, t] = linear(P, p + "attn.wk", on).reshape(B, Hkv, hd)
            vp[:, t] = linear(P, p + "attn.wv", on).reshape(B, Hkv, hd)
            z1s.append(z1), m1s.append(m1), rls.append(rl)
        st = saved[l]
        st.update(q1=q1, k=place(c, k_raw), v=vp, kd=kt, vd=vt,
                  m1=np.stack(m1s, 1))
        st["z1"] = None if z1s[0] is None else np.stack(z1s, 1)
        st["rl"] = None if rls[0] is None else np.stack(rls, 1)
        x = out
    return x


def primary(c, P, tokens):
    """SPEC §1 with §6.1-6.4. Returns logits [B,T,V], per-layer saved (q1, K,
    V, z1, m1, router logits, and kd, vd for recurrent layers) and the aux
    values per MoE layer."""
    L = c["n_layer"]
    saved = [dict() for _ in range(L)]
    h0 = embed(c, P, P["tok_emb.weight"], tokens)

    def ffn_fn(l, a):
        z1, m1, rl = ffn_primary(c, P, l, a)
        saved[l].update(z1=z1, m1=m1, rl=rl)
        return m1

    if c["recurrent"]:
        h = recurrent_stack(c, P, h0, saved)
    else:
        h = run_stack(c, P, h0, lambda l, x: attn_primary(c, P, l, x, saved[l]), ffn_fn)
    auxes = []
    if c["family"] == "moe":
        auxes = [switch_aux(c, st["rl"].reshape(-1, c["n_expert"])) for st in saved]
    return head(c, P, h), saved, auxes


def branch(c, P, tokens, saved):
    """SPEC §2 (with §6): the branch trajectory over every position, reading
    the primary's saved states (q1, K, V, z1, m1, router logits). It attends
    over exactly the primary's keys of its position (recurrent: kd, vd at
    s = t) and routes its own sources under attn_res."""
    B, T = tokens.shape
    C = c["d_model"]
    fam = c["family"]
    couple = c["couple"] == "on"
    emb = P["branch.tok_emb.weight"] if c["branch_emb"] == "own" else P["tok_emb.weight"]

    def wpre(l):                                            # own copies of wq, wo, FFN
        p = "layers.%d." % l
        return ("branch." + p) if c["share"] == "off" else p

    def attn_fn(l, g):
        p, w, st = "layers.%d." % l, wpre(l), saved[l]
        H, Hkv, hd = layer_heads(c, l)
        q2 = linear(P, w + "attn.wq", norm(c, P, p + "attn_norm", g))
        if couple:
            q2 = q2 + P[p + "branch.couple_q"] * st["q1"]
        q2 = place(c, q2.reshape(B, T, H, hd))
        y = attention(c, q2, st["k"], st["v"], H, Hkv, st.get("kd"), st.get("vd"))
        return linear(P, w + "attn.wo", y)

    def ffn_fn(l, g):
        p, w, st = "layers.%d." % l, wpre(l), saved[l]
        x2 = norm(c, P, p + "ffn_norm", g)
        if fam == "moe":
            xf = x2.reshape(B * T, C)
            brl = xf @ P[w + "moe.router.weight"].T
            kb = c["top_k_branch"]
            if c["branch_routing"] == "replay":
                chosen = topk_indices(st["rl"].reshape(B * T, -1), kb)
            else:
                chosen = topk_indices(brl, kb)
            m2 = moe_ffn(c, P, w, xf, chosen, brl).reshape(B, T, C)
        else:
            z2 = dense_hidden(c, P, w, x2)
            if couple:
                z2 = z2 + P[p + "branch.couple_hidden"] * st["z1"]
            m2 = dense_down(c, P, w, z2)
        if couple:
            m2 = m2 + P[p + "branch.couple_out"] * st["m1"]
        return m2

    return head(c, P, run_stack(c, P, embed(c, P, emb, tokens), attn_fn, ffn_fn))


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


def grads_fd(c, P, tokens, step=1e-6, sample=0, rng=None):
    """Central differences of /ref/loss for every parameter element (with
    sample > 0: for that many random elements per tensor, the rest NaN)."""
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
        idx = range(flat.size)
        if sample and flat.size > sample:
            g[...] = np.nan
            idx = sorted(rng.choice(flat.size, sample, replace=False).tolist())
        for i in idx:
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
        c = dict(DEFAULTS)      # SPEC §6: a file without the option keys
        c.update(read_config(f["config"]))   # loads with their defaults
        check_options(c)
        P = {k: f["params"][k][()].astype(np.float64) for k in f["params"]}
        tokens = f["ref/tokens"][()].astype(np.int64)
        ref = {}
        for k in f["ref"]:
            if k == "grads":
                ref["grads"] = {n: f["ref/grads"][n][()] for n in f["ref/grads"]}
            elif k != "tokens":
                ref[k] = f["ref"][k][()]
    return c, P, tokens, ref


def verify(path, sample=0):
    """Recompute a reference file. MATCH needs far tighter agreement than
    SPEC §5's float32 tolerances (both sides are float64); the worst
    relative error of each kind is printed to compare with §5."""
    c, P, tokens, ref = load_reference(path)
    if set(P) != set(param_shapes(c)):
        print("  parameter names differ: file only %s, ours only %s" % (
            sorted(set(P) - set(param_shapes(c))), sorted(set(param_shapes(c)) - set(P))))
        print("%s: MISMATCH" % path)
        return False
    res = evaluate(c, P, tokens)
    worst = 0.0
    worst_name = ""
    ok = True
    for k in ["loss", "loss_primary", "loss_branch", "aux"]:
        if k in ref:
            d = abs(float(res[k]) - float(ref[k]))
            print("  %-16s ours %.12f ref %.12f  |diff| %.2e rel %.2e" % (
                k, res[k], ref[k], d, d / max(abs(float(ref[k])), 1e-30)))
            ok &= d < 1e-9
    for k in ["alpha", "logits_primary", "logits_branch"]:
        if k in ref:
            d = np.abs(res[k] - ref[k]).max() / max(np.abs(ref[k]).max(), 1e-30)
            print("  %-16s max rel diff %.2e" % (k, d))
            ok &= d < 1e-9
    G = grads_fd(c, P, tokens, sample=sample, rng=np.random.default_rng(7))
    gmax = max(np.abs(v).max() for v in ref["grads"].values())
    for n, rg in ref["grads"].items():
        d = np.nanmax(np.abs(G[n] - rg)) / max(np.abs(rg).max(), 0.1 * gmax)
        if d > worst:
            worst, worst_name = d, n
    print("  grads            worst rel diff %.2e over %d tensors (%s)%s" % (
        worst, len(G), worst_name,
        " (%d sampled elements per tensor)" % sample if sample else ""))
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


def write_set(outdir, cases, seed0, only=None, scale_emb=False):
    """Write one reference file per case (name, config, B, T[, store_dff0]);
    existing files are kept unless named in `only`."""
    import os
    os.makedirs(outdir, exist_ok=True)
    for i, case in enumerate(cases):
        name, cfg, B, T = case[:4]
        store_dff0 = len(case) > 4 and case[4]
        path = os.path.join(outdir, "%s.h5" % name)
        if (only and name not in only) or (not only and os.path.exists(path)):
            continue
        c = complete_config(cfg, store_dff0)
        rng = np.random.default_rng(seed0 + i)
        # options: the logit scale of the C = 8 models at every width
        # (heldout keeps the draw its files were written with)
        P = init_params(c, rng, 1.5 * (math.sqrt(8.0 / c["d_model"]) if scale_emb else 1.0))
        tokens = rng.integers(0, c["vocab_size"], size=(B, T + 1))
        res = evaluate(c, P, tokens)
        G = grads_fd(c, P, tokens)
        write_reference(path, c, P, tokens, res, G)
        print("%s: loss %.6f  params %d" % (path, res["loss"],
                                            sum(v.size for v in P.values())))
        sys.stdout.flush()


def heldout(outdir, only=None):
    write_set(outdir, heldout_cases(), 1000, only)


# ---------------------------------------------------------------- §6 option set

def options_ffn(nano, llama, moe):
    """§6.1 product FFNs: dense nanogpt/llama and MoE experts, prod_norm, the
    branch's couple_hidden on the products, and d_ff = 0 stored in /config
    (widths chosen so the derived F differs from the other rules: llama
    C=40 triplu -> 96 (SwiGLU 128); nanogpt C=40 prod4 -> 64 (4C 160);
    nanogpt C=16 prod2 -> 64 (triplu 32); moe C=8 prod4 -> 32)."""
    B, T = 2, 6
    return [
        ("llama_triplu_dff0", dict(llama, ffn="triplu", d_model=40, n_layer=1,
                                   d_ff=0, branch="none"), B, T, True),
        ("llama_prod2_branch", dict(llama, ffn="prod2"), B, T),
        ("llama_prod4_prodnorm_branch", dict(llama, ffn="prod4", ffn_prod_norm=1,
                                             d_ff=16), B, T),
        ("llama_triplu_prodnorm_share_off_branch", dict(llama, ffn="triplu",
                                                        ffn_prod_norm=1, share="off"), B, T),
        ("nanogpt_triplu_branch", dict(nano, ffn="triplu", d_ff=16), B, T),
        ("nanogpt_prod4_dff0", dict(nano, ffn="prod4", d_model=40, n_layer=1,
                                    d_ff=0, branch="none"), B, T, True),
        ("nanogpt_prod2_prodnorm_dff0_branch", dict(nano, ffn="prod2", ffn_prod_norm=1,
                                                    d_model=16, n_layer=1, d_ff=0),
         B, T, True),
        ("moe_prod2_branch", dict(moe, ffn="prod2"), B, T),
        ("moe_prod4_prodnorm_dff0_branch", dict(moe, ffn="prod4", ffn_prod_norm=1,
                                                n_layer=1, d_ff=0), B, T, True),
    ]


def options_heads(nano, llama, moe):
    """§6.2 per-layer heads, with GQA (Hkv_l = H_l n_kv_head / n_head)."""
    B, T = 2, 6
    return [
        ("nanogpt_prism_branch", dict(nano, d_model=16, n_layer=3,
                                      layer_heads="1,2,4"), B, T),
        ("llama_prism_gqa", dict(llama, d_model=16, n_layer=3, n_head=4, n_kv_head=2,
                                 layer_heads="2,4,8", branch="none"), B, T),
        ("llama_prism_gqa_branch", dict(llama, d_model=16, n_head=4, n_kv_head=2,
                                        layer_heads="8,2"), B, T),
        ("moe_prism_branch", dict(moe, layer_heads="4,2"), B, T),
    ]


def options_attn_res(nano, llama, moe):
    """§6.3 attention residuals: full and block, R = 1 and R > 1, with and
    without the branch (its own sources, the shared queries)."""
    B, T = 2, 6
    full = dict(attn_res="full")
    return [
        ("llama_attnres_full", dict(llama, **full, branch="none"), B, T),
        ("llama_attnres_full_branch", dict(llama, **full), B, T),
        ("nanogpt_attnres_full_mhar", dict(nano, **full, attn_res_heads=4,
                                           branch="none"), B, T),
        ("nanogpt_attnres_full_mhar_branch", dict(nano, **full, attn_res_heads=2), B, T),
        ("llama_attnres_block_mhar", dict(llama, attn_res="block", attn_res_blocks=3,
                                          attn_res_heads=2, n_layer=3,
                                          branch="none"), B, T),
        ("llama_attnres_block_mhar_branch", dict(llama, attn_res="block",
                                                 attn_res_blocks=2, attn_res_heads=4,
                                                 n_layer=3), B, T),
        ("nanogpt_attnres_block_branch", dict(nano, attn_res="block",
                                              attn_res_blocks=2), B, T),
        ("llama_attnres_block1", dict(llama, attn_res="block", attn_res_blocks=1,
                                      branch="none"), B, T),
        ("moe_attnres_full_mhar_branch", dict(moe, **full, attn_res_heads=2), B, T),
    ]


def options_positions(nano, llama, moe):
    """§6.4 ALiBi (any family, with the branch, with per-layer heads) and
    recurrent layers (with the branch, with GQA)."""
    B, T = 2, 6
    return [
        ("nanogpt_alibi_branch", dict(nano, alibi=1), B, T),
        ("llama_alibi_prism_branch", dict(llama, alibi=1, d_model=16, n_head=4,
                                          n_kv_head=2, layer_heads="2,8"), B, T),
        ("nanogpt_alibi_prism", dict(nano, alibi=1, d_model=16, n_layer=3,
                                     layer_heads="1,2,4", branch="none"), B, T),
        ("moe_alibi_branch", dict(moe, alibi=1), B, T),
        ("nanogpt_recurrent", dict(nano, recurrent=1, branch="none"), B, T),
        ("llama_recurrent_gqa_branch", dict(llama, recurrent=1, n_head=4,
                                            n_kv_head=2), B, T),
        ("moe_recurrent_branch", dict(moe, recurrent=1), B, T),
        ("llama_recurrent_alibi_triplu_branch", dict(llama, recurrent=1, alibi=1,
                                                     ffn="triplu"), B, T),
    ]


def options_cases():
    nano = dict(family="nanogpt", vocab_size=16, block_size=8, n_layer=2,
                n_head=2, d_model=8, branch="decode")
    llama = dict(family="llama", vocab_size=16, block_size=8, n_layer=2,
                 n_head=2, n_kv_head=1, d_model=8, d_ff=12, branch="decode")
    moe = dict(family="moe", vocab_size=16, block_size=8, n_layer=2,
               n_head=2, n_kv_head=1, d_model=8, d_ff=6, n_expert=4,
               top_k=2, top_k_branch=2, branch="decode")
    return (options_ffn(nano, llama, moe) + options_heads(nano, llama, moe) +
            options_attn_res(nano, llama, moe) + options_positions(nano, llama, moe))


def options(outdir, only=None):
    write_set(outdir, options_cases(), 2000, only, scale_emb=True)


def main(argv):
    if len(argv) >= 3 and argv[1] == "verify":
        sample = 0
        if argv[2].startswith("--sample="):
            sample = int(argv[2].split("=")[1])
            argv = argv[:2] + argv[3:]
        ok = all([verify(p, sample) for p in argv[2:]])
        return 0 if ok else 1
    if len(argv) >= 3 and argv[1] == "heldout":
        heldout(argv[2], set(argv[3:]) or None)
        return 0
    if len(argv) >= 3 and argv[1] == "options":
        options(argv[2], set(argv[3:]) or None)
        return 0
    print(__doc__ if __doc__ else "usage: spec_reference.py verify [--sample=N] FILE... | heldout|options OUTDIR [NAME...]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
