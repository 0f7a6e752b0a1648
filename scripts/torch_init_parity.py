#!/usr/bin/env python3
"""PyTorch-side init parity: the same model built in PyTorch with each init scheme of docs/init.md,
its parameter groups' empirical mean / std / kurtosis compared with normlab's initial weights.

For each model (toy, gpt with QK-Norm, gpt with placement deepnorm; LayerNorm, normlab's default
sizes unless given) and each scheme (gpt2, xavier, torch, fairseq):

  normlab  normlab's initial weights: the model.safetensors of `normlab train --steps 0` (the
           initial model, written as it is). The script also draws normlab's init in Python
           (scripts/normlab_mirror.py: the ported PCG32 Rng in normlab's draw order) and prints the
           largest |checkpoint - port| (0 when the port is bit-exact).
  torch    the PyTorch mirror of the model (scripts/normlab_mirror.py) initialized with torch's own
           generator (torch.manual_seed) and torch.nn.init, as docs/init.md says per scheme:
             torch    nothing done: nn.Linear's default reset_parameters (kaiming_uniform_(a=sqrt(5))
                      = U(+-1/sqrt(fan_in)) weights, U(+-1/sqrt(fan_in)) biases), nn.Embedding's
                      N(0, 1), the head nn.Linear(d, vocab, bias=False), norm gains 1 and biases 0;
             fairseq  xavier_uniform_ on every block Linear, biases 0, embeddings and head N(0, 1/d);
             gpt2     normal_(0, 0.02), attn.o / mix / fc2 normal_(0, 0.02/sqrt(2L)), biases 0,
                      embeddings and head N(0, 0.02);
             xavier   xavier_normal_ on every block Linear, biases 0, embeddings and head N(0, 0.02);
             placement deepnorm (any scheme): xavier_normal_(gain=beta=(8L)^(-1/4)) on v, o (mix),
                      fc1, fc2, gain 1 on q and k, biases 0; embeddings and head by the scheme.
  expected what docs/init.md says: N(0, s^2) has std s and kurtosis 3, U(+-a) std a/sqrt(3) and
           kurtosis 1.8; constants exactly.

A group is every parameter of one kind across the blocks (attn.q.weight of all blocks, ...). It
disagrees when its mean, or normlab's or torch's std, or the ratio of the two stds, is more than
--sigmas (default 5) standard errors from what is expected (the std's standard error is
std * sqrt((kurtosis - 1) / (4 n))), when a kurtosis is more than --sigmas * sqrt(24/n) from the
expected one, when a uniform group has a value outside its bound, or when a constant is not that
constant (normlab: within 1e-20). Exit status 1 if any group disagrees.

Needs PyTorch, numpy and safetensors, and a built normlab; no network at run time; never needed
by normlab's tests. Examples:

  python3 scripts/torch_init_parity.py                       (build/normlab, all models and schemes)
  python3 scripts/torch_init_parity.py --models gpt --schemes torch,fairseq --layers 12 --d_model 128
  python3 scripts/torch_init_parity.py --markdown results/torch-init-parity.md

Measured (results/torch-init-parity.md has every table; AMD EPYC, PyTorch 2.15.0 CPU):
  python3 scripts/torch_init_parity.py --markdown results/torch-init-parity.md
  -> 0 of 184 groups disagree (toy, gpt + QK-Norm, gpt deepnorm x gpt2, xavier, torch, fairseq;
     L=6, d=64, hidden 128); the normlab/torch std ratios of the groups with >= 24576 values lie
     within 1.000 +- 0.011; the checkpoint of `--steps 0` (normlab's initial model) equals normlab's init
     as the Python port draws it (difference 0) in every configuration.
  python3 scripts/torch_init_parity.py --models gpt,toy --schemes fairseq --fairseq_as_code
  -> exit 1, 14 of 29 groups disagree: fairseq's code initializes q, k, v sqrt(2) narrower, fc1 and
     fc2 with nn.Linear's defaults and leaves nonzero biases, unlike docs/init.md's `fairseq`.
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import normlab_mirror as nm  # noqa: E402

SCHEMES = ("gpt2", "xavier", "torch", "fairseq")
MODELS = {  # name -> normlab train flags
    "toy": ["--model", "toy", "--norm", "layernorm", "--placement", "pre"],
    "gpt": ["--model", "gpt", "--norm", "layernorm", "--placement", "pre", "--qk_norm", "true"],
    "gpt-deepnorm": ["--model", "gpt", "--norm", "layernorm", "--placement", "deepnorm"],
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--normlab", default=os.environ.get("NORMLAB_BIN", os.path.join(ROOT, "build", "normlab")),
                   help="normlab binary (default $NORMLAB_BIN, else build/normlab)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)} (default all)")
    p.add_argument("--schemes", default=",".join(SCHEMES), help="comma list of init schemes (default all four)")
    for k in ("layers", "d_model", "d_hidden", "heads", "vocab", "seq_len"):
        p.add_argument("--" + k, type=int, default=None, help=f"model {k} (default: normlab's default)")
    p.add_argument("--seed", type=int, default=0, help="normlab's seed (default 0)")
    p.add_argument("--torch_seed", type=int, default=0, help="torch.manual_seed for the PyTorch model (default 0)")
    p.add_argument("--sigmas", type=float, default=5.0, help="tolerance in standard errors (default 5)")
    p.add_argument("--fairseq_as_code", action="store_true",
                   help="initialize the PyTorch side of scheme fairseq as fairseq's own code does instead of as "
                        "docs/init.md says (fairseq/modules/multihead_attention.py: q, k, v xavier_uniform_ with gain "
                        "1/sqrt(2) and nn.Linear's default biases, out_proj xavier_uniform_ with bias 0; "
                        "transformer_layer.py: fc1, fc2 plain nn.Linear defaults); the toy's mix as out_proj. "
                        "Expected to disagree: it shows where docs/init.md's fairseq differs from fairseq")
    p.add_argument("--no_port", action="store_true",
                   help="skip drawing normlab's init with the Python port (the checkpoint-vs-init measurement)")
    p.add_argument("--keep", default="", help="keep normlab's run directories under this directory")
    p.add_argument("--markdown", default="", help="also write the tables to this Markdown file")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")
    return p.parse_args(argv)


# ---- what docs/init.md says -----------------------------------------------------------------

def group_of(name):
    """A parameter's group: its name without blocks.N., norm gains / biases pooled."""
    parts = name.split(".")
    if parts[0] == "blocks":
        parts = parts[2:]
    g = ".".join(parts)
    if g in ("attn.q_norm.weight", "attn.k_norm.weight"):
        return "qk-norm gains"
    if parts[0].startswith("norm") or parts[0] == "final_norm":
        return "norm gains" if parts[-1] == "weight" else "norm biases"
    return g


