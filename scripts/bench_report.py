#!/usr/bin/env python3
"""Tables and target verdicts for results/bench-cpu.md from several `normlab bench norms` runs.

    python3 scripts/bench_report.py results/bench-runs/norms-{1,2,3}.json [--step results/bench-runs/step-{1,2,3}.json]

The figures are `normlab bench merge --json`'s (the binary: --normlab, else $NORMLAB, else
build/normlab): each is the median over the runs of that row's own figure (each run's figure is
itself a median over its timed calls, and a ratio is of two rows timed side by side in that run);
[a-b] is the range over the runs. This script only formats them. A target counts as met only when
every run meets it ("met"); when the median meets it but some run does not, the verdict is "within
the spread" (a claimed win smaller than the run-to-run spread is not a win).
"""
import argparse
import json
import os
import subprocess
import sys

# No fused kernel below 80% of the copy it is held to at memory-bound shapes, forward and
# backward (the previous round's forward target was 90%).
FWD_TARGET, BWD_TARGET = 80.0, 80.0
RESIDENT_TARGET = 80.0  # the training step's shapes, against the copy loop on the same cache-resident buffers


def merged(normlab, paths):
    """`normlab bench merge --json PATHS`: the runs as one document (its "runs": each run's context)."""
    out = subprocess.run([normlab, "bench", "merge", "--json", *paths], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout)


def rows_by_name(doc):
    return {b["name"]: b for b in doc["benchmarks"]}


def round_trips(runs):
    """The cache-line round trip between threads 0 and 1 at each run's start / end (ns), or ''."""
    per_run = []
    for i, r in enumerate(runs):
        v = [x for x in r.get("thread_round_trip_ns", []) if x is not None]
        if v:
            per_run.append(f"run {i + 1} " + " / ".join(f"{x:.0f}" for x in v))
    if not per_run:
        return ""
    return ("Threads 0 and 1 cache-line round trip, ns at the start / end (above 200: the vCPUs far apart, "
            "multi-threaded figures slower): " + "; ".join(per_run))


def fig(row, key, scale=1):
    """(median, min, max) over the runs of a merged row's figure, or Nones."""
    if row is None:
        return None, None, None
    rr = row.get("run_range", {})
    # a row's time in seconds: its range's name is "median" (bench norms) or "step" (bench step)
    if key in ("median", "step"):
        m = row["aggregates"].get("median")
        m = None if m is None else m * {"us": 1e-6, "ms": 1e-3, "s": 1}[row["time_unit"]]
    else:
        m = row["counters"].get(key)
    lo, hi = rr.get(key, (m, m))
    if m is None or lo is None:
        return None, None, None
    return m * scale, lo * scale, hi * scale


def fmt_range(m, lo, hi, unit="", digits=0):
    if m is None:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(m)}{unit} [{f.format(lo)}-{f.format(hi)}]"


def verdict(m, lo, hi, ok):
    if m is None:
        return "no data"
    if ok(lo) and ok(hi):  # every run's figure lies in [lo, hi], and each target is a bound
        return "met"
    if ok(m):
        return "within the spread"
    return "**missed**"


# The norms table's figure columns after shape and pass: the row (an implementation at the pass, or
# a copy), its figure in the merged document, the unit and the decimals shown.
COLUMNS = {
    "cl": ("copy.loop", "gb_per_s", "", 1),
    "mc": ("copy.memcpy", "gb_per_s", "", 1),
    "ln": ("layernorm.fused", "pct_of_copy", "%", 0),
    "rms": ("rmsnorm.fused", "pct_of_copy", "%", 0),
    "lno": ("layernorm.onednn", "pct_of_copy", "%", 0),
    "lnt": ("layernorm.torch", "pct_of_copy", "%", 0),
    "rmst": ("rmsnorm.torch", "pct_of_copy", "%", 0),
    "vs_o": ("layernorm.fused", "vs_onednn", "x", 2),
    "vs_t": ("layernorm.fused", "vs_torch", "x", 2),
    "rvs_t": ("rmsnorm.fused", "vs_torch", "x", 2),
    "rl": ("rmsnorm.fused", "rms_over_ln", "x", 2),
    "lu": ("layernorm.fused", "vs_unfused", "x", 2),
    "ru": ("rmsnorm.fused", "vs_unfused", "x", 2),
}


