#!/usr/bin/env python3
"""PyTorch's verdicts on normlab's low-precision training runs: the toy model in float16 / bfloat16
with float32 master weights, trained as each normlab run of a sweep was, its verdict (diverged or
not, at which step, from which module) set beside normlab's.

For each selected point of SWEEP_DIR (its runs/<name>/config.json and result.json, as `normlab
sweep` wrote them) the script builds the toy model in PyTorch the way a PyTorch user writes fp16
training by hand:

  - master weights: float32 tensors holding normlab's initial values (normlab_mirror.normlab_init:
    the same draws as normlab's init, bit for bit); Adam (torch.optim.Adam, normlab's betas, eps,
    lr and schedule) updates them;
  - each step the weights are cast to the format (.half() / .bfloat16()), the forward and backward
    run in it on PyTorch's own CPU kernels: nn.functional.linear, gelu, cumsum (the toy's prefix
    mean), layer_norm; the loss is cross-entropy of the logits upcast to float32 (as autocast
    does); residual_dtype fp32 keeps the residual stream float32 (sublayer outputs promote into it,
    the norms of a float32 stream run in float32, each linear casts its input to the format);
  - the norms by the run's norm_compute: format writes PyTorch's composite out at the format
    (x.pow(2).mean(-1) + eps, torch.rsqrt, ...), fp32 and fused upcast the row, normalize in
    float32 and cast the output back (LLaMA's RMSNorm; F.layer_norm);
  - loss scaling as torch.amp.GradScaler does it (2^16, x2 after 2000 finite steps, x0.5 and the
    step skipped on inf/NaN), written out because GradScaler refuses fp16 gradients; the run's
    loss_scale keys are honoured; bf16 without a scaler unless the run had one;
  - the same batches (normlab_mirror.Synthetic with normlab's data stream), the same evaluations
    (eval_every, eval_batches held-out batches).

A run diverges as normlab's does: a non-finite loss or gradient without a scaler, or a step skipped
with the scale below 2^-16 with one; it has collapsed when it finished within 0.05 nats of the
unigram loss or above it (normlab's rule, with the unigram loss of the normlab run's result.json). At the step that diverges the forward's intermediate values
and the backward's gradients are watched: the first non-finite one names the module (blocks.N,
embedding, final_norm, head) and the op, as normlab's result.json "nonfinite" does.

Needs PyTorch and numpy; never needed by normlab's tests. Writes a JSON document and a markdown
table (results/precision/torch-train-check.{json,md}):

  python3 scripts/torch_precision_train.py results/sweeps/precision-depth --select layers=6,20
  python3 scripts/torch_precision_train.py results/sweeps/precision-eps --select seed=0 layers=12 \\
      --json results/precision/torch-train-eps.json --md results/precision/torch-train-eps.md
"""
import argparse
import json
import math
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normlab_mirror as nm  # noqa: E402

MIN_LOSS_SCALE = 2.0 ** -16  # train.h kMinLossScale


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweep", help="a sweep directory (runs/<point>/config.json, result.json)")
    p.add_argument("--select", nargs="*", default=[],
                   help="key=v1,v2 conditions on the point's config (all must hold), e.g. layers=6,20 seed=0")
    p.add_argument("--limit", type=int, default=0, help="at most this many points (0: all)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--json", help="write the document here")
    p.add_argument("--md", help="write the markdown table here")
    return p.parse_args()


def same(a, b):
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(abs(float(a)), abs(float(b)))
    except (TypeError, ValueError):
        return str(a).lower() == str(b).lower()


def points(sweep, select):
    conds = []
    for c in select:
        k, _, v = c.partition("=")
        conds.append((k, v.split(",")))
    out = []
    for root, _, files in os.walk(os.path.join(sweep, "runs")):
        if "config.json" not in files or "result.json" not in files:
            continue
        with open(os.path.join(root, "config.json")) as f:
            cfg = json.load(f)
        if all(k in cfg and any(same(cfg[k], v) for v in vs) for k, vs in conds):
            out.append((os.path.relpath(root, os.path.join(sweep, "runs")), root, cfg))
    return sorted(out)


