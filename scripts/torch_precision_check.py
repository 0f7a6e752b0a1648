#!/usr/bin/env python3
"""normlab's low-precision norm worksheets against PyTorch on the CPU, value by value.

For every row (the built-in handcalc cases and random rows of several sizes and scales), every
format (fp16, bf16), every norm_compute mode (format, fp32) and both norms, this runs

    normlab handcalc --precision P --norm-compute M --json ...

and feeds the same row through PyTorch:
  format: the composite written out at the tensor's dtype, x.pow(2) -> .mean(-1) -> + eps ->
          torch.rsqrt -> x * r -> * gamma (LayerNorm: .mean(-1) -> x - mean -> .pow(2) -> .mean(-1)
          -> + eps -> torch.rsqrt -> * rstd -> * gamma -> + beta). Every intermediate must equal
          normlab's stored value within one ulp of the step's format (a float32 sum's order,
          PyTorch's vectorized cascade against normlab's float64-then-float32 sum, could move one);
          the report counts the worksheets equal bit for bit and says which steps differ.
  fp32:   the same composite on x.float() with only y rounded (.to(dtype)), compared step by step;
          and F.layer_norm / F.rms_norm on the half tensors, compared on y (PyTorch's fused CPU
          kernels compute x * rstd + (-mean * rstd) and F.rms_norm rounds xhat before gamma: the
          report gives their largest distance in ulps).

Before the rows, it checks the model handcalc uses for torch.rsqrt on every positive finite fp16
and bf16 value: a one-element tensor (a row's statistic) takes PyTorch's scalar path, which rounds
twice (sqrt to the format, then 1/sqrt); a long tensor takes the vector path, which rounds once.
And two more models on every value: `+ eps` adds eps rounded to the format (against eps added as
float32, the model before), and `r.pow(3)` (torch.rsqrt's backward, normlab's training) rounds
r^3 once in fp16 and twice in bf16. Then the training composite's backward: `normlab gradcheck
--op layernorm|rmsnorm --precision P --norm-compute format --dump` (the cpu backend's gradients of
x, gamma, beta, stored in the format) against PyTorch's autograd through the composite written out
at that dtype, bit for bit, for three shapes and four seeds.

Distances are counted on the format's grid (ordered bit patterns), so 1 means adjacent values.
Needs PyTorch (pip install torch); never needed by normlab's tests. Exit 0 when every composite
value is within one ulp, every non-finite value agrees, the models above hold on every value and
every backward gradient is PyTorch's bit for bit, 1 otherwise.

  python3 scripts/torch_precision_check.py --normlab build/normlab
  python3 scripts/torch_precision_check.py --normlab build/normlab --random 20 --json out.json
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--normlab", default="build/normlab", help="the normlab binary")
    ap.add_argument("--random", type=int, default=12, help="random rows per (d, scale) (default 12)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the full report here")
    return ap.parse_args()


CASES = ["worksheet", "square-overflow", "all-equal", "small-4096", "large-mean"]
RANDOM_SHAPES = [(4, 1.0), (64, 1.0), (768, 1.0), (768, 30.0), (1000, 1e-3), (4096, 0.05)]


def value(v):
    return float(v)  # numbers, or the strings "inf", "-inf", "nan"


def ordered(t, torch):
    """Bit patterns of t (in its own dtype) as integers that count grid steps."""
    if t.dtype == torch.float32:
        b = t.contiguous().view(torch.int32).to(torch.int64)
        mag = b & 0x7FFFFFFF
    else:
        b = t.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
        mag = b & 0x7FFF
    neg = b < 0 if t.dtype == torch.float32 else (b & 0x8000) != 0
    return torch.where(neg, -mag, mag)


def distance(a, b, torch):
    """Largest grid distance between two tensors of one dtype; NaN == NaN; inf only equals inf."""
    an, bn = torch.isnan(a.float()), torch.isnan(b.float())
    if bool((an != bn).any()):
        return math.inf
    keep = ~an
    if not bool(keep.any()):
        return 0
    a, b = a[keep], b[keep]
    ai, bi = torch.isinf(a.float()), torch.isinf(b.float())
    if bool((ai | bi).any()) and not bool((a.float()[ai | bi] == b.float()[ai | bi]).all()):
        return math.inf
    return int((ordered(a, torch) - ordered(b, torch)).abs().max())


def torch_chain(torch, norm, dt, mode, x, gamma, beta, eps):
    """The intermediates PyTorch stores, by normlab's step names."""
    xs = torch.tensor(x, dtype=torch.float64).to(dt)
    g = torch.tensor(gamma, dtype=torch.float64).to(dt)
    b = torch.tensor(beta, dtype=torch.float64).to(dt)
    steps = {"x": xs}
    h = xs if mode == "format" else xs.float()
    gg = g if mode == "format" else g.float()
    bb = b if mode == "format" else b.float()
    if norm == "rmsnorm":
        sq = h.pow(2)
        ms = sq.mean(-1, keepdim=True)
        ve = ms + eps
        r = torch.rsqrt(ve)
        xh = h * r
        y = xh * gg
        steps.update({"x^2": sq, "mean(x^2)": ms, "mean(x^2) + eps": ve, "r": r, "xhat": xh,
                      "y": y.to(dt)})
    else:
        mu = h.mean(-1, keepdim=True)
        xc = h - mu
        sq = xc.pow(2)
        var = sq.mean(-1, keepdim=True)
        ve = var + eps
        r = torch.rsqrt(ve)
        xh = xc * r
        yg = xh * gg
        y = yg + bb
        steps.update({"mean": mu, "x - mean": xc, "(x - mean)^2": sq, "var": var, "var + eps": ve,
                      "rstd": r, "xhat": xh, "gamma * xhat": yg, "y": y.to(dt)})
    return steps, xs, g, b


