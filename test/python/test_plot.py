"""python -m xllm_kernel.benchmark plot draws a report's bandwidth per case."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import python_env


def test_plot_from_a_benchmark_report(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install matplotlib)")
    report = tmp_path / "b.json"
    bench = subprocess.run([sys.executable, "-m", "xllm_kernel.benchmark", "--operation", "rms_norm",
                            "--implementation", "all", "--tokens", "4,64", "--hidden", "256", "--dtype", "bfloat16",
                            "--iterations", "3", "--warmup", "1", "--copy-bytes", "4194304", "--output", str(report)],
                           env=python_env(), capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(report.read_text())["summary"]["timed"] == 4
    image = tmp_path / "bw.png"
    result = subprocess.run([sys.executable, "-m", "xllm_kernel.benchmark", "plot", str(report), "-o", str(image)],
                            env=python_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = image.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_rejects_a_non_report(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = subprocess.run([sys.executable, "-m", "xllm_kernel.benchmark", "plot", str(bad), "-o", str(tmp_path / "x.png")],
                            env=python_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "is not a benchmark report" in result.stderr


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _benchmark_report(path: pathlib.Path) -> None:
    bench = subprocess.run([sys.executable, "-m", "xllm_kernel.benchmark", "--operation", "rms_norm",
                            "--implementation", "all", "--tokens", "4", "--hidden", "256", "--dtype", "bfloat16",
                            "--iterations", "3", "--warmup", "1", "--copy-bytes", "4194304", "--output", str(path)],
                           env=python_env(), capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr


def test_plot_is_percent_of_roofline(tmp_path):
    # The bars are each case's percent_of_roofline (against the ceilings timed in the run), 100% a
    # line, each bar labelled with its bound; a report from before the roofline shows percent_of_copy.
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (scripts/setup.sh installs it)")
    from xllm_kernel.benchmark import plot as plot_module
    import matplotlib.figure

    report = tmp_path / "b.json"
    _benchmark_report(report)
    data = json.loads(report.read_text())
    drawn = {}
    original = matplotlib.figure.Figure.savefig

    def capture(fig, *args, **kwargs):
        ax = fig.axes[0]
        drawn["bars"] = sorted(round(p.get_height(), 9) for p in ax.patches)
        drawn["lines"] = [line.get_ydata()[0] for line in ax.lines]
        drawn["ylabel"] = ax.get_ylabel()
        drawn["texts"] = sorted(t.get_text() for t in ax.texts)
        return original(fig, *args, **kwargs)

    matplotlib.figure.Figure.savefig = capture
    try:
        plot_module.plot(data, str(tmp_path / "p.png"))
        timed = [r for r in data["results"] if r["status"] == "timed"]
        assert drawn["bars"] == sorted(round(r["percent_of_roofline"], 9) for r in timed)
        assert drawn["lines"] == [100]
        assert drawn["ylabel"] == "% of roofline"
        assert drawn["texts"] == sorted(r["roofline"]["bound"] for r in timed)
        for r in data["results"]:
            r.pop("percent_of_roofline", None)
        plot_module.plot(data, str(tmp_path / "q.png"))
        assert drawn["bars"] == sorted(round(r["percent_of_copy"], 9) for r in timed)
        assert drawn["ylabel"] == "% of copy bandwidth"
    finally:
        matplotlib.figure.Figure.savefig = original


def test_main_sh_plots_its_benchmark_reports(tmp_path):
    # main.sh's plot step (scripts/plot-reports.sh on its report directory) draws a PNG beside each
    # benchmark report; main.sh runs it on REPORT_DIR after the benchmarks.
    main_sh = (ROOT / "scripts" / "main.sh").read_text()
    assert 'bash scripts/plot-reports.sh "$REPORT_DIR" "$PYTHON" "$BUILD_DIR"' in main_sh
    reports = tmp_path / "reports"
    reports.mkdir()
    _benchmark_report(reports / "benchmark-rms_norm.json")
    (reports / "numerics-rms_norm.json").write_text("{}")  # not a benchmark report: not plotted
    env = python_env()
    result = subprocess.run(["bash", str(ROOT / "scripts" / "plot-reports.sh"), str(reports), sys.executable,
                             str(tmp_path / "no-build")], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    image = reports / "benchmark-rms_norm.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert "plot: skipped: matplotlib is not installed" in result.stderr
        assert not image.exists()
        pytest.skip("matplotlib is not installed: the step skipped, as it should")
    data = image.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert sorted(p.name for p in reports.iterdir()) == ["benchmark-rms_norm.json", "benchmark-rms_norm.png",
                                                         "numerics-rms_norm.json"]


def test_plot_step_without_matplotlib_skips_with_its_reason(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    _benchmark_report(reports / "benchmark-rms_norm.json")
    # A matplotlib that cannot be imported, first on the path.
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), env["PYTHONPATH"]])
    result = subprocess.run(["bash", str(ROOT / "scripts" / "plot-reports.sh"), str(reports), sys.executable,
                             str(tmp_path / "no-build")], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plot: skipped: matplotlib is not installed (no matplotlib here)" in result.stderr
    assert "plots skipped" in result.stdout
    assert not (reports / "benchmark-rms_norm.png").exists()


def test_plot_without_matplotlib_says_what_is_missing(tmp_path):
    report = tmp_path / "b.json"
    report.write_text('{"results": []}')
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # as where matplotlib is not installed
            "from xllm_kernel.benchmark.plot import main\n"
            f"sys.exit(main([{str(report)!r}, '-o', {str(tmp_path / 'x.png')!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 3 and "plot: skipped: matplotlib is not installed" in result.stderr, result.stderr
