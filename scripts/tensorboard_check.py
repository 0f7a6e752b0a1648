#!/usr/bin/env python3
"""Read normlab's TensorBoard event files back with TensorBoard's own EventAccumulator and check
every scalar against the run directory it came from.

    python3 scripts/tensorboard_check.py LOGDIR RUNS_ROOT

LOGDIR is a TensorBoard log directory that normlab wrote (`train --tensorboard`, `sweep
--tensorboard`, `export tensorboard --out`); every directory below it that holds event files is one
TensorBoard run, named by its path R relative to LOGDIR. Its run directory is RUNS_ROOT/R, or, for
an export of a sweep (whose names drop the sweep's runs/ folder), RUNS_ROOT/<first part of R>/runs/
<rest of R>.

For each run it checks, with tensorboard.backend.event_processing.event_accumulator:
  - every number of every metrics.jsonl line (but step) is the scalar of the same tag at that step,
    and every entry k of a list field the scalar "<field>/layer_<k>" (k from 1, zero-padded), equal
    to the float32 of the JSON value (NaN for null); timing.jsonl the same under "timing/";
  - result.json's numbers that normlab exports ("result/<field>") at the run's last step;
  - that no scalar tag is there that the files do not explain, and the text "status" is.
With --serve it also starts the TensorBoard web app on LOGDIR (tensorboard --logdir LOGDIR
--load_fast=false, a free local port) and asks its HTTP API what a browser's Scalars tab would show:
every run must be listed (/data/runs) and each run's val_loss series (/data/plugin/scalars/scalars)
must be metrics.jsonl's, step for step.
It prints one line per run and exits 1 when any value differs, 2 when a run cannot be checked.

Needs the tensorboard package (pip install tensorboard; scripts/tensorboard_check.sh makes a
virtual environment); never needed by normlab's tests.
"""
import argparse
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

# result.json's numbers that normlab exports (result_number_fields(), src/experiment/run.cpp)
EXPORTED_RESULT_FIELDS = [
    "final_val_loss", "best_val_loss", "final_train_loss", "gap_to_floor", "loss_floor", "unigram_loss",
    "best_val_step", "steps_done", "diverged_step", "collapsed_step", "parameters", "final_val_loss_se",
    "final_oracle_loss", "final_excess_loss", "final_excess_loss_se", "val_tokens", "spike_count"]


def f32(x):
    """The float32 TensorBoard holds for a JSON number (None: NaN)."""
    if x is None:
        return float("nan")
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def expected_from_line(line, prefix):
    rec = json.loads(line)
    step = rec["step"]
    out = {}
    for key, v in rec.items():
        if key == "step":
            continue
        if isinstance(v, list):
            width = len(str(len(v)))
            for k, item in enumerate(v, start=1):
                out[f"{prefix}{key}/layer_{k:0{width}d}"] = f32(item)
        elif v is None or isinstance(v, (int, float)):
            out[prefix + key] = f32(v)
    return step, out


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [l for l in f.read().splitlines() if l.strip()]


def run_dir_for(runs_root, rel):
    direct = os.path.join(runs_root, rel)
    if os.path.isfile(os.path.join(direct, "result.json")):
        return direct
    parts = rel.split(os.sep)
    if len(parts) > 1:
        swept = os.path.join(runs_root, parts[0], "runs", *parts[1:])
        if os.path.isfile(os.path.join(swept, "result.json")):
            return swept
    return None