def expected(cfg, group, shape):
    """('normal', std) | ('uniform', bound) | ('const', value) for a group under cfg's scheme."""
    d, L, s = cfg.d_model, cfg.layers, cfg.init
    if group == "norm gains" or group == "qk-norm gains":
        return ("const", 1.0)
    if group == "norm biases":
        return ("const", 0.0)
    if group in ("tok_emb.weight", "pos_emb.weight"):
        return ("normal", {"torch": 1.0, "fairseq": 1.0 / math.sqrt(d)}.get(s, 0.02))
    if group == "head.weight":
        if s == "torch":
            return ("uniform", 1.0 / math.sqrt(d))
        return ("normal", 1.0 / math.sqrt(d) if s == "fairseq" else 0.02)
    if group == "head.bias":
        return ("const", 0.0)
    fan_out, fan_in = (shape[0], shape[1]) if len(shape) == 2 else (shape[0], None)
    layer = group.rsplit(".", 1)[0]
    residual_writer = layer in ("attn.o", "mix", "mlp.fc2")
    if cfg.deepnet():  # DeepNet's own init under every scheme
        if group.endswith(".bias"):
            return ("const", 0.0)
        gain = 1.0 if layer in ("attn.q", "attn.k") else cfg.deepnorm_beta()
        return ("normal", gain * math.sqrt(2.0 / (fan_in + fan_out)))
    if group.endswith(".bias"):
        if s != "torch":
            return ("const", 0.0)
        fan_in = {"mlp.fc2": cfg.d_hidden}.get(layer, d)
        return ("uniform", 1.0 / math.sqrt(fan_in))
    if s == "gpt2":
        return ("normal", 0.02 / math.sqrt(2.0 * L) if residual_writer else 0.02)
    if s == "xavier":
        return ("normal", math.sqrt(2.0 / (fan_in + fan_out)))
    if s == "torch":
        return ("uniform", 1.0 / math.sqrt(fan_in))
    return ("uniform", math.sqrt(6.0 / (fan_in + fan_out)))  # fairseq


