"""`python -m xllm_kernel.benchmark plot REPORT.json -o out.png`: each case's time for each implementation as a
percentage of its roofline (`percent_of_roofline`: the ideal time from the read, copy and compute ceilings measured in
the same run, over the median), each bar labelled with its bound, 100% as a line. Reports from before the roofline
show `percent_of_copy` instead. Needs matplotlib; without it the command says so and exits 3, drawing nothing."""

from __future__ import annotations

import argparse
import json
import sys


def _label(parameters: dict) -> str:
    # The shape and dtype tell cases apart; other parameters are shown only where they vary.
    tokens, hidden, dtype = parameters.get("tokens"), parameters.get("hidden"), parameters.get("dtype")
    rest = ",".join(f"{k}={v}" for k, v in sorted(parameters.items()) if k not in ("tokens", "hidden", "dtype"))
    return f"{tokens}x{hidden} {dtype}" + (f"\n{rest}" if rest else "")


class MatplotlibMissing(RuntimeError):
    pass


def plot(report: dict, output: str) -> None:
    try:
        import matplotlib
    except ImportError as e:
        raise MatplotlibMissing(f"matplotlib is not installed ({e}); scripts/setup.sh installs it") from e

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    cases: list[str] = []
    labels: dict[str, str] = {}
    series: dict[str, dict[str, float]] = {}
    bounds: dict[str, dict[str, str]] = {}
    timed = [row for row in report["results"] if row["status"] == "timed"]
    roofline = bool(timed) and all("percent_of_roofline" in row for row in timed)
    for row in report["results"]:
        case = row["case_id"]
        if case not in labels:
            cases.append(case)
            labels[case] = _label(row["parameters"])
        if row["status"] == "timed":
            name = row["implementation"]
            series.setdefault(name, {})[case] = row["percent_of_roofline"] if roofline else row["percent_of_copy"]
            if roofline:
                bounds.setdefault(name, {})[case] = row["roofline"]["bound"]
    if not series:
        raise SystemExit("plot: the report has no timed case")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(cases)), 4.5))
    positions = range(len(cases))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(sorted(series.items())):
        xs = [p + (i - (len(series) - 1) / 2) * width for p, c in zip(positions, cases) if c in values]
        heights = [values[c] for c in cases if c in values]
        ax.bar(xs, heights, width=width, label=name)
        if roofline:
            for x, h, c in zip(xs, heights, [c for c in cases if c in values]):
                ax.text(x, h, bounds[name][c], ha="center", va="bottom", fontsize=6, rotation=90)
    if roofline:
        ax.axhline(100, color="black", linestyle="--", linewidth=1,
                   label="roofline (read, copy and compute ceilings of this run; bound above each bar)")
    else:
        copy = report["copy_bandwidth_gbps"]
        ax.axhline(100, color="black", linestyle="--", linewidth=1,
                   label=f"copy bandwidth (at the start of the run {copy:.3g} GB/s; each case against its own)")
    ax.set_xticks(list(positions))
    ax.set_xticklabels([labels[c] for c in cases], rotation=30, ha="right", fontsize=8)
    # roofline: ideal time / median; copy: (bytes read + written / median device time) / copy GB/s
    ax.set_ylabel("% of roofline" if roofline else "% of copy bandwidth")
    ax.set_title(f"{report['operation']} on {report['device']} ({report['mode']}), "
                 f"revision {report['environment'].get('revision', '?')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m xllm_kernel.benchmark plot",
                                     description="Plot each case's time as % of its roofline per implementation from a "
                                                 "benchmark report. Exit codes: 0 drawn, 2 not a report, 3 matplotlib "
                                                 "missing (skipped).")
    parser.add_argument("report", help="benchmark JSON report (--output of the benchmark tool)")
    parser.add_argument("-o", "--output", required=True, help="image path (PNG, SVG or PDF by extension)")
    args = parser.parse_args(argv)
    try:
        with open(args.report) as f:
            report = json.load(f)
        report["results"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot: {args.report} is not a benchmark report: {e}", file=sys.stderr)
        return 2
    try:
        plot(report, args.output)
    except MatplotlibMissing as e:
        print(f"plot: skipped: {e}", file=sys.stderr)
        return 3
    return 0
