"""The guide's directory table in Python: xllm_kernel.selection (selection and explain results),
xllm_kernel.numerics.arguments (the shared suite arguments), xllm_kernel.numerics.report (reports
loaded, validated and compared) and xllm_kernel.numerics.distributed (torchrun's environment and
the aggregate), on real reports of the tools."""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from xllm_kernel import _C

from conftest import ROOT, TORCHRUN_VARIABLES, needs_torchrun, python_env, run_python

needs_tools = pytest.mark.skipif(not getattr(_C, "numerics_built", False), reason="built without the tools")


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"xllm_kernel.{name}", *args], env=python_env(CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=600)


# ---- selection ----------------------------------------------------------------------------------

def test_selection_and_explain_results_are_python_objects():
    out = run_python(
        """
        import dataclasses, json
        import xllm_kernel
        from xllm_kernel import selection
        assert selection.selection("cpu") is None  # nothing published yet
        xllm_kernel.initialize("cpu", operations=("rms_norm", "layer_norm", "silu_and_mul"),
                               overrides={"rms_norm": "torch"})
        s = selection.selection("cpu")
        assert (s.device, s.mode, sorted(s)) == ("cpu", "eager", ["layer_norm", "rms_norm", "silu_and_mul"]), s
        r = s["rms_norm"]
        assert (r.implementation, r.solution, r.binding, r.override_target, r.override_source) == (
            "cpu.torch.rms_norm", "torch", "aten", "torch", "argument"), r
        assert s["layer_norm"].override_source == "environment XLLM_KERNEL_OVERRIDE_LAYER_NORM", s["layer_norm"]
        assert s["layer_norm"].implementation == "cpu.torch.layer_norm"
        assert s["silu_and_mul"].implementation == "cpu.native.silu_and_mul" and s["silu_and_mul"].override_source == ""
        assert s["silu_and_mul"].spec == xllm_kernel.bindings("cpu")["silu_and_mul"].spec
        assert s["silu_and_mul"].detail == xllm_kernel.bindings("cpu")["silu_and_mul"].detail
        try:
            s["gelu"]
        except KeyError as e:
            assert "was not initialized" in str(e)
        else:
            raise AssertionError("gelu is not in this selection")
        assert json.loads(json.dumps(s.as_dict()))["selected"]["rms_norm"]["implementation"] == "cpu.torch.rms_norm"
        with_all = selection.explain_all("cpu")
        assert list(with_all) == [c.operation for c in xllm_kernel.catalog.operations()]
        ex = with_all["rms_norm"]
        assert isinstance(ex, selection.Explanation) and isinstance(ex.candidates[0], selection.Candidate)
        assert ex.selected.name == "cpu.torch.rms_norm" and ex.override_source == "argument"
        assert {c.verdict for c in ex.candidates} >= {"selected", "overridden"}, ex
        assert list(selection.explain_all("cpu", "gelu")) == ["gelu"]
        print("ok")
        """,
        env={"XLLM_KERNEL_OVERRIDE_LAYER_NORM": "torch"},
    )
    assert out.stdout.strip() == "ok"


# ---- arguments ----------------------------------------------------------------------------------

def add_standard(parser):
    from xllm_kernel.numerics import arguments

    arguments.add_tokens(parser, default=(1, 7))
    arguments.add_hidden(parser, default=(64,))
    arguments.add_dtype(parser, default=("float32",))
    arguments.add_layout(parser, choices=("contiguous", "3d"))


