#!/usr/bin/env python3
"""PyTorch's side of `normlab bench norms`: times torch.nn.LayerNorm and torch.nn.RMSNorm,
forward and backward, on the same shapes, thread counts and buffer rotation, and writes the
same JSON schema (docs/bench.md), so that `normlab bench norms --with-torch` puts its rows in
the same table.

    python3 scripts/torch_bench.py --shapes 8x256x1024 --threads 1,2 --out torch.json
    python3 scripts/torch_bench.py --shapes 1x512x64 --resident --out torch-resident.json
    python3 scripts/torch_bench.py --device cuda --dtypes f32,bf16 --out torch-cuda.json
    normlab bench norms --with-torch          (runs this script itself, once per kind of shape)
    normlab bench norms --device cuda --with-torch     (this script with --device cuda)

What is timed, per call (one call = one sample, each on the next buffer set; with --resident, one
buffer set reused by every call and a sample is a batch of calls, as normlab times its resident
shapes):
  fwd  y = module(x), in training mode (x and the parameters require grad), as a training step
       runs it: LayerNorm is aten::native_layer_norm; RMSNorm is what torch.nn.RMSNorm does on
       CPU (a composite of elementwise ops when gradients are needed).
  bwd  torch.autograd.grad(y, (x, weight[, bias]), dy, retain_graph=True): dx, dgamma, dbeta.
Each is checked against a float64 computation of the formula before it is timed (the same
tolerances as normlab's check); a wrong result is reported as "rejected" and not timed.

--device cuda: the same on GPU 0, as `normlab bench norms --device cuda` times normlab's
kernels: the buffers (x, dy, and the retained graphs of the backward) rotated through
--footprint-bytes on the device; a sample is a batch of calls (about 2 ms) on successive sets,
timed by the host's clock to the completion of the last (torch.cuda.synchronize), reported per
call, as normlab times its device rows; the check run in float64 on the device. --dtypes bf16 or fp16 (on either device) makes x, dy and the
parameters bf16 / float16 (PyTorch then computes in float32 inside its kernels and stores y, dx
and the parameter gradients in the format): those outputs get half an ulp of the format, 2^-8
or 2^-11 relative, on top of the tolerances. Rows are named
<norm>.torch/<pass>/<shape>[/bf16|/fp16]/<cuda or threads:T> and carry "device" and "dtype".

PyTorch allocates every output. glibc serves blocks over 32 MiB with mmap and returns them at
free, so each call would pay page faults for its output (very slow under a hypervisor: 5x on
the machine of results/bench-cpu.md). When libjemalloc.so.2 is installed (Debian:
libjemalloc2) the script re-executes itself with it preloaded and told to keep freed memory
(MALLOC_CONF: freed pages kept, never returned), so outputs reuse memory as a caching allocator would; the
JSON's context says which allocator ran. --allocator glibc keeps glibc's defaults.
"""
import argparse
import datetime
import gc
import json
import math
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from normlab_mirror import DEFAULT_EPS  # noqa: E402  (bench passes its own; these are for a run by hand)


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
    p.add_argument("--resident", action="store_true",
                   help="time cache-resident: one buffer set reused, calls in batches (rows named .../resident/...)")
    p.add_argument("--ln-eps", type=float, default=DEFAULT_EPS["layernorm"])
    p.add_argument("--rms-eps", type=float, default=DEFAULT_EPS["rmsnorm"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cpu (threads, default) or cuda: GPU 0, buffers on the device")
    p.add_argument("--dtypes", default="f32", help="storage: f32, bf16, fp16 or a comma list")
    p.add_argument("--allocator", default="auto", choices=["auto", "jemalloc", "glibc"],
                   help="auto: jemalloc when installed, else glibc (see above)")
    p.add_argument("--out", default="-", help="JSON file (default stdout)")
    return p.parse_args()


JEMALLOC_PATHS = ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/lib/x86_64-linux-gnu/libjemalloc.so.2",
                  "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2",
                  "/usr/local/lib/libjemalloc.so.2"]


def reexec_with_allocator(choice):
    """Re-executes this script with jemalloc preloaded (once); returns the allocator in use."""
    if os.environ.get("NORMLAB_TORCH_BENCH_ALLOCATOR"):
        return os.environ["NORMLAB_TORCH_BENCH_ALLOCATOR"]
    lib = next((p for p in JEMALLOC_PATHS if os.path.exists(p)), None)
    if choice == "glibc" or lib is None:
        if choice == "jemalloc":
            sys.exit("torch_bench.py: --allocator jemalloc: libjemalloc.so.2 not found (apt-get install libjemalloc2)")
        return "glibc"
    env = dict(os.environ)
    env["NORMLAB_TORCH_BENCH_ALLOCATOR"] = "jemalloc"
    env["LD_PRELOAD"] = (lib + " " + env.get("LD_PRELOAD", "")).strip()
    # Freed pages are never given back (decay -1), and large blocks (outputs) are cached like the
    # others (oversize_threshold:0), not in jemalloc's separate arena that gives them back at once:
    # a page given back and touched again costs a fault, and on the machine of
    # results/bench-cpu.md (a VM) faults made PyTorch's forward 5-10x slower.
    env["MALLOC_CONF"] = "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
    return "jemalloc"  # not reached


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


def byte_counts(norm, pas, b, t, d, stored=4):
    """As normlab's norm_bytes(): data = the N x D arrays, params, stats; the arrays and gamma/beta
    `stored` bytes each (4, or 2 for bf16 and fp16), statistics and dgamma/dbeta 4."""
    n, nd, ln = b * t, b * t * d, norm == "layernorm"
    if pas == "fwd":
        return 2 * nd * stored, (2 if ln else 1) * d * stored, (2 if ln else 1) * n * 4
    return 3 * nd * stored, d * stored + (2 if ln else 1) * d * 4, (2 if ln else 1) * n * 4


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

    def add(self, got, want, scale=None, offset=0):
        import torch
        got = got.double()
        err = (got - want).abs()
        err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
        tol = self.atol * (scale if scale is not None else 1.0) + self.rtol * want.abs()
        bad = ~(err <= tol)
        nbad = int(bad.sum())
        if nbad and not self.report:
            idx = int(bad.flatten().nonzero()[0])
            self.report = "%s: values outside atol %g + rtol %g*|ref|; first [%d] got %.7g want %.7g" % (
                self.name, self.atol, self.rtol, offset + idx, float(got.flatten()[idx]), float(want.flatten()[idx]))
        self.total += err.numel()
        self.bad += nbad
        self.max_err = max(self.max_err, float(err.max()))

    def finish(self):
        if self.bad:
            self.report += " (%d of %d bad, max |diff| %.3g)" % (self.bad, self.total, self.max_err)


# As norm_bench.cpp's kResidentSample: a resident sample is a batch of calls lasting about this long.
RESIDENT_SAMPLE = 200e-6


# A device sample: a batch of calls this long, so that the synchronization ending it is a small
# share of it (normlab's device rows: device_norm_bench.cpp's kDeviceSample).
DEVICE_SAMPLE = 2e-3


def resident_batch(call):
    """Calls per sample for a resident case, from the fastest of three single calls."""
    fastest = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        call(0)
        fastest = min(fastest, time.perf_counter() - t0)
    return max(1, min(100000, math.ceil(RESIDENT_SAMPLE / fastest))) if fastest > 0 else 100000


ROWS_PER_CHUNK = 256  # float64 temporaries of 256 rows, not of the whole tensor


# An output stored in 16 bits is rounded once more: half an ulp, 2^-8 (bf16) or 2^-11 (fp16)
# relative (normlab's tolerances.h, stored_half_ulp). dtype name -> (torch dtype, that tolerance).
STORAGE = {"f32": ("float32", 0.0), "bf16": ("bfloat16", 2.0 ** -8), "fp16": ("float16", 2.0 ** -11)}


def check_forward(norm, y, x, w, b, eps, stored_rtol=0.0):
    """y against the float64 formula, chunk by chunk."""
    ch = Check("y", 1e-4, 1e-4 + stored_rtol)  # tolerances as norm_bench.cpp's kTolRow
    wd = w.double()
    for lo in range(0, x.shape[0], ROWS_PER_CHUNK):
        xd = x[lo:lo + ROWS_PER_CHUNK].double()
        if norm == "layernorm":
            mu = xd.mean(-1, keepdim=True)
            xhat = (xd - mu) / (((xd - mu) ** 2).mean(-1, keepdim=True) + eps).sqrt()
            ref = xhat * wd + b.double()
        else:
            ref = xd / ((xd * xd).mean(-1, keepdim=True) + eps).sqrt() * wd
        ch.add(y[lo:lo + ROWS_PER_CHUNK], ref, offset=lo * x.shape[1])
    ch.finish()
    return [ch]


def check_backward(norm, grads, x, dy, w, b, eps, stored_rtol=0.0):
    """dx, dgamma, dbeta against the float64 formulas; parameter gradients summed over chunks, their
    tolerance scaled by sum_rows |term| (as norm_bench.cpp's kTolParam). stored_rtol: PyTorch stores
    all three in the parameters' dtype."""
    import torch
    d = x.shape[1]
    cdx = Check("dx", 1e-4, 1e-4 + stored_rtol)
    wd = w.double()
    dg = torch.zeros(d, dtype=torch.float64, device=x.device)
    db, adg, adb = torch.zeros_like(dg), torch.zeros_like(dg), torch.zeros_like(dg)
    for lo in range(0, x.shape[0], ROWS_PER_CHUNK):
        xd, dyd = x[lo:lo + ROWS_PER_CHUNK].double(), dy[lo:lo + ROWS_PER_CHUNK].double()
        g = dyd * wd
        if norm == "layernorm":
            mu = xd.mean(-1, keepdim=True)
            rstd = 1.0 / (((xd - mu) ** 2).mean(-1, keepdim=True) + eps).sqrt()
            xhat = (xd - mu) * rstd
            dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        else:
            rstd = 1.0 / ((xd * xd).mean(-1, keepdim=True) + eps).sqrt()
            xhat = xd * rstd
            dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        cdx.add(grads[0][lo:lo + ROWS_PER_CHUNK], dx, offset=lo * d)
        dg += (dyd * xhat).sum(0)
        adg += (dyd * xhat).abs().sum(0)
        db += dyd.sum(0)
        adb += dyd.abs().sum(0)
    cdx.finish()
    checks = [cdx]
    cdg = Check("dgamma", 1e-5, 1e-4 + stored_rtol)
    cdg.add(grads[1], dg, adg)
    cdg.finish()
    checks.append(cdg)
    if norm == "layernorm":
        cdb = Check("dbeta", 1e-5, 1e-4 + stored_rtol)
        cdb.add(grads[2], db, adb)
        cdb.finish()
        checks.append(cdb)
    return checks


def main():
    args = parse_args()
    allocator = reexec_with_allocator(args.allocator)
    import torch

    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    cuda = args.device == "cuda"
    dtypes = []
    for name in args.dtypes.split(","):
        if name not in STORAGE:
            sys.exit("torch_bench.py: --dtypes takes f32, bf16 or fp16, not '%s'" % name)
        if name not in dtypes:
            dtypes.append(name)
    if cuda and args.resident:
        sys.exit("torch_bench.py: --resident is the cpu's caches; --device cuda rotates its buffers")
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_bench.py: --device cuda: this PyTorch %s sees no CUDA device" % torch.__version__)
    # On the device a sample is a batch of calls on successive sets; the thread count is the cpu's.
    threads = [1] if cuda else [int(t) for t in args.threads.split(",")]
    dev = torch.device("cuda" if cuda else "cpu")
    passes = ["fwd", "bwd"] if args.passes == "both" else [args.passes]
    norms = [n for n in ("layernorm", "rmsnorm") if n in args.impl.split(",")]
    if not hasattr(torch.nn, "RMSNorm"):
        norms = [n for n in norms if n != "rmsnorm"]
    provider = "PyTorch " + torch.__version__
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    rows, warnings = [], []
    if allocator == "glibc":
        warnings.append("PyTorch ran on glibc malloc: outputs over 32 MiB are mmap'd and page-faulted on every call, "
                        "which can dominate its times; install libjemalloc2 (the script then preloads it)")

    def rand(*size):
        return torch.rand(*size, generator=gen, device=dev)

    def timed(call, k, batch):
        """Seconds of `batch` calls by the host's clock: on the cpu on set k, on the device on the sets
        from k on, to the completion of the last (the queue drained)."""
        t0 = time.perf_counter()
        for i in range(batch):
            call((k + i) % sets if cuda else k)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def device_batch(call):
        """Calls per device sample: about DEVICE_SAMPLE seconds, from one call timed to its completion."""
        one = timed(call, 0, 1)
        return max(1, min(10000, math.ceil(DEVICE_SAMPLE / one))) if one > 0 else 10000

    for (b, t, d), dtype in ((shape, dt) for shape in shapes for dt in dtypes):
        n = b * t
        tdt = getattr(torch, STORAGE[dtype][0])
        stored = 4 if dtype == "f32" else 2
        stored_rtol = STORAGE[dtype][1]
        per_set = 2 * n * d * stored
        sets = 1 if args.resident else max(1, -(-args.footprint_bytes // per_set))
        # x: rows with offsets and scales that vary, as normlab's inputs; dy uniform in [-1, 1).
        xs, dys = [], []
        for _ in range(sets):
            off = rand(n, 1) * 2 - 1
            scale = (0.5 + 1.5 * rand(n, 1)) * 1.7320508
            x = rand(n, d)  # in place from here: no N x D temporaries
            xs.append(x.mul_(2).sub_(1).mul_(scale).add_(off).to(tdt).requires_grad_(True))
            dys.append(rand(n, d).mul_(2).sub_(1).to(tdt))
        mods = {}
        for norm in norms:
            if norm == "layernorm":
                m = torch.nn.LayerNorm(d, eps=args.ln_eps, device=dev, dtype=tdt)
                with torch.no_grad():
                    m.weight.copy_(0.5 + rand(d))
                    m.bias.copy_(rand(d) - 0.5)
            else:
                m = torch.nn.RMSNorm(d, eps=args.rms_eps, device=dev, dtype=tdt)
                with torch.no_grad():
                    m.weight.copy_(0.5 + rand(d))
            mods[norm] = m

        for nthreads in threads:
            torch.set_num_threads(nthreads)
            cases = []
            for norm in norms:
                m = mods[norm]
                params = [m.weight] + ([m.bias] if norm == "layernorm" else [])
                eps = args.ln_eps if norm == "layernorm" else args.rms_eps
                for pas in passes:
                    data, pbytes, sbytes = byte_counts(norm, pas, b, t, d, stored)
                    name = "%s.torch/%s/%dx%dx%d%s%s/%s" % (norm, pas, b, t, d, "/resident" if args.resident else "",
                                                           "" if dtype == "f32" else "/" + dtype,
                                                           "cuda" if cuda else "threads:%d" % nthreads)
                    case = {"norm": norm, "pass": pas, "name": name, "samples": [], "timed": 0.0,
                            "status": "ok", "verify": {"pass": True, "max_abs_err": 0.0, "worst_output": "",
                                                        "report": ""},
                            "bytes": (data, pbytes, sbytes), "params": params, "module": m, "eps": eps,
                            "batch": 1}
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
                bias = m.bias.detach() if norm == "layernorm" else None
                out = c["call"](0)  # as timed: y, or the gradients
                with torch.no_grad():
                    if c["pass"] == "fwd":
                        checks = check_forward(norm, out.detach(), xs[0].detach(), m.weight.detach(), bias, c["eps"],
                                               stored_rtol)
                    else:
                        checks = check_backward(norm, out, xs[0].detach(), dys[0], m.weight.detach(), bias, c["eps"],
                                                stored_rtol)
                del out
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
            if args.resident:
                for c in live:
                    c["batch"] = resident_batch(c["call"])
            if cuda:
                for c in live:
                    c["batch"] = device_batch(c["call"])
            # The cases in turn, one sample each, as normlab times its own.
            running = True
            while running:
                running = False
                for c in live:
                    if c.get("done"):
                        continue
                    k = nxt % sets
                    nxt += 1
                    s = timed(c["call"], k, c["batch"])
                    c["samples"].append(s / c["batch"])
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
                    "repetition_index": 0, "threads": nthreads, "iterations": st["samples"] * c["batch"],
                    "real_time": us["median"], "cpu_time": us["median"], "time_unit": "us",
                    "bytes_per_second": data / st["median"] if st["median"] else None,
                    "label": "cache-resident" if ws < args.cache_resident_below else "memory",
                    "norm": c["norm"], "impl": "torch", "provider": provider, "pass": c["pass"], "shape": [b, t, d],
                    "device": args.device, "dtype": dtype,
                    "resident": args.resident, "calls_per_sample": c["batch"],
                    "status": c["status"], "streaming_stores": False, "verify": c["verify"], "aggregates": us,
                    "counters": {"data_bytes": data, "param_bytes": pbytes, "stat_bytes": sbytes,
                                 "working_set_bytes": ws, "parameters": (2 if c["norm"] == "layernorm" else 1) * d},
                    "pct_against": "copy-loop", "runs": 1})
                print("%s: median %.1f us over %d calls" % (c["name"], (st["median"] or 0) * 1e6, st["samples"]),
                      file=sys.stderr)
            cases.clear()  # the closures hold the retained graphs
        del xs, dys, mods
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()

    doc = {
        "context": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host_name": socket.gethostname(), "executable": sys.executable, "num_cpus": os.cpu_count(),
            "caches": caches(), "load_avg": list(os.getloadavg()), "library_build_type": "release",
            "library_versions": {"PyTorch": torch.__version__, "python": sys.version.split()[0]},
            "torch_allocator": allocator,
            "omp_proc_bind": os.environ.get("OMP_PROC_BIND", "false"),
            "threads_pinned": os.environ.get("OMP_PROC_BIND", "false").lower() not in ("", "false"),
            "footprint_target_bytes": args.footprint_bytes, "normlab_bench": "norms", "schema": "normlab-bench/1",
            **({"device": "cuda: PyTorch %s, %s" % (torch.version.cuda, torch.cuda.get_device_name(0))} if cuda else {}),
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
