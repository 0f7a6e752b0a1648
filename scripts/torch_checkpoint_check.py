#!/usr/bin/env python3
"""Load a normlab checkpoint into the PyTorch mirror of its model and recompute its validation loss.

Given run directories written by `normlab train` (config.json: the resolved config;
model.safetensors: the final weights under PyTorch names; result.json: final_val_loss, the mean
loss over `eval_batches` validation batches), this script

  1. builds the PyTorch mirror of the model for that config (scripts/normlab_mirror.py: toy and
     gpt, norm none / layernorm / rmsnorm, placement pre / post / sandwich / deepnorm, qk_norm,
     final_norm, head_bias, residual, fairseq's sqrt(d) token-embedding scale, DeepNet's alpha;
     the encoder-decoder, and for it torch.nn.Transformer itself where it expresses the config),
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

Verified (results/torch-checkpoint-check.md has the full table as measured, AMD EPYC, 2 cores,
PyTorch 2.15.0 CPU, torch threads 1; normlab Release build of branch torchcheck):

  N="build/normlab train --steps 200 --eval_every 100 --threads 1 --quiet --force"
  $N --out /tmp/tc/runs/toy-ln-pre --model toy --norm layernorm --placement pre
  ... 19 runs: toy and gpt x layernorm / rmsnorm / none x pre / post / sandwich / deepnorm, qk_norm
  on, init gpt2 / xavier / torch / fairseq, head_bias with final_norm off, residual false, L=20,
  text:experiments/data/tiny.txt, and one with --save_every 100 (its step-100 checkpoint too)
  python3 scripts/torch_checkpoint_check.py /tmp/tc/runs/* --checkpoints
  -> 20 of 20 weights agree: |torch - normlab| / normlab from 0 to 6.5e-08 in float32 and from
     1.6e-09 to 2.6e-08 in float64 (worst: gpt layernorm pre, init torch, 6.52e-08 in float32).
  Sensitivity (copies with one config key edited): another seed (other batches) 3.4 relative,
  init gpt2 for a fairseq run (no sqrt(d) scale) 0.88, deepnorm read as post (alpha 1) 0.48 ->
  exit 1; RMSNorm eps 1e-5 instead of 1e-6 moves the loss by 1.8e-06, caught by the default --rtol 1e-6.
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
    p.add_argument("--rtol", type=float, default=1e-6,
                   help="largest accepted |torch - normlab| / |normlab| in each dtype (default 1e-6: the measured agreement is <= 6.5e-8 in float32, and a wrong RMSNorm eps moves the loss by 1.8e-6)")
    p.add_argument("--data_root", default="",
                   help="directory that text:PATH data paths are relative to (default: the current "
                        "directory, else the repository root)")
    p.add_argument("--checkpoints", action="store_true",
                   help="also check each checkpoints/step-N.safetensors against metrics.jsonl's val_loss at step N")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--markdown", default="", help="also write the table (with the CPU model and versions) to this file")
    return p.parse_args(argv)


def mean_val_loss(torch, model, batches, dtype):
    model = model.to(dtype).eval()
    total = 0.0
    with torch.no_grad():
        for batch in batches:  # (inputs, targets), or an encoder-decoder's (sources, inputs, targets)
            # A float32 loss is widened to double, as normlab's item().
            total += float(model(*(torch.tensor(part, dtype=torch.long) for part in batch)))
    return total / len(batches)


def mirrors(cfg):
    """The PyTorch models a run's checkpoint is loaded into: normlab's spelt-out mirror, and for an
    encoder-decoder torch.nn.Transformer itself where it computes the same model."""
    if cfg.model != "encdec":
        return [("mirror", nm.build_model)]
    out = [("mirror", nm.build_encdec_model)]
    if nm.nn_transformer_covers(cfg):
        out.append(("nn.Transformer", nm.build_nn_transformer))
    return out


def load_into(model, name, state, dt):
    state = {k: v.to(dt) for k, v in state.items()}
    if name == "nn.Transformer":
        model.load_normlab(state)
    else:
        model.load_state_dict(state, strict=True)


def text_root(cfg, data_root):
    if data_root or not cfg.data.startswith("text:"):
        return data_root or "."
    path = cfg.data[5:]
    return "." if os.path.isabs(path) or os.path.exists(path) else ROOT


def check_weights(torch, load_file, cfg, batches, weights_path, reference):
    """A row per mirror: {'mirror', 'f32', 'f64', 'rel32', 'rel64'} for one safetensors file against `reference`."""
    state = load_file(weights_path)
    if cfg.tie_embeddings:  # one tensor in the file, as safetensors' save_model writes a tied model
        shared = cfg.model != "encdec" or cfg.shared_embeddings
        state["head.weight"] = state["tok_emb.weight" if shared else "tgt_emb.weight"]
    rows = []
    for mirror, build in mirrors(cfg):
        out = {"weights": weights_path, "normlab": reference, "mirror": mirror,
               "checkpoint_dtypes": sorted({str(t.dtype).replace("torch.", "") for t in state.values()})}
        for name, dt in (("f32", torch.float32), ("f64", torch.float64)):
            model = build(cfg, torch, dtype=dt)
            load_into(model, mirror, state, dt)
            loss = mean_val_loss(torch, model, batches, dt)
            out[name] = loss
            out["rel" + name[1:]] = abs(loss - reference) / abs(reference)
        rows.append(out)
    return rows


def check_run(torch, load_file, run, args):
    cfg = nm.ModelConfig.from_file(os.path.join(run, "config.json"))
    with open(os.path.join(run, "result.json")) as f:
        result = json.load(f)
    ref = result.get("final_val_loss")
    if ref is None or not math.isfinite(ref):
        raise RuntimeError(f"final_val_loss is {ref} (status {result.get('status')}): nothing to compare")
    data = nm.data_source(cfg, text_root(cfg, args.data_root))
    batches = [data.val_batch(i, cfg.batch_size, cfg.seq_len) for i in range(cfg.eval_batches)]
    rows = check_weights(torch, load_file, cfg, batches, os.path.join(run, "model.safetensors"), ref)
    for r in rows:
        r["step"] = result.get("steps_done")
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
            for row in check_weights(torch, load_file, cfg, batches, os.path.join(ckdir, n), val[step]):
                row["step"] = step
                rows.append(row)
    desc = f"{cfg.model} {cfg.norm} {cfg.placement} {cfg.init}" + (" qk" if cfg.qk_norm else "") + \
        (" hb" if cfg.head_bias else "") + ("" if cfg.residual else " no-residual") + \
        ("" if cfg.final_norm == "auto" else f" final_norm {cfg.final_norm}") + \
        (f" E{cfg.encoder_layers}D{cfg.decoder_layers}" if cfg.model == "encdec" else f" L{cfg.layers}") + \
        f" {'text' if cfg.data.startswith('text:') else cfg.data}"
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
        print(f"{'run':<{w}} {'config':<{c}} {'torch model':<14} {'step':>5} {'normlab':>10} {'torch f32':>10} "
              f"{'rel f32':>8} {'torch f64':>10} {'rel f64':>8}  ok")
        for e in report:
            if "error" in e:
                print(f"{e['run']:<{w}} cannot check: {e['error']}")
                continue
            for r in e["rows"]:
                print(f"{e['run']:<{w}} {e['config']:<{c}} {r['mirror']:<14} {r['step']!s:>5} {r['normlab']:10.6f} "
                      f"{r['f32']:10.6f} {r['rel32']:8.1e} {r['f64']:10.6f} {r['rel64']:8.1e}  "
                      f"{'yes' if r['ok'] else 'NO'}")
        print(f"worst relative difference {worst:.2e} (tolerance {args.rtol:g}); "
              f"{failed} mismatched, {unusable} could not be checked; torch {torch.__version__}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report, args, torch, worst, failed, unusable))
    if unusable:
        return 2
    return 1 if failed else 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "unknown CPU"


def markdown(report, args, torch, worst, failed, unusable):
    import numpy
    s = [f"Measured on {cpu_model()} ({os.cpu_count()} logical CPUs), PyTorch {torch.__version__}, numpy "
         f"{numpy.__version__}, torch threads {args.threads}; tolerance {args.rtol:g} relative.", "",
         f"Command: `python3 scripts/torch_checkpoint_check.py {' '.join(sys.argv[1:])}`", "",
         "| run | config | torch model | step | normlab val loss | torch f32 | rel diff f32 | torch f64 | rel diff f64 | ok |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for e in report:
        if "error" in e:
            s.append(f"| {e['run']} | cannot check: {e['error']} | | | | | | | | no |")
            continue
        for r in e["rows"]:
            s.append(f"| {os.path.basename(e['run'].rstrip('/'))} | {e['config']} | {r['mirror']} | {r['step']} | {r['normlab']:.9f} | "
                     f"{r['f32']:.9f} | {r['rel32']:.1e} | {r['f64']:.9f} | {r['rel64']:.1e} | "
                     f"{'yes' if r['ok'] else '**no**'} |")
    s += ["", f"Worst relative difference {worst:.2e}; {failed} mismatched, {unusable} could not be checked.", ""]
    return "\n".join(s)


if __name__ == "__main__":
    sys.exit(main())
