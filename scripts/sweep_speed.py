#!/usr/bin/env python3
"""End-to-end speed of a sweep: `normlab sweep` against the same grid trained by PyTorch, two processes at a
time, one thread each (results/sweep-speed.md; the issue's "Speed" benchmark). Needs PyTorch (pip install
torch); never needed by the tests.

The grid is experiments/sweep-lr-depth.json: toy model, LayerNorm, placement post/pre x layers 12/30 x
lr 1e-4, 3e-4, 1e-3, 3e-3, 1e-2; 3000 steps of batch 32, evaluation every 250 steps (8 held-out batches).

PyTorch side: one process per point (`--torch_point`), torch.set_num_threads(1), eager mode, the toy model
of scripts/normlab_mirror.py (build_model: tok + pos embedding; per block prefix-mean mixing + Linear and an
MLP with exact GELU; init_with_torch: gpt2) with placement pre `x + F(N(x))` (final norm on) or post
`N(x + F(x))` (final norm off), AdamW (fused when available), loss.item() and the global gradient norm every
step (normlab computes both to detect divergence), the same evaluations. The batches are the mirror's port
of normlab's synthetic task (training batches from Rng(seed, data), validation batches normlab's), drawn
before the clock starts (data_seconds, outside process_seconds). A pool runs the 20 points `--jobs` at a time.

normlab side: `normlab sweep experiments/sweep-lr-depth.json --out DIR --jobs 2 --threads 1`, timed from
outside (wall), plus the sweep's own cost: its process's CPU time (printed at the end), the gap between
the time each child ran (manifest) and the training time it reports (result.json timing.seconds), and
the time of `normlab sweep summarize`.

  python3 scripts/sweep_speed.py --out /tmp/sweep-speed                 # both sides, the full grid
  python3 scripts/sweep_speed.py --out /tmp/sweep-speed --steps 600     # a scaled-down grid
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "experiments", "sweep-lr-depth.json")


def grid_points():
    spec = json.load(open(SPEC))
    g = spec["grid"]
    return [(p, L, lr) for p in g["placement"] for L in g["layers"] for lr in g["lr"]]


# ---- one PyTorch point --------------------------------------------------------------------------
def torch_point(a):
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import normlab_mirror as nm
    cfg = nm.ModelConfig({
        "model": "toy", "norm": "layernorm", "placement": a.placement, "final_norm": "auto", "qk_norm": False,
        "head_bias": False, "residual": True, "layers": a.layers, "d_model": 64, "d_hidden": 128, "heads": 4,
        "vocab": 64, "seq_len": 16, "init": "gpt2", "norm_eps": 0, "data": "synthetic", "topics": 4, "noise": 0.1,
        "batch_size": a.batch_size, "eval_batches": 8, "seed": a.seed})
    # The task's batches, drawn before the clock starts by the mirror's port of normlab's synthetic task
    # (pure Python: about 1 ms a batch, which would otherwise be charged to PyTorch's steps).
    t_data = time.perf_counter()
    task = nm.data_source(cfg)
    as_tensors = lambda b: (torch.tensor(b[0], dtype=torch.long), torch.tensor(b[1], dtype=torch.long))
    val = [as_tensors(task.val_batch(i, cfg.batch_size, cfg.seq_len)) for i in range(cfg.eval_batches)]
    data_rng = nm.Rng(cfg.seed, nm.STREAM_DATA)
    train = [as_tensors(task.make(data_rng, cfg.batch_size, cfg.seq_len)) for _ in range(a.steps)]
    data_seconds = time.perf_counter() - t_data
    t0 = time.perf_counter()
    torch.manual_seed(a.seed)
    model = nm.init_with_torch(torch, nm.build_model(cfg, torch, fused_rms=True), cfg)
    params = list(model.parameters())
    try:
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=True)
    status, final_val, curve = "ok", float("nan"), []
    t_train = time.perf_counter()
    for step in range(1, a.steps + 1):
        opt.zero_grad(set_to_none=True)
        ids, tg = train[step - 1]
        loss = model(ids, tg)
        lv = loss.item()
        if not math.isfinite(lv):
            status = "diverged"
            break
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, float("inf")).item()
        if not math.isfinite(gn):
            status = "diverged"
            break
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            with torch.no_grad():
                final_val = sum(model(i, t).item() for i, t in val) / len(val)
            curve.append((step, final_val))
    out = {"placement": a.placement, "layers": a.layers, "lr": a.lr, "status": status, "final_val_loss": final_val,
           "train_seconds": time.perf_counter() - t_train, "process_seconds": time.perf_counter() - t0,
           "data_seconds": data_seconds, "curve": curve}
    print(json.dumps(out))


# ---- the two grids -------------------------------------------------------------------------------
def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_torch_grid(a):
    def one(pt):
        p, L, lr = pt
        cmd = [sys.executable, os.path.abspath(__file__), "--torch_point", "--placement", p, "--layers", str(L),
               "--lr", str(lr), "--steps", str(a.steps), "--eval_every", str(a.eval_every), "--batch_size", "32"]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode != 0:
            raise RuntimeError(f"{cmd}: {r.stderr[-2000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["wall_seconds"] = time.perf_counter() - t
        return res

    t0, c0 = time.perf_counter(), children_cpu()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        results = list(ex.map(one, grid_points()))
    return time.perf_counter() - t0, children_cpu() - c0, results


def run_normlab_grid(a):
    out = os.path.join(a.out, "normlab")
    cmd = [a.normlab_bin, "sweep", SPEC, "--out", out, "--jobs", str(a.jobs), "--threads", "1", "--force",
           "--set", f"steps={a.steps}", "--set", f"eval_every={a.eval_every}"]
    t0, c0 = time.perf_counter(), children_cpu()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr[-2000:]}")
    m = re.search(r"the sweep process itself used ([0-9.]+) s of CPU", r.stderr)
    own_cpu = float(m.group(1)) if m else float("nan")
    child, train = 0.0, 0.0
    for line in open(os.path.join(out, "manifest.jsonl")):
        j = json.loads(line)
        if j["event"] == "end":
            child += j["seconds"]
    for root, _, files in os.walk(os.path.join(out, "runs")):
        if "result.json" in files:
            train += json.load(open(os.path.join(root, "result.json")))["timing"]["seconds"]
    t1 = time.perf_counter()
    subprocess.run([a.normlab_bin, "sweep", "summarize", out], capture_output=True, check=True)
    summarize = time.perf_counter() - t1
    return {"wall_seconds": wall, "cpu_seconds": cpu, "load": os.getloadavg(), "own_cpu_seconds": own_cpu, "child_seconds": child, "train_seconds": train,
            "summarize_seconds": summarize, "summary": open(os.path.join(out, "summary.md")).read()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/sweep-speed")
    p.add_argument("--normlab_bin", default=os.environ.get("NORMLAB_BIN", os.path.join(ROOT, "build", "normlab")))
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--eval_every", type=int, default=250)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", choices=["both", "normlab", "torch"], default="both")
    # one PyTorch point (used by the pool)
    p.add_argument("--torch_point", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--placement", default="pre")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.torch_point:
        return torch_point(a)
    os.makedirs(a.out, exist_ok=True)
    report = {"steps": a.steps, "jobs": a.jobs, "cpu": cpu_name()}
    if a.only in ("both", "normlab"):
        report["normlab"] = run_normlab_grid(a)
        n = report["normlab"]
        print(f"normlab sweep: {n['wall_seconds']:.1f} s wall, {n['cpu_seconds']:.1f} s CPU "
              f"({100 * n['cpu_seconds'] / (n['wall_seconds'] * a.jobs):.0f}% of {a.jobs} cores); the sweep process {n['own_cpu_seconds']:.2f} s CPU; "
              f"children {n['child_seconds']:.1f} s in all, of which training {n['train_seconds']:.1f} s; "
              f"summarize {n['summarize_seconds']:.2f} s", flush=True)
    if a.only in ("both", "torch"):
        wall, cpu, results = run_torch_grid(a)
        report["torch"] = {"wall_seconds": wall, "cpu_seconds": cpu, "load": os.getloadavg(), "points": results}
        print(f"pytorch grid: {wall:.1f} s wall, {cpu:.1f} s CPU ({100 * cpu / (wall * a.jobs):.0f}% of {a.jobs} cores); per-point train {sum(r['train_seconds'] for r in results):.1f} s in all",
              flush=True)
        for r in results:
            print(f"  {r['placement']:4} L={r['layers']:2} lr={r['lr']:<7g} {r['status']:8} val {r['final_val_loss']:.4f} "
                  f"{r['wall_seconds']:.1f} s", flush=True)
    if "normlab" in report and "torch" in report:
        print(f"speed-up end to end: {report['torch']['wall_seconds'] / report['normlab']['wall_seconds']:.2f}x")
    json.dump(report, open(os.path.join(a.out, "report.json"), "w"), indent=2)


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