# ---- the PyTorch side -------------------------------------------------------------------------

def torch_init(torch, cfg, seed, fairseq_as_code=False):
    """The mirror model initialized the PyTorch way for cfg's scheme; {name: float64 numpy}."""
    torch.manual_seed(seed)
    model = nm.build_model(cfg, torch)  # nn.Linear / nn.Embedding run their default reset_parameters here
    nm.init_with_torch(torch, model, cfg, fairseq_as_code=fairseq_as_code)
    return {k: v.detach().double().numpy() for k, v in model.state_dict().items()}


# ---- normlab's side -----------------------------------------------------------------------------

def normlab_initial(args, model, scheme, workdir):
    out = os.path.join(workdir, f"{model}-{scheme}")
    cmd = [args.normlab, "train", *MODELS[model], "--init", scheme, "--seed", str(args.seed),
           "--steps", "0", "--eval_batches", "1", "--batch_size", "1",
           "--threads", "1", "--out", out, "--force", "--quiet"]
    for k in ("layers", "d_model", "d_hidden", "heads", "vocab", "seq_len"):
        if getattr(args, k) is not None:
            cmd += ["--" + k, str(getattr(args, k))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    from safetensors.numpy import load_file
    cfg = nm.ModelConfig.from_file(os.path.join(out, "config.json"))
    shown = ["build/normlab"] + [("DIR/" + os.path.basename(c) if c == out else c) for c in cmd[1:]]
    return cfg, load_file(os.path.join(out, "model.safetensors")), shown


# ---- statistics -----------------------------------------------------------------------------------

def stats(np, arrays):
    x = np.concatenate([a.astype(np.float64).ravel() for a in arrays])
    m, sd = float(x.mean()), float(x.std())
    kurt = float(((x - m) ** 4).mean() / sd ** 4) if sd > 0 else float("nan")
    return {"n": int(x.size), "mean": m, "std": sd, "kurt": kurt, "absmax": float(np.abs(x).max()),
            "min": float(x.min()), "max": float(x.max())}


def compare_group(np, exp, a, b, sigmas):
    """Problems (strings) with normlab's stats a and torch's b against exp."""
    kind, v = exp
    problems = []
    if kind == "const":
        if max(abs(a["min"] - v), abs(a["max"] - v)) > 1e-20:
            problems.append(f"normlab not all {v} (range {a['min']:.3g}..{a['max']:.3g})")
        if max(abs(b["min"] - v), abs(b["max"] - v)) > 0:
            problems.append(f"torch not all {v}")
        return problems
    n = a["n"]
    std = v if kind == "normal" else v / math.sqrt(3.0)
    kurt = 3.0 if kind == "normal" else 1.8
    se = math.sqrt((kurt - 1.0) / (4.0 * n))  # relative standard error of an empirical std
    for who, s in (("normlab", a), ("torch", b)):
        if abs(s["std"] / std - 1.0) > sigmas * se:
            problems.append(f"{who} std {s['std']:.4g} vs {std:.4g} ({(s['std'] / std - 1) / se:+.1f} se)")
        if abs(s["mean"]) > sigmas * std / math.sqrt(n):
            problems.append(f"{who} mean {s['mean']:.3g} ({s['mean'] / (std / math.sqrt(n)):+.1f} se)")
        if abs(s["kurt"] - kurt) > sigmas * math.sqrt(24.0 / n):
            problems.append(f"{who} kurtosis {s['kurt']:.2f} vs {kurt}")
        if kind == "uniform" and s["absmax"] > v * (1 + 1e-6):
            problems.append(f"{who} |w| up to {s['absmax']:.4g} > bound {v:.4g}")
    if abs(a["std"] / b["std"] - 1.0) > sigmas * math.sqrt(2.0) * se:
        problems.append(f"normlab/torch std ratio {a['std'] / b['std']:.4f}")
    return problems


def main(argv=None):
    args = parse_args(argv)
    try:
        import numpy as np
        import torch
        import safetensors.numpy  # noqa: F401
    except ImportError as e:
        print(f"torch_init_parity: needs PyTorch, numpy and safetensors ({e})", file=sys.stderr)
        return 2
    if not os.path.exists(args.normlab):
        print(f"torch_init_parity: no normlab binary at {args.normlab} (build it, or --normlab PATH)", file=sys.stderr)
        return 2
    models = [m for m in args.models.split(",") if m]
    schemes = [s for s in args.schemes.split(",") if s]
    for m in models:
        if m not in MODELS:
            print(f"unknown model {m!r} (one of {', '.join(MODELS)})", file=sys.stderr)
            return 2
    for s in schemes:
        if s not in SCHEMES:
            print(f"unknown scheme {s!r} (one of {', '.join(SCHEMES)})", file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    tmp = None
    workdir = args.keep
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="normlab-init-parity-")
        workdir = tmp.name
    tables, bad_groups = [], 0
    try:
        for model in models:
            for scheme in schemes:
                cfg, nl, cmd = normlab_initial(args, model, scheme, workdir)
                tw = torch_init(torch, cfg, args.torch_seed, args.fairseq_as_code)
                if sorted(nl) != sorted(tw):
                    raise RuntimeError(f"parameter names differ: normlab only {sorted(set(nl) - set(tw))}, "
                                       f"torch only {sorted(set(tw) - set(nl))}")
                port_diff = None
                if not args.no_port:
                    port = nm.normlab_init(cfg)
                    port_diff = max(float(np.abs(port[k].astype(np.float64) - nl[k].astype(np.float64)).max())
                                    for k in nl)
                groups = {}
                for name in nl:
                    groups.setdefault(group_of(name), []).append(name)
                rows = []
                for g, names in groups.items():
                    exp = expected(cfg, g, nl[names[0]].shape)
                    a = stats(np, [nl[k] for k in names])
                    b = stats(np, [tw[k] for k in names])
                    problems = compare_group(np, exp, a, b, args.sigmas)
                    bad_groups += bool(problems)
                    rows.append({"group": g, "expected": exp, "normlab": a, "torch": b, "problems": problems})
                tables.append({"model": model, "scheme": scheme, "deepnet": cfg.deepnet(), "layers": cfg.layers,
                               "d_model": cfg.d_model, "d_hidden": cfg.d_hidden, "command": " ".join(cmd),
                               "port_max_abs_diff": port_diff, "rows": rows})
    finally:
        if tmp is not None:
            tmp.cleanup()

    lines = render(tables, args, torch)
    if args.json:
        print(json.dumps({"tables": tables, "bad_groups": bad_groups, "torch": torch.__version__}, indent=2))
    else:
        print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(tables, args, torch, bad_groups))
    return 1 if bad_groups else 0