@needs_tools
def test_shared_arguments_in_a_suites_parser_and_in_argparse():
    import torch

    from xllm_kernel.numerics import arguments
    from xllm_kernel.numerics._bridge import ArgumentRecorder

    recorder = ArgumentRecorder("my_op")
    add_standard(recorder)
    assert [a.names for a in recorder.arguments] == [("--tokens",), ("--hidden",), ("--dtype",), ("--layout",)]
    assert recorder.arguments[0].help == "Rows (tokens) (comma list, each >= 1) [default: 1,7]"
    args = recorder.parse({"tokens": ["3", "0"], "dtype": ["bfloat16", "float16"]})
    assert (args.tokens, args.hidden, args.layout) == ([3, 0], [64], ["contiguous", "3d"])
    assert arguments.dtypes(args) == [torch.bfloat16, torch.float16]
    assert arguments.integers(args, "tokens", minimum=0) == [3, 0]
    with pytest.raises(ValueError, match=r"my_op: --tokens: expected integers >= 1, got 0"):
        arguments.integers(args, "tokens", operation="my_op")
    with pytest.raises(ValueError, match="--dtype: expected one of float32, bfloat16, float16, got 'float64'"):
        recorder.parse({"dtype": ["float64"]})
    # The same helpers on argparse itself (the protocol is argparse's add_argument).
    parser = argparse.ArgumentParser()
    add_standard(parser)
    parsed = parser.parse_args(["--tokens", "5", "--layout", "3d"])
    assert (parsed.tokens, parsed.dtype, parsed.layout) == ([5], ["float32"], ["3d"])
    with pytest.raises(ValueError, match="--device is a flag of the tools themselves"):
        arguments.add_argument(ArgumentRecorder("my_op"), "--device", default="cpu")
    with pytest.raises(ValueError, match=r"defaults \['float64'\] are not among the choices"):
        arguments.add_dtype(ArgumentRecorder("my_op"), default=("float64",))
    with pytest.raises(ValueError, match="dtype: expected one of"):
        arguments.torch_dtype("int8")


@needs_tools
def test_tool_flags_are_every_flag_the_tools_print():
    from xllm_kernel.numerics import arguments

    printed = set()
    for name in ("numerics", "benchmark"):
        r = tool(name, "--help")
        assert r.returncode == 0, r.stderr
        printed |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", r.stdout))
    assert printed and printed <= arguments.TOOL_FLAGS, sorted(printed - arguments.TOOL_FLAGS)


# ---- reports ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    if not getattr(_C, "numerics_built", False):
        pytest.skip("built without the tools")
    folder = tmp_path_factory.mktemp("reports")
    r = tool("numerics", "--operation", "rms_norm", "--implementation", "all", "--tokens", "3", "--hidden", "7,64",
             "--dtype", "float32,bfloat16", "--output", str(folder / "n.json"))
    assert r.returncode == 0, r.stderr
    for name in ("b0", "b1", "b2"):
        r = tool("benchmark", "--operation", "rms_norm", "--implementation", "all", "--tokens", "4", "--hidden", "256",
                 "--dtype", "float32", "--iterations", "5", "--warmup", "1", "--copy-bytes", "1048576",
                 "--output", str(folder / f"{name}.json"))
        assert r.returncode == 0, r.stderr
    r = tool("numerics", "--operation", "rms_norm", "--mode", "graph", "--hidden", "64", "--output",
             str(folder / "graph.json"))
    assert r.returncode == 3, r.stderr
    return folder


def test_a_numerics_report_loads_into_objects(reports):
    from xllm_kernel.numerics import report

    n = report.load(reports / "n.json")
    raw = json.loads((reports / "n.json").read_text())
    assert isinstance(n, report.NumericsReport) and n.passed and n.exit_code == 0
    assert (n.operation, n.device, n.mode, n.seed) == ("rms_norm", "cpu", "eager", 0)
    assert [i.name for i in n.implementations] == ["cpu.native.rms_norm", "cpu.torch.rms_norm"]
    native = n.implementation("cpu.native.rms_norm")
    assert native.implementation.solution == "native" and native.coverage == raw["implementations"][0]["coverage"]
    assert len(native.results) == len(raw["implementations"][0]["results"]) > 0
    first = raw["implementations"][0]["results"][0]
    case = n.result(first["case_id"], "cpu.native.rms_norm")
    assert (case.status, case.headroom, case.max_ulp, case.parameters) == (
        first["status"], first["headroom"], first["max_ulp"], first["parameters"])
    assert case.checks[0]["kind"] == "output" and not n.failures()
    with pytest.raises(KeyError, match="no implementation 'cpu.fast.rms_norm'"):
        n.implementation("cpu.fast.rms_norm")
    graph = report.load(reports / "graph.json")
    assert not graph.passed and graph.exit_code == 3 and graph.summary["status"] == "nothing_passed"
    assert {c.reason for _, c in graph.cases()} == {"device cpu has no graph API"}


