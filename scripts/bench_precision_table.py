#!/usr/bin/env python3
"""The summary table of results/bench-precision.md from scripts/bench_precision.sh's run files:
per shape, thread count and pass, each norm's % of the copy loop in f32 / bf16 / fp16, the time of
a 16-bit call against the float32 call (time ratio: below 1 is faster), RMSNorm over LayerNorm in
each format, and PyTorch's rows; the median over the runs, [min-max] when they differ.

  python3 scripts/bench_precision_table.py results/bench-runs/precision-{1,2,3}.json
"""
import json
import statistics
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    rows = {}
    for run in runs:
        for b in run["benchmarks"]:
            if b.get("status") != "ok" and b["impl"] != "torch":
                continue
            key = (tuple(b["shape"]), b.get("resident", False), b["threads"], b["pass"], b["norm"], b["impl"], b["dtype"])
            rows.setdefault(key, []).append(b)

    def med(key, f):
        vals = [f(b) for b in rows.get(key, []) if b.get("status") == "ok" and f(b) is not None]
        if not vals:
            return None, None, None
        return statistics.median(vals), min(vals), max(vals)

    def show(t, fmt):
        m, lo, hi = t
        if m is None:
            return "rejected" if t is not None and False else "-"
        s = fmt % m
        return s if (fmt % lo) == (fmt % hi) else "%s [%s-%s]" % (s, fmt % lo, fmt % hi)

    print("| shape | thr | pass | norm | %copy f32 | %copy bf16 | %copy fp16 | bf16 time / f32 | fp16 time / f32 "
          "| RMS/LN bf16 | RMS/LN fp16 | vs torch bf16 | vs torch fp16 |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    shapes = sorted({(k[0], k[1]) for k in rows}, key=lambda s: (s[1], s[0][0] * s[0][1] * s[0][2]))
    for shape, resident in shapes:
        for thr in sorted({k[2] for k in rows if k[0] == shape and k[1] == resident}):
            for pas in ("fwd", "bwd"):
                for norm in ("layernorm", "rmsnorm"):
                    k = lambda dt, impl="fused": (shape, resident, thr, pas, norm, impl, dt)
                    if k("f32") not in rows:
                        continue
                    pct = {dt: med(k(dt), lambda b: b["counters"]["pct_of_copy"]) for dt in ("f32", "bf16", "fp16")}

                    def ratio(dt):  # per run: the 16-bit call's time over the float32 call's
                        vals = []
                        for i in range(len(runs)):
                            a = [b for b in rows.get(k(dt), []) if b in runs[i]["benchmarks"]]
                            f = [b for b in rows.get(k("f32"), []) if b in runs[i]["benchmarks"]]
                            if a and f and a[0]["status"] == "ok" and f[0]["status"] == "ok":
                                vals.append(a[0]["aggregates"]["median"] / f[0]["aggregates"]["median"])
                        return (statistics.median(vals), min(vals), max(vals)) if vals else (None, None, None)
                    rl = {dt: med(k(dt), lambda b: b["counters"]["rms_over_ln"]) for dt in ("bf16", "fp16")}
                    vt = {dt: med(k(dt), lambda b: b["counters"]["vs_torch"]) for dt in ("bf16", "fp16")}
                    torch_rejected = {dt: any(b["status"] == "rejected" for b in rows.get(k(dt, "torch"), []))
                                      for dt in ("bf16", "fp16")}
                    name = "x".join(map(str, shape)) + (" (resident)" if resident else "")
                    print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                        name, thr, pas, "LN" if norm == "layernorm" else "RMS",
                        show(pct["f32"], "%.0f%%"), show(pct["bf16"], "%.0f%%"), show(pct["fp16"], "%.0f%%"),
                        show(ratio("bf16"), "%.2f"), show(ratio("fp16"), "%.2f"),
                        show(rl["bf16"], "%.2fx") if norm == "rmsnorm" else "", show(rl["fp16"], "%.2fx") if norm == "rmsnorm" else "",
                        "torch rejected" if torch_rejected["bf16"] else show(vt["bf16"], "%.2fx"),
                        "torch rejected" if torch_rejected["fp16"] else show(vt["fp16"], "%.2fx")))


if __name__ == "__main__":
    main(sys.argv[1:])