def check_run(ea_class, tb_dir, run):
    """Returns (checked values, list of problems)."""
    ea = ea_class(tb_dir, size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    tags = ea.Tags()
    scalars = {}
    for tag in tags.get("scalars", []):
        scalars[tag] = {e.step: e.value for e in ea.Scalars(tag)}
    problems = []
    checked = 0
    explained = set()

    def expect(tag, step, value):
        nonlocal checked
        explained.add(tag)
        got = scalars.get(tag, {}).get(step)
        if got is None:
            problems.append(f"{tag} at step {step}: missing (metrics say {value})")
        elif not same(got, value):
            problems.append(f"{tag} at step {step}: TensorBoard {got!r}, run {value!r}")
        checked += 1

    for line in read_lines(os.path.join(run, "metrics.jsonl")):
        step, values = expected_from_line(line, "")
        for tag, v in values.items():
            expect(tag, step, v)
    for line in read_lines(os.path.join(run, "timing.jsonl")):
        step, values = expected_from_line(line, "timing/")
        for tag, v in values.items():
            expect(tag, step, v)
    with open(os.path.join(run, "result.json")) as f:
        result = json.load(f)
    last = result.get("steps_done")
    for field in EXPORTED_RESULT_FIELDS:
        v = result.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            expect("result/" + field, last, f32(v))
    extra = sorted(set(scalars) - explained)
    if extra:
        problems.append(f"scalars no file of the run explains: {', '.join(extra[:5])}")
    if "status" not in tags.get("tensors", []):
        problems.append("no text 'status'")
    else:
        status = ea.Tensors("status")[-1].tensor_proto.string_val[0].decode()
        if not status.startswith(result.get("status", "?")):
            problems.append(f"status text {status!r} does not start with result.json's {result.get('status')!r}")
    return checked, problems


def serve_check(logdir, runs_root, rels):
    """The web app's view of LOGDIR: its run list and each run's val_loss series. Returns problems."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    app = subprocess.Popen([exe, "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1", "--load_fast=false"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    problems = []
    try:
        served = None
        for _ in range(120):  # the app loads the files in the background
            try:
                served = json.load(urllib.request.urlopen(base + "/data/runs", timeout=2))
                if all(r in served for r in rels):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        if served is None:
            return ["the TensorBoard app did not answer"]
        for rel in rels:
            if rel not in served:
                problems.append(f"{rel}: not among the app's runs {served}")
                continue
            run = run_dir_for(runs_root, rel)
            want = {}
            for line in read_lines(os.path.join(run, "metrics.jsonl")):
                rec = json.loads(line)
                want[rec["step"]] = f32(rec.get("val_loss"))
            if not want:
                continue
            q = urllib.parse.urlencode({"run": rel, "tag": "val_loss"})
            series = json.load(urllib.request.urlopen(f"{base}/data/plugin/scalars/scalars?{q}", timeout=10))
            got = {step: value for _, step, value in series}
            if set(got) != set(want) or any(not same(f32(got[k]), want[k]) for k in want):
                problems.append(f"{rel}: the app's val_loss {got} is not metrics.jsonl's {want}")
        return problems
    finally:
        app.terminate()
        try:
            app.wait(10)
        except subprocess.TimeoutExpired:
            app.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logdir")
    ap.add_argument("runs_root")
    ap.add_argument("--serve", action="store_true", help="also ask the TensorBoard web app (see above)")
    args = ap.parse_args()
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as e:
        print(f"tensorboard_check: needs the tensorboard package ({e}); pip install tensorboard", file=sys.stderr)
        return 2
    runs = []
    for dirpath, _, files in os.walk(args.logdir):
        if any("tfevents" in name for name in files):
            runs.append(os.path.relpath(dirpath, args.logdir))
    if not runs:
        print(f"tensorboard_check: no event files below {args.logdir}", file=sys.stderr)
        return 2
    bad = 0
    total = 0
    for rel in sorted(runs):
        run = run_dir_for(args.runs_root, rel)
        if run is None:
            print(f"tensorboard_check: no run directory for {rel} below {args.runs_root}", file=sys.stderr)
            return 2
        checked, problems = check_run(EventAccumulator, os.path.join(args.logdir, rel), run)
        total += checked
        if problems:
            bad += 1
            print(f"FAIL {rel}: {len(problems)} problem(s); first: {problems[0]}")
        else:
            print(f"ok   {rel}: {checked} scalars equal to {run}")
    print(f"{len(runs) - bad}/{len(runs)} runs agree ({total} scalar values checked with TensorBoard's EventAccumulator)")
    if args.serve:
        problems = serve_check(args.logdir, args.runs_root, sorted(runs))
        for p in problems:
            print("FAIL (web app)", p)
        print(f"the TensorBoard web app lists the {len(runs)} runs and serves their val_loss as metrics.jsonl has it"
              if not problems else f"the TensorBoard web app: {len(problems)} problem(s)")
        bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
