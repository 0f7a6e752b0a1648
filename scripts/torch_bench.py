#!/usr/bin/env python3
"""PyTorch's side of `normlab bench norms`: times torch.nn.LayerNorm and torch.nn.RMSNorm,
forward and backward, on the same shapes, thread counts and buffer rotation, and writes the
same JSON schema (docs/bench.md), so that `normlab bench norms --with-torch` puts its rows in
the same table.

    python3 scripts/torch_bench.py --shapes 8x256x1024 --threads 1,2 --out torch.json
    normlab bench norms --with-torch          (runs this script itself)

What is timed, per call (one call = one sample, each on the next buffer set):
  fwd  y = module(x), in training mode (x and the parameters require grad), as a training step
       runs it: LayerNorm is aten::native_layer_norm; RMSNorm is what torch.nn.RMSNorm does on
       CPU (a composite of elementwise ops when gradients are needed).
  bwd  torch.autograd.grad(y, (x, weight[, bias]), dy, retain_graph=True): dx, dgamma, dbeta.
Each is checked against a float64 computation of the formula before it is timed (the same
tolerances as normlab's check); a wrong result is reported as "rejected" and not timed.

PyTorch allocates every output. glibc serves blocks over 32 MiB with mmap and returns them at
free, so each call would pay page faults for its output (very slow under a hypervisor); the
script re-executes itself with MALLOC_MMAP_MAX_=0 and a large MALLOC_TRIM_THRESHOLD_ so that
freed memory is reused, as a caching allocator would (--default-malloc turns that off).
"""
import argparse
import datetime
import json
import math
import os
import socket
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="4x128x512,8x256x1024,16x512x2048,32x1024x4096")
    p.add_argument("--threads", default="1,%d" % os.cpu_count())
    p.add_argument("--pass", dest="passes", default="both", choices=["fwd", "bwd", "both"])
    p.add_argument("--impl", default="layernorm,rmsnorm", help="layernorm, rmsnorm or both")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--footprint-bytes", type=int, default=1 << 30)
    p.add_argument("--cache-resident-below", type=int, default=1 << 30)
    p.add_argument("--ln-eps", type=float, default=1e-5)
    p.add_argument("--rms-eps", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-malloc", action="store_true", help="do not tune glibc malloc (see above)")
    p.add_argument("--out", default="-", help="JSON file (default stdout)")
    return p.parse_args()


def reexec_with_malloc_tuning():
    if os.environ.get("NORMLAB_TORCH_BENCH_MALLOC") == "1" or "--default-malloc" in sys.argv:
        return
    env = dict(os.environ)
    env["NORMLAB_TORCH_BENCH_MALLOC"] = "1"
    env["MALLOC_MMAP_MAX_"] = "0"
    env["MALLOC_TRIM_THRESHOLD_"] = str(1 << 62)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def parse_shape(s):
    parts = s.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        sys.exit("torch_bench.py: shape '%s' is not BATCHxSEQxD" % s)
    return tuple(int(p) for p in parts)


def stats(samples):
    v = sorted(samples)
    n = len(v)
    if n == 0:
        return {"samples": 0, "median": None, "min": None, "max": None, "mean": None, "stddev": None,
                "cv": None, "spread": None}
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    mean = sum(v) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1)) if n > 1 else 0.0
    return {"samples": n, "median": med, "min": v[0], "max": v[-1], "mean": mean, "stddev": sd,
            "cv": sd / mean if mean > 0 else None, "spread": (v[-1] - v[0]) / med if med > 0 else None}


def byte_counts(norm, pas, b, t, d):
    """As normlab's norm_bytes(): data = the N x D arrays, params, stats (4-byte floats)."""
    n, nd, ln = b * t, b * t * d, norm == "layernorm"
    if pas == "fwd":
        return 2 * nd * 4, (2 if ln else 1) * d * 4, (2 if ln else 1) * n * 4
    return 3 * nd * 4, (3 if ln else 2) * d * 4, (2 if ln else 1) * n * 4


def caches():
    out = []
    for i in range(8):
        base = "/sys/devices/system/cpu/cpu0/cache/index%d/" % i
        try:
            level = int(open(base + "level").read())
            typ = open(base + "type").read().strip()
            size = open(base + "size").read().strip()
            mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            size = int(size.rstrip("KMG")) * mult
            shared = open(base + "shared_cpu_list").read().strip()
            count = 0
            for part in shared.split(","):
                a, _, b2 = part.partition("-")
                count += int(b2) - int(a) + 1 if b2 else 1
            out.append({"type": typ, "level": level, "size": size, "num_sharing": count})
        except OSError:
            break
    return out


