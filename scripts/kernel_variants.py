#!/usr/bin/env python3
"""Which kernel variants ran on this machine and which were skipped, from the last CTest run's log.

    python3 scripts/kernel_variants.py [BUILD_DIR] [--output FILE]

Reads BUILD_DIR/Testing/Temporary/LastTest.log (default BUILD_DIR: build), which CTest writes with the
output of every test it ran, and prints Markdown:
  - the kernel tests parametrized over CPU classes (XLLM_AS_CPU_CLASS, test/csrc/common/cpu_test_support.h):
    a row per test, a column per class, each cell `ran`, `skipped` or `FAILED`;
  - every other skipped test of the kernel binaries (xllm_kernel_cpu_kernels_test and the CUDA kernels'
    host tests), with the reason it gave, and the skipped tests of the other binaries, counted by reason.
scripts/test.sh prints it after CTest, so that a closing note can say what this CPU tested. Exit 0; 1
when a parametrized kernel test failed; 2 when the log is missing or holds no kernel test.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections import OrderedDict
from typing import Optional

KERNEL_BINARIES = ("xllm_kernel_cpu_kernels_test", "xllm_kernel_cuda_kernels_host_test")
CLASSES = ("sse4", "avx2", "avx2_vnni", "avx512", "avx512_avx_vnni", "avx512_vnni", "avx512_bf16", "amx")

_TEST = re.compile(r"^\d+/\d+ Test: (\S+)")
_COMMAND = re.compile(r'^Command: "([^"]+)"')
_RESULT = re.compile(r"^\[ +(OK|SKIPPED|FAILED) +\] (\S+)(?: \(\d+ ms\))?$")


def parse(log: str) -> list[dict]:
    """Every test of the log: name, binary, status (ran, skipped, failed or unknown) and reason."""
    tests, current = [], None
    for line in log.splitlines():
        m = _TEST.match(line)
        if m:
            current = {"name": m.group(1), "binary": "", "status": "unknown", "reason": "", "lines": []}
            tests.append(current)
            continue
        if current is None:
            continue
        m = _COMMAND.match(line)
        if m and not current["binary"]:
            current["binary"] = pathlib.Path(m.group(1)).name
            continue
        m = _RESULT.match(line)
        if m and m.group(2) == current["name"] and current["status"] == "unknown":
            current["status"] = {"OK": "ran", "SKIPPED": "skipped", "FAILED": "failed"}[m.group(1)]
            if current["status"] == "skipped":
                lines = current["lines"]
                start = max((i for i, l in enumerate(lines) if l.endswith(": Skipped")), default=len(lines) - 1)
                current["reason"] = " ".join(l.strip() for l in lines[start + 1:]).strip()
            continue
        current["lines"].append(line)
    for t in tests:
        t.pop("lines")
    return tests


def render(tests: list[dict]) -> tuple[str, int]:
    kernels = [t for t in tests if t["binary"] in KERNEL_BINARIES]
    if not kernels:
        return "No kernel test in the log: run CTest first (scripts/test.sh does).\n", 2
    grid: "OrderedDict[str, dict[str, str]]" = OrderedDict()
    reasons: dict[str, str] = {}
    others = []
    for t in kernels:
        head, _, cls = t["name"].rpartition("/")
        if cls in CLASSES and head:
            grid.setdefault(head, {})[cls] = t["status"]
            if t["status"] == "skipped":
                reasons.setdefault(cls, re.sub(r"^CPU class \S+: | \(it has: .*\)$", "", t["reason"]))
        elif t["status"] == "skipped":
            others.append(t)
    used = [c for c in CLASSES if any(c in row for row in grid.values())]
    lines = ["# Kernel variants on this machine", ""]
    if grid:
        cells = {"ran": "ran", "skipped": "skipped", "failed": "**FAILED**", "unknown": "?"}
        lines += ["Kernel tests per CPU class (XLLM_AS_CPU_CLASS): each class this CPU can stand in for runs "
                  "with that class's features and Highway target.", ""]
        lines.append("| test | " + " | ".join(f"`{c}`" for c in used) + " |")
        lines.append("|---|" + "---|" * len(used))
        for head, row in grid.items():
            lines.append(f"| `{head}` | " + " | ".join(cells[row[c]] if c in row else "—" for c in used) + " |")
        ran = sorted({c for row in grid.values() for c, s in row.items() if s == "ran"}, key=CLASSES.index)
        lines += ["", "Classes that ran: " + (", ".join(f"`{c}`" for c in ran) or "none") + "."]
        if reasons:
            lines.append("Classes skipped: " + "; ".join(f"`{c}` ({r})" for c, r in
                                                      sorted(reasons.items(), key=lambda x: CLASSES.index(x[0]))) + ".")
    if others:
        lines += ["", "Other kernel tests skipped here:", ""]
        lines += [f"- `{t['name']}`: {t['reason'] or '(no reason given)'}" for t in others]
    elsewhere: dict[str, int] = {}
    for t in tests:
        if t["binary"] not in KERNEL_BINARIES and t["status"] == "skipped":
            key = re.sub(r"\s+", " ", t["reason"])[:160] or "(no reason given)"
            elsewhere[key] = elsewhere.get(key, 0) + 1
    if elsewhere:
        lines += ["", "Skipped tests of the other binaries, by reason:", ""]
        lines += [f"- {n} × {reason}" for reason, n in sorted(elsewhere.items(), key=lambda x: -x[1])]
    failed = any(s == "failed" for row in grid.values() for s in row.values())
    return "\n".join(lines) + "\n", 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build_dir", nargs="?", default="build")
    p.add_argument("--output", help="also write the Markdown here")
    args = p.parse_args(argv)
    log = pathlib.Path(args.build_dir) / "Testing" / "Temporary" / "LastTest.log"
    if not log.exists():
        print(f"{log}: no CTest log (run CTest in {args.build_dir} first)", file=sys.stderr)
        return 2
    text, code = render(parse(log.read_text(errors="replace")))
    print(text, end="")
    if args.output:
        tmp = pathlib.Path(args.output + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.output)
    return code


if __name__ == "__main__":
    sys.exit(main())
