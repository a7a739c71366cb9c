#!/usr/bin/env python3
"""Table and medians of experiments/llama2c/run.sh's rows (the TSV that
pair.py prints, one row per round, shape and weight format of ours): every
row, then per shape and format the medians over all rounds and over the
quiet rounds only (other load below QUIET_CORES during both runs of the
pair); where a round has both fp32 and bf16 rows, the median over rounds of
ours bf16 / ours fp32 (same llama2.c run, back to back).

Usage: summarize.py RESULTS.tsv"""

import statistics
import sys

QUIET_CORES = 0.25


def load(path):
    rows = []
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.rstrip("\n").split("\t")
        rows.append(dict(shape=f[0], round=f[1], l2c=float(f[2]), ours=float(f[3]), ours_median=float(f[4]),
                         probe=float(f[5]), bytes=float(f[6]), steps=f[7], threads=f[8],
                         l2c_load=float(f[9]), ours_load=float(f[10]),
                         weights=f[11] if len(f) > 11 else "fp32"))
    # llama2.c reads float32 weights: its bytes are the fp32 rows' count for
    # the shape (the same in every round), also beside a bf16 row
    fp32_bytes = {r["shape"]: r["bytes"] for r in rows if r["weights"] == "fp32"}
    for r in rows:
        r["l2c_bytes"] = fp32_bytes.get(r["shape"], float("nan"))
    return rows


def medians(sel):
    med = statistics.median
    return dict(n=len(sel), l2c=med(r["l2c"] for r in sel), ours=med(r["ours"] for r in sel),
                ratio=med(r["ours"] / r["l2c"] for r in sel), probe=med(r["probe"] for r in sel),
                l2c_frac=med(r["l2c"] * r["l2c_bytes"] * 1e-9 / r["probe"] for r in sel),
                ours_frac=med(r["ours"] * r["bytes"] * 1e-9 / r["probe"] for r in sel))


def main():
    rows = load(sys.argv[1])
    if not rows:
        print("no rows")
        return 1
    print(f"{'shape':6} {'round':>5} {'ours':>4} {'llama2.c tok/s':>15} {'ours tok/s':>11} {'ratio':>7} {'probe GB/s':>11} "
          f"{'l2c GB/s':>9} {'ours GB/s':>10} {'ours med-step':>14} {'other load l2c/ours':>20}")
    for r in rows:
        flag = "" if max(r["l2c_load"], r["ours_load"]) < QUIET_CORES else "  (busy)"
        print(f"{r['shape']:6} {r['round']:>5} {r['weights']:>4} {r['l2c']:15.2f} {r['ours']:11.2f} {r['ours'] / r['l2c']:7.3f} "
              f"{r['probe']:11.2f} {r['l2c'] * r['l2c_bytes'] * 1e-9:9.2f} {r['ours'] * r['bytes'] * 1e-9:10.2f} "
              f"{r['ours_median']:14.2f} {r['l2c_load']:9.2f} / {r['ours_load']:.2f}{flag}")
    print()
    print("medians per shape (ratio = ours / llama2.c: median of the per-round ratios; % probe: effective GB/s")
    print(f"over the same run's best probe pass; quiet: other load < {QUIET_CORES} cores during both runs)")
    print(f"{'shape':6} {'ours':>4} {'rows':>10} {'n':>3} {'llama2.c tok/s':>15} {'ours tok/s':>11} {'ratio':>7} "
          f"{'probe GB/s':>11} {'l2c % probe':>12} {'ours % probe':>13}")
    groups = dict.fromkeys((r["shape"], r["weights"]) for r in rows)
    for shape, weights in groups:
        every = [r for r in rows if r["shape"] == shape and r["weights"] == weights]
        quiet = [r for r in every if max(r["l2c_load"], r["ours_load"]) < QUIET_CORES]
        for label, sel in (("all", every), ("quiet", quiet)):
            if not sel:
                print(f"{shape:6} {weights:>4} {label:>10} {0:3d}")
                continue
            m = medians(sel)
            print(f"{shape:6} {weights:>4} {label:>10} {m['n']:3d} {m['l2c']:15.2f} {m['ours']:11.2f} "
                  f"{m['ratio']:7.3f} {m['probe']:11.2f} {100 * m['l2c_frac']:11.1f}% {100 * m['ours_frac']:12.1f}%")
    paired = {}
    for r in rows:
        paired.setdefault((r["shape"], r["round"]), {})[r["weights"]] = r
    for shape in dict.fromkeys(r["shape"] for r in rows):
        both = [p for (s, _), p in paired.items() if s == shape and "fp32" in p and "bf16" in p]
        if not both:
            continue
        quiet = [p for p in both if all(max(r["l2c_load"], r["ours_load"]) < QUIET_CORES for r in p.values())]
        for label, sel in (("all", both), ("quiet", quiet)):
            if sel:
                ratio = statistics.median(p["bf16"]["ours"] / p["fp32"]["ours"] for p in sel)
                print(f"{shape:6} ours bf16 / ours fp32, {label} rounds ({len(sel)}): {ratio:.3f} "
                      f"(median of the per-round ratios)")
    print("(bytes per token: weights + KV read, dbranch's count for the shape, the same for both programs at fp32 "
          "(bf16 weights: 2 bytes per matrix element); GB/s = bytes x tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