def test_a_benchmark_report_loads_into_objects(reports):
    from xllm_kernel.numerics import report

    b = report.load(reports / "b0.json")
    assert isinstance(b, report.BenchmarkReport) and b.exit_code == 0 and b.timing["iterations"] == 5
    assert b.implementations == ("cpu.native.rms_norm", "cpu.torch.rms_norm") and b.copy_bandwidth_gbps > 0
    (case_id,) = {r.case_id for r in b.results}
    row = b.result(case_id, "cpu.native.rms_norm")
    assert row.status == "timed" and len(row.samples["device"]) == 5 and row.median == row.device["median"] > 0
    assert b.result(case_id, "cpu.torch.rms_norm").speedup_vs_torch == 1.0


@pytest.mark.skipif(importlib.util.find_spec("jsonschema") is None,
                    reason="jsonschema is not installed (pip install jsonschema)")
def test_reports_validate_against_their_schemas(reports, tmp_path):
    from xllm_kernel.numerics import report

    if report.schema_directory() is None:
        pytest.skip("the report schemas (docs/schemas/) are not next to this package")
    for name in ("n", "b0", "graph"):
        report.load(reports / f"{name}.json", check=True)
    broken = json.loads((reports / "n.json").read_text())
    del broken["implementations"][0]["results"][0]["headroom"]
    with pytest.raises(report.ReportError, match=r"at implementations/0/results/0: 'headroom' is a required property"):
        report.from_dict(broken, path="broken.json", check=True)
    with pytest.raises(report.ReportError):
        report.from_dict(broken)  # check=None validates where it can


def test_reports_are_checked_without_jsonschema(reports, tmp_path, monkeypatch):
    from xllm_kernel.numerics import report

    monkeypatch.setattr(report, "_can_validate", lambda: False)  # as where jsonschema is not installed
    data = json.loads((reports / "n.json").read_text())
    assert report.from_dict(data).passed
    del data["summary"]
    with pytest.raises(report.ReportError, match=r"x.json: a xllm-kernel/numerics-report/1 without summary"):
        report.from_dict(data, path="x.json")
    for text, message in (("[1, 2]", "expected a JSON object, got list"), ("{", "not JSON"),
                          ('{"schema": "other"}', "schema is 'other', expected one of"),
                          ('{"schema": "xllm-kernel/numerics-distributed-report/1"}', "distributed.load_aggregate")):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(report.ReportError, match=re.escape(message)):
            report.load(tmp_path / "bad.json")
    with pytest.raises(report.ReportError, match="cannot be read"):
        report.load(tmp_path / "missing.json")


def test_the_required_fields_are_the_schemas():
    from xllm_kernel.numerics import report

    folder = ROOT / "docs" / "schemas"
    for identifier, name in report.SCHEMA_FILES.items():
        schema = json.loads((folder / f"{name}.schema.json").read_text())
        assert tuple(schema["required"]) == report.REQUIRED[identifier], name


def test_benchmark_reports_compare_through_the_tools_comparison(reports):
    from xllm_kernel.numerics import report

    c = report.compare(reports / "b0.json", reports / "b1.json", reports / "b2.json")
    assert isinstance(c, report.Comparison) and c.compared == 2 and len(c.rows) == 2
    assert set(c.verdicts().values()) <= {"faster", "slower", "same", "drift"}
    row = c.rows[0]
    assert row.candidate_over_baseline.low <= row.candidate_over_baseline.point <= row.candidate_over_baseline.high
    two = report.compare(report.load(reports / "b0.json"), reports / "b1.json")  # baseline2 = baseline
    assert two.compared == 2
    with pytest.raises(report.ReportError, match="expected two numerics reports or benchmark reports"):
        report.compare(reports / "n.json", reports / "b0.json")


