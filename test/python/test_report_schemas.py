"""The numerics and benchmark reports validate against the JSON schemas documented in docs/schemas/."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import sys

import pytest

from xllm_kernel import _C

from conftest import python_env

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install jsonschema)")
pytestmark = pytest.mark.skipif(not getattr(_C, "numerics_built", False), reason="built without the tools")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("BUILD_DIR", "build")
SCHEMAS = ROOT / "docs" / "schemas"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def command(tool: str) -> list[str]:
    """The build tree's CLI, or (an installed package) `python -m xllm_kernel.<tool>`: the same code."""
    binary = BUILD / f"xllm-kernel-{tool}"
    return [str(binary)] if binary.exists() else [sys.executable, "-m", f"xllm_kernel.{tool}"]


def run_tool(tool: str, *args: str, out: pathlib.Path, expect: int = 0) -> dict:
    env = python_env()
    result = subprocess.run([*command(tool), *args, "--output", str(out)], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == expect, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("operation", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_numerics_report_validates(tmp_path, operation):
    report = run_tool("numerics", "--operation", operation, "--implementation", "all", "--hidden", "7,64",
                      "--revision", "schema-test", out=tmp_path / "r.json")
    jsonschema.validate(report, schema("numerics-report"))
    assert report["summary"]["status"] == "passed"
    assert {i["implementation"]["solution"] for i in report["implementations"]} >= {"native", "torch"}


def test_numerics_report_with_unsupported_cases_validates(tmp_path):
    report = run_tool("numerics", "--operation", "rms_norm", "--mode", "graph", "--hidden", "64",
                      out=tmp_path / "r.json", expect=3)
    jsonschema.validate(report, schema("numerics-report"))
    assert report["summary"]["status"] == "nothing_passed"


def test_schema_rejects_a_broken_report(tmp_path):
    report = run_tool("numerics", "--operation", "rms_norm", "--hidden", "7", out=tmp_path / "r.json")
    del report["implementations"][0]["results"][0]["headroom"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, schema("numerics-report"))


def test_benchmark_report_and_comparison_validate(tmp_path):
    args = ("--operation", "rms_norm", "--implementation", "all", "--tokens", "4,64", "--hidden", "256",
            "--iterations", "5", "--warmup", "1", "--copy-bytes", "4194304")
    paths = [tmp_path / f"{name}.json" for name in ("base", "cand", "base2")]
    for path in paths:
        report = run_tool("benchmark", *args, out=path)
        jsonschema.validate(report, schema("benchmark-report"))
        assert report["summary"]["timed"] == 8  # 2 token counts x 2 default dtypes x 2 implementations
    out = tmp_path / "cmp.json"
    result = subprocess.run([*command("benchmark"), "compare", *map(str, paths), "--output", str(out),
                             "--fail-on", "none"],
                            capture_output=True, text=True, timeout=120, env=python_env())
    assert result.returncode == 0, result.stderr
    comparison = json.loads(out.read_text())
    jsonschema.validate(comparison, schema("benchmark-comparison"))
    assert comparison["compared"] == 8


def test_ab_comparison_validates(tmp_path):
    # `ab` over rounds (scripts/ab.sh runs it): one report as both sides of one round.
    report = tmp_path / "r.json"
    run_tool("benchmark", "--operation", "rms_norm", "--implementation", "cpu.native.rms_norm", "--tokens", "4",
             "--hidden", "64", "--dtype", "float32", "--iterations", "5", "--warmup", "1", "--copy-bytes", "4194304",
             out=report)
    out = tmp_path / "ab.json"
    result = subprocess.run([*command("benchmark"), "ab", "--baseline", str(report), "--candidate", str(report),
                             "--min-rounds", "1", "--output", str(out)],
                            capture_output=True, text=True, timeout=120, env=python_env())
    assert result.returncode == 0, result.stderr
    comparison = json.loads(out.read_text())
    jsonschema.validate(comparison, schema("benchmark-ab"))
    assert comparison["compared"] == 1 and comparison["rows"][0]["verdict"] == "same"


def test_benchmark_report_of_a_mutating_case_validates(tmp_path):
    # rotary_embedding rotates in place: its rows carry the reset's own time and where it is counted.
    report = run_tool("benchmark", "--operation", "rotary_embedding", "--implementation", "all", "--tokens", "16",
                      "--head-size", "64", "--rot", "full", "--heads", "8/1", "--is-neox", "true", "--dtype", "float32",
                      "--cache-dtype", "float32", "--layout", "contiguous", "--iterations", "3", "--warmup", "1",
                      "--copy-bytes", "4194304", out=tmp_path / "r.json")
    jsonschema.validate(report, schema("benchmark-report"))
    timed = [r for r in report["results"] if r["status"] == "timed"]
    assert timed and all(r["reset"]["included_in"] == ["wall"] and len(r["samples"]["reset"]) == 3 for r in timed)
    broken = json.loads(json.dumps(report))
    broken["results"][0]["reset"]["seconds"] = "unknown"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("benchmark-report"))
    broken = json.loads(json.dumps(report))
    broken["occupancy"]["host"]["other_processes_cpu_cores"] = "busy"  # a reason must say "unavailable: ..."
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("benchmark-report"))
    broken = json.loads(json.dumps(report))
    broken["occupancy"]["idle"] = not broken["occupancy"]["warnings"]  # consistent: still valid
    jsonschema.validate(broken, schema("benchmark-report"))
    broken["occupancy"]["idle"] = bool(broken["occupancy"]["warnings"])  # idle with warnings, or busy without
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("benchmark-report"))
