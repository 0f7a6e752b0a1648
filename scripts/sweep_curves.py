#!/usr/bin/env python3
"""A metric of metrics.jsonl at chosen steps, for every point of a `normlab sweep` directory,
as a markdown table: mean ± std over seeds (the axes are the run path's key=value parts, seed
excluded). `normlab sweep summarize` tabulates result.json's final numbers; this script is for the
curves behind them (the warm-up table's losses at 200/500/1000/2000/3000 steps, the QK-Norm
table's attention logits and entropies by step).

A per-layer field (a list: stream_norm, block_grad_norm, attn_entropy, attn_max_logit) is reduced
over the layers first with --layers max|min|mean|first|last. A run that diverged before a step has
no value there: the cell counts the seeds it averages ("n=2/3") when some are missing, and a
non-finite value (null in metrics.jsonl) shows as "nan".

Examples:
  python3 scripts/sweep_curves.py results/sweeps/warmup-torch --steps 200,500,1000,2000,3000
  python3 scripts/sweep_curves.py results/sweeps/gpt-lr-qknorm-torch --field attn_max_logit --layers max \\
      --steps 500,1000,2000,3000 --where lr=3e-3,1e-2 --transpose
"""
import argparse
import json
import math
import os
import statistics
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="a sweep directory (holds runs/)")
    p.add_argument("--steps", required=True, help="comma-separated steps (eval steps of the runs)")
    p.add_argument("--field", default="val_loss", help="a field of metrics.jsonl (default val_loss)")
    p.add_argument("--layers", default="max", choices=["max", "min", "mean", "first", "last"],
                   help="how a per-layer field is reduced over the layers (default max)")
    p.add_argument("--where", action="append", default=[],
                   help="key=v1,v2: keep only points whose axis key has one of these values (repeatable)")
    p.add_argument("--digits", type=int, default=4, help="decimals in the table (default 4)")
    p.add_argument("--transpose", action="store_true", help="one row per point, one column per step")
    return p.parse_args(argv)


def axes_of(rel):
    """runs/lr=0.001/placement=pre/seed=0 -> ({'lr': '0.001', 'placement': 'pre'}, '0')"""
    axes, seed = {}, None
    for part in rel.split(os.sep):
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        if k == "seed":
            seed = v
        else:
            axes[k] = v
    return axes, seed


def reduce_layers(v, how):
    if not isinstance(v, list):
        return v
    vals = [math.nan if x is None else float(x) for x in v]
    if not vals:
        return None
    if how == "first":
        return vals[0]
    if how == "last":
        return vals[-1]
    if any(math.isnan(x) for x in vals):
        return math.nan
    return {"max": max, "min": min, "mean": statistics.fmean}[how](vals)


def matches(axes, where):
    for cond in where:
        key, _, values = cond.partition("=")
        allowed = values.split(",")
        if key not in axes:
            return False
        try:
            if not any(math.isclose(float(axes[key]), float(a), rel_tol=1e-9) for a in allowed):
                return False
        except ValueError:
            if axes[key] not in allowed:
                return False
    return True


_SPEC = {}


def spec_axes(sweep):
    """The spec's varied axes in its order, each with its values in the spec's order."""
    if sweep not in _SPEC:
        axes = []
        try:
            with open(os.path.join(sweep, "spec.json")) as f:
                spec = json.load(f)
            for k, vs in spec.get("grid", {}).items():
                axes.append((k, vs))
            zips = spec.get("zip", [])
            for group in (zips if isinstance(zips, list) else [zips]):
                axes.extend(group.items())
        except (OSError, ValueError):
            pass
        _SPEC[sweep] = axes
    return _SPEC[sweep]


def axis_rank(sweep, key):
    names = [k for k, _ in spec_axes(sweep)]
    return (names.index(key), key) if key in names else (len(names), key)


def value_rank(values, v):
    for i, x in enumerate(values):
        try:
            if math.isclose(float(x), float(v), rel_tol=1e-9):
                return i
        except (TypeError, ValueError):
            if str(x).lower() == str(v).lower():
                return i
    return len(values)


def spec_order(sweep, axes):
    """Sort key of a point: the spec's axes in order, each by the spec's order of its values."""
    order = [value_rank(vs, axes[k]) for k, vs in spec_axes(sweep) if k in axes]
    rest = [f"{k}={v}" for k, v in sorted(axes.items()) if k not in dict(spec_axes(sweep))]
    return order, rest


def main(argv=None):
    args = parse_args(argv)
    steps = [int(s) for s in args.steps.split(",")]
    runs_dir = os.path.join(args.sweep, "runs")
    if not os.path.isdir(runs_dir):
        sys.exit(f"error: {runs_dir} is not a directory (not a sweep directory?)")
    points = {}  # axes tuple -> {step: [values]}
    seeds = {}
    for root, _dirs, files in os.walk(runs_dir):
        if "metrics.jsonl" not in files or ".partial." in root:
            continue
        axes, seed = axes_of(os.path.relpath(root, runs_dir))
        if not matches(axes, args.where):
            continue
        key = tuple(sorted(axes.items()))
        seeds.setdefault(key, set()).add(seed)
        cells = points.setdefault(key, {s: [] for s in steps})
        with open(os.path.join(root, "metrics.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("step") in cells and args.field in rec:
                    v = reduce_layers(rec[args.field], args.layers)
                    cells[rec["step"]].append(math.nan if v is None else float(v))
    if not points:
        sys.exit(f"error: no finished runs with metrics.jsonl under {runs_dir} match")
    keys = sorted(points, key=lambda k: spec_order(args.sweep, dict(k)))
    names = [" ".join(f"{k}={v}" for k, v in sorted(key, key=lambda kv: axis_rank(args.sweep, kv[0]))) or "all"
             for key in keys]
    field = args.field + (f" ({args.layers} over layers)" if args.field in
                          ("stream_norm", "block_grad_norm", "attn_entropy", "attn_max_logit") else "")
    print(f"{field}: mean ± std over seeds ({args.sweep})\n")
    def cell(key, s):
        vals = points[key][s]
        if not vals:
            return "—"
        finite = [v for v in vals if not math.isnan(v)]
        if len(finite) < len(vals):
            return "nan"
        text = f"{statistics.fmean(finite):.{args.digits}f}"
        if len(finite) > 1:
            text += f" ± {statistics.stdev(finite):.{args.digits}f}"
        if len(vals) < len(seeds[key]):
            text += f" (n={len(vals)}/{len(seeds[key])})"
        return text

    if args.transpose:
        print("| point | " + " | ".join(f"step {s}" for s in steps) + " |")
        print("|---|" + "---:|" * len(steps))
        for key, name in zip(keys, names):
            print(f"| {name} | " + " | ".join(cell(key, s) for s in steps) + " |")
        return 0
    print("| step | " + " | ".join(names) + " |")
    print("|---:|" + "---|" * len(names))
    for s in steps:
        print(f"| {s} | " + " | ".join(cell(key, s) for key in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