def check_rsqrt(torch):
    """Mismatches of torch.rsqrt against the two rounding models, over every positive finite value."""
    out = {}
    for name, dt, top in (("fp16", torch.float16, 0x7C00), ("bf16", torch.bfloat16, 0x7F80)):
        vals = torch.arange(1, top, dtype=torch.int32).to(torch.int16).view(dt)
        f = vals.float()
        once = (1.0 / torch.sqrt(f.double())).float().to(dt)   # 1/sqrt in float, one rounding
        twice = (torch.ones_like(vals) / torch.sqrt(f.double()).float().to(dt))
        scalar_twice = scalar_once = 0
        for i in range(len(vals)):
            r = torch.rsqrt(vals[i:i + 1].clone())
            scalar_twice += distance(r, twice[i:i + 1], torch) != 0
            scalar_once += distance(r, once[i:i + 1], torch) != 0
        vector = torch.rsqrt(vals)
        out[name] = {"values": len(vals), "scalar_vs_twice": scalar_twice, "scalar_vs_once": scalar_once,
                     "vector_vs_once": int((ordered(vector, torch) != ordered(once, torch)).sum())}
    return out


def check_scalar_ops(torch):
    """Two models behind the composite, over every finite non-negative value v of each format:
    `v + eps` (eps a Python scalar) against eps rounded to the format first and against eps added
    as float32; and `r.pow(3)` (torch.rsqrt's backward) against one rounding of r^3 and against two
    (r * r, then * r), on a long tensor and on one-element tensors (every 97th value)."""
    out = {}
    for name, dt, top in (("fp16", torch.float16, 0x7C00), ("bf16", torch.bfloat16, 0x7F80)):
        vals = torch.arange(0, top, dtype=torch.int32).to(torch.int16).view(dt)
        f = vals.float()
        eps_rows = []
        for eps in (1e-5, 1e-6, 1e-8, 1e-12):
            got = ordered(vals + eps, torch)
            rounded = ordered((f + torch.tensor(eps, dtype=torch.float32).to(dt).float()).to(dt), torch)
            float32 = ordered((f + torch.tensor(eps, dtype=torch.float32)).to(dt), torch)
            eps_rows.append({"eps": eps, "values": len(vals), "vs_rounded_eps": int((got != rounded).sum()),
                             "vs_float32_eps": int((got != float32).sum())})
        pos = vals[1:]
        once = ordered((pos.double() ** 3).float().to(dt), torch)
        twice = ordered(((pos.float() * pos.float()).to(dt).float() * pos.float()).to(dt), torch)
        vector = ordered(pos.pow(3), torch)
        single = ordered(torch.cat([pos[i:i + 1].pow(3) for i in range(0, len(pos), 97)]), torch)
        out[name] = {"eps_add": eps_rows, "pow3_values": len(pos),
                     "pow3_vs_once": int((vector != once).sum()), "pow3_vs_twice": int((vector != twice).sum()),
                     "pow3_single": len(single), "pow3_single_vs_once": int((single != once[::97]).sum()),
                     "pow3_single_vs_twice": int((single != twice[::97]).sum())}
    return out


