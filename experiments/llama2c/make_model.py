#!/usr/bin/env python3
"""Random-weight model and tokenizer files in llama2.c's binary format, so
llama2.c's run.c can be timed on the same LLaMA shapes as `dbranch bench
decode` (experiments/llama2c/run.sh). This writes files; it holds no llama2.c
code. The layout below was read off run.c (read_checkpoint,
memory_map_weights, build_tokenizer):

  model file: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
    vocab_size, seq_len; a positive vocab_size means the classifier is the
    token embedding), then float32 arrays in this order:
    token embedding [V, dim]; attention RMSNorm weights [L, dim];
    wq [L, dim, dim]; wk, wv [L, kv_dim, dim]; wo [L, dim, dim];
    FFN RMSNorm weights [L, dim]; w1 [L, hidden, dim]; w2 [L, dim, hidden];
    w3 [L, hidden, dim]; final RMSNorm weight [dim]; two unused RoPE tables
    [seq_len, head_size/2] each; (unshared classifier [V, dim]).
  tokenizer file: int32 max_token_length, then per token: float32 score,
    int32 byte length, the bytes (no terminator).

Values: matrices N(0, 0.02), norm weights 1, so nothing overflows; the timing
does not depend on them. Row 1 of the embedding (the BOS token, which ends
run.c's generation loop when it is the argmax) is zero, so with the shared
classifier its logit is exactly 0 and greedy decoding never picks it: every
run makes all its steps.

Usage: make_model.py --shape 110m|15m --out DIR [--seed S] [--seq-len T]
writes DIR/model.bin and DIR/tokenizer.bin and prints the parameter count
(the one llama2.c's shapes imply; compare with `dbranch info`)."""

import argparse
import os
import struct
import sys

import numpy as np

# The two LLaMA shapes of issue 5 (TinyStories stories110M / stories15M).
SHAPES = {
    "110m": dict(dim=768, hidden_dim=2048, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=32000, seq_len=1024),
    "15m": dict(dim=288, hidden_dim=768, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=32000, seq_len=256),
}

BOS = 1


def param_count(s):
    """Parameters of the model the header describes (shared classifier, the
    unused RoPE tables not counted): what dbranch calls a tied llama."""
    dim, hid, L, V = s["dim"], s["hidden_dim"], s["n_layers"], s["vocab_size"]
    kv_dim = dim * s["n_kv_heads"] // s["n_heads"]
    per_layer = 2 * dim + 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hid
    return V * dim + L * per_layer + dim


def write_model(path, s, rng):
    dim, hid, L, V, T = s["dim"], s["hidden_dim"], s["n_layers"], s["vocab_size"], s["seq_len"]
    head_size = dim // s["n_heads"]
    kv_dim = dim * s["n_kv_heads"] // s["n_heads"]

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype("<f4")

    with open(path, "wb") as f:
        # positive vocab_size: the classifier is the token embedding (tied)
        f.write(struct.pack("<7i", dim, hid, L, s["n_heads"], s["n_kv_heads"], V, T))
        emb = normal(V, dim)
        emb[BOS] = 0.0
        f.write(emb.tobytes())
        f.write(np.ones((L, dim), "<f4").tobytes())  # attention RMSNorm
        # one layer at a time keeps memory small; the file order is per tensor kind
        for rows, cols in ((dim, dim), (kv_dim, dim), (kv_dim, dim), (dim, dim)):  # wq wk wv wo
            for _ in range(L):
                f.write(normal(rows, cols).tobytes())
        f.write(np.ones((L, dim), "<f4").tobytes())  # FFN RMSNorm
        for rows, cols in ((hid, dim), (dim, hid), (hid, dim)):  # w1 w2 w3
            for _ in range(L):
                f.write(normal(rows, cols).tobytes())
        f.write(np.ones(dim, "<f4").tobytes())  # final RMSNorm
        f.write(np.zeros(2 * T * (head_size // 2), "<f4").tobytes())  # unused RoPE tables


def write_tokenizer(path, vocab_size):
    """A vocabulary the BPE encoder accepts: <unk>, <s>, </s>, the 256 byte
    fallback pieces <0xNN> at ids 3..258 (the encoder maps an unknown byte b
    to id b + 3), every printable ASCII character (the encoder needs " " for
    its dummy prefix), then distinct filler pieces up to vocab_size."""
    pieces = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)]
    pieces += [bytes([c]) for c in range(32, 127)]
    n = 0
    while len(pieces) < vocab_size:
        pieces.append(b"t%d" % n)
        n += 1
    pieces = pieces[:vocab_size]
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            f.write(struct.pack("<fi", -float(i), len(p)))
            f.write(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True, help="directory for model.bin and tokenizer.bin")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seq-len", type=int, help="override the header's seq_len (KV cache length)")
    a = ap.parse_args()
    s = dict(SHAPES[a.shape])
    if a.seq_len:
        s["seq_len"] = a.seq_len
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    write_model(os.path.join(a.out, "model.bin"), s, rng)
    write_tokenizer(os.path.join(a.out, "tokenizer.bin"), s["vocab_size"])
    n = param_count(s)
    print(f"{a.shape}: dim {s['dim']} hidden {s['hidden_dim']} layers {s['n_layers']} heads {s['n_heads']} "
          f"kv_heads {s['n_kv_heads']} vocab {s['vocab_size']} seq_len {s['seq_len']}: "
          f"params {n} ({n * 4 / 1e6:.1f} MB fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
