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

--precision bf16 runs forward and loss under torch.autocast('cpu',
dtype=torch.bfloat16) and the backward outside it, as PyTorch's autocast
docs recommend; weights, gradients and AdamW stay float32. The GEMM probe
then runs under the same autocast, W cast to bf16 once beforehand (as
autocast's weight cache does within a step and dbranch's bf16 probe reads
the weights' bf16 copy), x cast inside the timed products: MFU is against
the GEMM rate of the run's own precision. A bf16 run also records what
torch says about bf16 on this CPU (bf16_support(); --bf16-support prints
only that).

Usage: torch_nanogpt.py --preset baby|char [--steps N] [--warmup W]
                        [--threads K] [--optimizer foreach|loop]
                        [--precision fp32|bf16] [--json]
       torch_nanogpt.py --bf16-support
Set OMP_NUM_THREADS / MKL_NUM_THREADS to the thread count before starting
Python (run.sh does); --threads also calls torch.set_num_threads.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
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


def autocast(precision):
    """The context forward and loss run in: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def gemm_probe(M, N, K, precision):
    """Seconds for y = x W^T, d_x = d_y W, d_W = d_y^T x at [M,K] x [N,K], in the run's precision."""
    x, w = torch.randn(M, K), torch.randn(N, K) * 0.02
    if precision == "bf16":
        w = w.to(torch.bfloat16)  # once, outside the timing: the step's weight cast is cached per forward
    with autocast(precision):
        start = time.perf_counter()
        y = x @ w.t()
        y @ w
        y.t() @ x
        return time.perf_counter() - start


# Run in a child interpreter: oneDNN reads ONEDNN_VERBOSE once, at its first primitive, and prints to stdout.
BF16_CHILD = """
import torch
x, w = torch.randn(64, 64), torch.randn(64, 64)
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = x @ w.t()
print("dtype", y.dtype)
"""


def bf16_support():
    """What torch reports about bf16 on this CPU.

    torch >= 2.0 has torch.ops.mkldnn._is_mkldnn_bf16_supported() (true also where
    oneDNN only emulates bf16, so it is not a speed claim); torch 1.13 (Debian
    bookworm) does not, so the facts come from oneDNN itself: the ISA it
    dispatches to and the implementation of an autocast bf16 matmul, from its
    verbose log ("gemm:jit" is the emulated path; "brg:avx512_core_bf16" or
    "brg:avx512_core_amx" use bf16 units)."""
    query = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        supported = bool(query()) if query is not None else None
    except (RuntimeError, AttributeError):
        supported = None
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1", OMP_NUM_THREADS="1")
    child = subprocess.run([sys.executable, "-c", BF16_CHILD], env=env, capture_output=True, text=True)
    if child.returncode != 0:
        raise RuntimeError("bf16 support probe failed: " + child.stderr.strip().splitlines()[-1])
    isa, matmul = "", ""
    for line in child.stdout.splitlines():
        fields = line.split(",")
        if line.startswith("onednn_verbose,info,cpu,isa:"):
            isa = line.split("isa:", 1)[1]
        elif len(fields) > 4 and fields[1] == "exec" and fields[3] == "matmul" and not matmul:
            matmul = fields[4]
    return {
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "is_mkldnn_bf16_supported": supported,
        "query": "torch.ops.mkldnn._is_mkldnn_bf16_supported" if query is not None else "absent in torch " + torch.__version__,
        "onednn_isa": isa, "bf16_matmul_impl": matmul or "none (not through oneDNN)",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="baby")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--optimizer", choices=["foreach", "loop"], default="foreach")
    parser.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--bf16-support", action="store_true", help="print bf16_support() as JSON and exit")
    args = parser.parse_args()
    if args.bf16_support:
        print(json.dumps(bf16_support()))
        return 0
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
        with autocast(args.precision):
            loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start, loss.item()

    for _ in range(args.warmup):
        step()
        gemm_probe(B * T, 4 * C, C, args.precision)
    times, probes, losses = [], [], []
    for _ in range(args.steps):
        seconds, loss = step()
        times.append(seconds)
        losses.append(loss)
        probes.append(gemm_probe(B * T, 4 * C, C, args.precision))
    step_s = statistics.median(times)
    tokens_per_s = B * T / step_s
    gflops = tokens_per_s * flops_per_token * 1e-9
    gemm_gflops = 3 * 2 * B * T * 4 * C * C / statistics.median(probes) * 1e-9
    result = {
        "bench": "torch_nanogpt", "torch": torch.__version__, "preset": args.preset, "threads": torch.get_num_threads(),
        "precision": args.precision, "optimizer": args.optimizer,
        "attention": args.attention if sdpa_function(args.attention) else "manual",
        "params": n_params, "params_flop": n_flop, "flops_per_token": flops_per_token, "step_ms": 1e3 * step_s,
        "tokens_per_s": tokens_per_s, "gflops": gflops, "gemm_gflops": gemm_gflops, "mfu": gflops / gemm_gflops,
        "first_loss": losses[0], "last_loss": losses[-1], "steps": args.steps, "warmup": args.warmup,
    }
    if args.precision == "bf16":
        result["bf16_support"] = bf16_support()
    if args.json:
        print(json.dumps(result))
    else:
        print("torch %s nanoGPT %s (V=%d T=%d B=%d L=%d H=%d C=%d), %d threads, %s, AdamW %s, attention %s" %
              (torch.__version__, args.preset, V, T, B, L, H, C, result["threads"],
               "bf16 autocast" if args.precision == "bf16" else "fp32", args.optimizer, result["attention"]))
        print("  params %.3f M (N for FLOPs %.3f M), FLOPs/token %.3f M" % (n_params / 1e6, n_flop / 1e6,
                                                                          flops_per_token / 1e6))
        print("  step %.2f ms (median of %d), %.0f tokens/s, %.1f GFLOP/s, GEMM rate %.1f GFLOP/s, MFU %.0f%%" %
              (1e3 * step_s, args.steps, tokens_per_s, gflops, gemm_gflops, 100 * gflops / gemm_gflops))
        print("  loss %.4f -> %.4f" % (losses[0], losses[-1]))
        if args.precision == "bf16":
            print("  bf16 on this CPU: %s" % json.dumps(result["bf16_support"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