BACKWARD_SHAPES = ["2x5x8", "4x4x64", "2x8x768"]


def composite_backward(torch, norm, dt, x, g, b, r, eps):
    """PyTorch's autograd through the composite at dtype dt, from float32 leaves cast to dt (as
    float32 master weights are): the leaves' gradients. rsqrt runs on the statistics padded to a
    whole number of 64 values, so that every row takes the vector path (one rounding), as a
    training batch's rows do and as normlab's training composite models them."""
    leaves = [t.float().requires_grad_(True) for t in (x, g, b)]
    xh, gh, bh = (t.to(dt) for t in leaves)
    c = xh - xh.mean(-1, keepdim=True) if norm == "layernorm" else xh
    v = c.pow(2).mean(-1, keepdim=True) + eps
    flat = v.reshape(-1)
    pad = (-flat.numel()) % 64
    rs = torch.rsqrt(torch.cat([flat, torch.ones(pad, dtype=dt)]))[:flat.numel()].reshape(v.shape)
    y = c * rs * gh + bh if norm == "layernorm" else c * rs * gh
    y.backward(r.float().to(dt))
    return [t.grad for t in leaves]


def check_backward(torch, binary, seeds):
    """normlab's training composite backward (gradcheck --dump --precision P --norm-compute format:
    the cpu backend's gradients of each case's leaves, stored in the format) against PyTorch's
    autograd through the same composite, bit for bit on the format's grid, per leaf."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.json")
        for fmt, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            for norm in ("layernorm", "rmsnorm"):
                for shape in BACKWARD_SHAPES:
                    for seed in seeds:
                        subprocess.run([binary, "gradcheck", "--op", norm, "--precision", fmt, "--norm-compute",
                                        "format", "--shape", shape, "--seed", str(seed), "--dump", path,
                                        "--force", "-q"], capture_output=True, text=True)
                        with open(path) as f:
                            doc = json.load(f)
                        ins = {i["name"]: i for i in doc["inputs"]}
                        tensor = lambda i: torch.tensor(i["values"], dtype=torch.float64).reshape(i["shape"])
                        x, g = tensor(ins["x"]), tensor(ins["gamma"])
                        b = tensor(ins["beta"]) if "beta" in ins else torch.zeros_like(g)
                        r = torch.tensor(doc["upstream"]["values"], dtype=torch.float64).reshape(
                            doc["upstream"]["shape"])
                        theirs = composite_backward(torch, norm, dt, x, g, b, r, doc["hyperparameters"]["eps"])
                        row = {"format": fmt, "norm": norm, "shape": shape, "seed": seed}
                        for name, t in zip(("x", "gamma", "beta"), theirs):
                            if name not in ins:
                                continue
                            mine = torch.tensor(ins[name]["f32_analytic_grad"], dtype=torch.float64).float()
                            # The leaf's gradient is the format's (the cast copy's), widened.
                            row[name] = distance(mine.to(dt), t.reshape(-1).to(dt), torch)
                        out.append(row)
    return out


def run_normlab(binary, args):
    out = subprocess.run([binary, "handcalc", "--json"] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"normlab handcalc {' '.join(args[:6])}...: {out.stderr.strip()}")
    return json.loads(out.stdout)


def check(torch, F, binary, label, fmt, mode, row_args, x, gamma, beta, eps):
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[fmt]
    doc = run_normlab(binary, ["--precision", fmt, "--norm-compute", mode] + row_args)
    rows = []
    for n in doc["norms"]:
        norm = n["norm"]
        ref, xs, g, b = torch_chain(torch, norm, dt, mode, x, gamma, beta, eps)
        worst, where = 0, []
        for s in n["steps"]:
            # In fp32 mode only y is in the format: the float32 statistics differ from PyTorch's
            # by its summation order (reported, not judged).
            judged = mode == "format" or s["name"] in ("x", "y")
            stored = s["stored"] if s["per_element"] else [s["stored"]]
            sdt = dt if s["stored_in"] != "fp32" else torch.float32
            mine = torch.tensor([value(v) for v in stored], dtype=torch.float64).to(sdt)
            theirs = ref[s["name"]].reshape(-1).to(sdt)
            dist = distance(mine, theirs, torch)
            if dist:
                where.append(f"{s['name']}:{dist}")
            if judged:
                worst = max(worst, dist)
        y_mine = torch.tensor([value(v) for v in n["steps"][-1]["stored"]],
                              dtype=torch.float64).to(dt)
        if norm == "layernorm":
            fused = F.layer_norm(xs, (len(x),), g, b, eps)
        else:
            fused = F.rms_norm(xs, (len(x),), g, eps)
        rows.append({"row": label, "format": fmt, "norm_compute": mode, "norm": norm,
                     "breakdown": n["breakdown"], "max_abs_output_ulps": n["max_abs_output_ulps"],
                     "composite_max_ulps": worst,
                     "steps_off": where, "functional_y_max_ulps": distance(y_mine, fused, torch)})
    return rows


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch_precision_check: needs PyTorch ({e}); pip install torch", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    rsqrt = check_rsqrt(torch)
    for name, r in rsqrt.items():
        print(f"torch.rsqrt, {name}, all {r['values']} positive finite values: one-element tensor "
              f"!= round(1/round(sqrt)) for {r['scalar_vs_twice']}, != round(1/sqrt) for "
              f"{r['scalar_vs_once']}; {r['values']}-element tensor != round(1/sqrt) for "
              f"{r['vector_vs_once']}")
    scalar_ops = check_scalar_ops(torch)
    for name, r in scalar_ops.items():
        for e in r["eps_add"]:
            print(f"v + {e['eps']:g}, {name}, all {e['values']} finite v >= 0: != round(v + round(eps)) for "
                  f"{e['vs_rounded_eps']}, != round(v + eps as float32) for {e['vs_float32_eps']}")
        print(f"r.pow(3), {name}, all {r['pow3_values']} positive finite r: != one rounding of r^3 for "
              f"{r['pow3_vs_once']}, != two (r * r, * r) for {r['pow3_vs_twice']}; one-element tensors "
              f"({r['pow3_single']}): {r['pow3_single_vs_once']} and {r['pow3_single_vs_twice']}")
    backward = check_backward(torch, args.normlab, range(4))
    for fmt in ("fp16", "bf16"):
        for norm in ("layernorm", "rmsnorm"):
            sel = [r for r in backward if r["format"] == fmt and r["norm"] == norm]
            leaves = [k for k in ("x", "gamma", "beta") if k in sel[0]]
            exact = sum(all(r[k] == 0 for k in leaves) for r in sel)
            worst = {k: max(r[k] for r in sel) for k in leaves}
            print(f"composite backward, {fmt} {norm}, shapes {', '.join(BACKWARD_SHAPES)} x seeds 0-3: "
                  f"{exact} of {len(sel)} cases bit for bit in every leaf; worst distance "
                  + ", ".join(f"{k} {v}" for k, v in worst.items()))
    rng = random.Random(args.seed)
    jobs = []
    for case in CASES:
        doc = run_normlab(args.normlab, ["--precision", "fp32", "--case", case])
        inp = doc["input"]
        jobs.append((f"case {case}", ["--case", case], inp["x"], inp["gamma"],
                     inp.get("beta", [0.0] * inp["d"]), inp["eps"]))
    for d, scale in RANDOM_SHAPES:
        for k in range(args.random):
            x = [rng.gauss(0.0, scale) + (scale * 3 if k % 3 == 1 else 0.0) for _ in range(d)]
            gamma = [1.0 + 0.2 * rng.gauss(0.0, 1.0) for _ in range(d)]
            beta = [0.1 * rng.gauss(0.0, 1.0) for _ in range(d)]
            eps = [1e-5, 1e-6, 1e-8, 1e-12][k % 4]
            row = ["--x", ",".join(repr(v) for v in x), "--gamma", ",".join(repr(v) for v in gamma),
                   "--beta", ",".join(repr(v) for v in beta), "--eps", repr(eps)]
            jobs.append((f"random d={d} scale={scale:g} #{k}", row, x, gamma, beta, eps))
    rows = []
    for label, row_args, x, gamma, beta, eps in jobs:
        for fmt in ("fp16", "bf16"):
            for mode in ("format", "fp32"):
                rows.extend(check(torch, F, args.normlab, label, fmt, mode, row_args, x, gamma,
                                  beta, eps))
    print(f"PyTorch {torch.__version__}, {len(jobs)} rows x fp16/bf16 x format/fp32 x LN/RMSNorm "
          f"= {len(rows)} worksheets\n")
    print("\nComposite: every step in format mode, y in fp32 mode (its float32 statistics are listed "
          "under steps off, as float32 ulps, not judged).\n")
    print("| format | norm_compute | norm | worksheets | composite exact | composite <= 1 ulp | "
          "worst composite | steps off (count) | F.* y worst ulps |")
    print("|---|---|---|---:|---:|---:|---:|---|---:|")
    failed = False
    for fmt in ("fp16", "bf16"):
        for mode in ("format", "fp32"):
            for norm in ("layernorm", "rmsnorm"):
                sel = [r for r in rows if (r["format"], r["norm_compute"], r["norm"]) == (fmt, mode, norm)]
                exact = sum(r["composite_max_ulps"] == 0 for r in sel)
                within = sum(r["composite_max_ulps"] <= 1 for r in sel)
                worst = max(r["composite_max_ulps"] for r in sel)
                off = {}
                for r in sel:
                    for w in r["steps_off"]:
                        name = w.rsplit(":", 1)[0]
                        off[name] = off.get(name, 0) + 1
                fworst = max(r["functional_y_max_ulps"] for r in sel)
                failed |= within < len(sel)
                print(f"| {fmt} | {mode} | {norm} | {len(sel)} | {exact} | {within} | {worst} | "
                      f"{', '.join(f'{k} ({v})' for k, v in sorted(off.items())) or '-'} | {fworst} |")
    fmt_rows = [r for r in rows if r["norm_compute"] == "format"]
    print(f"\nformat mode: {sum(r['composite_max_ulps'] == 0 for r in fmt_rows)} of {len(fmt_rows)} worksheets "
          f"equal PyTorch's composite bit for bit at every step")
    print("\nThe built-in cases as normlab diagnoses them (breakdown, largest |error| of y in ulps):\n")
    print("| case | norm | fp16 format | fp16 fp32 | bf16 format | bf16 fp32 |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        for norm in ("layernorm", "rmsnorm"):
            cells = []
            for fmt in ("fp16", "bf16"):
                for mode in ("format", "fp32"):
                    r = next(r for r in rows if r["row"] == f"case {case}" and r["format"] == fmt
                             and r["norm_compute"] == mode and r["norm"] == norm)
                    u = r["max_abs_output_ulps"]
                    cells.append(f"{r['breakdown']}, {u if isinstance(u, str) else f'{u:.3g}'}")
            print(f"| {case} | {norm} | {' | '.join(cells)} |")
    bad = [r for r in rows if r["composite_max_ulps"] > 1]
    for r in bad[:20]:
        print(f"  over 1 ulp: {r['row']} {r['format']} {r['norm_compute']} {r['norm']}: {r['steps_off']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rsqrt": rsqrt, "scalar_ops": scalar_ops, "backward": backward,
                       "rows": rows}, f, indent=1)
    failed |= any(r["scalar_vs_twice"] for r in rsqrt.values())
    # The models normlab uses: eps rounded to the format; r^3 rounded once in fp16, twice in bf16.
    failed |= any(e["vs_rounded_eps"] for r in scalar_ops.values() for e in r["eps_add"])
    failed |= bool(scalar_ops["fp16"]["pow3_vs_once"] or scalar_ops["fp16"]["pow3_single_vs_once"])
    failed |= bool(scalar_ops["bf16"]["pow3_vs_twice"] or scalar_ops["bf16"]["pow3_single_vs_twice"])
    # The training composite's backward: PyTorch's autograd, bit for bit.
    failed |= any(r[k] for r in backward for k in ("x", "gamma", "beta") if k in r)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
