#!/usr/bin/env python3
"""The DiscoLoop study's tables (experiments/disco/study.sh calls this):
table.tsv (one row per run), table.md (per seed, then mean ± sd per arm) and
runs.md (every run's command and files), from the run folders.

Usage: table.py OUT_DIR ENTITIES "ARMS" "SEEDS"
"""
import json
import os
import statistics
import sys

out, N, arms, seeds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
COLS = ["atomic (train)", "A two-hop (train)", "B two-hop (OOD)", "B fact at r1",
        "cos r1 after 1", "other", "lens r1 after 1", "cos r1 into 2", "lens r1 into 2",
        "cos r1 after 1 (A)", "other (A)", "lens r1 after 1 (A)"]


def accuracy(path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    return {t: a for t, a, n in next(l for l in lines if "per_position" in l)["per_position"]}


def bridge(path):
    rows = {}
    for line in open(path):
        if line.startswith("bridge "):
            f = line.split()
            rows[(f[1], int(f[2]), f[3])] = [float(x) for x in f[4:]]
    return rows


EMB, OTHER, LENS = 0, 1, 4
table = {}
for arm in arms:
    for seed in seeds:
        d = f"{out}/{arm}/seed{seed}"
        if not os.path.exists(f"{d}/done"):
            continue
        train, val = accuracy(f"{d}/eval_train.json"), accuracy(f"{d}/eval_val.json")
        bv, bt = bridge(f"{d}/bridge_val.txt"), bridge(f"{d}/bridge_train.txt")
        K = max(k for (kind, k, p) in bv if kind == "after")
        a1, i2, a1t = bv[("after", 1, "r1")], bv[("into", 2, "r1")], bt[("after", 1, "r1")]
        table[(arm, seed)] = [train[2], train[3], val[3], bv[("after", K, "r1")][LENS],
                              a1[EMB], a1[OTHER], a1[LENS], i2[EMB], i2[LENS],
                              a1t[EMB], a1t[OTHER], a1t[LENS]]

with open(f"{out}/table.tsv", "w") as f:
    f.write("arm\tseed\t" + "\t".join(COLS) + "\n")
    for (arm, seed), v in table.items():
        f.write(f"{arm}\t{seed}\t" + "\t".join(f"{x:.4f}" for x in v) + "\n")

with open(f"{out}/table.md", "w") as f:
    f.write(
        f"Accuracy: argmax over the vocabulary at the answer; chance, for a model that knows the graph, "
        f"1/{N} = {1 / N:.3f}. atomic / A two-hop: the training split's answers (memorisation); B two-hop: "
        "graph B's queries (out of distribution). B fact at r1: the fraction of B queries whose final output "
        "at r1 (\"BOS e r1\") is the bridge, i.e. graph B's atomic fact recalled in the query. cos: mean "
        "cosine, at the r1 position of B queries, of the stack's output after application 1 to tok_emb[bridge] "
        "(head tied, so also W_out[bridge]); other: the same to the bridge graph's other entities (mean); "
        "lens: fraction whose head on Norm_f(state) is the bridge; into 2: the input of application 2 "
        "(with DiscoLoop H~ = H + a RMSNorm(Phi)); (A): the same on graph A's training queries.\n\n")
    f.write("| arm | seed | " + " | ".join(COLS) + " |\n|" + "---|" * (len(COLS) + 2) + "\n")
    for (arm, seed), v in table.items():
        f.write(f"| {arm} | {seed} | " + " | ".join(f"{x:.3f}" for x in v) + " |\n")
    for arm in arms:
        runs = [v for (a, s), v in table.items() if a == arm]
        if not runs:
            continue
        cells = []
        for i in range(len(COLS)):
            xs = [r[i] for r in runs]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.mean(xs):.3f} ± {sd:.3f}")
        f.write(f"| **{arm}** | mean ± sd, n = {len(runs)} | " + " | ".join(cells) + " |\n")

with open(f"{out}/runs.md", "w") as f:
    f.write("# Runs of the DiscoLoop study\n\nWritten by experiments/disco/study.sh from the run folders (do not "
            "edit): every run, the command that trained it (from the repository root), its wall time in seconds "
            "(a loaded 2-core machine) and its files. See README.md for what the study asks.\n\n"
            "| arm | seed | seconds | files | command |\n|---|---|---|---|---|\n")
    for (arm, seed) in table:
        d = f"{arm}/seed{seed}"
        command = open(f"{out}/{d}/command.txt").read().strip()
        seconds = open(f"{out}/{d}/seconds").read().strip()
        f.write(f"| {arm} | {seed} | {seconds} | [log]({d}/log.jsonl.gz), [eval val]({d}/eval_val.json), "
                f"[eval train]({d}/eval_train.json), [bridge val]({d}/bridge_val.txt), "
                f"[bridge train]({d}/bridge_train.txt) | `{command}` |\n")
