#!/usr/bin/env python3
"""The variants' depth x lr grid (experiments/variants-toy.json or variants-gpt.json) as tables and claim checks.

Reads a sweep directory of `normlab sweep experiments/variants-{toy,gpt}.json` (every run's result.json
and metrics.jsonl, whatever has finished) and writes a markdown report:
  - per variant and depth: the best stable lr's final validation loss (mean over seeds), the stable
    lr window (every seed finished ok: not diverged, not collapsed) and the diverged/collapsed counts;
  - the papers' small-scale claims that this grid can test, each paired by seed with a 95% t
    interval over the seeds (none with one seed, as the gpt grid has by design: then a row gives the
    difference and its sign, and no verdict);
  - the variant selection table (loss, lr window, depth limit, and the kernel's speed from a
    `bench norms --json` document when one is given).

With --dyt-alpha DIR (a sweep of experiments/variants-dyt-alpha.json) it adds DyT's alpha-init x width
claim: per seed and width, the spread of the final loss over the alpha inits (worst − best), its trend
over log2(width) paired by seed, and the best alpha per width.

Usage: scripts/variants_report.py SWEEP_DIR [--bench results/bench-runs/variants-norms.json]
       [--dyt-alpha results/sweeps/variants-dyt-alpha] [--out results/variants.md]
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

from variants_probe import fit  # noqa: E402 (the same least-squares fit as the probe report)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANT_KEYS = ("norm", "placement", "residual_scale", "ln_scaling", "gemma_norm", "embed_norm")
# The selection table's depth limit: a variant "trains" at a depth when its best loss is within this
# many nats of the best variant's there (about 4 times the runs' resolution, 0.026).
DEPTH_MARGIN = 0.1
# Student's t, two-sided 95%, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def variant_name(cfg):
    parts = [f"{cfg['placement']}-{cfg['norm']}"]
    if cfg.get("residual_scale", "none") != "none":
        parts.append(cfg["residual_scale"])
    for k in ("ln_scaling", "gemma_norm", "embed_norm"):
        if cfg.get(k):
            parts.append(k.replace("_", "-"))
    return " ".join(parts)


def results(sweep):
    """(path, result.json) of every whole run of a sweep directory (a run being written is .partial.)."""
    for res in glob.glob(os.path.join(sweep, "runs", "**", "result.json"), recursive=True):
        if ".partial." not in res:
            yield res, json.load(open(res))


def provenance(v):
    """Which code and which CPU made a run: the commit (with the sources' hash, which names a dirty
    tree's code too) and the CPU's family / model and oneDNN's ISA. A float32 result changes with the
    ISA (other summation orders), so runs compared across two of these are said to be."""
    return (f"{v.get('git_commit', '?')} (sources {v.get('source_hash', '?')[:12]}) on {v.get('cpu', '?')} family "
            f"{v.get('cpu_family', '?')} model {v.get('cpu_model_number', '?')}, oneDNN {v.get('onednn_isa', '?')}")


def machine(v):
    """The part of the provenance a float32 result depends on. Builds whose training code is the same
    give the same bits on the same CPU (3063c6f and f26ab56 do: results/REPRODUCTION.md, "Beyond the
    article"), so a pair is marked only when its runs' CPUs or ISAs differ."""
    return (v.get("cpu_family"), v.get("cpu_model_number"), v.get("onednn_isa"), v.get("norm_kernels_isa"))


def load(sweep):
    runs = []
    for res, r in results(sweep):
        cfg = r["config"]
        metrics = []
        mpath = os.path.join(os.path.dirname(res), "metrics.jsonl")
        if os.path.exists(mpath):
            metrics = [json.loads(line) for line in open(mpath) if line.strip()]
        runs.append({"variant": variant_name(cfg), "layers": cfg["layers"], "lr": cfg["lr"], "seed": cfg["seed"],
                     "status": r["status"], "final": r.get("final_val_loss"), "diverged_step": r.get("diverged_step"),
                     "collapsed_step": r.get("collapsed_step"), "metrics": metrics, "cpu": r["versions"].get("cpu"),
                     "commit": r["versions"].get("git_commit"), "provenance": provenance(r["versions"]),
                     "machine": machine(r["versions"])})
    return runs


def ok(run):
    return run["status"] in ("ok", "completed")


def interval(diffs):
    """Mean, and the 95% t half-width (None with fewer than 2 values, or none spread: a metric that
    takes few values, equal in every seed, has no interval; a sign test would need 6 seeds)."""
    m = statistics.mean(diffs)
    if len(diffs) < 2 or statistics.stdev(diffs) == 0:
        return m, None
    if len(diffs) - 1 not in T95:
        sys.exit(f"{len(diffs)} seeds: add Student's t for {len(diffs) - 1} degrees of freedom to T95")
    return m, T95[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))


def fmt_ci(m, h, digits=4, n=1):
    if h is not None:
        return f"{m:+.{digits}f} ± {h:.{digits}f}"
    return f"{m:+.{digits}f}" + (" (1 seed: no interval)" if n < 2 else f" (the same in all {n} seeds: no interval)")


def verdict(m, h, better_when_negative=True, margin=0.0):
    """reproduced when the interval lies on the claimed side; refuted when it lies on the other;
    otherwise inconclusive; none with one seed."""
    if h is None:
        return "no verdict (one seed, or no spread to make an interval of)"
    lo, hi = m - h, m + h
    if better_when_negative:
        return "reproduced" if hi < -margin else "refuted" if lo > margin else "inconclusive"
    return "reproduced" if lo > margin else "refuted" if hi < -margin else "inconclusive"


def dyt_alpha_section(sweep):
    """DyT's alpha init against the width: does the final loss depend more on alpha as d_model grows?"""
    runs = []
    for _, r in results(sweep):
        c = r["config"]
        runs.append({"norm": c["norm"], "alpha": c.get("dyt_alpha"), "width": c["d_model"], "seed": c["seed"],
                     "status": r["status"], "final": r.get("final_val_loss"),
                     "step": r.get("diverged_step") or r.get("collapsed_step"), "cpu": r["versions"].get("cpu")})
    rel = os.path.relpath(sweep, ROOT)
    if not runs:
        return ["## DyT's alpha init against the width", "", f"`{rel}`: no finished runs yet.", ""]
    # The planned axes, so that a partial sweep never names a best alpha among the ones that ran so far.
    spec = json.load(open(os.path.join(sweep, "spec.json")))
    zips = spec["zip"] if isinstance(spec["zip"], list) else [spec["zip"]]
    planned = {k: v for z in zips for k, v in z.items()}
    widths = sorted(planned["d_model"])
    alphas = sorted(a for a in planned["dyt_alpha"] if a is not None)
    seeds = sorted(spec.get("seeds", [0]))
    cell = {(r["norm"], r["alpha"] if r["norm"] == "dyt" else None, r["width"], r["seed"]): r for r in runs}
    out = ["## DyT's alpha init against the width", "",
           f"Sweep `{rel}` (experiments/variants-dyt-alpha.json: Pre-LN DyT with alpha init {alphas} and Pre-LN "
           f"LayerNorm, d_model {widths} with d_hidden = 2 d_model, 6 layers, lr 1e-3, 1000 steps, gpt2 init): "
           f"{len(runs)} of {len(seeds) * len(widths) * (len(alphas) + 1)} runs finished, seeds {seeds}. CPU: {runs[0]['cpu']}. Final validation loss, mean over "
           "the seeds (a cell names the seeds that did not finish ok).", "",
           "| d_model | " + " | ".join(f"DyT alpha {a:g}" for a in alphas) + " | LayerNorm | best alpha per seed |",
           "|---:|" + "---:|" * (len(alphas) + 1) + "---|"]
    spread = {}  # seed -> {width: worst - best over alphas}, only where every alpha ran ok
    for w in widths:
        cells = []
        for norm, a in [("dyt", a) for a in alphas] + [("layernorm", None)]:
            rs = [cell[(norm, a, w, s)] for s in seeds if (norm, a, w, s) in cell]
            if not rs:
                cells.append("")
            elif all(ok(r) for r in rs):
                cells.append(f"{statistics.mean(r['final'] for r in rs):.4f}" + ("" if len(rs) == len(seeds) else
                                                                                  f" ({len(rs)} of {len(seeds)} seeds)"))
            else:
                cells.append(", ".join(f"seed {r['seed']} {r['status']}@{r['step']}" for r in rs if not ok(r)))
        best = []
        for s in seeds:
            rs = [cell.get(("dyt", a, w, s)) for a in alphas]
            if all(r is not None for r in rs):  # every alpha of this seed and width has finished
                finals = [r["final"] if ok(r) else math.inf for r in rs]
                best.append(f"{alphas[finals.index(min(finals))]:g}")
                spread.setdefault(s, {})[w] = max(finals) - min(finals)
        out.append(f"| {w} | " + " | ".join(cells) + f" | {', '.join(best) if best else '-'} |")
    out += ["", "The claim as the issue states it (Zhu et al. 2025 tune alpha's init for their LLMs and find that the "
            "wider model wants the smaller one; the issue: alpha's init matters more as the width grows): the spread of the final loss over the alpha inits "
            "(worst − best) grows with the width. A seed with a run that did not finish ok at some width has "
            "no spread there and is left out of the slope (its row says so). Per seed, the least-squares slope of the spread against log2(d_model); the slopes' mean with its 95% t interval "
            "over the seeds; reproduced when the interval lies above 0.", "",
            "| seed | " + " | ".join(f"spread at {w}" for w in widths) + " | slope per doubling |",
            "|---:|" + "---:|" * len(widths) + "---:|"]
    slopes = []
    for s in seeds:
        sp = spread.get(s, {})
        row_cells = [f"{sp[w]:.4f}" if w in sp else "" for w in widths]
        ws = [w for w in widths if w in sp]
        slope = ""
        if len(ws) == len(widths) and all(math.isfinite(sp[w]) for w in ws):
            b, _ = fit([math.log2(w) for w in ws], [sp[w] for w in ws])
            slopes.append(b)
            slope = f"{b:+.4f}"
        out.append(f"| {s} | " + " | ".join(row_cells) + f" | {slope} |")
    out.append("")
    if slopes:
        m, h = interval(slopes)
        out.append(f"Slope of the spread per doubling of d_model: {fmt_ci(m, h, 4, len(slopes))} (n={len(slopes)}): "
                   f"**{verdict(m, h, better_when_negative=False)}**" +
                   ("" if len(slopes) == len(seeds) and len(widths) == 4 else " (partial: not every width and seed)") + ".")
    else:
        out.append("Slope: pending (no seed has every width with every alpha finished ok).")
    out.append("")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--bench", help="a `normlab bench norms --json` document with DyT and RMSNorm rows")
    ap.add_argument("--dyt-alpha", help="a sweep directory of experiments/variants-dyt-alpha.json")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "variants.md"))
    a = ap.parse_args()
    runs = load(a.sweep)
    if not runs:
        sys.exit(f"{a.sweep}: no finished runs")
    spec = json.load(open(os.path.join(a.sweep, "spec.json")))
    if isinstance(spec["zip"], list):  # the resolved spec holds a list of zips
        spec["zip"] = spec["zip"][0]
    planned = len(spec["grid"]["layers"]) * len(spec["grid"]["lr"]) * len(spec.get("seeds", [0])) * \
        len(next(iter(spec["zip"].values())))
    variants = []
    for r in sorted(runs, key=lambda r: 0):
        if r["variant"] not in variants:
            variants.append(r["variant"])
    order = {}
    z = spec["zip"]
    for i in range(len(z["norm"])):
        cfg = {k: z[k][i] for k in z if z[k][i] is not None}
        cfg.setdefault("residual_scale", "none")
        order[variant_name(cfg)] = i
    variants.sort(key=lambda v: order.get(v, 99))
    depths = sorted({r["layers"] for r in runs})
    lrs = sorted({r["lr"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    planned_lrs, planned_seeds = sorted(spec["grid"]["lr"]), sorted(spec.get("seeds", [0]))
    by = {}
    for r in runs:
        by.setdefault((r["variant"], r["layers"], r["lr"]), []).append(r)

    base = spec["base"]
    # The spec file this sweep was made from, when the directory is named after it (results/sweeps/X <- experiments/X.json).
    spec_file = os.path.join("experiments", os.path.basename(os.path.normpath(a.sweep)) + ".json")
    spec_file = spec_file if os.path.exists(os.path.join(ROOT, spec_file)) else "its spec.json"
    out = [f"# The variants' depth x lr grid ({base['model']} model, {base.get('init', 'torch')} init)", "",
           f"Sweep `{os.path.relpath(a.sweep, ROOT)}` ({spec_file}: {len(variants)} variants x "
           f"layers {depths} x lr {lrs}, {base['steps']} steps, batch {base['batch_size']}): {len(runs)} of {planned} planned runs finished, "
           f"seeds {seeds}. Written by `scripts/variants_report.py {os.path.relpath(a.sweep, ROOT)}`.", ""]
    prov = {}
    for r in runs:
        prov.setdefault(r["provenance"], []).append(r)
    out += ["Built from and run on (a paired comparison whose two runs ran on different CPUs or ISAs says so):", ""]
    for p, rs in sorted(prov.items(), key=lambda kv: -len(kv[1])):
        cells = sorted({(r["seed"], r["layers"]) for r in rs})
        out.append(f"- {len(rs)} runs: {p}; seed/depth cells " + ", ".join(f"{sd}/{L}" for sd, L in cells))
    out += ["",
           "A point is stable when every seed that ran finished ok (not diverged, not collapsed: collapsed = "
           "within 0.05 nats of the unigram loss at the end). Best: the lowest mean final validation loss over "
           "the stable lrs.", ""]

    # ---- the grid
    summary = {}  # (variant, L) -> (best_lr, best_mean, window, diverged, collapsed)
    for L in depths:
        out += [f"## L = {L}", "", "| variant | " + " | ".join(f"lr {lr:g}" for lr in lrs) +
                " | best (lr) | stable lr window | diverged | collapsed |",
                "|---|" + "---:|" * len(lrs) + "---|---|---:|---:|"]
        for v in variants:
            cells, stable, div, col = [], [], 0, 0
            best = None
            for lr in lrs:
                rs = by.get((v, L, lr), [])
                if not rs:
                    cells.append("")
                    continue
                div += sum(r["status"] == "diverged" for r in rs)
                col += sum(r["status"] == "collapsed" for r in rs)
                if all(ok(r) for r in rs):
                    m = statistics.mean(r["final"] for r in rs)
                    stable.append(lr)
                    cells.append(f"{m:.4f}")
                    if best is None or m < best[1]:
                        best = (lr, m)
                else:
                    bad = [r for r in rs if not ok(r)]
                    cells.append(", ".join(f"{r['status']}@{r['diverged_step'] or r['collapsed_step'] or ''}"
                                           for r in bad))
            window = f"{min(stable):g} … {max(stable):g}" if stable else "none"
            missing = sum(1 for lr in lrs if not by.get((v, L, lr)))
            if missing:
                window += f" ({missing} lr not run yet)"
            summary[(v, L)] = (best, stable, div, col, missing)
            out.append(f"| {v} | " + " | ".join(cells) + f" | {best[1]:.4f} ({best[0]:g}) | {window} | {div} | {col} |"
                       if best else f"| {v} | " + " | ".join(cells) + f" | - | {window} | {div} | {col} |")
        out.append("")

    # ---- claims
    crossed = set()  # (v1, v2, L, lr) whose pairs mix CPUs

    def pairs(v1, v2, L, lr):
        """(run of v1, run of v2) per seed where both ran ok; notes a pair whose runs ran on different CPUs."""
        a_runs = {r["seed"]: r for r in by.get((v1, L, lr), []) if ok(r)}
        b_runs = {r["seed"]: r for r in by.get((v2, L, lr), []) if ok(r)}
        both = [(a_runs[s], b_runs[s]) for s in sorted(set(a_runs) & set(b_runs))]
        if any(a["machine"] != b["machine"] for a, b in both):
            crossed.add((v1, v2, L, lr))
        return both

    def paired(v1, v2, L, lr, value):
        """value(run) of v1 minus v2, paired by seed, where both ran ok."""
        return [value(a) - value(b) for a, b in pairs(v1, v2, L, lr)]

    def crossing(v1, v2, L, lr):
        return " (a pair crosses CPUs)" if (v1, v2, L, lr) in crossed else ""

    def at_step(step):
        def f(r):
            for m in r["metrics"]:
                if m.get("step") == step and "val_loss" in m:
                    return m["val_loss"]
            return float("nan")
        return f

    final = lambda r: r["final"]  # noqa: E731
    out += ["## Claims this grid tests", "",
            "Each row pairs two variants by seed at the same depth and lr (both ok), and gives the mean paired "
            "difference with its 95% t interval over the seeds. The verdict is about the claim as stated: "
            "reproduced when the interval lies on the claimed side, refuted when it lies on the other side, "
            "inconclusive when it holds 0; no verdict from one seed (the difference's sign is then all a row says).", "",
            "| claim | comparison | depth | lr | metric | difference (first − second) | verdict |",
            "|---|---|---:|---:|---|---|---|"]
    claim_lr = 1e-3

    def row(claim, v1, v2, L, lr, metric_name, fn, better_negative=True, margin=0.0, digits=4):
        if not by.get((v1, L, lr)) or not by.get((v2, L, lr)):
            out.append(f"| {claim} | {v1} vs {v2} | {L} | {lr:g} | {metric_name} | not run yet | pending |")
            return
        d = paired(v1, v2, L, lr, fn)
        d = [x for x in d if not math.isnan(x)]
        if not d:
            out.append(f"| {claim} | {v1} vs {v2} | {L} | {lr:g} | {metric_name} | not both ok | - |")
            return
        m, h = interval(d)
        out.append(f"| {claim} | {v1} vs {v2} | {L} | {lr:g} | {metric_name} | {fmt_ci(m, h, digits, len(d))} (n={len(d)}) | "
                   f"{verdict(m, h, better_negative, margin)}{crossing(v1, v2, L, lr)} |")

    for L in depths:
        # DyT matches LayerNorm: |difference| within the seed noise; "reproduced" needs the interval
        # inside +-0.01 nats (the equivalence margin), "refuted" one side outside it.
        d = paired("pre-dyt", "pre-layernorm", L, claim_lr, final)
        if d:
            m, h = interval(d)
            if h is None:
                v = "no verdict (one seed)"
            else:
                v = "reproduced" if (m - h > -0.01 and m + h < 0.01) else "refuted" if (m - h > 0.01 or m + h < -0.01) else "inconclusive"
            out.append(f"| DyT matches LayerNorm (within 0.01 nats) | pre-dyt vs pre-layernorm | {L} | {claim_lr:g} | "
                       f"final val loss | {fmt_ci(m, h, 4, len(d))} (n={len(d)}) | {v}{crossing('pre-dyt', 'pre-layernorm', L, claim_lr)} |")
    for L in depths:
        d = paired("pre-rmsnorm gemma-norm", "pre-rmsnorm", L, claim_lr, final)
        if d:
            m, h = interval(d)
            v = "no verdict (one seed)" if h is None else \
                "reproduced" if (m - h > -0.01 and m + h < 0.01) else "refuted" if (m - h > 0.01 or m + h < -0.01) else "inconclusive"
            out.append(f"| Gemma's 1 + w trains as RMSNorm (within 0.01 nats) | pre-rmsnorm gemma-norm vs pre-rmsnorm | {L} | "
                       f"{claim_lr:g} | final val loss | {fmt_ci(m, h, 4, len(d))} (n={len(d)}) | {v}"
                       f"{crossing('pre-rmsnorm gemma-norm', 'pre-rmsnorm', L, claim_lr)} |")
    # At the claims' lr and at the grid's top, where ReZero is best at every depth of the toy grid.
    for L in depths:
        for lr in sorted({claim_lr, planned_lrs[-1]}):
            row("ReZero converges faster early (no norm)", "pre-none rezero", "pre-none", L, lr,
                "val loss at step 250", at_step(250))
            row("ReZero converges faster early (vs Pre-LN)", "pre-none rezero", "pre-layernorm", L, lr,
                "val loss at step 250", at_step(250))
    out.append("")

    # LayerScale lets deep stacks train at higher lr: the largest stable lr, with and without.
    out += ["### Largest stable lr, with and without LayerScale", "",
            "| depth | pre-layernorm | pre-layernorm layerscale | post-layernorm | post-layernorm layerscale |",
            "|---:|---:|---:|---:|---:|"]
    for L in depths:
        cells = []
        for v in ("pre-layernorm", "pre-layernorm layerscale", "post-layernorm", "post-layernorm layerscale"):
            s = summary.get((v, L))
            cells.append("pending (lrs not run yet)" if not s or s[4] else f"{max(s[1]):g}" if s[1] else "none")
        out.append(f"| {L} | " + " | ".join(cells) + " |")
    out.append("")
    out += ["Per seed, log10 of the largest lr that finished ok with LayerScale over the one without (0 = the "
            "same lr, 0.48 = one step of the grid's 1-3-10 ladder up); the mean with its 95% t interval; "
            "reproduced when it lies above 0. A seed counts once every lr of both arms has run; 'top' marks a "
            "seed whose arms both reached the grid's largest lr (the difference is then capped at 0); a seed "
            "with no ok lr in an arm is named, not dropped silently.", "",
            "| depth | placement | per seed | mean (95% interval) | verdict |", "|---:|---|---|---|---|"]
    for L in depths:
        for place in ("pre", "post"):
            base, ls = f"{place}-layernorm", f"{place}-layernorm layerscale"
            diffs, cells = [], []
            for sd in planned_seeds:
                arms = []
                for v in (base, ls):
                    ran = {lr: r for lr in planned_lrs for r in by.get((v, L, lr), []) if r["seed"] == sd}
                    arms.append(None if len(ran) < len(planned_lrs) else [lr for lr, r in ran.items() if ok(r)])
                if None in arms:
                    cells.append(f"seed {sd}: pending")
                elif not arms[0] or not arms[1]:
                    cells.append(f"seed {sd}: no ok lr {'without' if not arms[0] else 'with'} LayerScale")
                else:
                    d = math.log10(max(arms[1]) / max(arms[0]))
                    diffs.append(d)
                    top = max(arms[0]) == max(arms[1]) == planned_lrs[-1]
                    cells.append(f"seed {sd}: {d:+.2f}" + (" (top)" if top else ""))
            if not diffs:
                out.append(f"| {L} | {place} | {'; '.join(cells)} | | pending |")
                continue
            m, h = interval(diffs)
            partial = len(diffs) < len(planned_seeds)
            if h is None and len(diffs) > 1:  # the ladder's steps: every seed moved the same, no interval
                v = ("higher in every seed" if m > 0 else "lower in every seed" if m < 0 else "the same in every seed") + \
                    f" ({len(diffs)}; a discrete metric, no interval)"
            else:
                v = verdict(m, h, better_when_negative=False)
            out.append(f"| {L} | {place} | {'; '.join(cells)} | {fmt_ci(m, h, 2, len(diffs))} | "
                       f"{v}{' (partial)' if partial else ''} |")
    out.append("")

    # Mix-LN's middle layers: the per-layer gradient norms of the run, averaged over its log steps.
    out += ["### Middle-layer gradients: Mix-LN against Pre-LN", "",
            "Mean over the logged steps of ||dL/dP_l|| for the middle half of the blocks (l in (L/4, 3L/4]), "
            "as train records it (metrics.jsonl `block_grad_norm`), Mix-LN over Pre-LN (a ratio > 1: Mix-LN's "
            "middle layers get larger gradients, the claim).", "",
            "Paired by seed: the mean of log(Mix-LN / Pre-LN) with its 95% t interval, shown as a ratio; "
            "reproduced when the interval lies above 1.", "",
            "| depth | lr | Mix-LN / Pre-LN (95% interval) | seeds | verdict |", "|---:|---:|---:|---:|---|"]
    for L in depths:
        for lr in lrs:
            def mid(r):
                vals = []
                for m in r["metrics"]:
                    g = m.get("block_grad_norm")
                    if g:
                        lo, hi = len(g) // 4, (3 * len(g)) // 4
                        vals.append(statistics.mean(g[lo:hi]) if hi > lo else float("nan"))
                return statistics.mean(vals) if vals else float("nan")
            mids = [(mid(a), mid(b)) for a, b in pairs("mixln-layernorm", "pre-layernorm", L, lr)]
            ratios = [x / y for x, y in mids if x > 0 and y > 0 and math.isfinite(x / y)]
            if ratios:
                logs = [math.log(q) for q in ratios]
                m, h = interval(logs)
                ci = f"{math.exp(m):.3g}" + (f" ({math.exp(m - h):.3g} … {math.exp(m + h):.3g})" if h is not None else "")
                out.append(f"| {L} | {lr:g} | {ci} | {len(ratios)} | {verdict(m, h, better_when_negative=False)}"
                           f"{crossing('mixln-layernorm', 'pre-layernorm', L, lr)} |")
    out.append("")

    # LayerNorm Scaling: the stream's growth over the blocks at the end of training.
    out += ["### Residual-stream growth at the end of training: LayerNorm Scaling and Peri-LN against Pre-LN", "",
            "||x_l|| at the last logged step (metrics.jsonl `stream_norm`), fitted as log ||x_l|| = a + rate l "
            "(exponential) and = a + p log l (power law); R² of each. Sub-exponential growth: the power law fits "
            "at least as well as the exponential.", "",
            "| variant | depth | lr | ||x_L|| / ||x_1|| | exp rate (R²) | power p (R²) |", "|---|---:|---:|---:|---|---|"]

    r2gap = {}  # (variant, depth) -> per seed R²(power) - R²(exponential)
    for L in depths:
        if L < 6:
            continue
        for v in ("pre-layernorm", "pre-layernorm ln-scaling", "sandwich-layernorm"):
            for r in by.get((v, L, claim_lr), []):
                if not ok(r) or not r["metrics"]:
                    continue
                s = r["metrics"][-1].get("stream_norm")
                if not s:
                    continue
                ls = list(range(1, len(s) + 1))
                rate, r2e = fit(ls, [math.log(x) for x in s])
                p, r2p = fit([math.log(x) for x in ls], [math.log(x) for x in s])
                out.append(f"| {v} (seed {r['seed']}) | {L} | {claim_lr:g} | {s[-1] / s[0]:.3g} | {rate:.3g} ({r2e:.2f}) | "
                           f"{p:.3g} ({r2p:.2f}) |")
                r2gap.setdefault((v, L), []).append(r2p - r2e)
    out += ["", "R² of the power law minus R² of the exponential, per seed (> 0: the growth is better described "
            "as sub-exponential); the mean with its 95% t interval. The claim holds for LayerNorm Scaling (and "
            "Peri-LN = sandwich) when the interval lies above 0; the premise (Pre-LN grows exponentially) when "
            "Pre-LN's lies below 0.", "",
            "| variant | depth | R² power − R² exponential (95% interval) | seeds | sub-exponential? |",
            "|---|---:|---|---:|---|"]
    for (v, L), gaps in sorted(r2gap.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        m, h = interval(gaps)
        out.append(f"| {v} | {L} | {fmt_ci(m, h, 3, len(gaps))} | {len(gaps)} | "
                   f"{verdict(m, h, better_when_negative=False).replace('reproduced', 'yes').replace('refuted', 'no (exponential fits better)')} |")
    out.append("")

    # ---- selection table
    speed = {}
    if a.bench:
        doc = json.load(open(a.bench))
        rows = {b["name"]: b for b in doc["benchmarks"] if b.get("status") == "ok"}
        for b in rows.values():
            if b["norm"] in ("dyt", "derf") and b["impl"] == "fused":
                rms = rows.get(b["name"].replace(f"{b['norm']}.fused", "rmsnorm.fused"))
                ln = rows.get(b["name"].replace(f"{b['norm']}.fused", "layernorm.fused"))
                if rms:
                    speed.setdefault(f"{b['norm']}_vs_rms", []).append(rms["real_time"] / b["real_time"])
                if ln:
                    speed.setdefault(f"{b['norm']}_vs_ln", []).append(ln["real_time"] / b["real_time"])

    def squash_kernel(norm, label):
        if f"{norm}_vs_rms" not in speed:
            return label
        return (f"{label}: {statistics.median(speed[norm + '_vs_rms']):.2f}x RMSNorm's speed, "
                f"{statistics.median(speed[norm + '_vs_ln']):.2f}x LayerNorm's (medians over the bench rows)")
    kernel = {
        "pre-layernorm": "LayerNorm kernel", "pre-rmsnorm": "RMSNorm kernel", "post-layernorm": "fused add + LayerNorm",
        "pre-none": "none", "pre-dyt": squash_kernel("dyt", "DyT kernel"),
        "pre-derf": squash_kernel("derf", "Derf kernel (DyT's, with erf)"), "pre-none rezero": "a scalar multiply per sublayer",
        "pre-layernorm skipinit": "LayerNorm + a scalar multiply per sublayer",
        "pre-layernorm layerscale": "LayerNorm + a per-channel multiply per sublayer",
        "post-layernorm layerscale": "unfused add + LayerNorm, a per-channel multiply",
        "mixln-layernorm": "LayerNorm (fused add + norm in the Post-LN blocks)",
        "pre-layernorm ln-scaling": "LayerNorm + a scale", "postsub-rmsnorm": "RMSNorm on each branch",
        "sandwich-layernorm": "two LayerNorms per sublayer", "pre-rmsnorm gemma-norm": "RMSNorm + a d-element add"}
    out += ["## Variant selection (measured here)", "",
            "For each variant: its best final loss and stable lr window at each depth; its depth limit, the deepest "
            f"depth at which its best loss is within {DEPTH_MARGIN} nats of the best variant's at that depth (a stable "
            "run that hardly learned does not count; the runs' resolution is ~0.026); and what its norm costs.", "",
            "| variant | " + " | ".join(f"L={L}: best (lr) / window" for L in depths) + " | depth limit | kernel |",
            "|---|" + "---|" * len(depths) + "---:|---|"]
    best_at = {L: min((summary[(v, L)][0][1] for v in variants if summary.get((v, L)) and summary[(v, L)][0]),
                      default=math.inf) for L in depths}
    for v in variants:
        cells, limit = [], "none"
        for L in depths:
            s = summary.get((v, L))
            if s and s[0]:
                cells.append(f"{s[0][1]:.4f} ({s[0][0]:g}) / {min(s[1]):g}…{max(s[1]):g}" + (" (partial)" if s[4] else ""))
                if s[0][1] <= best_at[L] + DEPTH_MARGIN:
                    limit = str(L) + (" (partial)" if s[4] else "")
            else:
                cells.append("no stable lr" if s else "not run")
        out.append(f"| {v} | " + " | ".join(cells) + f" | {limit} | {kernel.get(v, '')} |")
    out.append("")
    if a.dyt_alpha:
        out += dyt_alpha_section(a.dyt_alpha)
    with open(a.out + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