class Check:
    """|got - want| <= atol*scale + rtol*|want|, as normlab's verify (norm_bench.cpp)."""

    def __init__(self, name, atol, rtol):
        self.name, self.atol, self.rtol = name, atol, rtol
        self.max_err, self.bad, self.total, self.report = 0.0, 0, 0, ""

    def add(self, got, want, scale=None):
        import torch
        got = got.double()
        err = (got - want).abs()
        err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
        tol = self.atol * (scale if scale is not None else 1.0) + self.rtol * want.abs()
        bad = ~(err <= tol)
        self.total += err.numel()
        self.bad += int(bad.sum())
        self.max_err = max(self.max_err, float(err.max()))
        if self.bad and not self.report:
            idx = int(bad.flatten().nonzero()[0])
            self.report = "%s: %d of %d values outside tolerance, max |diff| %.3g; first [%d] got %.7g want %.7g" % (
                self.name, self.bad, self.total, self.max_err, idx, float(got.flatten()[idx]),
                float(want.flatten()[idx]))


def reference(norm, x, dy, w, b, eps):
    """float64: y, dx, dgamma, dbeta and the sum_rows |term| scales of the parameter gradients."""
    xd, dyd, wd = x.double(), dy.double(), w.double()
    if norm == "layernorm":
        mu = xd.mean(-1, keepdim=True)
        var = ((xd - mu) ** 2).mean(-1, keepdim=True)
        rstd = 1.0 / (var + eps).sqrt()
        xhat = (xd - mu) * rstd
        y = xhat * wd + b.double()
        g = dyd * wd
        dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        return y, dx, (dyd * xhat).sum(0), dyd.sum(0), (dyd * xhat).abs().sum(0), dyd.abs().sum(0)
    rstd = 1.0 / ((xd * xd).mean(-1, keepdim=True) + eps).sqrt()
    xhat = xd * rstd
    y = xhat * wd
    g = dyd * wd
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return y, dx, (dyd * xhat).sum(0), None, (dyd * xhat).abs().sum(0), None