def test_numerics_reports_compare_case_by_case(reports, tmp_path):
    from xllm_kernel.numerics import report

    data = json.loads((reports / "n.json").read_text())
    worse = copy.deepcopy(data)
    case = worse["implementations"][1]["results"][0]
    case.update(status="failed", headroom=3.5, failures=["output out0: made up"])
    worse["implementations"][1]["results"].pop()  # a case gone
    (tmp_path / "worse.json").write_text(json.dumps(worse))
    d = report.compare(reports / "n.json", tmp_path / "worse.json")
    assert isinstance(d, report.NumericsDiff)
    assert len(d.changes) == sum(len(i["results"]) for i in data["implementations"])
    gone = data["implementations"][1]["results"][-1]["case_id"]
    assert [(c.implementation, c.case_id, c.candidate_status) for c in d.regressions] == [
        ("cpu.torch.rms_norm", case["case_id"], "failed"), ("cpu.torch.rms_norm", gone, None)]
    assert d.regressions[0].candidate_headroom == 3.5 and d.regressions[0].baseline_headroom < 1
    assert report.compare(reports / "n.json", reports / "n.json").regressions == ()


# ---- distributed --------------------------------------------------------------------------------

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}


@needs_tools
def test_the_torchrun_environment_by_the_tools_rules():
    from xllm_kernel.numerics import distributed

    env = distributed.environment({**TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "x1"})
    assert env == distributed.RankEnvironment(rank=1, world_size=2, local_rank=1, master_addr="127.0.0.1",
                                              master_port=29400, agent_store=True, run_id="x1", restart_count=0)
    assert distributed.under_torchrun(TORCHRUN) and not distributed.under_torchrun({})
    with pytest.raises(ValueError, match="not set here: RANK, MASTER_PORT"):
        distributed.environment({k: v for k, v in TORCHRUN.items() if k not in ("RANK", "MASTER_PORT")})
    with pytest.raises(ValueError, match="needs at least 2 ranks, but WORLD_SIZE is 1"):
        distributed.environment({**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"})
    with pytest.raises(ValueError, match=r"RANK='2' is not an integer in \[0, 1\]"):
        distributed.environment({**TORCHRUN, "RANK": "2"})
    assert distributed.rank_path("out/numerics.json", 1) == "out/numerics.rank1.json"
    assert distributed.rank_path("out.d/report", 3) == "out.d/report.rank3"


@needs_tools
@needs_torchrun
def test_a_distributed_aggregate_loads_with_its_rank_reports(tmp_path):
    from xllm_kernel.numerics import distributed, report

    env = {k: v for k, v in python_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1").items()
           if k not in TORCHRUN_VARIABLES}
    out = tmp_path / "n.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                        "-m", "xllm_kernel.numerics", "--operation", "rms_norm", "--tokens", "3", "--hidden", "64",
                        "--dtype", "float32", "--implementation", "cpu.native.rms_norm", "--distributed",
                        "--output", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    agg = distributed.load_aggregate(out)
    assert (agg.schema, agg.tool, agg.operation, agg.world_size, agg.exit_code) == (
        distributed.NUMERICS_AGGREGATE, "numerics", "rms_norm", 2, 0)
    assert [x.rank for x in agg.ranks] == [0, 1] and not agg.disagreed()
    assert agg.results and all(x.statuses == ("passed", "passed") and x.consensus == "agreed" for x in agg.results)
    assert {x.implementation for x in agg.results} == {"cpu.native.rms_norm"}
    rank1 = agg.rank_report(1)
    assert isinstance(rank1, report.NumericsReport) and rank1.data["distributed"]["rank"] == 1
    assert rank1.path == distributed.rank_path(out, 1)
    with pytest.raises(report.ReportError, match="a rank's own report"):
        distributed.load_aggregate(rank1.path)
