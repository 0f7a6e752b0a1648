#!/usr/bin/env python3
"""Signal propagation at init for every normalization variant (docs/variants.md), from `normlab probe`.

For each variant of experiments/variants-toy.json (the same zip of keys) and each depth, runs
`normlab probe --json` (3 seeds, toy model, gpt2 init) and writes a markdown report: per-layer
stream norm growth, per-layer weight-gradient norms and the identity share, plus the two
depth-growth claims (LayerNorm Scaling's sub-exponential variance growth, Peri-LN's linear growth)
as fits of log ||x_l|| against l (exponential) and log l (power law).

Usage: scripts/variants_probe.py [--normlab build/normlab] [--depths 6,20,48] [--out results/variants-probe.md]
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def variants(spec_path):
    """The zip of experiments/variants-toy.json as a list of {key: value} (nulls left out)."""
    spec = json.load(open(spec_path))
    z = spec["zip"]
    keys = list(z)
    out = []
    for i in range(len(z[keys[0]])):
        out.append({k: z[k][i] for k in keys if z[k][i] is not None})
    return out


def name_of(v):
    parts = [f"{v['placement']}-{v['norm']}"]
    for k in ("residual_scale", "ln_scaling", "gemma_norm", "embed_norm"):
        if k in v:
            parts.append(v[k] if isinstance(v[k], str) else k.replace("_", "-"))
    return " ".join(parts)


def probe(normlab, v, layers, seeds):
    cmd = [normlab, "probe", "--json", "--seeds", str(seeds), "--layers", str(layers), "--model", "toy",
           "--init", "gpt2"]
    for k, val in v.items():
        cmd += [f"--{k}", str(val).lower() if isinstance(val, bool) else str(val)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["config"], " ".join(cmd)


def fit(xs, ys):
    """Least squares y = a + b x: (b, R^2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    syy = sum((y - my) ** 2 for y in ys)
    b = sxy / sxx if sxx else 0.0
    r2 = (sxy * sxy) / (sxx * syy) if sxx and syy else 1.0
    return b, r2


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--normlab", default=os.path.join(ROOT, "build", "normlab"))
    ap.add_argument("--depths", default="6,20,48")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--spec", default=os.path.join(ROOT, "experiments", "variants-toy.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "variants-probe.md"))
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    vs = variants(a.spec)
    results = {}  # (name, L) -> probe config json
    commands = []
    for v in vs:
        for L in depths:
            results[(name_of(v), L)], cmd = probe(a.normlab, v, L, a.seeds)
            commands.append(cmd.replace(a.normlab, "normlab"))
    names = [name_of(v) for v in vs]
    m = lambda s: s["mean"]  # noqa: E731

    lines = ["# Signal propagation at init, every variant (toy model, gpt2 init)", "",
             f"Measured by `scripts/variants_probe.py --depths {a.depths} --seeds {a.seeds}` on {cpu_name()} "
             f"(each cell the mean over {a.seeds} seeds of `normlab probe`; every command is listed at the end). "
             "d_model 64, d_hidden 128, batch 16 x 16 tokens of the synthetic task.", "",
             "Columns: ||x_L|| / ||x_0|| the residual stream's growth over the stack (mean token norm after the last "
             "block over the embeddings'); exp rate and power p: least-squares fits of log ||x_l|| against l "
             "(||x_l|| ~ e^(rate l)) and against log l (||x_l|| ~ l^p) over the blocks, with their R^2; "
             "grad first / mid / last: ||dL/dP_l|| (the Frobenius norm of block l's parameter gradient) at "
             "l = 1, L/2, L; share: the identity's share of dL/dx_{l-1}, ||id|| / (||id|| + ||F||), mean over "
             "the blocks.", ""]
    for L in depths:
        lines += [f"## L = {L}", "",
                  "| variant | loss at init | ‖x_L‖/‖x_0‖ | exp rate (R²) | power p (R²) | grad first | grad mid | "
                  "grad last | last/first | share |",
                  "|---|---:|---:|---|---|---:|---:|---:|---:|---:|"]
        for n in names:
            c = results[(n, L)]
            layers = c["layers"]
            act = [m(l["act_norm"]) for l in layers]
            g = [m(l["block_grad_norm"]) for l in layers]
            share = sum(m(l["identity_share"]) for l in layers) / len(layers)
            ls = list(range(1, len(act) + 1))
            rate, r2e = fit(ls, [math.log(x) for x in act])
            p, r2p = fit([math.log(l) for l in ls], [math.log(x) for x in act])
            growth = act[-1] / m(c["embed_norm"])
            lines.append(f"| {n} | {m(c['loss']):.3f} | {growth:.3g} | {rate:.3g} ({r2e:.2f}) | {p:.3g} ({r2p:.2f}) | "
                         f"{g[0]:.3g} | {g[len(g) // 2 - 1]:.3g} | {g[-1]:.3g} | {g[-1] / g[0]:.3g} | {share:.3f} |")
        lines.append("")
    lines += ["## Per-layer profiles at the deepest depth", "",
              f"||x_l|| and ||dL/dP_l|| at l = 1 .. {depths[-1]} (every 4th layer and the last), L = {depths[-1]}.", ""]
    L = depths[-1]
    pick = sorted(set(list(range(0, L, 4)) + [L - 1]))
    lines.append("| variant | " + " | ".join(f"l={i + 1}" for i in pick) + " |")
    lines.append("|---|" + "---:|" * len(pick))
    for n in names:
        layers = results[(n, L)]["layers"]
        lines.append(f"| {n} ‖x‖ | " + " | ".join(f"{m(layers[i]['act_norm']):.3g}" for i in pick) + " |")
        lines.append(f"| {n} ‖dL/dP‖ | " + " | ".join(f"{m(layers[i]['block_grad_norm']):.3g}" for i in pick) + " |")
    lines += ["", "## Commands", "", "```"] + commands + ["```", ""]
    with open(a.out + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
