#!/usr/bin/env python3
"""The GPU check's verdict (scripts/gpu-check.sh), read from its reports folder.

  python3 scripts/gpu_check_verdict.py first-error LOG
      The first compiler or linker error line of a build log (nvcc's and g++'s formats, ninja's
      FAILED line when nothing better is there), one line, for the phase's status.
  python3 scripts/gpu_check_verdict.py verdict REPORTS SECONDS FAILED NO_GPU_EXIT TESTS_SCOPE
      One table from phases.tsv, environment.txt, ctest.xml and the numerics and benchmark JSON
      reports; writes verdict.md and summary.json there and exits with the check's code (0 passed,
      1 a phase failed, NO_GPU_EXIT when the GPU phases did not run).

phases.tsv holds one "name<TAB>seconds<TAB>status[<TAB>estimate]" line per phase run (the estimate
in seconds, from the dry run's times, where there was one); a phase run again (the check split into
several commands, --phase) replaces its earlier line.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# The check's phases, in order; a command runs some of them (--phase), the verdict covers all.
PHASES = ("environment", "configure", "build", "tests", "numerics", "benchmark")
# "file:line:col: error: ...", "file(line): error: ..." (nvcc), "fatal error:", CMake's "CMake Error",
# the linker's undefined references.
ERROR_LINE = re.compile(r"(\berror\b\s*(\w+\s*)?:|CMake Error|undefined reference to|cannot find -l)")


def first_error(text, limit=300):
    lines = text.splitlines()
    found = next((l for l in lines if ERROR_LINE.search(l)), None)
    if found is None:
        found = next((l for l in lines if l.startswith("FAILED:")), None)
    if found is None:
        return ""
    found = found.strip()
    return found if len(found) <= limit else found[:limit - 3] + "..."


def read_phases(reports, estimates=None):
    """{phase: (seconds, status)} in run order; `estimates` (a dict) gets {phase: estimated seconds}."""
    phases = {}
    estimates = {} if estimates is None else estimates
    path = os.path.join(reports, "phases.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) in (3, 4):
                phases.pop(parts[0], None)  # a rerun replaces the earlier line, keeping run order
                phases[parts[0]] = (int(parts[1]), parts[2])
                if len(parts) == 4 and parts[3]:
                    estimates[parts[0]] = int(parts[3])
    return phases


def verdict(reports, seconds, failed, no_gpu_exit, scope):
    rows = []
    estimates = {}
    phases = read_phases(reports, estimates)
    env_path = os.path.join(reports, "environment.txt")
    env = open(env_path).read() if os.path.exists(env_path) else ""
    torch = re.search(r"^torch (\S+)", env, re.M)
    gpu = re.search(r"^gpu 0 (.*)$", env, re.M)
    title = "torch %s, %s, %d s" % (torch.group(1) if torch else "?", gpu.group(1) if gpu else "no GPU", seconds)

    # A phase that did not pass says why, first (the build's first compiler error among them).
    for name, (_, status) in phases.items():
        if not (status.startswith("ok") or status.startswith("skipped")):
            rows.append(("phase " + name, status.replace("|", "\\|")))

    # The benchmark's budget: operations left at the headline grid (not a failure).
    bench_status = phases.get("benchmark", (0, ""))[1]
    if bench_status.startswith("ok: headline grid only"):
        rows.append(("benchmark grid", bench_status[len("ok: "):]))

    # Tests: ctest's JUnit report.
    junit = os.path.join(reports, "ctest.xml")
    if os.path.exists(junit):
        passed = failed_tests = skipped = 0
        failures = []
        for case in ET.parse(junit).getroot().iter("testcase"):
            status = case.get("status", "")
            if case.find("failure") is not None or status == "fail":
                failed_tests += 1
                failures.append(case.get("name", "?"))
            elif case.find("skipped") is not None or status in ("notrun", "disabled"):
                skipped += 1
            else:
                passed += 1
        text = "%d passed, %d failed, %d skipped" % (passed, failed_tests, skipped)
        if failures:
            text += " (failed: %s%s)" % (", ".join(failures[:5]), ", ..." if len(failures) > 5 else "")
        rows.append(("ctest, " + scope, text))
    else:
        rows.append(("ctest, " + scope, phases.get("tests", (0, "not run"))[1]))

    def load(pattern):
        out = []
        for path in sorted(glob.glob(os.path.join(reports, pattern))):
            try:
                out.append(json.load(open(path)))
            except (OSError, ValueError) as e:
                rows.append((os.path.basename(path), "unreadable: %s" % e))
        return out

    # Numerics: cases passed per implementation, per mode.
    numerics = load("numerics-*.json")
    if numerics:
        per_impl = {}
        for r in numerics:
            for impl in r.get("implementations", []):
                name = impl["implementation"]["name"]
                c = impl.get("coverage", {})
                text = "%s %d/%d" % (r["mode"], c.get("passed", 0), c.get("cases", 0))
                if c.get("failed"):
                    text += " (%d FAILED)" % c["failed"]
                if c.get("unsupported") and not c.get("passed") and not c.get("failed"):
                    text = "%s unsupported" % r["mode"]  # e.g. an eager-only implementation in graph mode
                elif c.get("unsupported"):
                    text += " (%d unsupported)" % c["unsupported"]
                if impl.get("excluded_reason"):
                    text += " (excluded: %s)" % impl["excluded_reason"]
                per_impl.setdefault(name, []).append(text)
        for name, texts in per_impl.items():
            rows.append(("numerics " + name, ", ".join(texts)))
    else:
        rows.append(("numerics", phases.get("numerics", (0, "not run"))[1]))

    # Benchmark: per operation at 8192 x 4096, eager, each non-torch implementation: % of the row's
    # roofline (its ceilings measured in the same run) with the bound, and the speed-up over the torch
    # solution of the report's device (cuda.torch; cpu.torch where CHECK_DEVICE=cpu).
    short = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
    bench = [r for r in load("benchmark-*.json") if r.get("mode") == "eager"]
    if bench:
        for r in bench:
            per_impl = {}
            for row in r.get("results", []):
                p = row.get("parameters", {})
                if p.get("tokens") != 8192 or p.get("hidden") != 4096 or row.get("status") != "timed":
                    continue
                if row.get("implementation_detail", {}).get("solution") == "torch":
                    continue
                x = row.get("speedup_vs_torch")
                percent = row.get("percent_of_roofline")
                of = "%.0f%% %s" % (percent, row["roofline"]["bound"]) if percent is not None else \
                    "%.0f%% copy" % row["percent_of_copy"]
                per_impl.setdefault(row["implementation"], []).append(
                    "%s %s, %s" % (short.get(p.get("dtype"), p.get("dtype", "?")), of,
                                   "%.2fx" % x if x is not None else "no torch"))
            if not per_impl:
                rows.append((r["operation"] + " 8192x4096", "nothing timed"))
            torch = "%s.torch" % r.get("device", "cuda")
            for name, texts in per_impl.items():
                rows.append((name + " 8192x4096", "; ".join(texts) + " (% of roofline and its bound, x " + torch + ")"))
    else:
        rows.append(("benchmark", phases.get("benchmark", (0, "not run"))[1]))

    bad = [name for name, (_, status) in phases.items()
           if not (status.startswith("ok") or status.startswith("skipped"))]
    no_gpu = any(status == "skipped: no GPU" for _, status in phases.values())
    not_run = [name for name in PHASES if name not in phases]
    if failed or bad:
        text, code = "FAILED: " + ", ".join(bad or ["a phase"]), 1
    elif not_run:
        text, code = "passed so far; not run yet: " + ", ".join(not_run), 0
    elif no_gpu:
        text, code = "passed without a GPU (the GPU phases did not run)", no_gpu_exit
    else:
        text, code = "passed", 0
    ran = ", ".join("%s %d s%s" % (name, s, " (estimate %d s)" % estimates[name] if name in estimates else "")
                    for name, (s, _) in phases.items())
    rows.append(("phases", ran or "none"))
    rows.append(("verdict", text))

    width = max(len(name) for name, _ in rows)
    lines = ["== verdict: " + title, "| %s | result |" % "check".ljust(width), "|%s|---|" % ("-" * (width + 2))]
    lines += ["| %s | %s |" % (name.ljust(width), text) for name, text in rows]
    table = "\n".join(lines)
    with open(os.path.join(reports, "verdict.md.partial"), "w") as f:
        f.write(table + "\n")
    os.replace(os.path.join(reports, "verdict.md.partial"), os.path.join(reports, "verdict.md"))
    with open(os.path.join(reports, "summary.json.partial"), "w") as f:
        json.dump({"title": title, "phases": {n: s for n, (_, s) in phases.items()},
                   "phase_seconds": {n: s for n, (s, _) in phases.items()},
                   "phase_estimates": estimates,
                   "rows": [{"check": n, "result": t} for n, t in rows], "exit_code": code}, f, indent=2)
    os.replace(os.path.join(reports, "summary.json.partial"), os.path.join(reports, "summary.json"))
    print()
    print(table)
    return code


def main(argv):
    if len(argv) == 2 and argv[0] == "first-error":
        try:
            text = open(argv[1], errors="replace").read()
        except OSError as e:
            print("gpu_check_verdict: first-error: cannot read the log %s: %s" % (argv[1], e), file=sys.stderr)
            return 2
        print(first_error(text))
        return 0
    if len(argv) == 6 and argv[0] == "verdict":
        return verdict(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
