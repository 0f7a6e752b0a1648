#!/usr/bin/env python3
"""Tables and target verdicts for results/bench-cpu.md from several `normlab bench norms` runs.

    python3 scripts/bench_report.py results/bench-runs/norms-{1,2,3}.json [--step results/bench-runs/step-{1,2,3}.json]

Every figure is the median over the runs of that row's own figure (each run's figure is itself a
median over its timed calls); [a-b] is the range over the runs. A target counts as met only when
every run meets it ("met"); when the median meets it but some run does not, the verdict is
"within the spread" (a claimed win smaller than the run-to-run spread is not a win).
"""
import argparse
import json
import statistics
import sys

# Issue 23: no fused kernel below 80% of the copy it is held to at memory-bound shapes, forward
# and backward (the previous round's forward target was 90%).
FWD_TARGET, BWD_TARGET = 80.0, 80.0
RESIDENT_TARGET = 80.0  # the training step's shapes, against the copy loop on the same cache-resident buffers


def load(paths):
    runs = []
    for p in paths:
        with open(p) as fh:
            runs.append(json.load(fh))
    return runs


def rows_by_name(run):
    return {b["name"]: b for b in run["benchmarks"]}


def round_trips(runs):
    """The cache-line round trip between threads 0 and 1 at each run's start / end (ns), or ''."""
    per_run = []
    for i, r in enumerate(runs):
        v = [x for x in r["context"].get("thread_round_trip_ns", []) if x is not None]
        if v:
            per_run.append(f"run {i + 1} " + " / ".join(f"{x:.0f}" for x in v))
    if not per_run:
        return ""
    return ("Threads 0 and 1 cache-line round trip, ns at the start / end (above 200: the vCPUs far apart, "
            "multi-threaded figures slower): " + "; ".join(per_run))


def fig(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, None, None
    return statistics.median(vals), min(vals), max(vals)


def fmt_range(m, lo, hi, unit="", digits=0):
    if m is None:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(m)}{unit} [{f.format(lo)}-{f.format(hi)}]"


def pct_of_copy(b):
    c = b.get("counters", {})
    # a kernel that streams its stores is held to the faster of the two copies
    if b.get("streaming_stores"):
        return min(c.get("pct_of_copy_loop") or 1e9, c.get("pct_of_memcpy") or 1e9)
    return c.get("pct_of_copy_loop")


def verdict(vals, ok):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "no data"
    if all(ok(v) for v in vals):
        return "met"
    if ok(statistics.median(vals)):
        return "within the spread"
    return "**missed**"


def norms_report(runs):
    by = [rows_by_name(r) for r in runs]
    names = list(by[0].keys())
    # (shape, resident): a resident row's name has "/resident" after its shape
    shapes, threads = [], []
    for n in names:
        b = by[0][n]
        s = ("x".join(str(x) for x in b["shape"]), bool(b.get("resident")))
        if s not in shapes:
            shapes.append(s)
        if b["threads"] not in threads:
            threads.append(b["threads"])
    out = []
    ctx = runs[0]["context"]
    out.append(f"Runs: {len(runs)}; " + "; ".join(
        f"run {i + 1}: {r['context'].get('date')}, commit {r['context'].get('normlab_commit')}, others used "
        f"{100 * (r['context'].get('others_cpu') or 0):.0f}% of the CPUs, steal {100 * (r['context'].get('steal') or 0):.0f}%"
        for i, r in enumerate(runs)))
    out.append(f"CPU: {ctx.get('cpu_model')} x{ctx.get('num_cpus')}, LLC {ctx.get('llc_bytes', 0) // 2**20} MiB; "
               f"libraries: {ctx.get('library_versions')}; threads pinned: {ctx.get('threads_pinned')}")
    trips = round_trips(runs)
    if trips:
        out.append(trips)
    out.append("")

    def get(name, key):
        vals = []
        for b in by:
            r = b.get(name)
            if r is None or r.get("status") != "ok":
                vals.append(None)
                continue
            vals.append(key(r))
        return vals

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
                if all(v is None for v in get(key("layernorm.fused"), lambda r: 1) + get(key("rmsnorm.fused"), lambda r: 1)):
                    continue  # a pass this run did not time
                copy = f"copy.loop/copy/{sn}/threads:{t}"
                memc = f"copy.memcpy/copy/{sn}/threads:{t}"
                gbs = lambda r: r["counters"]["gb_per_s"]
                cl = fig(get(copy, gbs))
                mc = fig(get(memc, gbs))
                ln = get(key("layernorm.fused"), pct_of_copy)
                rms = get(key("rmsnorm.fused"), pct_of_copy)
                lno = get(key("layernorm.onednn"), pct_of_copy)
                lnt = get(key("layernorm.torch"), pct_of_copy)
                rmst = get(key("rmsnorm.torch"), pct_of_copy)
                vs_o = get(key("layernorm.fused"), lambda r: r["counters"].get("vs_onednn"))
                # What training runs: the fused kernel, or oneDNN's primitive where the shape class's
                # measurement chose it (then it is exactly as fast as oneDNN).
                vs_ob = get(key("layernorm.fused"), lambda r: 1.0 if r.get("backend_variant") == "onednn"
                            else r["counters"].get("vs_onednn"))
                vs_t = get(key("layernorm.fused"), lambda r: r["counters"].get("vs_torch"))
                rvs_t = get(key("rmsnorm.fused"), lambda r: r["counters"].get("vs_torch"))
                rl = get(key("rmsnorm.fused"), lambda r: r["counters"].get("rms_over_ln"))
                lu = get(key("layernorm.fused"), lambda r: r["counters"].get("vs_unfused"))
                ru = get(key("rmsnorm.fused"), lambda r: r["counters"].get("vs_unfused"))
                out.append(f"| {label} | {ps} | {fmt_range(*cl, digits=1)} | {fmt_range(*mc, digits=1)} | "
                           f"{fmt_range(*fig(ln), '%')} | {fmt_range(*fig(rms), '%')} | {fmt_range(*fig(lno), '%')} | "
                           f"{fmt_range(*fig(lnt), '%')} | {fmt_range(*fig(rmst), '%')} | "
                           f"{fmt_range(*fig(vs_o), 'x', 2)} | {fmt_range(*fig(vs_t), 'x', 2)} | "
                           f"{fmt_range(*fig(rvs_t), 'x', 2)} | {fmt_range(*fig(rl), 'x', 2)} | "
                           f"{fmt_range(*fig(lu), 'x', 2)} | {fmt_range(*fig(ru), 'x', 2)} |")
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
            v = verdict(vals, ok)
            m = fig(vals)[0]
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
        for k in r["context"].get("kernel_choices", []):
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