class NonFinite(Exception):
    pass


def run_point(torch, raw):
    F = torch.nn.functional
    cfg = nm.ModelConfig(raw)
    if cfg.model != "toy" or cfg.data != "synthetic":
        raise SystemExit("torch_precision_train.py: the toy model on synthetic data only")
    prec = raw.get("precision", "fp32")
    fmt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[prec]
    stream_dtype = torch.float32 if raw.get("residual_dtype") == "fp32" else fmt
    compute = raw.get("norm_compute") or "fused"
    scaled = raw.get("loss_scale", "dynamic" if prec == "fp16" else "none") == "dynamic"
    scale = float(raw.get("loss_scale_init", 65536.0)) if scaled else 1.0
    growth_interval = int(raw.get("loss_scale_growth_interval", 2000))
    growth, backoff = float(raw.get("loss_scale_growth_factor", 2.0)), float(raw.get("loss_scale_backoff_factor", 0.5))
    d, L = cfg.d_model, cfg.layers
    eps, final_eps = cfg.eps(), cfg.final_eps()
    alpha = cfg.deepnorm_alpha() if cfg.deepnet() else 1.0

    master = {k: torch.tensor(v) for k, v in nm.normlab_init(cfg).items()}
    for t in master.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(list(master.values()), lr=raw["lr"], betas=(raw["beta1"], raw["beta2"]),
                           eps=raw["adam_eps"], weight_decay=raw["weight_decay"])
    if raw.get("optimizer") not in ("adam", "adamw") or raw["weight_decay"] != 0:
        raise SystemExit("torch_precision_train.py: Adam without weight decay only")

    watch = {"on": False, "first": None}

    def seen(t, module, op):
        """t as the forward stored it; at a watched step, the first non-finite value (forward) and
        the first non-finite gradient reaching it (backward) are noted."""
        if watch["on"]:
            if watch["first"] is None and not torch.isfinite(t).all():
                watch["first"] = ("forward", op, module, float(t.detach()[~torch.isfinite(t.detach())][0]))
            if t.requires_grad:
                def hook(g, module=module, op=op):
                    if watch["first"] is None and not torch.isfinite(g).all():
                        watch["first"] = ("backward", op, module, float(g[~torch.isfinite(g)][0]))
                t.register_hook(hook)
        return t

    def norm(x, w, kind, e, module, name):
        if kind == "none":
            return x
        b = w.get(name + ".bias")
        g = w[name + ".weight"]
        if x.dtype == torch.float32:  # a float32 stream: the norm in float32 (autocast's rule)
            g, b = g.float(), (b.float() if b is not None else None)
        elif compute == "format":  # PyTorch's composite at the format, every intermediate stored
            # rsqrt's input is watched too: the gradient reaching it is torch.rsqrt's backward.
            c = x - x.mean(-1, keepdim=True) if kind == "layernorm" else x
            r = torch.rsqrt(seen(c.pow(2).mean(-1, keepdim=True) + e, module, kind + ": torch.rsqrt backward"))
            return seen(c * r * g + b, module, kind) if kind == "layernorm" else seen(c * r * g, module, kind)
        else:  # fp32 / fused: the row upcast, float32 inside, the output cast back once
            xf = x.float()
            if kind == "layernorm":
                y = F.layer_norm(xf, (d,), g.float(), b.float(), e)
            else:
                y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + e) * g.float()
            return seen(y.to(x.dtype), module, kind)
        if kind == "layernorm":
            return seen(F.layer_norm(x, (d,), g, b, e), module, "layernorm")
        return seen(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + e) * g, module, "rmsnorm")

    def linear(x, w, name, module, op="linear"):
        return seen(F.linear(x.to(fmt), w[name + ".weight"], w.get(name + ".bias")), module, op)

    count = torch.arange(1, cfg.seq_len + 1, dtype=torch.float32).view(1, -1, 1)

    def forward(w, ids, targets):
        T = ids.shape[1]
        x = seen(w["tok_emb.weight"][ids] + w["pos_emb.weight"][:T].unsqueeze(0), "embedding", "embedding")
        x = x.to(stream_dtype)
        for l in range(L):
            m, p = f"blocks.{l}", f"blocks.{l}."
            k = cfg.norm

            def f1(h):
                mixed = seen(h.cumsum(1) / count[:, :T].to(h.dtype), m, "prefix_mean")
                return linear(mixed, w, p + "mix", m)

            def f2(h):
                return linear(seen(F.gelu(linear(h, w, p + "mlp.fc1", m)), m, "gelu"), w, p + "mlp.fc2", m)

            if k == "none":
                h = seen(x + f1(x), m, "add")
                x = seen(h + f2(h), m, "add")
            elif cfg.placement == "pre":
                h = seen(x + f1(norm(x, w, k, eps, m, p + "norm1")), m, "add")
                x = seen(h + f2(norm(h, w, k, eps, m, p + "norm2")), m, "add")
            elif cfg.placement == "sandwich":
                h = seen(x + norm(f1(norm(x, w, k, eps, m, p + "norm1")), w, k, eps, m, p + "norm1b"), m, "add")
                x = seen(h + norm(f2(norm(h, w, k, eps, m, p + "norm2")), w, k, eps, m, p + "norm2b"), m, "add")
            else:  # post, deepnorm: N(alpha x + F(x))
                h = norm(seen(alpha * x + f1(x), m, "add"), w, k, eps, m, p + "norm1")
                x = norm(seen(alpha * h + f2(h), m, "add"), w, k, eps, m, p + "norm2")
        x = norm(x, w, cfg.final_norm_kind(), final_eps, "final_norm", "final_norm")
        logits = linear(x, w, "head", "head")
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), targets.reshape(-1))
        return seen(loss, "loss", "cross_entropy")

    data = nm.Synthetic(cfg.vocab, cfg.topics, cfg.noise, cfg.seed)
    rng = nm.Rng(cfg.seed, nm.STREAM_DATA)
    val = [data.val_batch(i, cfg.batch_size, cfg.seq_len) for i in range(cfg.eval_batches)]
    val = [(torch.tensor(a), torch.tensor(b)) for a, b in val]

    def evaluate():
        with torch.no_grad():
            w = {k: v.detach().to(fmt) for k, v in master.items()}
            return sum(float(forward(w, a, b)) for a, b in val) / len(val)

    steps, eval_every = int(raw["steps"]), int(raw["eval_every"])
    lr0, warm = raw["lr"], int(raw.get("warmup_steps", 0))
    res = {"status": "ok", "diverged_step": -1, "skipped_steps": 0, "evals": [], "nonfinite": None}
    good = 0
    for step in range(1, steps + 1):
        a, b = data.make(rng, cfg.batch_size, cfg.seq_len)
        ids, targets = torch.tensor(a), torch.tensor(b)
        if raw.get("schedule", "constant") != "constant":
            raise SystemExit("torch_precision_train.py: constant schedule only")
        for group in opt.param_groups:
            group["lr"] = lr0 * min(1.0, step / warm) if warm > 0 else lr0

        def attempt():
            w = {k: v.detach().to(fmt).requires_grad_(True) for k, v in master.items()}
            loss = forward(w, ids, targets)
            (loss * scale).backward()
            grads = {k: t.grad for k, t in w.items()}
            finite = math.isfinite(float(loss.detach())) and all(bool(torch.isfinite(g).all()) for g in grads.values())
            return loss, grads, finite

        loss, grads, finite = attempt()
        if not finite:
            if scaled and scale >= MIN_LOSS_SCALE:  # skipped, the scale halved
                res["skipped_steps"] += 1
                scale *= backoff
                good = 0
                continue
            res["status"], res["diverged_step"] = "diverged", step
            watch["on"] = True  # the step again, every stored value looked at
            attempt()
            watch["on"] = False
            res["nonfinite"] = watch["first"]
            break
        for k, t in master.items():
            t.grad = grads[k].float() / scale
        clip = float(raw.get("clip", 0.0))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(master.values()), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if scaled:
            good += 1
            if good == growth_interval:
                scale *= growth
                good = 0
        if step % eval_every == 0 or step == steps:
            res["evals"].append((step, evaluate()))
    res["final_val_loss"] = res["evals"][-1][1] if res["evals"] and res["status"] == "ok" else None
    res["final_loss_scale"] = scale
    return res


