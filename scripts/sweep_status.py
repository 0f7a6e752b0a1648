#!/usr/bin/env python3
"""Where each sweep directory stands and what it cost: points finished of planned, how they ended,
the wall-clock span of its runs (first start to last end in manifest.jsonl, across resumes) and
the sum of its runs' own seconds. REPRODUCTION.md's status table comes from this.

  python3 scripts/sweep_status.py results/sweeps/*/
"""
import argparse
import datetime
import json
import os
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", nargs="+", help="sweep directories (each holds spec.json and manifest.jsonl)")
    return p.parse_args(argv)


def planned_points(spec):
    n = 1
    for values in spec.get("grid", {}).values():
        n *= len(values)
    zips = spec.get("zip", [])
    for group in (zips if isinstance(zips, list) else [zips]):
        if group:
            n *= len(next(iter(group.values())))
    return n * max(1, len(spec.get("seeds", [])))


def when(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def hms(seconds):
    m = int(round(seconds / 60))
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def main(argv=None):
    args = parse_args(argv)
    print("| sweep | init | points done | statuses | wall clock | sum of run times |")
    print("|---|---|---:|---|---:|---:|")
    for d in args.sweeps:
        d = d.rstrip("/")
        try:
            with open(os.path.join(d, "spec.json")) as f:
                spec = json.load(f)
            with open(os.path.join(d, "manifest.jsonl")) as f:
                events = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            sys.exit(f"error: {d}: {e}")
        ends = {}
        starts = []
        for e in events:
            if e.get("event") == "start":
                starts.append(when(e["time"]))
            elif e.get("event") == "end":
                ends[e["point"]] = e  # the last end of a point counts (a rerun replaces it)
        finished = {p: e for p, e in ends.items() if e.get("status") in ("completed", "diverged")}
        statuses = {}
        for p in finished:
            try:
                with open(os.path.join(d, "runs", p, "result.json")) as f:
                    s = json.load(f)["status"]
            except (OSError, ValueError, KeyError):
                s = finished[p]["status"]
            statuses[s] = statuses.get(s, 0) + 1
        span = 0.0
        if starts and ends:
            span = (max(when(e["time"]) for e in ends.values()) - min(starts)).total_seconds()
        run_s = sum(e.get("seconds", 0) for e in ends.values())
        total = planned_points(spec)
        init = spec.get("base", {}).get("init", "gpt2")
        status_text = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "—"
        print(f"| {os.path.basename(d)} | {init} | {len(finished)} / {total} | {status_text} | {hms(span)} "
              f"| {hms(run_s)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