def norms_report(doc):
    by = rows_by_name(doc)
    runs = doc["runs"]
    # (shape, resident): a resident row's name has "/resident" after its shape
    shapes, threads = [], []
    for b in by.values():
        s = ("x".join(str(x) for x in b["shape"]), bool(b.get("resident")))
        if s not in shapes:
            shapes.append(s)
        if b["threads"] not in threads:
            threads.append(b["threads"])
    out = []
    ctx = runs[0]
    out.append(f"Runs: {len(runs)}; " + "; ".join(
        f"run {i + 1}: {r.get('date')}, commit {r.get('normlab_commit')}"
        + (f" (sources {r['normlab_source_hash'][:12]})" if r.get("normlab_source_hash") else "") + ", others used "
        f"{100 * (r.get('others_cpu') or 0):.0f}% of the CPUs, steal {100 * (r.get('steal') or 0):.0f}%"
        for i, r in enumerate(runs)))
    out.append(f"CPU: {ctx.get('cpu_model')} x{ctx.get('num_cpus')}, LLC {ctx.get('llc_bytes', 0) // 2**20} MiB; "
               f"libraries: {ctx.get('library_versions')}; threads pinned: {ctx.get('threads_pinned')}")
    trips = round_trips(runs)
    if trips:
        out.append(trips)
    out.append("")

    def get(name, key):
        return fig(by.get(name), key)

    verdicts = []
    for t in threads:
        out.append(f"### {t} thread{'s' if t > 1 else ''}")
        out.append("")
        out.append("| shape | pass | copy loop GB/s | memcpy GB/s | LN fused % copy | RMS fused % copy | LN oneDNN % copy | "
                   "LN torch % copy | RMS torch % copy | LN fused vs oneDNN | LN fused vs torch | RMS fused vs torch | "
                   "RMS/LN (fused) | LN fused vs unfused | RMS fused vs unfused |")
        out.append("|" + "---|" * 15)
        for s, resident in shapes:
            sn = s + ("/resident" if resident else "")
            label = s + (" (resident)" if resident else "")
            for ps in ("fwd", "bwd", "addfwd"):
                key = lambda impl: f"{impl}/{ps}/{sn}/threads:{t}"
                if get(key("layernorm.fused"), "median")[0] is None and get(key("rmsnorm.fused"), "median")[0] is None:
                    continue  # a pass this run did not time
                f = {col: get(f"{impl}/copy/{sn}/threads:{t}" if impl.startswith("copy.") else key(impl), figure)
                     for col, (impl, figure, _, _) in COLUMNS.items()}
                # A row above its own copy is a measurement error, no figure (normlab's verdicts name it).
                out.append(f"| {label} | {ps} | " + " | ".join(
                    "error" if (COLUMNS[col][1] == "pct_of_copy" and (by.get(key(COLUMNS[col][0])) or {}).get(
                        "measurement_error")) else fmt_range(*f[col], unit, digits)
                    for col, (_, _, unit, digits) in COLUMNS.items()) + " |")
                ln, rms, vs_o, vs_t, rvs_t, rl, lu, ru = (f[c] for c in ("ln", "rms", "vs_o", "vs_t", "rvs_t", "rl", "lu", "ru"))
                # What training runs: the fused kernel, or oneDNN's primitive where the shape class's
                # measurement chose it (then it is exactly as fast as oneDNN).
                vs_ob = get(key("layernorm.fused"), "backend_vs_onednn")
                if ps == "addfwd":
                    verdicts.append(("LayerNorm fused add+norm faster than unfused", label, t, lu, lambda v: v > 1.0, "x"))
                    verdicts.append(("RMSNorm fused add+norm faster than unfused", label, t, ru, lambda v: v > 1.0, "x"))
                    continue
                limit = RESIDENT_TARGET if resident else FWD_TARGET if ps == "fwd" else BWD_TARGET
                of = "of the resident copy" if resident else "of copy"
                verdicts.append((f"LayerNorm fused {ps} >= {limit:.0f}% {of}", label, t, ln, lambda v, l=limit: v >= l, "%"))
                verdicts.append((f"RMSNorm fused {ps} >= {limit:.0f}% {of}", label, t, rms, lambda v, l=limit: v >= l, "%"))
                verdicts.append((f"LayerNorm fused {ps} faster than oneDNN", label, t, vs_o, lambda v: v > 1.0, "x"))
                verdicts.append((f"LayerNorm as the backend runs it, {ps}: not slower than oneDNN (>= 0.97x)", label, t,
                                 vs_ob, lambda v: v >= 0.97, "x"))
                verdicts.append((f"LayerNorm fused {ps} faster than PyTorch", label, t, vs_t, lambda v: v > 1.0, "x"))
                verdicts.append((f"RMSNorm fused {ps} faster than PyTorch", label, t, rvs_t, lambda v: v > 1.0, "x"))
                verdicts.append((f"RMSNorm faster than LayerNorm ({ps}, fused)", label, t, rl, lambda v: v > 1.0, "x"))
        out.append("")

    out.append("### Verdict per target")
    out.append("")
    out.append("| target | met in | within the spread | missed (median over runs) |")
    out.append("|---|---|---|---|")
    groups = {}
    for name, s, t, vals, ok, unit in verdicts:
        groups.setdefault(name, []).append((s, t, vals, ok, unit))
    for name, cases in groups.items():
        met, spread, missed = [], [], []
        for s, t, vals, ok, unit in cases:
            v = verdict(*vals, ok)
            m = vals[0]
            label = f"{s}/t{t}" + ("" if m is None else f" ({m:.0f}%)" if unit == "%" else f" ({m:.2f}x)")
            if v == "met":
                met.append(label)
            elif v == "within the spread":
                spread.append(label)
            elif v == "no data":
                missed.append(label + " no data")
            else:
                missed.append(label)
        out.append(f"| {name} | {len(met)}/{len(cases)} | {', '.join(spread) or '-'} | {', '.join(missed) or '-'} |")
    out.append("")
    return "\n".join(out)