def main():
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    pts = points(args.sweep, args.select)
    if args.limit:
        pts = pts[:args.limit]
    if not pts:
        raise SystemExit("torch_precision_train.py: no point of %s matches %s" % (args.sweep, " ".join(args.select)))
    rows = []
    for name, root, raw in pts:
        with open(os.path.join(root, "result.json")) as f:
            nl = json.load(f)
        t0 = time.time()
        tr = run_point(torch, raw)
        # normlab's collapse rule (train.h): finished within 0.05 nats of the unigram loss, or above it
        unigram = nl.get("unigram_loss")
        if tr["status"] == "ok" and unigram is not None and not (tr["final_val_loss"] < unigram - 0.05):
            tr["status"] = "collapsed"
        origin = nl.get("nonfinite") or {}
        row = {"point": name, "normlab": {"status": nl["status"], "diverged_step": nl.get("diverged_step", -1),
                                          "final_val_loss": nl.get("final_val_loss"),
                                          "skipped_steps": nl.get("skipped_steps", 0),
                                          "nonfinite": origin},
               "torch": tr, "same_verdict": nl["status"] == tr["status"], "seconds": time.time() - t0}
        rows.append(row)
        print("%-60s normlab %-9s torch %-9s %s  %.0f s" % (name, nl["status"], tr["status"],
                                                          "same" if row["same_verdict"] else "DIFFERENT",
                                                          row["seconds"]), flush=True)
    agree = sum(r["same_verdict"] for r in rows)
    doc = {"sweep": args.sweep, "select": args.select, "torch": torch.__version__, "cpu": platform.processor(),
           "points": len(rows), "same_verdict": agree, "rows": rows}
    print("%d of %d points: the same verdict (ok, collapsed or diverged)" % (agree, len(rows)))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    if args.md:
        lines = ["| point | normlab | torch | normlab final val | torch final val | normlab origin | torch origin |",
                 "|---|---|---|---:|---:|---|---|"]

        def status(s, step):
            return s if step is None or step < 0 else "%s @%d" % (s, step)

        def val(v):
            return "-" if v is None else "%.4f" % v
        for r in rows:
            o = r["normlab"]["nonfinite"]
            no = "%s %s in %s" % (o.get("phase", ""), o.get("op", ""), o.get("module", "")) if o else "-"
            t = r["torch"]["nonfinite"]
            to = "%s %s in %s" % (t[0], t[1], t[2]) if t else "-"
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                r["point"], status(r["normlab"]["status"], r["normlab"]["diverged_step"]),
                status(r["torch"]["status"], r["torch"]["diverged_step"]), val(r["normlab"]["final_val_loss"]),
                val(r["torch"]["final_val_loss"]), no, to))
        lines.append("")
        lines.append("%d of %d points: the same verdict (ok, collapsed or diverged); PyTorch %s." % (agree, len(rows),
                                                                                       torch.__version__))
        with open(args.md + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(args.md + ".tmp", args.md)


if __name__ == "__main__":
    main()
