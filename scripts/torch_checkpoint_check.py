#!/usr/bin/env python3
"""Load a normlab checkpoint into the PyTorch mirror of its model and recompute its validation loss.

Given run directories written by `normlab train` (config.json: the resolved config;
model.safetensors: the final weights under PyTorch names; result.json: final_val_loss, the mean
loss over `eval_batches` validation batches), this script

  1. builds the PyTorch mirror of the model for that config (scripts/normlab_mirror.py: toy and
     gpt, norm none / layernorm / rmsnorm, placement pre / post / sandwich / deepnorm, qk_norm,
     final_norm, head_bias, residual, fairseq's sqrt(d) token-embedding scale, DeepNet's alpha),
  2. loads model.safetensors with safetensors.torch.load_file and load_state_dict(strict=True),
  3. regenerates normlab's validation batches in Python (a port of normlab's PCG32 Rng and of the
     synthetic task / text windows of src/train/data.cpp: batch i from Rng(seed ^ 0x5bd1e995,
     1000 + i), the task's permutations from their own stream),
  4. computes the mean loss over the eval_batches batches in float32 and in float64, and
  5. compares both with result.json's final_val_loss.

It prints one row per run and exits 1 when a run's |torch - normlab| / normlab exceeds --rtol
(default 1e-5) in either dtype, 2 on a run it cannot check (missing files, a diverged run, a
checkpoint that does not load strictly). With --checkpoints it also checks every
checkpoints/step-N.safetensors against the val_loss that metrics.jsonl records at step N.

Needs PyTorch, numpy and safetensors (pip install torch numpy safetensors); no network at run
time; never needed by normlab's tests. Examples:

  build/normlab train --model gpt --norm rmsnorm --qk_norm true --steps 200 --eval_every 100 --out /tmp/g
  python3 scripts/torch_checkpoint_check.py /tmp/g
  python3 scripts/torch_checkpoint_check.py /tmp/runs/* --rtol 1e-5 --json
  python3 scripts/torch_checkpoint_check.py --checkpoints runs/long      (after train --save_every N)

Verified (results/torch-checkpoint-check.md has the table as measured, with the CPU model):
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import normlab_mirror as nm  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories written by `normlab train`")
    p.add_argument("--rtol", type=float, default=1e-5,
                   help="largest accepted |torch - normlab| / |normlab| in each dtype (default 1e-5)")
    p.add_argument("--data_root", default="",
                   help="directory that text:PATH data paths are relative to (default: the current "
                        "directory, else the repository root)")
    p.add_argument("--checkpoints", action="store_true",
                   help="also check each checkpoints/step-N.safetensors against metrics.jsonl's val_loss at step N")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    return p.parse_args(argv)


def mean_val_loss(torch, model, batches, dtype):
    model = model.to(dtype)
    total = 0.0
    with torch.no_grad():
        for inputs, targets in batches:
            ids = torch.tensor(inputs, dtype=torch.long)
            tg = torch.tensor(targets, dtype=torch.long)
            total += float(model(ids, tg))  # a float32 loss is widened to double, as normlab's item()
    return total / len(batches)


def text_root(cfg, data_root):
    if data_root or not cfg.data.startswith("text:"):
        return data_root or "."
    path = cfg.data[5:]
    return "." if os.path.isabs(path) or os.path.exists(path) else ROOT


def check_weights(torch, load_file, cfg, batches, weights_path, reference):
    """{'f32':..., 'f64':..., 'rel32':..., 'rel64':...} for one safetensors file against `reference`."""
    state = load_file(weights_path)
    out = {"weights": weights_path, "normlab": reference,
           "checkpoint_dtypes": sorted({str(t.dtype).replace("torch.", "") for t in state.values()})}
    for name, dt in (("f32", torch.float32), ("f64", torch.float64)):
        model = nm.build_model(cfg, torch, dtype=dt)
        model.load_state_dict({k: v.to(dt) for k, v in state.items()}, strict=True)
        loss = mean_val_loss(torch, model, batches, dt)
        out[name] = loss
        out["rel" + name[1:]] = abs(loss - reference) / abs(reference)
    return out


def check_run(torch, load_file, run, args):
    cfg = nm.ModelConfig.from_file(os.path.join(run, "config.json"))
    with open(os.path.join(run, "result.json")) as f:
        result = json.load(f)
    ref = result.get("final_val_loss")
    if ref is None or not math.isfinite(ref):
        raise RuntimeError(f"final_val_loss is {ref} (status {result.get('status')}): nothing to compare")
    data = nm.data_source(cfg, text_root(cfg, args.data_root))
    batches = [data.val_batch(i, cfg.batch_size, cfg.seq_len) for i in range(cfg.eval_batches)]
    rows = [check_weights(torch, load_file, cfg, batches, os.path.join(run, "model.safetensors"), ref)]
    rows[0]["step"] = result.get("steps_done")
    if args.checkpoints:
        ckdir = os.path.join(run, "checkpoints")
        val = {}
        if os.path.exists(os.path.join(run, "metrics.jsonl")):
            with open(os.path.join(run, "metrics.jsonl")) as f:
                for line in f:
                    if line.strip():
                        r = json.loads(line)
                        val[r["step"]] = r.get("val_loss")
        names = sorted((n for n in os.listdir(ckdir) if n.startswith("step-") and n.endswith(".safetensors")
                        and not n.endswith(".state.safetensors")), key=lambda n: int(n[5:].split(".")[0])) \
            if os.path.isdir(ckdir) else []
        for n in names:
            step = int(n[5:].split(".")[0])
            if val.get(step) is None:
                continue  # a checkpoint between evals: metrics.jsonl has no loss for it
            row = check_weights(torch, load_file, cfg, batches, os.path.join(ckdir, n), val[step])
            row["step"] = step
            rows.append(row)
    desc = f"{cfg.model} {cfg.norm} {cfg.placement} {cfg.init}" + (" qk" if cfg.qk_norm else "") + \
        (" hb" if cfg.head_bias else "") + f" L{cfg.layers} {cfg.data if cfg.data == 'synthetic' else 'text'}"
    return desc, rows


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError as e:
        print(f"torch_checkpoint_check: needs PyTorch and safetensors ({e}); "
              "pip install torch safetensors numpy", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    report, worst, failed, unusable = [], 0.0, 0, 0
    for run in args.runs:
        try:
            desc, rows = check_run(torch, load_file, run, args)
        except Exception as e:  # one bad run does not hide the others
            unusable += 1
            report.append({"run": run, "error": f"{type(e).__name__}: {e}"})
            continue
        for r in rows:
            r["ok"] = r["rel32"] <= args.rtol and r["rel64"] <= args.rtol
            failed += not r["ok"]
            worst = max(worst, r["rel32"], r["rel64"])
        report.append({"run": run, "config": desc, "rows": rows})
    if args.json:
        print(json.dumps({"rtol": args.rtol, "torch": torch.__version__, "runs": report,
                          "worst_rel": worst, "failed": failed, "unusable": unusable}, indent=2))
    else:
        w = max([len("run")] + [len(e["run"]) for e in report])
        c = max([len("config")] + [len(e.get("config", "")) for e in report])
        print(f"{'run':<{w}} {'config':<{c}} {'step':>5} {'normlab':>10} {'torch f32':>10} {'rel f32':>8} "
              f"{'torch f64':>10} {'rel f64':>8}  ok")
        for e in report:
            if "error" in e:
                print(f"{e['run']:<{w}} cannot check: {e['error']}")
                continue
            for r in e["rows"]:
                print(f"{e['run']:<{w}} {e['config']:<{c}} {r['step']!s:>5} {r['normlab']:10.6f} {r['f32']:10.6f} "
                      f"{r['rel32']:8.1e} {r['f64']:10.6f} {r['rel64']:8.1e}  {'yes' if r['ok'] else 'NO'}")
        print(f"worst relative difference {worst:.2e} (tolerance {args.rtol:g}); "
              f"{failed} mismatched, {unusable} could not be checked; torch {torch.__version__}")
    if unusable:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
