#!/usr/bin/python3
"""PyTorch reference for `dbranch bench train`: a nanoGPT-style model trained
on random tokens, timed step by step (forward, backward, global-norm clip,
AdamW, zeroed gradients), with the same configs and thread count.

Model (nanoGPT's, no dropout): token + learned position embeddings, pre-LN
blocks (LayerNorm with bias, causal self-attention with one fused qkv
projection, GELU tanh MLP of width 4C), final LayerNorm, head tied to the
token embedding. Attention goes through scaled_dot_product_attention
(torch >= 2.0: F.scaled_dot_product_attention; 1.13, Debian bookworm's
version: its private F._scaled_dot_product_attention), or the explicit
masked softmax with --attention manual.

Reports tokens/s from the median step time, the model FLOPs per token
(6N + 12*L*C*T, N without the position embedding) and the GEMM rate of
torch.mm on the MLP's first linear map at the step's shape (forward, d_in,
d_weight), timed between the steps as the C benchmark does.

Usage: torch_nanogpt.py --preset baby|char [--steps N] [--warmup W]
                        [--threads K] [--optimizer foreach|loop] [--json]
Set OMP_NUM_THREADS / MKL_NUM_THREADS to the thread count before starting
Python (run.sh does); --threads also calls torch.set_num_threads.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # name: (vocab, seq_len T, batch B, layers L, heads H, width C, lr, beta2)
    "baby": dict(V=256, T=64, B=12, L=4, H=4, C=128, lr=2e-3, beta2=0.99),
    "char": dict(V=256, T=256, B=16, L=6, H=6, C=384, lr=1e-3, beta2=0.99),
}


def sdpa_function(mode):
    """The attention call: (q, k, v) [B, H, T, hd] -> [B, H, T, hd], causal."""
    if mode == "manual":
        return None
    if hasattr(F, "scaled_dot_product_attention"):
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if hasattr(F, "_scaled_dot_product_attention"):  # torch 1.13: returns (out, weights)
        return lambda q, k, v: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
    return None


class SelfAttention(nn.Module):
    def __init__(self, C, H, T, attention):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.sdpa = sdpa_function(attention)
        if self.sdpa is None:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        if self.sdpa is not None:
            y = self.sdpa(q, k, v)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, C, H, T, attention):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = SelfAttention(C, H, T, attention)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C, attention):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, H, T, attention) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gemm_probe(M, N, K):
    """Seconds for y = x W^T, d_x = d_y W, d_W = d_y^T x at [M,K] x [N,K]."""
    x, w = torch.randn(M, K), torch.randn(N, K) * 0.02
    start = time.perf_counter()
    y = x @ w.t()
    y @ w
    y.t() @ x
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="baby")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--optimizer", choices=["foreach", "loop"], default="foreach")
    parser.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = PRESETS[args.preset]
    V, T, B, L, H, C = (cfg[k] for k in "VTBLHC")
    torch.manual_seed(args.seed)
    model = GPT(V, T, L, H, C, args.attention)
    n_params = sum(p.numel() for p in model.parameters())  # tied head counted once
    n_flop = n_params - model.wpe.weight.numel()
    flops_per_token = 6 * n_flop + 12 * L * C * T
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, cfg["beta2"]), eps=1e-8,
                            foreach=(args.optimizer == "foreach"))
    generator = torch.Generator().manual_seed(args.seed + 1)

    def step():
        data = torch.randint(0, V, (B, T + 1), generator=generator)
        inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        start = time.perf_counter()
        loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start, loss.item()

    for _ in range(args.warmup):
        step()
        gemm_probe(B * T, 4 * C, C)
    times, probes, losses = [], [], []
    for _ in range(args.steps):
        seconds, loss = step()
        times.append(seconds)
        losses.append(loss)
        probes.append(gemm_probe(B * T, 4 * C, C))
    step_s = statistics.median(times)
    tokens_per_s = B * T / step_s
    gflops = tokens_per_s * flops_per_token * 1e-9
    gemm_gflops = 3 * 2 * B * T * 4 * C * C / statistics.median(probes) * 1e-9
    result = {
        "bench": "torch_nanogpt", "torch": torch.__version__, "preset": args.preset, "threads": torch.get_num_threads(),
        "optimizer": args.optimizer, "attention": args.attention if sdpa_function(args.attention) else "manual",
        "params": n_params, "params_flop": n_flop, "flops_per_token": flops_per_token, "step_ms": 1e3 * step_s,
        "tokens_per_s": tokens_per_s, "gflops": gflops, "gemm_gflops": gemm_gflops, "mfu": gflops / gemm_gflops,
        "first_loss": losses[0], "last_loss": losses[-1], "steps": args.steps, "warmup": args.warmup,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print("torch %s nanoGPT %s (V=%d T=%d B=%d L=%d H=%d C=%d), %d threads, AdamW %s, attention %s" %
              (torch.__version__, args.preset, V, T, B, L, H, C, result["threads"], args.optimizer,
               result["attention"]))
        print("  params %.3f M (N for FLOPs %.3f M), FLOPs/token %.3f M" % (n_params / 1e6, n_flop / 1e6,
                                                                          flops_per_token / 1e6))
        print("  step %.2f ms (median of %d), %.0f tokens/s, %.1f GFLOP/s, GEMM rate %.1f GFLOP/s, MFU %.0f%%" %
              (1e3 * step_s, args.steps, tokens_per_s, gflops, gemm_gflops, 100 * gflops / gemm_gflops))
        print("  loss %.4f -> %.4f" % (losses[0], losses[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