def fmt_exp(exp):
    kind, v = exp
    if kind == "const":
        return f"= {v:g}"
    if kind == "normal":
        return f"N std {v:.4g}"
    return f"U(+-{v:.4g}) std {v / math.sqrt(3):.4g}"


def render(tables, args, torch):
    out = []
    for t in tables:
        title = f"== {t['model']} (L={t['layers']}, d={t['d_model']}, hidden={t['d_hidden']}), init {t['scheme']}"
        if t["deepnet"]:
            title += " (DeepNet's init on the block linears)"
        out.append(title)
        if t["port_max_abs_diff"] is not None:
            out.append(f"   normlab checkpoint (--steps 0) vs its init drawn by the Python port: "
                       f"max |diff| = {t['port_max_abs_diff']:.3g}")
        out.append(f"   {'group':<16} {'n':>7} {'expected (docs/init.md)':<26} {'normlab std':>11} {'torch std':>11} "
                   f"{'nl/torch':>8} {'nl mean':>9} {'nl kurt':>7} {'t kurt':>6}  ok")
        for r in t["rows"]:
            a, b = r["normlab"], r["torch"]
            ratio = f"{a['std'] / b['std']:.4f}" if b["std"] > 0 else "-"
            out.append(f"   {r['group']:<16} {a['n']:>7} {fmt_exp(r['expected']):<26} {a['std']:>11.5g} {b['std']:>11.5g} "
                       f"{ratio:>8} {a['mean']:>9.2g} {a['kurt']:>7.2f} {b['kurt']:>6.2f}  "
                       f"{'yes' if not r['problems'] else 'NO: ' + '; '.join(r['problems'])}")
        out.append("")
    bad = sum(bool(r["problems"]) for t in tables for r in t["rows"])
    out.append(f"{bad} of {sum(len(t['rows']) for t in tables)} groups disagree (tolerance {args.sigmas:g} standard "
               f"errors); torch {torch.__version__}")
    return out


