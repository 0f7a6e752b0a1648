#!/usr/bin/env python3
"""PyTorch baseline of normlab's toy and gpt models, for timing one training step against `normlab train`.

The model is scripts/normlab_mirror.py's build_model (the mirror the checkpoint check verifies, with
the checkpoint's parameter names), with PyTorch's own kernels swapped in for timing: F.rms_norm,
F.scaled_dot_product_attention (gpt) and the prefix mean in the --mix form (toy); the task shape and
optimizer mirror normlab (src/train/trainer.cpp). --model toy (the default):

  x = tok_emb[ids] + pos_emb[0..T-1]
  per block (placement pre):  h = x + proj(prefix_mean(norm1(x)))          proj: Linear d->d (bias)
                              x = h + fc2(gelu(fc1(norm2(h))))            fc1 d->hidden, fc2 hidden->d
                              prefix_mean: y_t = mean_{s<=t} x_s, exact GELU (erf)
  (proj is the checkpoint's blocks.{l}.mix)
  final norm (on for pre), head: Linear d->vocab without bias, cross-entropy (mean over B*T tokens).
  Norms: rmsnorm (weight, eps 1e-6), layernorm (weight, bias, eps 1e-5) or none.
  Init (gpt2, normlab_mirror.init_with_torch): weights N(0, 0.02), the residual projections (mix,
  fc2) N(0, 0.02/sqrt(2L)), biases 0, gains 1; embeddings N(0, 0.02).

--model gpt (--heads, --qk_norm):

  x = tok_emb[ids] + pos_emb[0..T-1]
  per block (pre):  h = x + o(attn(norm1(x)))      q, k, v, o: Linear d->d (bias), heads of Dh = d/heads
                    x = h + fc2(gelu(fc1(norm2(h))))
                    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True) (scale 1/sqrt(Dh));
                    --qk_norm: RMSNorm (F.rms_norm, eps 1e-6, gain per Dh) on each head's q and k
  final norm, head without bias, cross-entropy; RMSNorm is F.rms_norm, LayerNorm F.layer_norm.
  Init: normlab's default gpt2 (normlab_mirror.init_with_torch): N(0, 0.02), o and fc2
  N(0, 0.02/sqrt(2L)), biases 0, gains 1, embeddings N(0, 0.02), drawn with torch's RNG.
  --check_init runs `normlab train --steps 0` with the same config (its initial model), loads its weights
  into this model and compares the parameter count and the validation loss (both models).

Both: AdamW(lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0), constant schedule.

One step = zero_grad, draw a batch (random ids: timing does not need normlab's numbers), forward,
loss.item() (normlab reads the loss every step to detect divergence), backward, optimizer step.
normlab additionally takes the global gradient norm every step; --grad-norm adds the same here
(off by default, which can only favour PyTorch).

Timing: `--warmup` untimed steps, then `--steps` steps each timed with perf_counter; the median
per-step time is the figure (mean, p10, p90 are printed too). Modes: eager, compile (torch.compile
of the model's forward+loss; backward through AOTAutograd), or both.

--compare (what scripts/compare_speed.sh runs) times normlab's own step next to both, interleaved:
per repeat, norm and thread count it runs `normlab train --model M ... --steps 300 --eval_every 300
--threads t --json` with this script's model config (--model, --heads, --qk_norm, --layers,
--d_model, --d_hidden, --vocab, --seq_len, --batch_size; timing.seconds_per_step: the mean over
the 300 steps, evaluation excluded), a DNNL_VERBOSE=1 run of normlab (--gemm_steps steps) for the
matmul time of each step (gpt: attention's batched products are oneDNN matmuls too, so they count
as matmul; the causal softmax is normlab's own kernel), then this script in eager and compile mode in
fresh processes; it records the load (other processes' CPU time and the hypervisor's steal during
each run) and prints medians over the repeats. Method and figures: results/train-speed.md.

Needs PyTorch (pip install torch); never needed by normlab's tests. Examples:
  python3 scripts/torch_baseline.py --threads 1 --mode both
  python3 scripts/torch_baseline.py --threads 2 --mode eager --norm layernorm --json
  NORMLAB_BIN=build/normlab python3 scripts/torch_baseline.py --compare --repeats 4 --norms rmsnorm,layernorm \\
      --normlab_policies default,active --perf --out_json /tmp/speed.json
  python3 scripts/torch_baseline.py --summarize /tmp/speed.json
  python3 scripts/torch_baseline.py --model gpt --threads 1 --mode both           # default gpt config
  python3 scripts/torch_baseline.py --model gpt --check_init                       # against normlab's init
  # the gpt config where products dominate (about 70 GFLOP per step, 50x the toy's: fewer steps)
  python3 scripts/torch_baseline.py --compare --model gpt --layers 6 --d_model 256 --d_hidden 1024 \\
      --heads 4 --seq_len 256 --batch_size 8 --steps 30 --warmup 5 --normlab_steps 40 --gemm_steps 30
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nanogpt_mirror  # noqa: E402  (nanoGPT's model.py, --model nanogpt)
import normlab_mirror as nm  # noqa: E402  (the gpt model; needs nothing beyond the standard library)

# The sizes of each --model when not given: normlab's defaults, and nanoGPT's CPU shape.
SIZES = {
    "toy": {"layers": 20, "d_model": 64, "d_hidden": 128, "heads": 4, "vocab": 64, "seq_len": 16, "batch_size": 32},
    "gpt": {"layers": 20, "d_model": 64, "d_hidden": 128, "heads": 4, "vocab": 64, "seq_len": 16, "batch_size": 32},
    "nanogpt": nanogpt_mirror.SHAPE,
}


def parse_bool(v):
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not true or false")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--model", choices=["toy", "gpt", "nanogpt"], default="toy",
                   help="toy: prefix-mean mixer (default); gpt: causal attention with F.scaled_dot_product_attention; "
                        "nanogpt: nanoGPT's model.py (scripts/nanogpt_mirror.py) at its CPU shape of shakespeare_char, "
                        "against normlab's gpt of the same sizes")
    p.add_argument("--heads", type=int, default=None, help="attention heads (gpt, nanogpt; default 4)")
    p.add_argument("--qk_norm", type=parse_bool, nargs="?", const=True, default=False,
                   help="gpt: RMSNorm on each head's q and k (--qk_norm or --qk_norm true)")
    # Sizes: SIZES[--model] where not given (toy, gpt: 20 layers, d 64, hidden 128, vocab 64, 32 x 16
    # tokens; nanogpt: 4 layers, d 128, hidden 512, 4 heads, vocab 65, 12 x 64 tokens).
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--d_model", type=int, default=None)
    p.add_argument("--d_hidden", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--seq_len", type=int, default=None)
    p.add_argument("--batch_size", type=int, default=None)
    p.add_argument("--norm", choices=["rmsnorm", "layernorm", "none"], default=None,
                   help="default rmsnorm (toy, gpt); nanogpt: layernorm, its only norm")
    p.add_argument("--placement", choices=["pre"], default="pre", help="only pre (the timed configuration)")
    p.add_argument("--mode", choices=["eager", "compile", "both"], default="both")
    p.add_argument("--compile_mode", default="default",
                   help="torch.compile mode: default, reduce-overhead, max-autotune-no-cudagraphs, ...")
    p.add_argument("--compile_optimizer", action="store_true",
                   help="also torch.compile the optimizer step (only useful with --adam foreach/loop)")
    p.add_argument("--mix", choices=["auto", "matmul", "cumsum"], default="auto",
                   help="prefix mean as a (T,T) averaging-matrix product or cumsum / arange; "
                        "auto times both in eager and keeps the faster")
    p.add_argument("--adam", choices=["auto", "fused", "foreach", "loop"], default="auto",
                   help="AdamW implementation; auto: fused if this torch has it on CPU, else foreach")
    p.add_argument("--grad-norm", dest="grad_norm", action="store_true",
                   help="also compute the global gradient norm each step, as normlab does")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps (after compilation)")
    p.add_argument("--steps", type=int, default=200, help="timed steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true",
                   help="after timing, run torch.profiler over 20 steps and print the op table "
                        "(matmul ops vs the rest)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--check_init", action="store_true",
                   help="instead of timing: run normlab train --steps 0 with this config, load "
                        "its weights into the timed model and compare parameter count and validation loss")
    c = p.add_argument_group("side-by-side comparison (--compare; scripts/compare_speed.sh runs this)")
    c.add_argument("--compare", action="store_true",
                   help="time normlab, eager and compiled PyTorch interleaved, per thread count, several repeats")
    c.add_argument("--normlab_bin", default=os.environ.get("NORMLAB_BIN", ""),
                   help="normlab binary (default $NORMLAB_BIN, else build/normlab, else build-main/normlab)")
    c.add_argument("--thread_list", default="1,2", help="thread counts to compare (default 1,2)")
    c.add_argument("--norms", default="", help="comma list of norms to compare (default: --norm)")
    c.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    c.add_argument("--normlab_steps", type=int, default=300, help="steps of `normlab train` per repeat")
    c.add_argument("--normlab_policies", default="default",
                   help="OpenMP wait policies to time normlab with, comma list of default (OMP_WAIT_POLICY "
                        "unset: libgomp spins briefly, then sleeps), active, passive; the "
                        "first one is the headline (default: default)")
    c.add_argument("--skip_compile", action="store_true", help="compare against eager only")
    c.add_argument("--no_gemm_share", dest="gemm_share", action="store_false",
                   help="skip the DNNL_VERBOSE matmul-time split of normlab's step")
    c.add_argument("--gemm_steps", type=int, default=120,
                   help="steps of the DNNL_VERBOSE run; the first min(20, steps/6) are skipped (default 120)")
    c.add_argument("--perf", action="store_true", help="also profile normlab with perf (cpu-clock) per thread count")
    c.add_argument("--torch_profile", action="store_true", help="also run torch.profiler on eager PyTorch")
    c.add_argument("--out_json", default="", help="write every measurement to this JSON file")
    c.add_argument("--quiet_wait", type=float, default=0.0,
                   help="before each measurement wait up to this many seconds for the machine to be quiet "
                        "(other processes using less than --quiet_threshold cores over 2 s); 0 = do not wait")
    c.add_argument("--quiet_threshold", type=float, default=0.3)
    c.add_argument("--summarize", default="", metavar="JSON",
                   help="print the tables again from a file written by --out_json, and exit")
    c.add_argument("--quiet_max", type=float, default=0.2,
                   help="summary: a repeat counts as quiet when other processes used less than this many "
                        "cores during each of its runs (default 0.2)")
    args = p.parse_args(argv)
    for k, v in SIZES[args.model].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.norm is None:
        args.norm = "layernorm" if args.model == "nanogpt" else "rmsnorm"
    if args.model == "nanogpt" and (args.norm != "layernorm" or (args.norms and args.norms != "layernorm")):
        p.error("--model nanogpt has LayerNorm (without bias) only")
    if args.model != "toy" and (args.heads < 1 or args.d_model % args.heads):
        p.error(f"--heads {args.heads} does not divide --d_model {args.d_model}")
    if args.qk_norm and args.model != "gpt":
        p.error("--qk_norm needs --model gpt (the toy model has no queries or keys; nanoGPT has no QK-Norm)")
    return args


def model_config(args, seed=None):
    """normlab_mirror.ModelConfig of the timed model for these arguments (normlab's defaults elsewhere)."""
    return nm.ModelConfig({
        "model": args.model, "norm": args.norm, "placement": args.placement, "final_norm": "auto",
        "qk_norm": bool(args.qk_norm), "head_bias": False, "residual": True, "layers": args.layers,
        "d_model": args.d_model, "d_hidden": args.d_hidden, "heads": args.heads, "vocab": args.vocab,
        "seq_len": args.seq_len, "init": "gpt2", "norm_eps": 0, "data": "synthetic", "topics": 4,
        "noise": 0.1, "batch_size": args.batch_size, "eval_batches": 8, "seed": args.seed if seed is None else seed})


def build_timed(args, torch, form="cumsum", cfg=None, init=True):
    """normlab's model as timed: the checked mirror (normlab_mirror.build_model) with PyTorch's own
    kernels swapped in (gpt: SDPA attention; every RMSNorm F.rms_norm; toy: the prefix mean in
    `form`), gpt2 init drawn with torch's RNG."""
    if args.model == "nanogpt":
        return nanogpt_mirror.build(torch, args.layers, args.d_model, args.heads, args.vocab, args.seq_len,
                                    args.d_hidden)
    cfg = cfg or model_config(args)
    model = nm.build_model(cfg, torch, sdpa=True, fused_rms=True, mix=form)
    if init:
        nm.init_with_torch(torch, model, cfg)
    return model


def make_optimizer(args, torch, model):
    """AdamW as normlab runs it (lr 1e-3, betas (0.9, 0.999), no decay), or nanoGPT's (its decay groups,
    betas (0.9, 0.99), weight decay 0.1); fused, foreach or a loop as --adam says."""
    if args.model == "nanogpt":
        make = lambda **impl: nanogpt_mirror.optimizer(torch, model, **impl)
    else:
        kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        make = lambda **impl: torch.optim.AdamW(list(model.parameters()), **impl, **kw)
    choice = args.adam
    if choice in ("auto", "fused"):
        try:
            return make(fused=True), "fused"
        except (RuntimeError, TypeError, ValueError) as e:
            if choice == "fused":
                raise
            warnings.warn(f"fused AdamW unavailable on CPU ({e}); using foreach")
            choice = "foreach"
    if choice in ("auto", "foreach"):
        return make(foreach=True), "foreach"
    return make(foreach=False), "loop"


def run_mode(args, torch, mode, form):
    torch.manual_seed(args.seed)
    model = build_timed(args, torch, form if args.model == "toy" else "cumsum")
    params = [p for p in model.parameters()]
    n_params = sum(p.numel() for p in params)
    opt, adam_impl = make_optimizer(args, torch, model)
    loss_fn = model
    if mode == "compile":
        loss_fn = torch.compile(model, mode=None if args.compile_mode == "default" else args.compile_mode)
    opt_step = opt.step
    if mode == "compile" and args.compile_optimizer:
        opt_step = torch.compile(opt.step)
    gen = torch.Generator().manual_seed(args.seed + 1)
    B, T, V = args.batch_size, args.seq_len, args.vocab

    def step():
        opt.zero_grad(set_to_none=True)
        ids = torch.randint(0, V, (B, T), generator=gen, dtype=torch.long)
        tg = torch.randint(0, V, (B, T), generator=gen, dtype=torch.long)
        loss = loss_fn(ids, tg)
        value = loss.item()
        loss.backward()
        if args.grad_norm:
            g = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params])))
            g.item()
        opt_step()
        return value

    t0 = time.perf_counter()
    first_loss = step()  # compiles in compile mode
    first_step_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        step()
    times, cpu = [], []
    for _ in range(args.steps):
        t, c = time.perf_counter(), time.process_time()
        last_loss = step()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    times.sort()
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]
    res = {
        "mode": mode,
        "model": args.model,
        "mix": form,
        "adam": adam_impl,
        "compile_mode": args.compile_mode if mode == "compile" else None,
        "threads": torch.get_num_threads(),
        "parameters": n_params,
        "first_step_s": first_step_s,
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "p10_s": q(0.1),
        "p90_s": q(0.9),
        "min_s": times[0],
        # CPU time of the process per step (all threads): at 1 thread a load-robust cross-check
        "cpu_median_s": statistics.median(cpu),
        "steps": args.steps,
        "warmup": args.warmup,
        "first_loss": first_loss,
        "last_loss": last_loss,
    }
    if args.profile:
        res["profile"] = profile(torch, step)
    return res


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")