def main():
    args = parse_args()
    reexec_with_malloc_tuning()
    import torch

    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    passes = ["fwd", "bwd"] if args.passes == "both" else [args.passes]
    norms = [n for n in ("layernorm", "rmsnorm") if n in args.impl.split(",")]
    if not hasattr(torch.nn, "RMSNorm"):
        norms = [n for n in norms if n != "rmsnorm"]
    provider = "PyTorch " + torch.__version__
    gen = torch.Generator().manual_seed(args.seed)
    rows, warnings = [], []
    if not args.default_malloc and os.environ.get("NORMLAB_TORCH_BENCH_MALLOC") == "1":
        warnings.append("glibc malloc tuned (MALLOC_MMAP_MAX_=0): freed outputs are reused, no page faults per call")

    for (b, t, d) in shapes:
        n = b * t
        per_set = 2 * n * d * 4
        sets = max(1, -(-args.footprint_bytes // per_set))
        # x: rows with offsets and scales that vary, as normlab's inputs; dy uniform in [-1, 1).
        xs, dys = [], []
        for _ in range(sets):
            off = torch.rand(n, 1, generator=gen) * 2 - 1
            scale = 0.5 + 1.5 * torch.rand(n, 1, generator=gen)
            xs.append((off + scale * (torch.rand(n, d, generator=gen) * 2 - 1) * 1.7320508).requires_grad_(True))
            dys.append(torch.rand(n, d, generator=gen) * 2 - 1)
        mods = {}
        for norm in norms:
            if norm == "layernorm":
                m = torch.nn.LayerNorm(d, eps=args.ln_eps)
                with torch.no_grad():
                    m.weight.copy_(0.5 + torch.rand(d, generator=gen))
                    m.bias.copy_(torch.rand(d, generator=gen) - 0.5)
            else:
                m = torch.nn.RMSNorm(d, eps=args.rms_eps)
                with torch.no_grad():
                    m.weight.copy_(0.5 + torch.rand(d, generator=gen))
            mods[norm] = m

        for nthreads in threads:
            torch.set_num_threads(nthreads)
            cases = []
            for norm in norms:
                m = mods[norm]
                params = [m.weight] + ([m.bias] if norm == "layernorm" else [])
                eps = args.ln_eps if norm == "layernorm" else args.rms_eps
                for pas in passes:
                    data, pbytes, sbytes = byte_counts(norm, pas, b, t, d)
                    name = "%s.torch/%s/%dx%dx%d/threads:%d" % (norm, pas, b, t, d, nthreads)
                    case = {"norm": norm, "pass": pas, "name": name, "samples": [], "timed": 0.0,
                            "status": "ok", "verify": {"pass": True, "max_abs_err": 0.0, "worst_output": "",
                                                        "report": ""},
                            "bytes": (data, pbytes, sbytes), "params": params, "module": m, "eps": eps}
                    if pas == "fwd":
                        case["call"] = (lambda m=m: (lambda k: m(xs[k])))()
                    else:
                        graphs = [m(x) for x in xs]  # forward outside the timing; backward retains it
                        case["graphs"] = graphs
                        case["call"] = (lambda graphs=graphs, params=params: (
                            lambda k: torch.autograd.grad(graphs[k], [xs[k]] + params, dys[k], retain_graph=True)))()
                    cases.append(case)

            # Correctness first, on set 0.
            for c in cases:
                norm, m = c["norm"], c["module"]
                bias = m.bias if norm == "layernorm" else None
                y_ref, dx_ref, dg_ref, db_ref, dg_scale, db_scale = reference(
                    norm, xs[0].detach(), dys[0], m.weight.detach(), bias.detach() if bias is not None else None,
                    c["eps"])
                checks = []
                if c["pass"] == "fwd":
                    ch = Check("y", 1e-4, 1e-4)
                    ch.add(c["call"](0).detach(), y_ref)
                    checks.append(ch)
                else:
                    grads = c["call"](0)
                    for nm, got, want, scale, tol in (("dx", grads[0], dx_ref, None, (1e-4, 1e-4)),
                                                      ("dgamma", grads[1], dg_ref, dg_scale, (1e-5, 1e-4)),
                                                      ("dbeta", grads[2] if len(grads) > 2 else None, db_ref,
                                                       db_scale, (1e-5, 1e-4))):
                        if got is None or want is None:
                            continue
                        ch = Check(nm, *tol)
                        ch.add(got, want, scale)
                        checks.append(ch)
                worst = max(checks, key=lambda ch: ch.max_err)
                c["verify"] = {"pass": all(ch.bad == 0 for ch in checks), "max_abs_err": worst.max_err,
                               "worst_output": worst.name,
                               "report": " | ".join(ch.report for ch in checks if ch.report)}
                if not c["verify"]["pass"]:
                    c["status"] = "rejected"
                    print("REJECTED %s: %s" % (c["name"], c["verify"]["report"]), file=sys.stderr)

            live = [c for c in cases if c["status"] == "ok"]
            nxt = 0
            for _ in range(args.warmup):
                for c in live:
                    c["call"](nxt % sets)
                    nxt += 1
            # The cases in turn, one call each, as normlab times its own.
            running = True
            while running:
                running = False
                for c in live:
                    if c.get("done"):
                        continue
                    k = nxt % sets
                    nxt += 1
                    t0 = time.perf_counter()
                    c["call"](k)
                    s = time.perf_counter() - t0
                    c["samples"].append(s)
                    c["timed"] += s
                    c["done"] = len(c["samples"]) >= args.repeats and c["timed"] >= args.min_time
                    running = running or not c["done"]

            for c in cases:
                st = stats(c["samples"])
                us = {k: (v * 1e6 if isinstance(v, float) and k not in ("cv", "spread") else v) for k, v in st.items()}
                data, pbytes, sbytes = c["bytes"]
                ws = (data + sbytes) * sets
                rows.append({
                    "name": c["name"], "run_name": c["name"], "run_type": "iteration", "repetitions": 1,
                    "repetition_index": 0, "threads": nthreads, "iterations": st["samples"],
                    "real_time": us["median"], "cpu_time": us["median"], "time_unit": "us",
                    "bytes_per_second": data / st["median"] if st["median"] else None,
                    "label": "cache-resident" if ws < args.cache_resident_below else "memory",
                    "norm": c["norm"], "impl": "torch", "provider": provider, "pass": c["pass"], "shape": [b, t, d],
                    "status": c["status"], "streaming_stores": False, "verify": c["verify"], "aggregates": us,
                    "counters": {"data_bytes": data, "param_bytes": pbytes, "stat_bytes": sbytes,
                                 "working_set_bytes": ws, "parameters": (2 if c["norm"] == "layernorm" else 1) * d},
                    "pct_against": "copy-loop", "runs": 1})
                print("%s: median %.1f us over %d calls" % (c["name"], (st["median"] or 0) * 1e6, st["samples"]),
                      file=sys.stderr)
            for c in cases:
                c.pop("graphs", None)
        del xs, dys

    doc = {
        "context": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host_name": socket.gethostname(), "executable": sys.executable, "num_cpus": os.cpu_count(),
            "caches": caches(), "load_avg": list(os.getloadavg()), "library_build_type": "release",
            "library_versions": {"PyTorch": torch.__version__, "python": sys.version.split()[0]},
            "omp_proc_bind": os.environ.get("OMP_PROC_BIND", "false"),
            "threads_pinned": os.environ.get("OMP_PROC_BIND", "false").lower() not in ("", "false"),
            "footprint_target_bytes": args.footprint_bytes, "normlab_bench": "norms", "schema": "normlab-bench/1",
            "warnings": warnings,
        },
        "benchmarks": rows,
    }
    text = json.dumps(doc, indent=2)
    if args.out == "-":
        print(text)
    else:
        tmp = args.out + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
