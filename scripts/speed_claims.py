#!/usr/bin/env python3
"""The published speed claims about RMSNorm vs LayerNorm next to what `normlab bench` measured
(the speed tables in results/REPRODUCTION.md; every figure from the bench JSON files).

Operator level. Published (one CPU thread, median of 2000 calls, shapes batch x seq x d):
nn.LayerNorm 21 / 63 / 240 / 1820 us and a hand-written RMSNorm 18 / 54 / 205 / 1540 us at
4x128x512 / 8x256x1024 / 16x512x2048 / 32x1024x4096 (RMSNorm 14-15% faster at every shape).
For each shape this prints the bytes a forward call must move (x read + y written, float32), the
time that takes at this machine's copy-loop bandwidth (measured in the same bench run: the
fastest a memory-bound kernel can go here), the bandwidth each published time implies, and the
forward medians of normlab's fused kernels, oneDNN's primitive and PyTorch, with the RMS/LN ratios.

Model level. Published (the RMSNorm paper): switching a Transformer's LayerNorms to RMSNorm
speeds training up by 7-9%. For each model and thread count of `bench step`: the LN and RMS step
medians, the measured step speedup, the norms' share of the LN step, the norm kernels' own
speedup, and the step speedup that share predicts: 1 / (1 - s + s / r) - 1.

Figures are medians over the runs given (each run's figure is itself a median over its calls);
brackets give the range over the runs.

  python3 scripts/speed_claims.py --norms results/bench-runs/norms-{1,2,3}.json \\
      --step results/bench-runs/step-{1,2,3}.json
"""
import argparse
import json
import statistics
import sys

PUBLISHED = {  # shape -> (LayerNorm us, RMSNorm us), forward, one thread
    (4, 128, 512): (21, 18),
    (8, 256, 1024): (63, 54),
    (16, 512, 2048): (240, 205),
    (32, 1024, 4096): (1820, 1540),
}
PUBLISHED_STEP_SPEEDUP = (0.07, 0.09)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--norms", nargs="+", required=True, help="bench norms JSON files (one per run)")
    p.add_argument("--step", nargs="*", default=[], help="bench step JSON files (one per run)")
    p.add_argument("--threads", type=int, default=1, help="operator-level thread count (default 1, as published)")
    return p.parse_args(argv)


def load(paths):
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"error: {path}: {e}")
    return runs


def med_range(values, fmt="{:.0f}"):
    if not values:
        return "—"
    m = statistics.median(values)
    if len(values) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def norm_rows(runs, threads):
    """(name, shape) -> list over runs of the median time in us, and of bytes_per_second."""
    times, bw = {}, {}
    for run in runs:
        for b in run["benchmarks"]:
            if b.get("threads") != threads or b.get("status", "ok") != "ok":
                continue
            if b.get("pass") not in ("fwd", "copy"):
                continue
            shape = tuple(b["shape"])
            key = (b["name"].split("/")[0], shape)
            scale = {"us": 1.0, "ms": 1e3, "ns": 1e-3, "s": 1e6}[b.get("time_unit", "us")]
            times.setdefault(key, []).append(b["aggregates"]["median"] * scale)
            if "bytes_per_second" in b:
                bw.setdefault(key, []).append(b["bytes_per_second"])
    return times, bw


def operator_table(runs, threads):
    times, bw = norm_rows(runs, threads)
    cpu = runs[0]["context"].get("cpu_model", "?")
    print(f"Operator level, forward, {threads} thread(s), {len(runs)} run(s), CPU {cpu}\n")
    print("| shape | bytes/call | copy loop GB/s | at copy bandwidth µs | published LN µs (implied GB/s) "
          "| published RMS µs (implied GB/s) | normlab LN µs | oneDNN LN µs | torch LN µs | normlab RMS µs "
          "| torch RMS µs | RMS/LN published | RMS/LN normlab | RMS/LN torch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, (pub_ln, pub_rms) in PUBLISHED.items():
        n = shape[0] * shape[1] * shape[2]
        nbytes = 2 * 4 * n
        copy = [x / 1e9 for x in bw.get(("copy.loop", shape), [])]
        floor_us = [nbytes / (g * 1e9) * 1e6 for g in copy]

        def t(name):
            return times.get((name, shape), [])

        def ratio(a, b):
            xs, ys = t(a), t(b)
            if not xs or not ys:
                return "—"
            return f"{statistics.median(xs) / statistics.median(ys):.2f}"

        implied_ln = nbytes / (pub_ln * 1e-6) / 1e9
        implied_rms = nbytes / (pub_rms * 1e-6) / 1e9
        print(f"| {'x'.join(map(str, shape))} | {nbytes / 2**20:.0f} MiB | {med_range(copy, '{:.1f}')} "
              f"| {med_range(floor_us)} | {pub_ln} ({implied_ln:.0f}) | {pub_rms} ({implied_rms:.0f}) "
              f"| {med_range(t('layernorm.fused'))} | {med_range(t('layernorm.onednn'))} "
              f"| {med_range(t('layernorm.torch'))} | {med_range(t('rmsnorm.fused'))} | {med_range(t('rmsnorm.torch'))} "
              f"| {pub_rms / pub_ln:.2f} | {ratio('rmsnorm.fused', 'layernorm.fused')} "
              f"| {ratio('rmsnorm.torch', 'layernorm.torch')} |")
    print()


def step_table(runs):
    rows = {}
    for run in runs:
        for b in run["benchmarks"]:
            if not b["name"].startswith("step/"):
                continue
            key = (b["model"], b["threads"])
            entry = rows.setdefault(key, {})
            entry.setdefault(b["norm"], []).append(b)
    cpu = runs[0]["context"].get("cpu_model", "?")
    print(f"Model level: bench step, {len(runs)} run(s), CPU {cpu}\n")
    print("| model | threads | LN step ms | RMS step ms | step speedup (LN/RMS - 1) | norms' share of the LN step "
          "| norm kernels' speedup (LN/RMS) | predicted step speedup | published |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (model, threads), entry in sorted(rows.items()):
        ln, rms = entry.get("layernorm", []), entry.get("rmsnorm", [])
        if not ln or not rms:
            continue
        ln_ms = [b["aggregates"]["median"] for b in ln]
        rms_ms = [b["aggregates"]["median"] for b in rms]
        speedups = [a / b - 1 for a, b in zip(ln_ms, rms_ms)]
        shares = [b["counters"]["norm_share"] for b in ln]
        kernel = [a["norm_kernels"]["median"] / b["norm_kernels"]["median"] for a, b in zip(ln, rms)]
        predicted = [1 / (1 - s + s / r) - 1 for s, r in zip(shares, kernel)]
        pct = "{:+.1%}"
        print(f"| {model} | {threads} | {med_range(ln_ms, '{:.1f}')} | {med_range(rms_ms, '{:.1f}')} "
              f"| {med_range(speedups, pct)} | {med_range(shares, '{:.1%}')} | {med_range(kernel, '{:.2f}')} "
              f"| {med_range(predicted, pct)} | +{PUBLISHED_STEP_SPEEDUP[0]:.0%} to +{PUBLISHED_STEP_SPEEDUP[1]:.0%} |")
    print()


def main(argv=None):
    args = parse_args(argv)
    operator_table(load(args.norms), args.threads)
    if args.step:
        step_table(load(args.step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