def profile(torch, step):
    from torch.profiler import ProfilerActivity, profile as tprofile
    n = 20
    t = time.perf_counter()
    with tprofile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
    wall = (time.perf_counter() - t) / n
    avgs = prof.key_averages()
    # Self time of the leaf GEMM ops (mm/addmm/bmm; compiled graphs call them as extern kernels).
    gemm = sum(e.self_cpu_time_total for e in avgs if e.key in ("aten::mm", "aten::addmm", "aten::bmm",
                                                                 "aten::baddbmm")) / n / 1e6
    rows = sorted(((e.key, e.self_cpu_time_total / n / 1e6, e.count // n) for e in avgs), key=lambda r: -r[1])
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(table, file=sys.stderr)
    return {"profiled_step_s": wall, "gemm_self_s": gemm, "top_ops": [
        {"op": k, "self_s_per_step": s, "calls_per_step": c} for k, s, c in rows[:25]]}


def choose_form(args, torch):
    """Times both prefix-mean forms in eager and keeps the faster one (toy; gpt: attention is SDPA)."""
    if args.model != "toy":
        return "sdpa", {}
    if args.mix != "auto":
        return args.mix, {}
    sub = argparse.Namespace(**vars(args))
    sub.warmup, sub.steps, sub.profile, sub.grad_norm = 10, 40, False, False
    t = {f: run_mode(sub, torch, "eager", f)["median_s"] for f in ("matmul", "cumsum")}
    return min(t, key=t.get), t


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    if args.summarize:
        with open(args.summarize) as fh:
            data = json.load(fh)
        runs = data["runs"]
        norms = list(dict.fromkeys(r["norm"] for r in runs))
        threads = list(dict.fromkeys(r["threads"] for r in runs))
        modes = [m for m in ("eager", "compile") if any(m in r for r in runs)]
        print_summary(data, norms, threads, modes, args.quiet_max)
        return 0
    if args.compare:
        return compare(args)
    if args.check_init:
        if args.model == "nanogpt":
            sys.exit("--check_init compares normlab's own model; nanoGPT's has no normlab checkpoint")
        return check_init(args)
    # PyTorch at its best: with jemalloc preloaded when it is installed (Debian: libjemalloc2), as
    # torch_bench.py runs it; the choice is recorded in the output.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_bench import reexec_with_allocator
    allocator = reexec_with_allocator("auto")
    import torch

    torch.set_num_threads(args.threads)
    if hasattr(torch, "set_num_interop_threads"):
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    form, form_times = choose_form(args, torch)
    modes = ["eager", "compile"] if args.mode == "both" else [args.mode]
    out = {
        "torch": torch.__version__,
        "allocator": allocator,
        "config": {k: getattr(args, k) for k in ("model", "layers", "d_model", "d_hidden", "heads", "qk_norm",
                                                  "vocab", "seq_len", "batch_size", "norm", "placement",
                                                  "threads")},
        "mix_choice_median_s": form_times,
        "loadavg": open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None,
        "results": [],
    }
    for m in modes:
        try:
            out["results"].append(run_mode(args, torch, m, form))
        except Exception as e:  # torch.compile needs a working C++ toolchain; report instead of dying
            out["results"].append({"mode": m, "error": f"{type(e).__name__}: {e}"[:2000]})
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        if args.model == "toy":
            print(f"torch {out['torch']}, threads {args.threads}, norm {args.norm}, layers {args.layers}, "
                  f"batch {args.batch_size}; prefix mean: {form} {form_times or ''}")
        else:
            print(f"torch {out['torch']}, model {args.model}, threads {args.threads}, norm {args.norm}, layers {args.layers}, "
                  f"d_model {args.d_model}, d_hidden {args.d_hidden}, heads {args.heads}, qk_norm {args.qk_norm}, "
                  f"seq_len {args.seq_len}, batch {args.batch_size}; attention: "
                  f"F.scaled_dot_product_attention(is_causal=True); {out['results'][0].get('parameters')} parameters")
        for r in out["results"]:
            if "error" in r:
                print(f"  {r['mode']:8s} FAILED: {r['error']}")
                continue
            print(f"  {r['mode']:8s} median {1e3 * r['median_s']:7.3f} ms/step  (mean {1e3 * r['mean_s']:.3f}, "
                  f"p10 {1e3 * r['p10_s']:.3f}, p90 {1e3 * r['p90_s']:.3f}; first step {r['first_step_s']:.2f} s; "
                  f"AdamW {r['adam']}; loss {r['first_loss']:.3f} -> {r['last_loss']:.3f})")
            if "profile" in r:
                pr = r["profile"]
                print(f"           profiled {1e3 * pr['profiled_step_s']:.3f} ms/step, GEMM self time "
                      f"{1e3 * pr['gemm_self_s']:.3f} ms/step")
    return 0


# ---- side-by-side comparison -------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_busy():
    """(busy, steal) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


QUIET = {"wait": 0.0, "threshold": 0.3}


def wait_quiet():
    """Waits (up to QUIET['wait'] s) until other processes use < QUIET['threshold'] cores over 2 s."""
    if QUIET["wait"] <= 0:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    deadline = time.time() + QUIET["wait"]
    while True:
        b0, _ = cpu_busy()
        time.sleep(2.0)
        b1, _ = cpu_busy()
        busy = (b1 - b0) / hz / 2.0
        if busy < QUIET["threshold"] or time.time() > deadline:
            return busy


def measured(cmd, env=None, timeout=None, wait=True):
    """Runs cmd; returns (CompletedProcess, facts about the load while it ran).

    others_cores: CPU time used by every other process on the machine during the run, divided by
    the wall time (0 = machine otherwise idle, 1 = one other core's worth of work, 2 = both cores).
    """
    import resource
    import subprocess
    hz = os.sysconf("SC_CLK_TCK")
    before = wait_quiet() if wait else None
    load0 = open("/proc/loadavg").read().split()[0]
    b0, st0 = cpu_busy()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b1, st1 = cpu_busy()
    own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    others = max(0.0, (b1 - b0) / hz - own)
    return p, {"wall_s": wall, "loadavg1_before": float(load0), "own_cpu_s": own, "others_cores_before": before,
               "others_cores": others / wall if wall > 0 else 0.0,
               "steal_cores": (st1 - st0) / hz / wall if wall > 0 else 0.0}


def find_normlab(args):
    for cand in [args.normlab_bin, os.path.join(ROOT, "build", "normlab"), os.path.join(ROOT, "build-main", "normlab")]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    sys.exit("no normlab binary: build it with ./scripts/build.sh or set NORMLAB_BIN")


def model_flags(args):
    """normlab train's model flags for this config (toy: as before, only --model added). nanogpt:
    normlab's gpt of the same sizes with LayerNorm and nanoGPT's AdamW settings; it has what nanoGPT's
    bias=False drops (the linears' biases and LayerNorm's beta) and an untied head, and its
    --weight_decay decays every parameter where nanoGPT decays the tensors of two or more dims (the
    same work per step either way)."""
    flags = ["--model", "gpt" if args.model == "nanogpt" else args.model]
    if args.model != "toy":
        flags += ["--heads", str(args.heads), "--qk_norm", "true" if args.qk_norm else "false"]
    if args.model == "nanogpt":
        o = nanogpt_mirror.OPTIMIZER
        flags += ["--lr", str(o["lr"]), "--beta2", str(o["betas"][1]), "--weight_decay", str(o["weight_decay"])]
    return flags


def normlab_cmd(args, binary, norm, threads, steps, out, eval_batches=None):
    cmd = [binary, "train", *model_flags(args), "--layers", str(args.layers), "--d_model", str(args.d_model), "--d_hidden",
           str(args.d_hidden), "--vocab", str(args.vocab), "--seq_len", str(args.seq_len), "--norm", norm,
           "--placement", args.placement, "--batch_size", str(args.batch_size), "--steps", str(steps),
           "--eval_every", str(steps), "--threads", str(threads), "--json", "--out", out, "--force", "-q"]
    if eval_batches is not None:
        cmd += ["--eval_batches", str(eval_batches)]
    return cmd


def normlab_env(threads, policy="default"):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    env.pop("DNNL_VERBOSE", None)
    env.pop("ONEDNN_VERBOSE", None)
    return env


def run_normlab(args, binary, norm, threads, tmp, policy="default"):
    out = os.path.join(tmp, f"nl-{norm}-{threads}-{policy}")
    p, load = measured(normlab_cmd(args, binary, norm, threads, args.normlab_steps, out),
                       env=normlab_env(threads, policy))
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-2000:], **load}
    j = json.loads(p.stdout)
    return {"seconds_per_step": j["timing"]["seconds_per_step"], "threads": j["timing"].get("threads"),
            "policy": policy, "versions": j.get("versions"), "parameters": j.get("parameters"),
            # whole process (start-up, model creation, the final evaluation included): an upper bound
            "cpu_s_per_step": load["own_cpu_s"] / args.normlab_steps, **load}


def verbose_exec_lines(text):
    """(kind, impl, shapes, ms, timestamp_ms) of each oneDNN execution in DNNL_VERBOSE=1 output.

    With DNNL_VERBOSE_TIMESTAMP=1 oneDNN 2.x puts a millisecond timestamp (taken when the
    execution started) after the prefix; without it the timestamp is None.
    """
    rows = []
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 6 or f[0] not in ("onednn_verbose", "dnnl_verbose"):
            continue
        ts = None
        if f[1] != "exec":
            try:
                ts = float(f[1])
            except ValueError:
                continue
            f = f[:1] + f[2:]
            if f[1] != "exec":
                continue
        try:
            rows.append((f[3], f[4], f[-2], float(f[-1]), ts))
        except ValueError:
            pass
    return rows


def gemm_counts(args, binary, norm, threads, tmp):
    """oneDNN executions per training step (c) and per evaluation forward (f), from short runs.

    The first run of a shape on a machine may time the norm's candidate kernels (oneDNN's among
    them) before it picks one and caches the choice, which adds executions to that run only: a
    run of 1 step goes first and is not counted, and runs of 2, 3 and 4 steps must then differ by
    the same count (None, None otherwise)."""
    env = normlab_env(threads)
    env["DNNL_VERBOSE"] = "1"
    counts = {}
    for s in (1, 2, 3, 4):
        p, _ = measured(normlab_cmd(args, binary, norm, threads, s, os.path.join(tmp, f"v{s}"), 1), env=env,
                        wait=False)
        counts[s] = len(verbose_exec_lines(p.stdout + p.stderr))
    c = counts[3] - counts[2]
    if counts[4] - counts[3] != c:
        return None, None
    return c, counts[2] - 2 * c


def gemm_share(args, binary, norm, threads, tmp, counts, steps=120, skip=20, policy="default"):
    """normlab's matmul time per step from DNNL_VERBOSE=1 (oneDNN prints every execution with its time).

    With c executions per training step and f per evaluation forward (gemm_counts), a run of
    `steps` steps with one evaluation batch at the end prints steps*c + f lines in order, and
    step k is lines [k*c, (k+1)*c). Sum the matmul lines of each step; median over the steps
    after `skip`. The printing slows the run's own step down, so the share is taken against the
    step time of the plain run of the same repeat.
    """
    c, f = counts
    if c is None:
        return {"error": "DNNL_VERBOSE line counts of 2, 3 and 4 steps are not linear in the steps"}
    env = normlab_env(threads, policy)
    env["DNNL_VERBOSE"] = "1"
    env["DNNL_VERBOSE_TIMESTAMP"] = "1"
    p, load = measured(normlab_cmd(args, binary, norm, threads, steps, os.path.join(tmp, "vN"), 1), env=env)
    rows = verbose_exec_lines(p.stdout + p.stderr)
    if c <= 0 or len(rows) != steps * c + f:
        return {"error": f"unexpected DNNL_VERBOSE line counts: per step {c}, eval {f}, run {len(rows)}"}
    mm, other, wall, share = [], [], [], []
    for k in range(skip, steps):
        chunk = rows[k * c:(k + 1) * c]
        mm.append(sum(r[3] for r in chunk if r[0] == "matmul") / 1e3)
        other.append(sum(r[3] for r in chunk if r[0] != "matmul") / 1e3)
        if k + 1 < steps and chunk[0][4] is not None:
            # step k's wall time: from its first oneDNN execution to the next step's first one
            wall.append((rows[(k + 1) * c][4] - chunk[0][4]) / 1e3)
            share.append(mm[-1] / wall[-1])
    kinds = {}
    for r in rows[skip * c:(skip + 1) * c]:
        kinds[f"{r[0]} {r[1]}"] = kinds.get(f"{r[0]} {r[1]}", 0) + 1
    shapes = {}
    for r in rows[skip * c:(skip + 1) * c]:
        if r[0] == "matmul":
            shapes[r[2]] = shapes.get(r[2], 0) + 1
    return {"execs_per_step": c, "execs_per_eval_forward": f, "kinds_per_step": kinds, "matmul_shapes": shapes,
            "matmul_s_median": statistics.median(mm), "matmul_s_p10": sorted(mm)[len(mm) // 10],
            "matmul_s_p90": sorted(mm)[(9 * len(mm)) // 10],
            "other_onednn_s_median": statistics.median(other),
            # the same steps' wall time in this run (printing each line slows it down a little, so
            # the share is, if anything, underestimated)
            "verbose_step_s_median": statistics.median(wall) if wall else None,
            "share_in_run_median": statistics.median(share) if share else None, **load}


def perf_profile(args, binary, norm, threads, tmp, policy="default"):
    """perf record -e cpu-clock of one normlab run; samples grouped into matmul / the rest."""
    import shutil
    import subprocess
    if not shutil.which("perf"):
        return {"error": "perf not found"}
    data = os.path.join(tmp, f"perf-{norm}-{threads}-{policy}.data")
    env = normlab_env(threads, policy)
    env["DNNL_JIT_PROFILE"] = "2"  # perf map of oneDNN's JIT kernels (/tmp/perf-PID.map)
    cmd = ["perf", "record", "-e", "cpu-clock", "-F", "2000", "-o", data, "--"] + normlab_cmd(
        args, binary, norm, threads, args.normlab_steps, os.path.join(tmp, "perf-run"))
    p, load = measured(cmd, env=env)
    if p.returncode != 0:
        return {"error": p.stderr[-1000:]}
    return {**parse_perf(data), **load}


def parse_perf(data):
    """Groups the samples of a perf.data file: matmul (oneDNN) / normlab code / OpenMP / libc / kernel."""
    import re
    import subprocess
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio", "-g",
                          "none"], capture_output=True, text=True).stdout
    groups, syms = {}, {}
    for line in rep.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "%" not in line.split()[0]:
            continue
        pct = float(line.split()[0].rstrip("%"))
        rest = line.split(None, 1)[1]
        dso, _, sym = rest.partition("[.]") if "[.]" in rest else rest.partition("[k]")
        dso, sym = dso.strip(), sym.strip()
        m = re.search(r"(normlab::cpu::\w+)\(", sym) if "for_tiles" in sym or "for_row" in sym else None
        short = m.group(1) + " (tiled loop)" if m else sym.split("(")[0].split("<")[0]
        if "libdnnl" in dso or "[JIT]" in dso:
            # normlab's step runs only matmul primitives in oneDNN (DNNL_VERBOSE: 183 of 183
            # executions); JIT GEMM kernels, their bias post-processing and the stripped
            # libdnnl driver code all count as matmul. A oneDNN norm kernel would be named *norm*.
            g = "oneDNN, not matmul" if "norm" in sym else "matmul (oneDNN)"
        elif "libgomp" in dso or "libiomp" in dso:
            g = "OpenMP runtime (barriers, spin-wait)"
        elif "kernel" in dso:
            g = "kernel"
        elif dso.startswith("libc"):
            g = "libc (malloc/free, memcpy)"
        else:
            g = "normlab code"
        groups[g] = groups.get(g, 0.0) + pct
        if g != "matmul (oneDNN)":
            key = f"{dso}: {short}"
            syms[key] = syms.get(key, 0.0) + pct
    top = sorted(syms.items(), key=lambda kv: -kv[1])[:15]
    return {"groups_pct": groups, "top_non_matmul_pct": top}


def run_torch(args, mode, norm, threads, mix):
    cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--threads", str(threads), "--norm", norm,
           "--model", args.model, "--heads", str(args.heads), "--qk_norm", "true" if args.qk_norm else "false",
           "--mix", mix if args.model == "toy" else "auto", "--json", "--steps", str(args.steps), "--warmup", str(args.warmup), "--layers",
           str(args.layers), "--d_model", str(args.d_model), "--d_hidden", str(args.d_hidden), "--vocab",
           str(args.vocab), "--seq_len", str(args.seq_len), "--batch_size", str(args.batch_size),
           "--adam", args.adam, "--compile_mode", args.compile_mode]
    if args.grad_norm:
        cmd.append("--grad-norm")
    if args.torch_profile and mode == "eager":
        cmd.append("--profile")
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    p, load = measured(cmd, env=env)
    try:
        j = json.loads(p.stdout)
        r = j["results"][0]
    except (ValueError, KeyError, IndexError):
        return {"error": (p.stderr or p.stdout)[-2000:], **load}
    r["torch"] = j["torch"]
    r["allocator"] = j.get("allocator")
    r["mix_choice_median_s"] = j.get("mix_choice_median_s")
    return {**r, **load}


NORM_FN = {"rmsnorm": "F.rms_norm", "layernorm": "F.layer_norm", "none": "no norm"}
def check_init(args):
    """normlab's initial weights in the timed PyTorch model: parameter counts and validation loss.

    Runs `normlab train --steps 0` with this config (model.safetensors is the initial model and
    result.json's final_val_loss the loss at init), loads
    model.safetensors into the model this script times (toy: prefix mean in the --mix form;
    gpt: SDPA + F.rms_norm) and into the explicit mirror (normlab_mirror.build_model), and
    recomputes the mean loss over the same validation batches (normlab_mirror's port of the data).
    Needs safetensors (pip install safetensors). The run directory is removed afterwards.
    Exit 1 when a count differs or a relative loss difference exceeds 1e-6 (at init the loss is close
    to ln(vocab) whatever the weights, so the test has to be tight: a non-causal mask, scale 1 or an
    RMSNorm eps of 1e-5 move it by 1.6e-5 to 4.4e-5 relative in the default gpt config)."""
    import shutil
    import subprocess
    import tempfile
    import torch
    from safetensors.torch import load_file
    torch.set_num_threads(args.threads)
    binary = find_normlab(args)
    out = os.path.join(tempfile.mkdtemp(prefix="normlab-check-init-"), "run")  # normlab creates it
    cmd = [binary, "train", *model_flags(args), "--layers", str(args.layers), "--d_model", str(args.d_model),
           "--d_hidden", str(args.d_hidden), "--vocab", str(args.vocab), "--seq_len", str(args.seq_len), "--norm",
           args.norm, "--placement", args.placement, "--batch_size", str(args.batch_size), "--seed", str(args.seed),
           "--steps", "0", "--eval_batches", "2", "--threads",
           str(args.threads), "--out", out, "--force", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-1000:]}")
    with open(os.path.join(out, "result.json")) as fh:
        result = json.load(fh)
    cfg = nm.ModelConfig.from_file(os.path.join(out, "config.json"))
    state = load_file(os.path.join(out, "model.safetensors"))
    data = nm.data_source(cfg)
    batches = [data.val_batch(i, cfg.batch_size, cfg.seq_len) for i in range(cfg.eval_batches)]
    ref = result["final_val_loss"]
    form = args.mix if args.mix != "auto" else "matmul"
    timed = build_timed(args, torch, form, cfg=cfg, init=False)
    timed.load_state_dict(state, strict=True)
    timed_name = (f"timed (SDPA, {NORM_FN[args.norm]})" if args.model == "gpt" else
                  f"timed (prefix mean {form}, {NORM_FN[args.norm]})")
    mirror = nm.build_model(cfg, torch)
    mirror.load_state_dict(state, strict=True)
    # the timed model initialized the way it is when timed (torch's RNG): only its size is compared
    torch.manual_seed(args.seed)
    fresh = build_timed(args, torch, "matmul")
    counts = {"normlab": result.get("parameters"), "timed": sum(t.numel() for t in timed.parameters()),
              "timed, as initialized for timing": sum(t.numel() for t in fresh.parameters()),
              "checkpoint": sum(t.numel() for t in state.values())}
    print(f"normlab: {' '.join(cmd)}")
    print("parameters: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    bad = len(set(counts.values())) != 1
    for name, model in ((timed_name, timed), ("explicit mirror (normlab_mirror)", mirror)):
        total = 0.0
        with torch.no_grad():
            for inputs, targets in batches:
                total += float(model(torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)))
        loss = total / len(batches)
        rel = abs(loss - ref) / abs(ref)
        bad = bad or rel > 1e-6
        print(f"validation loss at init over {len(batches)} batches: normlab {ref:.8f}, {name} {loss:.8f}, "
              f"relative difference {rel:.2e}")
    print("MISMATCH" if bad else "agree (parameter counts equal, losses within 1e-6 relative)")
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    return 1 if bad else 0


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return ""
    m = statistics.median(xs)
    return f"{1e3 * min(xs):.2f}-{1e3 * max(xs):.2f} (±{50 * (max(xs) - min(xs)) / m:.0f}%)"


def compare(args):
    import platform
    import tempfile
    binary = find_normlab(args)
    QUIET["wait"], QUIET["threshold"] = args.quiet_wait, args.quiet_threshold
    policies = [x for x in args.normlab_policies.split(",") if x]
    threads = [int(t) for t in args.thread_list.split(",") if t]
    norms = [n for n in (args.norms or args.norm).split(",") if n]
    tmp = tempfile.mkdtemp(prefix="normlab-speed-")
    log = lambda *a: print(*a, file=sys.stderr, flush=True)
    info = {"machine": platform.processor() or platform.machine(), "normlab_bin": binary, "tmp": tmp,
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
            "nproc": os.cpu_count(), "normlab_policies": policies,
            "normlab_bin_mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(binary)))}
    config = {k: getattr(args, k) for k in ("model", "layers", "d_model", "d_hidden", "heads", "qk_norm", "vocab",
                                             "seq_len", "batch_size", "placement", "normlab_steps", "steps",
                                             "warmup", "gemm_steps")}
    log(f"normlab: {binary}; cpu: {info['cpu']} x{info['nproc']}; scratch {tmp}")
    log("config: " + ", ".join(f"{k} {v}" for k, v in config.items()))
    # The prefix-mean form for PyTorch (toy): the faster of the two in eager, 1 thread.
    mix = args.mix if args.model == "toy" else "sdpa"
    if mix == "auto":
        r = run_torch(argparse.Namespace(**{**vars(args), "steps": 60, "warmup": 10, "mix": "auto",
                                            "torch_profile": False}), "eager", norms[0], 1, "auto")
        mix = r.get("mix", "matmul")
        log(f"prefix mean form for PyTorch: {mix} (eager medians {r.get('mix_choice_median_s')})")
    data = {"info": info, "config": config, "mix": mix, "runs": [], "perf": {}}
    modes = ["eager"] + ([] if args.skip_compile else ["compile"])
    counts = {}
    if args.gemm_share:
        for norm in norms:
            for t in threads:
                counts[(norm, t)] = gemm_counts(args, binary, norm, t, tmp)
                log(f"oneDNN executions {norm} t={t}: {counts[(norm, t)][0]} per step, "
                    f"{counts[(norm, t)][1]} per evaluation forward")
    for rep in range(args.repeats):
        for norm in norms:
            for t in threads:
                row = {"repeat": rep, "norm": norm, "threads": t}
                for i, pol in enumerate(policies):
                    sfx = "" if i == 0 else "@" + pol
                    row["normlab" + sfx] = run_normlab(args, binary, norm, t, tmp, pol)
                    if args.gemm_share:
                        row["gemm" + sfx] = gemm_share(args, binary, norm, t, tmp, counts[(norm, t)],
                                                       steps=args.gemm_steps, skip=min(20, args.gemm_steps // 6),
                                                       policy=pol)
                for m in modes:
                    row[m] = run_torch(args, m, norm, t, mix)
                data["runs"].append(row)
                msg = f"repeat {rep + 1}/{args.repeats} {norm} t={t}: normlab " + (
                    f"{1e3 * row['normlab']['seconds_per_step']:.2f} ms" if "seconds_per_step" in row["normlab"] else
                    "FAILED " + row["normlab"].get("error", "")[:300])
                if "matmul_s_median" in row.get("gemm", {}):
                    g = row["gemm"]
                    msg += f" (DNNL_VERBOSE: matmul {1e3 * g['matmul_s_median']:.2f} ms of " + (
                        f"{1e3 * g['verbose_step_s_median']:.2f} ms = {100 * g['share_in_run_median']:.0f}%)"
                        if g.get("verbose_step_s_median") else "?)")
                for m in modes:
                    r = row[m]
                    msg += f", {m} " + (f"{1e3 * r['median_s']:.2f} ms" if "median_s" in r else
                                        "FAILED " + r.get("error", "")[-300:])
                for pol in policies[1:]:
                    r = row["normlab@" + pol]
                    msg += f"; normlab OMP_WAIT_POLICY={pol} " + (
                        f"{1e3 * r['seconds_per_step']:.2f} ms" if "seconds_per_step" in r else "FAILED")
                msg += f"  [others used {row['normlab']['others_cores']:.2f} cores during normlab]"
                pn = row["normlab"].get("parameters")
                pt = {row[m].get("parameters") for m in modes} - {None}
                if pn is not None and pt and pt != {pn}:
                    msg += (f"  parameters: normlab {pn} (with biases, LayerNorm's beta and an untied head), "
                            f"nanoGPT {sorted(pt)}" if args.model == "nanogpt" else
                            f"  PARAMETER COUNTS DIFFER: normlab {pn}, PyTorch {sorted(pt)}")
                log(msg)
                if args.out_json:
                    with open(args.out_json, "w") as fh:
                        json.dump(data, fh, indent=1)
    if args.perf:
        for norm in norms:
            for t in threads:
                for pol in policies if t > 1 else policies[:1]:
                    key = f"{norm}/{t}/{pol}"
                    data["perf"][key] = perf_profile(args, binary, norm, t, tmp, pol)
                    log(f"perf {key}: {json.dumps(data['perf'][key])[:1500]}")
    if args.out_json:
        with open(args.out_json, "w") as fh:
            json.dump(data, fh, indent=1)
    print_summary(data, norms, threads, modes, args.quiet_max)
    return 0


def load_of(part):
    """Cores' worth of CPU taken by others during a run: other processes plus the hypervisor's steal.
    When normlab's threads spin (OMP_WAIT_POLICY=active) they hide other processes from the
    busy-minus-own measure, so the 2-s sample taken just before the run counts too."""
    return max(part.get("others_cores", 9), part.get("others_cores_before") or 0) + part.get("steal_cores", 0)


def is_quiet(row, modes, limit):
    parts = [row["normlab"]] + [row[m] for m in modes] + ([row["gemm"]] if row.get("gemm") else [])
    return all(load_of(p) < limit for p in parts)


def print_table(data, norms, threads, modes, rows_of):
    hdr = "| norm | threads | repeats | normlab ms | " + " | ".join(
        f"{m} ms (median step) | {m} / normlab" for m in modes)
    hdr += (" | normlab matmul ms (DNNL_VERBOSE) | matmul share (vs plain run) | matmul share (in-run)"
            " | outside matmul | others' load + steal, worst run (cores) |")
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for norm in norms:
        for t in threads:
            rows = rows_of(norm, t)
            if not rows:
                continue
            nl = [r["normlab"].get("seconds_per_step") for r in rows]
            nlm = med(nl)
            line = f"| {norm} | {t} | {len(rows)} | " + (f"{1e3 * nlm:.2f} [{spread(nl)}] |" if nlm else "failed |")
            for m in modes:
                ts = [r[m].get("median_s") for r in rows]
                # ratio per repeat (runs next to each other in time), then the median of the ratios
                ratios = [r[m]["median_s"] / r["normlab"]["seconds_per_step"] for r in rows
                          if r[m].get("median_s") and r["normlab"].get("seconds_per_step")]
                tm = med(ts)
                line += (f" {1e3 * tm:.2f} [{spread(ts)}] | {med(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] |"
                         if tm and ratios else " failed | - |")
            gs = [r for r in rows if "matmul_s_median" in r.get("gemm", {}) and r["normlab"].get("seconds_per_step")]
            if gs:
                mms = [r["gemm"]["matmul_s_median"] for r in gs]
                plain = [r["gemm"]["matmul_s_median"] / r["normlab"]["seconds_per_step"] for r in gs]
                inrun = [r["gemm"]["share_in_run_median"] for r in gs if r["gemm"].get("share_in_run_median")]
                sh = med(plain)
                line += (f" {1e3 * med(mms):.2f} | {100 * sh:.0f}% [{100 * min(plain):.0f}-{100 * max(plain):.0f}] |"
                         + (f" {100 * med(inrun):.0f}% [{100 * min(inrun):.0f}-{100 * max(inrun):.0f}] |" if inrun
                            else " - |") + f" {100 * (1 - sh):.0f}% |")
            else:
                line += " - | - | - | - |"
            loads = [max(load_of(r[k]) for k in ["normlab"] + modes) for r in rows]
            line += f" {med(loads):.2f} [{min(loads):.2f}-{max(loads):.2f}] |"
            print(line)


def print_summary(data, norms, threads, modes, quiet_max=0.2):
    policies = data["info"].get("normlab_policies", ["default"])
    for i, pol in enumerate(policies):
        if i == 0:
            runs = data["runs"]
        else:  # the same repeats, with normlab's figures taken from this policy's runs
            runs = [{**r, "normlab": r["normlab@" + pol], "gemm": r.get("gemm@" + pol, {})} for r in data["runs"]
                    if "normlab@" + pol in r]
        print(f"\n===== normlab with OpenMP wait policy: {pol} =====")
        print_summary_runs(data, runs, norms, threads, modes, quiet_max)
    for key, pr in data.get("perf", {}).items():
        if "groups_pct" in pr:
            g = ", ".join(f"{k} {v:.1f}%" for k, v in sorted(pr["groups_pct"].items(), key=lambda kv: -kv[1]))
            top = ", ".join(f"{k.split(': ', 1)[-1]} {v:.1f}%" for k, v in pr["top_non_matmul_pct"][:10])
            print(f"\nperf (cpu-clock samples of normlab, all threads) {key}: {g}\n  outside matmul: {top}")


def print_summary_runs(data, runs, norms, threads, modes, quiet_max):
    cfg = data.get("config") or {"model": "toy"}
    if cfg.get("model") in ("gpt", "nanogpt"):
        print(f"\nmodel {cfg['model']}: " + ", ".join(f"{k} {cfg[k]}" for k in ("layers", "d_model", "d_hidden", "heads", "qk_norm",
                                                                 "vocab", "seq_len", "batch_size") if k in cfg))
        what = "PyTorch attention: F.scaled_dot_product_attention(is_causal=True)"
        if cfg["model"] == "nanogpt":
            what = ("PyTorch: nanoGPT's model.py (scripts/nanogpt_mirror.py: no biases, LayerNorm without beta, "
                    "tied head, decay groups); normlab: its gpt of the same sizes, LayerNorm with beta, biases, "
                    "untied head")
    else:
        what = f"PyTorch prefix mean: {data['mix']}"
    print(f"\nper-step ms, median over repeats [min-max of the repeats (± half-range / median)]; ratios: "
          f"median of the per-repeat ratios [min-max]; {what}")
    print("\nAll repeats:")
    print_table(data, norms, threads, modes,
                lambda n, t: [r for r in runs if r["norm"] == n and r["threads"] == t])
    print(f"\nQuiet repeats only (other processes used < {quiet_max} cores during each run of the repeat):")
    print_table(data, norms, threads, modes,
                lambda n, t: [r for r in runs if r["norm"] == n and r["threads"] == t and is_quiet(r, modes, quiet_max)])
    # 1 thread: CPU time per step is far less sensitive to other processes than wall time.
    print("\n1-thread CPU time per step, all repeats (process CPU time; normlab: whole run / steps, an upper bound):")
    for norm in norms:
        rows = [r for r in runs if r["norm"] == norm and r["threads"] == 1]
        if not rows:
            continue
        nl = med([r["normlab"].get("cpu_s_per_step") for r in rows])
        parts = [f"normlab {1e3 * nl:.2f} ms" if nl else "normlab -"]
        for m in modes:
            c = med([r[m].get("cpu_median_s") for r in rows])
            if c and nl:
                parts.append(f"{m} {1e3 * c:.2f} ms ({c / nl:.2f}x)")
        print(f"  {norm}: " + ", ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
