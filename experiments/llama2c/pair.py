#!/usr/bin/env python3
"""One (round, shape) pair of experiments/llama2c/run.sh: llama2.c's run.c,
then `dbranch bench decode` once per weight format of WEIGHTS (fp32, bf16:
`--weights`), back to back on the same shape, REPS times alternately
(default 1); prints one TSV row per repetition and weight format (columns
below, each row with the same llama2.c run; round ROUND.REP when REPS > 1). Kept apart from run.sh so it can be wrapped as one
command (e.g. by a script that pauses background jobs while it runs).

Each run's "other load" is the CPU time the rest of the machine used during
it (busy time in /proc/stat minus the run's own, per second of wall time, in
cores). On a machine shared with other jobs a 2-thread run with a barrier per
matrix product (llama2.c) slows down far more than one that does not, so rows
with other load are flagged and run.sh also gives medians over quiet rows.
Before the pair it waits (up to quiet_wait seconds) for one second with less
than 0.15 cores busy.

Usage: pair.py WORK DBRANCH ROOT SHAPE ROUND STEPS THREADS PROMPT QUIET_WAIT [REPS [WEIGHTS]]
  WORK holds run (the llama2.c binary) and SHAPE/{model,tokenizer}.bin;
  WEIGHTS is a comma list of fp32 and bf16 (default fp32).
Row: shape round llama2c_tok/s ours_mean_tok/s ours_median_step_tok/s
     probe_best_GB/s bytes_per_token steps threads llama2c_other_load ours_other_load
     ours_weights (rows without it, from before the column, are fp32)"""

import json
import os
import resource
import subprocess
import sys
import time

QUIET_CORES = 0.15


def busy_seconds():
    """CPU seconds all CPUs spent busy (user nice system irq softirq steal)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, threads):
    """Runs cmd; returns (stdout, stderr, other load in cores)."""
    b0, c0, t0 = busy_seconds(), children_cpu(), time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=threads))
    b1, c1, t1 = busy_seconds(), children_cpu(), time.monotonic()
    if p.returncode != 0:
        sys.exit(f"pair.py: {cmd[0]} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    return p.stdout, p.stderr, max(0.0, ((b1 - b0) - (c1 - c0)) / (t1 - t0))


def wait_for_quiet(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        b0, t0 = busy_seconds(), time.monotonic()
        time.sleep(1.0)
        if (busy_seconds() - b0) / (time.monotonic() - t0) < QUIET_CORES:
            return


def one_pair(work, dbranch, root, shape, rnd, steps, threads, prompt, weights_list):
    _, err, l2c_load = run([f"{work}/run", f"{work}/{shape}/model.bin", "-z", f"{work}/{shape}/tokenizer.bin",
                            "-t", "0", "-n", str(steps), "-i", prompt], threads)
    l2c = [line.split(":", 1)[1].strip() for line in err.splitlines() if line.startswith("achieved tok/s:")]
    if not l2c:
        sys.exit(f"pair.py: llama2.c printed no 'achieved tok/s' ({shape}): {err.strip()[-300:]}")
    for weights in weights_list:
        out, _, ours_load = run([dbranch, "bench", "decode", "--config",
                                 f"{root}/experiments/configs/llama2c_{shape}.ini", "--threads", threads,
                                 "--prompt-len", "1", "--tokens", str(steps - 1), "--probe-every", "0",
                                 "--weights", weights, "--json"], threads)
        r = json.loads(out)
        m = r["modes"][0]
        print("\t".join([shape, rnd, f"{float(l2c[0]):.3f}", f"{m['decode_tokens_per_s_mean']:.3f}",
                         f"{m['decode_tokens_per_s']:.3f}", f"{r['probe']['best_gbps']:.3f}",
                         f"{m['bytes_per_token']:.0f}", str(steps), threads, f"{l2c_load:.2f}", f"{ours_load:.2f}",
                         weights]), flush=True)


def main():
    work, dbranch, root, shape, rnd, steps, threads, prompt, quiet_wait = sys.argv[1:10]
    reps = int(sys.argv[10]) if len(sys.argv) > 10 else 1
    weights_list = sys.argv[11].split(",") if len(sys.argv) > 11 else ["fp32"]
    for w in weights_list:
        if w not in ("fp32", "bf16"):
            sys.exit(f"pair.py: weights '{w}' must be fp32 or bf16")
    wait_for_quiet(float(quiet_wait))
    for rep in range(1, reps + 1):
        one_pair(work, dbranch, root, shape, f"{rnd}.{rep}" if reps > 1 else rnd, int(steps), threads, prompt,
                 weights_list)
    return 0


if __name__ == "__main__":
    sys.exit(main())
