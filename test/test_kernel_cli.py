"""The kernel CLI protocol (guide sections 4 and 5) on synthetic suites and CPU test doubles.

This module is also the extension the tools load (XLLM_KERNEL_EXTENSIONS=test_kernel_cli): it
declares the in-place operation cli_scale_ (OPERATIONS; the test doubles are in
kernel_cli_doubles.py) and its suite (SUITE), written with the guide's section 4.2 interfaces
directly: a KernelCase with case_id, parameters, unsupported_reason(plan) and prepare(plan), whose
PreparedCase has function, validate, metadata and reset. The tests then run
`python -m xllm_kernel.numerics` / `.benchmark` on it and check what the guide requires:

- a correct implementation passes; a wrong one fails the run (exit 1) with the failure reported;
- an inapplicable case is `unsupported` with its reason; zero passing cases is not a success
  (exit 3, `nothing_passed`), also when graph mode runs on a device without graphs;
- an execution error propagates (exit 1, the error on stderr, no report);
- a mutated input is restored by reset before every timed call: the case's function refuses to run
  on an input that was not reset, so the benchmark passes only if the runner resets (and fails, as
  it must, with `--skip-reset`).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import torch

from xllm_kernel.catalog import BackendModule
from xllm_kernel.numerics import inputs, verify
from xllm_kernel.numerics.suite import CaseMetadata, KernelCase, OperationSuite, PreparedCase
from xllm_kernel.registry import OpContract, Operation

# ---- the extension: operation, backend module, suite --------------------------------------------

CLI_SCALE_CONTRACT = OpContract(operation="cli_scale_", version=1,
                                schema="cli_scale_(Tensor(a!) input, float alpha) -> ()", mutates=("input",),
                                numerical_mode="exact", semantics="input <- input * alpha, in place")
OPERATIONS = (Operation(CLI_SCALE_CONTRACT),)
MODULES = (BackendModule(name="kernel_cli_doubles", device="cpu",
                         implementations=("cpu.python.cli_scale_", "cpu.python.cli_scale_.wrong",
                                          "cpu.python.cli_scale_.raises")),)


def _add_arguments(parser) -> None:
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 5], help="Rows")
    parser.add_argument("--hidden", type=int, nargs="+", default=[16, 7], help="Row width (odd: unsupported)")
    parser.add_argument("--alpha", type=float, default=1.5, help="The scale")
    parser.add_argument("--skip-reset", action="store_true", help="Prepare cases without reset (to see it matter)")


class ScaleCase(KernelCase):
    """One input shape; the input is mutated, so the case restores it through reset."""

    def __init__(self, tokens: int, hidden: int, alpha: float, with_reset: bool):
        self.parameters = {"tokens": tokens, "hidden": hidden, "alpha": alpha}
        self.case_id = f"cli_scale_/tokens={tokens}/hidden={hidden}"
        self._with_reset = with_reset

    def unsupported_reason(self, plan):
        if self.parameters["hidden"] % 2:
            return f"{plan.implementation.name} takes {plan.implementation.spec.input_domain} only"
        return None

    def prepare(self, plan) -> PreparedCase:
        p = self.parameters
        g = inputs.generator(plan.seed, self.case_id)
        pristine = inputs.randn((p["tokens"], p["hidden"]), g).to(plan.torch_device)
        x = pristine.clone()
        expected = pristine.double() * p["alpha"]  # the float64 reference, no registered implementation
        function_ = plan.implementation.function

        def function():
            if not verify.bitwise_equal(x, pristine):
                raise RuntimeError(f"{self.case_id}: the mutated input was not reset before this call")
            function_(x, p["alpha"])

        def validate(last):
            last()
            return verify.Validation().compare("input", x, expected, atol=0.0, rtol=2.0 ** -24, kind="mutation")

        def reset():
            x.copy_(pristine)

        nbytes = x.numel() * x.element_size()
        return PreparedCase(function=function, validate=validate, reset=reset if self._with_reset else None,
                            metadata=CaseMetadata(bytes_read=nbytes, bytes_written=nbytes))


def _cases(args):
    return [ScaleCase(t, h, args.alpha, not args.skip_reset) for t in args.tokens for h in args.hidden]


SUITE = OperationSuite(operation="cli_scale_", implementations=("cpu.python.cli_scale_",),
                       add_arguments=_add_arguments, cases=_cases, description="synthetic: input *= alpha")

# ---- the tests ------------------------------------------------------------------------------------

HERE = pathlib.Path(__file__).resolve().parent


def tool(name: str, *args: str, output: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    import xllm_kernel

    env = {k: v for k, v in os.environ.items() if not k.startswith("XLLM_KERNEL_OVERRIDE_")}
    package_parent = pathlib.Path(xllm_kernel.__file__).parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(package_parent), env.get("PYTHONPATH")]))
    env.update(XLLM_KERNEL_EXTENSIONS="test_kernel_cli", XLLM_KERNEL_LOG="off", CUDA_VISIBLE_DEVICES="")
    extra = ["--output", str(output)] if output is not None else []
    return subprocess.run([sys.executable, "-m", f"xllm_kernel.{name}", "--operation", "cli_scale_", *args, *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def rows(path: pathlib.Path, implementation: str) -> list[dict]:
    report = json.loads(path.read_text())
    return next(i for i in report["implementations"] if i["implementation"]["name"] == implementation)["results"]


def test_help_shows_the_suites_arguments():
    r = tool("numerics", "--help")
    assert r.returncode == 0 and "--skip-reset" in r.stdout and "--alpha" in r.stdout, r.stdout + r.stderr


def test_pass_and_unsupported_with_its_reason(tmp_path):
    out = tmp_path / "n.json"
    r = tool("numerics", output=out)  # the suite's implementation by default
    assert r.returncode == 0, r.stdout + r.stderr
    got = {x["case_id"]: x for x in rows(out, "cpu.python.cli_scale_")}
    assert sorted(got) == ["cli_scale_/tokens=1/hidden=16", "cli_scale_/tokens=1/hidden=7",
                           "cli_scale_/tokens=5/hidden=16", "cli_scale_/tokens=5/hidden=7"]
    assert got["cli_scale_/tokens=5/hidden=16"]["status"] == "passed"
    assert got["cli_scale_/tokens=5/hidden=16"]["checks"][0]["kind"] == "mutation"
    assert got["cli_scale_/tokens=5/hidden=7"] == {**got["cli_scale_/tokens=5/hidden=7"], "status": "unsupported",
                                                   "reason": "cpu.python.cli_scale_ takes even hidden sizes only"}
    assert json.loads(out.read_text())["summary"] == {**json.loads(out.read_text())["summary"], "passed": 2,
                                                      "unsupported": 2, "status": "passed", "exit_code": 0}


def test_a_wrong_implementation_fails_the_run(tmp_path):
    out = tmp_path / "n.json"
    r = tool("numerics", "--implementation", "cpu.python.cli_scale_.wrong", "--hidden", "16", output=out)
    assert r.returncode == 1, r.stdout + r.stderr
    (first, second) = rows(out, "cpu.python.cli_scale_.wrong")
    assert first["status"] == second["status"] == "failed"
    assert first["headroom"] > 1 and first["failures"][0].startswith("mutation input"), first
    assert json.loads(out.read_text())["summary"]["status"] == "failed"


def test_zero_passing_cases_is_a_failure(tmp_path):
    out = tmp_path / "n.json"
    r = tool("numerics", "--hidden", "7", "3", output=out)  # every case unsupported
    assert r.returncode == 3, r.stdout + r.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["passed"] == 0 and summary["status"] == "nothing_passed" and summary["exit_code"] == 3
    r = tool("benchmark", "--hidden", "7", "--iterations", "2", "--copy-bytes", "1048576", output=tmp_path / "b.json")
    assert r.returncode == 3, r.stdout + r.stderr
    assert json.loads((tmp_path / "b.json").read_text())["summary"]["timed"] == 0


def test_an_execution_error_propagates(tmp_path):
    for name in ("numerics", "benchmark"):
        out = tmp_path / f"{name}.json"
        r = tool(name, "--implementation", "cpu.python.cli_scale_.raises", "--hidden", "16", output=out)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        assert "cli_scale_.raises: the test double fails on purpose" in r.stderr, (name, r.stderr)
        assert not out.exists()  # no report from a run that did not finish


def test_reset_restores_the_mutated_input_before_every_call(tmp_path):
    out = tmp_path / "b.json"
    r = tool("benchmark", "--hidden", "16", "--tokens", "5", "--iterations", "5", "--warmup", "2",
             "--copy-bytes", "1048576", output=out)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads(out.read_text())["results"]
    assert row["status"] == "timed" and len(row["samples"]["device"]) == 5  # 5 + warmup calls, each on a reset input
    # Without reset the case's second call sees the first call's result: the error propagates.
    r = tool("benchmark", "--hidden", "16", "--tokens", "5", "--iterations", "5", "--skip-reset",
             "--copy-bytes", "1048576", output=tmp_path / "no-reset.json")
    assert r.returncode == 1 and "the mutated input was not reset before this call" in r.stderr, r.stdout + r.stderr


def test_graph_mode_on_a_device_without_graphs_is_unsupported_with_the_reason(tmp_path):
    for mode in ("graph", "aclgraph"):
        out = tmp_path / f"{mode}.json"
        r = tool("numerics", "--mode", mode, "--hidden", "16", output=out)
        assert r.returncode == 3, r.stdout + r.stderr
        report = json.loads(out.read_text())
        assert report["mode"] == "graph" and report["summary"]["status"] == "nothing_passed"
        assert {x["reason"] for x in rows(out, "cpu.python.cli_scale_")} == {"device cpu has no graph API"}