def variants_report(runs):
    """Which kernel variant each shape class chose in each run (context.kernel_choices), how, and by how
    much it beat the next candidate."""
    classes = []
    per = {}
    for i, r in enumerate(runs):
        for k in r.get("kernel_choices", []):
            c = k["shape_class"]
            if c not in per:
                classes.append(c)
                per[c] = []
            per[c].append((i + 1, k))
    if not classes:
        return "no kernel_choices in these runs (a run before issue 23, or NORMLAB_TUNE unrecorded)"
    out = ["| shape class | fused rows ran (runs) | backend ran | how | fastest candidate per call | next candidate | "
           "slowest candidate |", "|" + "---|" * 7]
    for c in classes:
        runs_of = per[c]
        chosen = {}
        for i, k in runs_of:
            chosen.setdefault(k["fused"], []).append(str(i))
        backend = sorted({k["backend"] for _, k in runs_of})
        how = sorted({k["source"] for _, k in runs_of})
        # the timings of the run that measured (the cached runs repeat them)
        timed = next((k for _, k in runs_of if k["source"] == "measured"), runs_of[0][1])
        secs = sorted(((t, v) for v, t in timed.get("seconds", {}).items() if t is not None))
        def us(t):
            return f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"
        best = f"{secs[0][1]} {us(secs[0][0])}" if secs else "-"
        nxt = f"{secs[1][1]} +{100 * (secs[1][0] / secs[0][0] - 1):.0f}%" if len(secs) > 1 else "-"
        worst = f"{secs[-1][1]} +{100 * (secs[-1][0] / secs[0][0] - 1):.0f}%" if len(secs) > 1 else "-"
        ran = ", ".join(f"{v} ({','.join(r)})" for v, r in chosen.items())
        out.append(f"| {c} | {ran} | {', '.join(backend)} | {', '.join(how)} | {best} | {nxt} | {worst} |")
    return "\n".join(out)


def step_report(doc):
    out = []
    peaks = doc["context"].get("fma_peak", [])
    if peaks:
        isa = peaks[0].get("isa")
        out.append(f"FMA peak (float32, {isa}, measured by `bench step` in each run): " + ", ".join(
            f"{p['threads']} thread{'s' if p['threads'] > 1 else ''} "
            f"{fmt_range(p.get('gflop_per_s'), *p.get('run_range', [p.get('gflop_per_s')] * 2), ' GFLOP/s', 1)}"
            for p in sorted(peaks, key=lambda p: p["threads"])))
        out.append("")
    trips = round_trips(doc["runs"])
    if trips:
        out.append(trips)
        out.append("")
    out += ["| model | norm | threads | step ms | GFLOP/s | % of FMA peak | norm kernels' share | step speed-up RMS/LN | "
            "operator speed-up RMS/LN | predicted step speed-up |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["benchmarks"]:
        step = fig(r, "step", 1e3)  # seconds, as the document's ranges are
        share = fig(r, "norm_share", 100)
        sp = fig(r, "step_speedup")
        op = fig(r, "op_speedup")
        pr = fig(r, "predicted_step_speedup")
        gf = fig(r, "gflop_per_s")
        pk = fig(r, "pct_of_fma_peak")
        out.append(f"| {r['model']} | {r['norm']} | {r['threads']} | {fmt_range(*step, digits=2)} | "
                   f"{fmt_range(*gf, digits=1)} | {fmt_range(*pk, '%', 1)} | {fmt_range(*share, '%', 1)} | {fmt_range(*sp, 'x', 3)} | {fmt_range(*op, 'x', 2)} | "
                   f"{fmt_range(*pr, 'x', 3)} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("norms", nargs="+", help="bench norms JSON files (one per run)")
    ap.add_argument("--step", nargs="*", default=[], help="bench step JSON files (one per run)")
    ap.add_argument("--normlab", default=os.environ.get("NORMLAB", "build/normlab"),
                    help="the normlab binary (default: $NORMLAB, else build/normlab)")
    a = ap.parse_args(argv)
    doc = merged(a.normlab, a.norms)
    print(norms_report(doc))
    print("### Kernel variants chosen")
    print()
    print(variants_report(doc["runs"]))
    print()
    if a.step:
        print("### bench step")
        print()
        print(step_report(merged(a.normlab, a.step)))


if __name__ == "__main__":
    sys.exit(main())