def markdown(tables, args, torch, bad_groups):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cmdline = "python3 scripts/torch_init_parity.py " + " ".join(sys.argv[1:])
    s = ["# Init parity: normlab's initial weights vs the same model initialized in PyTorch", "",
         "Written by `scripts/torch_init_parity.py` (issue 12); the figures below are its output, as measured.", "",
         f"- command: `{cmdline.strip()}`",
         f"- machine: {cpu or platform.processor()} ({platform.system()}), PyTorch {torch.__version__}, "
         f"normlab seed {args.seed}, torch.manual_seed({args.torch_seed})",
         "- normlab's weights: `normlab train --steps 0 ...` (the initial model.safetensors); "
         "\"port diff\" is the largest |checkpoint - init| where the init is drawn by the Python port of normlab's "
         "Rng in normlab's draw order.",
         f"- tolerance: {args.sigmas:g} standard errors (std: std*sqrt((kurtosis-1)/(4n)); mean: std/sqrt(n); "
         "kurtosis: sqrt(24/n)); constants exact (normlab within 1e-20).",
         f"- result: **{bad_groups} of {sum(len(t['rows']) for t in tables)} groups disagree**.", "",
         "Reading the tables: a group is one kind of parameter pooled over the blocks. A port diff of 0 says that "
         "every weight of the checkpoint is bit-identical to normlab's init as the Python port of its generator "
         "draws it. Kurtosis 3 is a normal, 1.8 a uniform: it tells the two apart where the std alone cannot.", ""]
    for t in tables:
        s.append(f"## {t['model']}, init `{t['scheme']}`" + (" (DeepNet's init on the block linears)" if t["deepnet"] else ""))
        s.append("")
        line = f"L={t['layers']}, d={t['d_model']}, hidden={t['d_hidden']}; normlab: `{t['command']}`"
        if t["port_max_abs_diff"] is not None:
            line += f"; port diff {t['port_max_abs_diff']:.3g}"
        s.append(line)
        s.append("")
        s.append("| group | n | expected (docs/init.md) | normlab std | torch std | normlab/torch | normlab mean | "
                 "torch mean | normlab kurt | torch kurt | ok |")
        s.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in t["rows"]:
            a, b = r["normlab"], r["torch"]
            ratio = f"{a['std'] / b['std']:.4f}" if b["std"] > 0 else "-"
            ok = "yes" if not r["problems"] else "**no**: " + "; ".join(r["problems"])
            s.append(f"| {r['group']} | {a['n']} | {fmt_exp(r['expected'])} | {a['std']:.5g} | {b['std']:.5g} | "
                     f"{ratio} | {a['mean']:.2g} | {b['mean']:.2g} | {a['kurt']:.2f} | {b['kurt']:.2f} | {ok} |")
        s.append("")
    return "\n".join(s) + "\n"


if __name__ == "__main__":
    sys.exit(main())
