"""`python -m xllm_kernel.benchmark plot REPORT.json -o out.png`: achieved bandwidth per case for each
implementation, with the copy bandwidth measured in the same run as a line."""

from __future__ import annotations

import argparse
import json
import sys


def _label(parameters: dict) -> str:
    # The shape and dtype tell cases apart; other parameters are shown only where they vary.
    tokens, hidden, dtype = parameters.get("tokens"), parameters.get("hidden"), parameters.get("dtype")
    rest = ",".join(f"{k}={v}" for k, v in sorted(parameters.items()) if k not in ("tokens", "hidden", "dtype"))
    return f"{tokens}x{hidden} {dtype}" + (f"\n{rest}" if rest else "")


def plot(report: dict, output: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    cases: list[str] = []
    labels: dict[str, str] = {}
    series: dict[str, dict[str, float]] = {}
    for row in report["results"]:
        case = row["case_id"]
        if case not in labels:
            cases.append(case)
            labels[case] = _label(row["parameters"])
        if row["status"] == "timed":
            series.setdefault(row["implementation"], {})[case] = row["achieved_gbps"]
    if not series:
        raise SystemExit("plot: the report has no timed case")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(cases)), 4.5))
    positions = range(len(cases))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(sorted(series.items())):
        xs = [p + (i - (len(series) - 1) / 2) * width for p, c in zip(positions, cases) if c in values]
        ax.bar(xs, [values[c] for c in cases if c in values], width=width, label=name)
    copy = report["copy_bandwidth_gbps"]
    ax.axhline(copy, color="black", linestyle="--", linewidth=1, label=f"copy bandwidth {copy:.3g} GB/s")
    ax.set_xticks(list(positions))
    ax.set_xticklabels([labels[c] for c in cases], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("achieved GB/s")  # bytes read + written / median device time
    ax.set_title(f"{report['operation']} on {report['device']} ({report['mode']}), "
                 f"revision {report['environment'].get('revision', '?')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m xllm_kernel.benchmark plot",
                                     description="Plot achieved bandwidth per case from a benchmark report.")
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
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"plot: needs matplotlib, which cannot be imported here ({e}); pip install matplotlib", file=sys.stderr)
        return 2
    plot(report, args.output)
    return 0
