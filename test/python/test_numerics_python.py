"""Python suites run by the C++ tools, end to end: `python -m xllm_kernel.numerics` / `.benchmark`
with suites and operations from extension modules (test/python/fixtures/, named by
XLLM_KERNEL_EXTENSIONS as a user would). The same runner, report schemas and exit codes as C++
suites: a correct implementation passes, a wrong one fails the run with the failure in the report,
unsupported cases and implementations carry their reasons, mutations are checked and reset."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from xllm_kernel import _C

from conftest import TORCHRUN_VARIABLES, needs_torchrun, python_env

pytestmark = pytest.mark.skipif(not getattr(_C, "numerics_built", False), reason="built without the tools")

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
EXTENSIONS = "xk_numerics_ops,xk_numerics_my_scale,xk_numerics_my_add"


def tool(name: str, *args: str, extensions: str = EXTENSIONS) -> subprocess.CompletedProcess:
    env = python_env(XLLM_KERNEL_EXTENSIONS=extensions, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-m", f"xllm_kernel.{name}", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def report(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def results(rep: dict, implementation: str) -> list[dict]:
    return next(i for i in rep["implementations"] if i["implementation"]["name"] == implementation)["results"]


def test_help_lists_the_python_suites_arguments():
    for name in ("numerics", "benchmark"):
        r = tool(name, "--operation", "my_scale", "--help")
        assert r.returncode == 0, r.stderr
        for flag in ("--tokens", "--hidden", "--alpha", "--dtype", "--implementation"):
            assert flag in r.stdout, (name, flag, r.stdout)
        r = tool(name, "--help")
        assert r.returncode == 0 and "my_scale" in r.stdout and "my_add_" in r.stdout, r.stdout


def test_unknown_operation_is_a_usage_error_naming_the_known_ones():
    for args in (("--operation", "my_operation", "--help"), ("--operation", "my_operation")):
        for name in ("numerics", "benchmark"):
            r = tool(name, *args)
            assert r.returncode == 2, (name, args, r.stdout, r.stderr)
            assert "unknown operation 'my_operation'" in r.stderr and "my_scale" in r.stderr and "rms_norm" in r.stderr


def test_correct_implementation_passes(tmp_path):
    out = tmp_path / "n.json"
    r = tool("numerics", "--operation", "my_scale", "--implementation", "cpu.python.my_scale", "--output", str(out))
    assert r.returncode == 0, r.stderr
    rep = report(out)
    assert rep["schema"] == "xllm-kernel/numerics-report/1" and rep["operation"] == "my_scale"
    rows = results(rep, "cpu.python.my_scale")
    assert [x["status"] for x in rows] == ["passed", "unsupported"] * 2, rows
    assert rows[0]["case_id"] == "my_scale/alpha=0.5/dtype=float32/hidden=64/tokens=1"
    assert rows[1]["reason"] == "cpu.python.my_scale takes float32 only"  # the case's own unsupported_reason
    assert rows[0]["headroom"] <= 1 and {c["kind"] for c in rows[0]["checks"]} == {"output", "unchanged"}
    assert rows[0]["bytes_read"] == 64 * 4  # estimated from the arguments


def test_suite_implementations_are_the_default_and_a_wrong_one_fails_the_run(tmp_path):
    out, md = tmp_path / "n.json", tmp_path / "n.md"
    r = tool("numerics", "--operation", "my_scale", "--tokens", "3", "--dtype", "float32", "--alpha", "2",
             "--output", str(out), "--markdown", str(md))
    assert r.returncode == 1, (r.stdout, r.stderr)
    rep = report(out)
    assert [i["implementation"]["name"] for i in rep["implementations"]] == [
        "cpu.python.my_scale", "cpu.python.my_scale.wrong", "cpu.python.my_scale.unprepared"]
    assert results(rep, "cpu.python.my_scale")[0]["status"] == "passed"
    wrong = results(rep, "cpu.python.my_scale.wrong")[0]
    assert wrong["status"] == "failed" and wrong["case_id"] == "my_scale/alpha=2.0/dtype=float32/hidden=64/tokens=3"
    assert "output out0" in wrong["failures"][0] and wrong["headroom"] > 1
    skipped = results(rep, "cpu.python.my_scale.unprepared")[0]
    assert skipped == {**skipped, "status": "unsupported", "reason": "its extension is not built here"}
    assert rep["summary"]["status"] == "failed"
    assert "cpu.python.my_scale.wrong" in md.read_text()


def test_mutating_operation_checks_mutations_and_resets(tmp_path):
    out = tmp_path / "n.json"
    r = tool("numerics", "--operation", "my_add_", "--output", str(out))  # no suite implementations: selected
    assert r.returncode == 0, r.stderr
    rows = results(report(out), "cpu.python.my_add_")
    assert len(rows) == 4 and all(x["status"] == "passed" for x in rows), rows
    assert sorted(c["kind"] for c in rows[0]["checks"]) == ["mutation", "unchanged"]

    r = tool("numerics", "--operation", "my_add_", "--implementation", "cpu.python.my_add_.forgetful",
             "--tokens", "2", "--hidden", "8", "--output", str(out))
    assert r.returncode == 1
    (row,) = results(report(out), "cpu.python.my_add_.forgetful")
    assert any(f.startswith("mutation input") for f in row["failures"]), row
    assert "input other was modified, but the contract does not declare it mutated" in row["failures"]


def test_bad_suite_arguments_are_usage_errors(tmp_path):
    for args, message in ((("--tokens", "x"), "--tokens: expected int values, got 'x'"),
                          (("--dtype", "float16"), "--dtype: expected one of float32, bfloat16, got 'float16'")):
        r = tool("numerics", "--operation", "my_scale", *args, "--output", str(tmp_path / "n.json"))
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert not (tmp_path / "n.json").exists()
    r = tool("numerics", "--operation", "my_add_", "--tokens", "0")
    assert r.returncode == 2 and "custom KernelCase" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ["aclgraph", "cudagraph", "graph"])
def test_graph_mode_names_are_accepted_and_unsupported_on_cpu(tmp_path, mode):
    out = tmp_path / "n.json"
    r = tool("numerics", "--operation", "my_scale", "--mode", mode, "--implementation", "cpu.python.my_scale",
             "--dtype", "float32", "--output", str(out))
    assert r.returncode == 3, r.stderr  # the CPU has no graph API: nothing passed
    rep = report(out)
    assert rep["mode"] == "graph"
    assert {x["reason"] for x in results(rep, "cpu.python.my_scale")} == {"device cpu has no graph API"}


def test_benchmark_times_a_python_suite_and_compare_reads_its_reports(tmp_path):
    paths = []
    for k in range(2):
        out = tmp_path / f"b{k}.json"
        r = tool("benchmark", "--operation", "my_add_", "--implementation", "cpu.python.my_add_", "--iterations", "5",
                 "--warmup", "1", "--copy-bytes", "1048576", "--output", str(out))
        assert r.returncode == 0, r.stderr
        paths.append(out)
    rep = report(paths[0])
    assert rep["schema"] == "xllm-kernel/benchmark-report/1" and rep["summary"]["timed"] == 1
    (row,) = rep["results"]
    assert row["parameters"] == {"hidden": 256, "tokens": 64}  # the suite's benchmark_defaults
    assert row["status"] == "timed" and len(row["samples"]["device"]) == 5
    assert row["bytes_read"] == 2 * 64 * 256 * 4 and row["bytes_written"] == 64 * 256 * 4
    assert rep["grid"] == "default"

    # --grid headline: the suite's headline values, in both tools.
    for name in ("numerics", "benchmark"):
        out = tmp_path / f"h-{name}.json"
        r = tool(name, "--operation", "my_add_", "--implementation", "cpu.python.my_add_", "--grid", "headline",
                 *(("--iterations", "2", "--warmup", "0", "--copy-bytes", "1048576") if name == "benchmark" else ()),
                 "--output", str(out))
        assert r.returncode == 0, r.stderr
        rep = report(out)
        assert rep["grid"] == "headline"
        params = ([x["parameters"] for x in rep["results"]] if name == "benchmark"
                  else [x["parameters"] for x in rep["implementations"][0]["results"]])
        assert params == [{"hidden": 40, "tokens": 3}], name

    r = tool("benchmark", "--operation", "my_scale", "--dtype", "float32", "--iterations", "2", "--warmup", "0",
             "--copy-bytes", "1048576", "--output", str(tmp_path / "w.json"))
    assert r.returncode == 1  # the wrong implementation fails validation and is not timed
    rows = report(tmp_path / "w.json")["results"]
    assert {x["status"] for x in rows if x["implementation"] == "cpu.python.my_scale.wrong"} == {"failed"}
    assert {x["status"] for x in rows if x["implementation"] == "cpu.python.my_scale"} == {"timed"}

    # Two real runs: reading them is under test, not their speed (--fail-on none).
    r = tool("benchmark", "compare", str(paths[0]), str(paths[1]), str(paths[0]), "--output", str(tmp_path / "c.json"),
             "--fail-on", "none")
    assert r.returncode == 0, r.stderr
    comparison = report(tmp_path / "c.json")
    assert comparison["schema"] == "xllm-kernel/benchmark-comparison/1" and comparison["compared"] == 1


def test_guide_section_6_1_commands_as_written(tmp_path):
    # The guide's commands with its names replaced (my_operation -> my_scale, npu -> cpu).
    revision = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=pathlib.Path(__file__).parent).stdout.strip() or "unknown"
    assert tool("numerics", "--help").returncode == 0
    assert tool("benchmark", "--help").returncode == 0
    assert tool("numerics", "--operation", "my_scale", "--help").returncode == 0
    assert tool("benchmark", "--operation", "my_scale", "--help").returncode == 0
    r = tool("numerics", "--operation", "my_scale", "--device", "cpu", "--mode", "eager",
             "--implementation", "cpu.python.my_scale", "--revision", revision,
             "--output", str(tmp_path / "numerics.json"))
    assert r.returncode == 0, r.stderr
    assert report(tmp_path / "numerics.json")["environment"]["revision"] == revision
    r = tool("benchmark", "--operation", "my_scale", "--device", "cpu", "--mode", "aclgraph",
             "--implementation", "cpu.python.my_scale", "--iterations", "50", "--revision", revision,
             "--output", str(tmp_path / "benchmark.json"))
    assert r.returncode == 3, r.stderr  # on the CPU the graph mode is unsupported: nothing timed
    assert report(tmp_path / "benchmark.json")["mode"] == "graph"


def test_a_broken_suite_module_is_reported_not_a_traceback():
    r = tool("numerics", "--operation", "my_scale", extensions="xk_numerics_no_such_module")
    assert r.returncode == 1
    assert "loading the numerics suites" in r.stderr and "xk_numerics_no_such_module" in r.stderr, r.stderr



@needs_torchrun
def test_a_python_suite_runs_distributed_over_two_ranks(tmp_path):
    # torchrun starts `python -m xllm_kernel.numerics` on each rank: every rank loads the Python
    # groups and suites, validates, and rank 0 writes the consensus of both.
    env = {k: v for k, v in python_env(XLLM_KERNEL_EXTENSIONS=EXTENSIONS, CUDA_VISIBLE_DEVICES="",
                                       OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES), env["PYTHONPATH"]])
    out = tmp_path / "n.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                        "-m", "xllm_kernel.numerics", "--operation", "my_scale", "--tokens", "3", "--dtype", "float32",
                        "--implementation", "cpu.python.my_scale", "--distributed", "--output", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    aggregate = report(out)
    assert aggregate["schema"] == "xllm-kernel/numerics-distributed-report/1" and aggregate["world_size"] == 2
    assert aggregate["summary"]["status"] == "passed" and aggregate["summary"]["disagreed"] == 0
    cases = aggregate["implementations"][0]["results"]
    assert cases and all(c["consensus"] == "agreed" and c["statuses"] == ["passed", "passed"] for c in cases)
    for rank in (0, 1):
        assert report(tmp_path / f"n.rank{rank}.json")["distributed"]["rank"] == rank
