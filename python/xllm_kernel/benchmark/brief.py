"""`python -m xllm_kernel.benchmark.brief REPORT_DIR [--output summary.md]`: one screen of what a main run
(scripts/main.sh) found, from the numerics, benchmark and end-to-end reports in REPORT_DIR.

    python -m xllm_kernel.benchmark.brief reports/ --output reports/summary.md

A line per operation: its numerics (implementations whose every supported case passed, of those run; cases;
the worst headroom, error over tolerance), and its benchmark (the library's fastest timed implementation on each
case, its speed over the device's `torch` solution and its % of roofline, as ranges over the cases). Then the
end-to-end sides' decode tokens/s, and which grid the reports used. Printed, and written atomically with
--output. Exit 0 when every report passed, 1 when a report shows a failure or an operation lacks a report,
2 when REPORT_DIR holds no such report.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Optional

NUMERICS = "xllm-kernel/numerics-report/1"
BENCHMARK = "xllm-kernel/benchmark-report/1"
E2E = "xllm-kernel/e2e-report/1"
BASELINES = ("torch", "compile")


def _solution(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) >= 3 else name


def _figure(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.2g}"


def _span(values: list[float], unit: str) -> str:
    if not values:
        return "—"
    low, high = _figure(min(values)) + unit, _figure(max(values)) + unit
    return low if low == high else f"{low}–{high}"


def load(directory: str) -> dict[str, dict]:
    """The reports in `directory` by kind: {"numerics": {op: report}, "benchmark": {op: report}, "e2e": report}."""
    found: dict[str, dict] = {"numerics": {}, "benchmark": {}, "e2e": None}
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == NUMERICS:
            found["numerics"][data["operation"]] = data
        elif schema == BENCHMARK:
            found["benchmark"][data["operation"]] = data
        elif schema == E2E:
            found["e2e"] = data
    return found


def _numerics_cells(report: Optional[dict]) -> tuple[list[str], bool]:
    if report is None:
        return ["no report", "—"], False
    impls = report["implementations"]
    ran = [i for i in impls if i["coverage"]["passed"] + i["coverage"]["failed"] > 0]
    clean = [i for i in ran if i["coverage"]["failed"] == 0]
    cases = len({r["case_id"] for i in impls for r in i["results"]})
    failed = sum(i["coverage"]["failed"] for i in impls)
    worst = max((i["worst_headroom"] for i in ran), default=None)
    text = f"{len(clean)}/{len(ran)} impl × {cases} cases" + (f", **{failed} failed**" if failed else "")
    return [text, "—" if worst is None else f"{worst:.2g}"], failed == 0 and bool(ran)


def _benchmark_cells(report: Optional[dict]) -> tuple[list[str], bool]:
    if report is None:
        return ["no report", "—", "—"], False
    rows = report["results"]
    failed = [r for r in rows if r.get("status") == "failed"]
    timed = [r for r in rows if r.get("status") == "timed"]
    mine = [r for r in timed if _solution(r["implementation"]) not in BASELINES]
    best: dict[str, dict] = {}
    for r in mine:
        case = r["case_id"]
        if case not in best or r["device"]["median"] < best[case]["device"]["median"]:
            best[case] = r
    chosen = list(best.values()) or [r for r in timed]
    names = sorted({r["implementation"] for r in chosen})
    speedups = [r["speedup_vs_torch"] for r in chosen if r.get("speedup_vs_torch")]
    roofline = [r["percent_of_roofline"] for r in chosen if r.get("percent_of_roofline") is not None]
    impl = ", ".join(f"`{_solution(n)}`" for n in names) if names else "nothing timed"
    if failed:
        impl += f" (**{len(failed)} failed**)"
    return [impl, _span(speedups, "×"), _span(roofline, "%")], not failed and bool(timed)


def render(found: dict) -> tuple[str, bool]:
    ops = sorted(set(found["numerics"]) | set(found["benchmark"]))
    grids = sorted({r.get("grid", "default") for kind in ("numerics", "benchmark") for r in found[kind].values()})
    rows, ok = [], True
    for op in ops:
        n_cells, n_ok = _numerics_cells(found["numerics"].get(op))
        b_cells, b_ok = _benchmark_cells(found["benchmark"].get(op))
        ok &= n_ok and b_ok
        rows.append([f"`{op}`"] + n_cells + b_cells)
    env = next(iter(found["benchmark"].values() or found["numerics"].values()), {}).get("environment", {})
    lines = [f"# Main run: {len(ops)} operations on {env.get('cpu_model', '?')} "
             f"({env.get('cpu_simd_target', '?')}), {', '.join(grids) or '?'} grid", ""]
    header = ["operation", "numerics: passed impl × cases", "worst headroom", "library (fastest)",
              "× torch", "% roofline"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    e2e = found["e2e"]
    if e2e is not None:
        sides = []
        for s in e2e.get("sides", []):
            tps = (s.get("timing") or {}).get("decode_tokens_per_s")
            sides.append(f"{s['name']} {tps:.4g} tok/s" if tps else f"{s['name']} {s.get('status')}")
            ok &= s.get("status") == "timed"
        lines += ["", f"End to end (`{e2e['model']['name']}`, decode): " + "; ".join(sides) + "."]
    else:
        lines += ["", "End to end: no report."]
        ok = False
    lines += ["", "Headroom: the worst error over its tolerance (<= 1 passes). × torch: the torch solution's median over "
              "the library's, per case. % roofline: of the ceilings measured in the run; above 100% the case's data "
              "stayed in cache (the benchmark's --cold-cache rotates copies).",
              "", "Verdict: " + ("every report passed." if ok else "**something failed or is missing** (above)."),
              "Per operation: numerics-OP.md and benchmark-OP.md beside this file; the full sweep: "
              "`FULL=1 bash scripts/main.sh`."]
    return "\n".join(lines) + "\n", ok


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xllm_kernel.benchmark.brief", description=__doc__.split("\n")[0])
    p.add_argument("directory", help="a folder of numerics, benchmark and e2e JSON reports")
    p.add_argument("--output", help="also write the summary here (Markdown, atomically)")
    args = p.parse_args(argv)
    found = load(args.directory)
    if not found["numerics"] and not found["benchmark"] and found["e2e"] is None:
        print(f"{args.directory}: no numerics, benchmark or e2e report", file=sys.stderr)
        return 2
    text, ok = render(found)
    print(text, end="")
    if args.output:
        from xllm_kernel.e2e.report import write_atomically
        write_atomically(args.output, text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