def step_report(runs):
    by = [rows_by_name(r) for r in runs]
    out = []
    peaks = {}  # threads -> GFLOP/s of each run's FMA loop
    for r in runs:
        for p in r["context"].get("fma_peak", []):
            peaks.setdefault(p["threads"], []).append(p.get("gflop_per_s"))
    if peaks:
        isa = runs[0]["context"]["fma_peak"][0].get("isa")
        out.append(f"FMA peak (float32, {isa}, measured by `bench step` in each run): " + ", ".join(
            f"{t} thread{'s' if t > 1 else ''} {fmt_range(*fig(v), ' GFLOP/s', 1)}" for t, v in sorted(peaks.items())))
        out.append("")
    trips = round_trips(runs)
    if trips:
        out.append(trips)
        out.append("")
    out += ["| model | norm | threads | step ms | GFLOP/s | % of FMA peak | norm kernels' share | step speed-up RMS/LN | "
            "operator speed-up RMS/LN | predicted step speed-up |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in by[0]:
        def get(key):
            return [key(b[name]) if name in b else None for b in by]
        r0 = by[0][name]
        step = fig(get(lambda r: r["aggregates"]["median"]))
        share = fig(get(lambda r: 100 * r["counters"]["norm_share"] if r["counters"].get("norm_share") is not None else None))
        sp = fig(get(lambda r: r["counters"].get("step_speedup")))
        op = fig(get(lambda r: r["counters"].get("op_speedup")))
        pr = fig(get(lambda r: r["counters"].get("predicted_step_speedup")))
        gf = fig(get(lambda r: r["counters"].get("gflop_per_s")))
        pk = fig(get(lambda r: r["counters"].get("pct_of_fma_peak")))
        out.append(f"| {r0['model']} | {r0['norm']} | {r0['threads']} | {fmt_range(*step, digits=2)} | "
                   f"{fmt_range(*gf, digits=1)} | {fmt_range(*pk, '%', 1)} | {fmt_range(*share, '%', 1)} | {fmt_range(*sp, 'x', 3)} | {fmt_range(*op, 'x', 2)} | "
                   f"{fmt_range(*pr, 'x', 3)} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("norms", nargs="+", help="bench norms JSON files (one per run)")
    ap.add_argument("--step", nargs="*", default=[], help="bench step JSON files (one per run)")
    a = ap.parse_args(argv)
    runs = load(a.norms)
    print(norms_report(runs))
    print("### Kernel variants chosen")
    print()
    print(variants_report(runs))
    print()
    if a.step:
        print("### bench step")
        print()
        print(step_report(load(a.step)))


if __name__ == "__main__":
    sys.exit(main())
