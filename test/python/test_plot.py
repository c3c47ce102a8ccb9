"""python -m xllm_kernel.benchmark plot draws a report's bandwidth per case."""

from __future__ import annotations

import json
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


def test_plot_without_matplotlib_says_what_is_missing(tmp_path):
    report = tmp_path / "b.json"
    report.write_text('{"results": []}')
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # as where matplotlib is not installed
            "from xllm_kernel.benchmark.plot import main\n"
            f"sys.exit(main([{str(report)!r}, '-o', {str(tmp_path / 'x.png')!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "plot: needs matplotlib" in result.stderr, result.stderr
