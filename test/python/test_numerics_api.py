"""The Python numerics API's pieces on their own: argument recording and parsing, TensorCase
validation (the C++ checks through _C), inputs, tensor_suite's dimension rules, and the catalog's
one-suite-per-operation rule. End-to-end runs through the tools are in test_numerics_python.py."""

from __future__ import annotations

import argparse

import pytest
import torch

from xllm_kernel import _C

pytestmark = pytest.mark.skipif(not getattr(_C, "numerics_built", False), reason="built without the tools")

from xllm_kernel.numerics import inputs, verify  # noqa: E402
from xllm_kernel.numerics._bridge import ArgumentRecorder, SuiteAdapter, SuiteArgumentError  # noqa: E402
from xllm_kernel.numerics.factory import Dimension, tensor_suite  # noqa: E402
from xllm_kernel.numerics.suite import Implementation, OperationSuite, Plan, Validation  # noqa: E402
from xllm_kernel.numerics.tensor_case import Example, TensorCase, Tolerance  # noqa: E402

from conftest import run_python  # noqa: E402


def plan_for(function, seed=0) -> Plan:
    return Plan(device="cpu", device_index=0, mode="eager", seed=seed,
                implementation=Implementation("cpu.test.fn", None, function))


def silu_and_mul_reference(x):
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    return a / (1 + torch.exp(-a)) * b


def silu_and_mul_example(p, g):
    x = inputs.randn((p["tokens"], 2 * p["hidden"]), g, dtype=torch.float32, scale=3)
    return Example(args=(x,), reference=silu_and_mul_reference, tolerance=Tolerance(atol=1e-5, rtol=1e-5))


def run_case(case, function):
    prepared = case.prepare(plan_for(function))
    prepared.function()
    last = []

    def run_and_keep():
        last[:] = [prepared.function()]

    run_and_keep()
    return prepared, prepared.validate(lambda: last[0])


# ---- arguments ----

def test_arguments_convert_like_argparse():
    parser = ArgumentRecorder("my_op")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 7], help="rows")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--eps", type=float, default="1e-6")  # argparse converts string defaults
    parser.add_argument("--two", type=int, nargs=2, default=[3, 4])
    parser.add_argument("--no-bias", action="store_true")
    args = parser.parse({})
    assert args == argparse.Namespace(tokens=[1, 7], dtype="float32", eps=1e-6, two=[3, 4], no_bias=False)
    args = parser.parse({"tokens": ["5", "6"], "dtype": ["bfloat16"], "two": ["1", "2"], "no_bias": ["1"]})
    assert (args.tokens, args.dtype, args.two, args.no_bias) == ([5, 6], "bfloat16", [1, 2], True)

    with pytest.raises(SuiteArgumentError, match=r"my_op: --tokens: expected int values, got 'x'"):
        parser.parse({"tokens": ["x"]})
    with pytest.raises(SuiteArgumentError, match=r"--dtype: expected one of float32, bfloat16, got 'float64'"):
        parser.parse({"dtype": ["float64"]})
    with pytest.raises(SuiteArgumentError, match=r"--two: expected 2 values, got 3"):
        parser.parse({"two": ["1", "2", "3"]})
    assert issubclass(SuiteArgumentError, ValueError)  # the tools exit 2 on it


@pytest.mark.parametrize("call, message", [
    (lambda p: p.add_argument("tokens"), "not positional arguments"),
    (lambda p: p.add_argument("--x", nargs="?"), "nargs '?'"),
    (lambda p: p.add_argument("--x", action="append"), "action 'append' is not supported"),
    (lambda p: p.add_argument("--x", nargs=0), "nargs must be"),
    (lambda p: (p.add_argument("--x"), p.add_argument("--x")), "repeats"),
])
def test_bad_argument_declarations_are_named(call, message):
    with pytest.raises(SuiteArgumentError, match=message):
        call(ArgumentRecorder("my_op"))


def test_suite_fields_are_checked():
    with pytest.raises(TypeError, match="implementations must be a sequence of names"):
        OperationSuite(operation="x", implementations="cpu.python.x", add_arguments=print, cases=print)
    with pytest.raises(ValueError, match="operation must be a non-empty string"):
        OperationSuite(operation="", implementations=(), add_arguments=print, cases=print)
    suite = OperationSuite(operation="x", implementations=["a"], add_arguments=lambda p: None, cases=lambda a: [])
    assert suite.implementations == ("a",) and suite.prepare is None
    with pytest.raises(SuiteArgumentError, match="benchmark_defaults names 'tokens'"):
        SuiteAdapter(OperationSuite(operation="x", implementations=(), add_arguments=lambda p: None,
                                    cases=lambda a: [], benchmark_defaults={"tokens": [1]}), "test")
    with pytest.raises(SuiteArgumentError, match="headline names 'tokens'"):
        SuiteAdapter(OperationSuite(operation="x", implementations=(), add_arguments=lambda p: None,
                                    cases=lambda a: [], headline={"tokens": [1]}), "test")


# ---- tensor cases ----

def test_tensor_case_passes_a_correct_implementation_and_catches_a_wrong_one():
    case = TensorCase("silu_and_mul", {"tokens": 3, "hidden": 8}, silu_and_mul_example)
    assert case.case_id == "silu_and_mul/hidden=8/tokens=3"  # keys in order, as C++ names cases
    correct = lambda x: silu_and_mul_reference(x.double()).float()  # noqa: E731
    _, v = run_case(case, correct)
    assert v.passed and v.failures == [] and 0 < v.headroom <= 1, v
    assert [c["kind"] for c in v.checks] == ["output", "unchanged"]

    _, v = run_case(case, lambda x: correct(x) * 1.01)
    assert not v.passed and v.mismatches > 0 and v.headroom > 1
    assert "output out0" in v.failures[0]

    def writes_its_input(x):
        out = correct(x)
        x.add_(1)
        return out

    _, v = run_case(case, writes_its_input)
    assert not v.passed
    assert "input input was modified, but the contract does not declare it mutated" in v.failures


def test_tensor_case_checks_declared_mutations_and_resets_them():
    def example(p, g):
        x = inputs.randn((2, 16), g)
        residual = inputs.randn((2, 16), g)
        weight = inputs.randn((16,), g)

        def reference(input, residual, weight, eps):
            residual.add_(input)
            r = residual.to(torch.float32).double()  # rounded to the residual's dtype, as the contract says
            residual.copy_(r)
            input.copy_(r * torch.rsqrt(r.square().mean(-1, keepdim=True) + eps) * weight)

        return Example(args=(x, residual, weight, 1e-6), reference=reference, tolerance=Tolerance(1e-5, 1e-5))

    case = TensorCase("fused_add_rms_norm", {"tokens": 2}, example)

    def correct(input, residual, weight, eps):
        residual.add_(input)
        input.copy_(residual * torch.rsqrt(residual.square().mean(-1, keepdim=True) + eps) * weight)

    prepared, v = run_case(case, correct)  # ran twice: the second call sees mutated inputs
    assert not v.passed
    prepared.reset()
    prepared.function()
    v = prepared.validate(lambda: None)
    assert v.passed, v.failures
    assert sorted(c["kind"] for c in v.checks) == ["mutation", "mutation", "unchanged"]
    assert prepared.reset is not None and len(prepared.snapshot()) == 2  # the two mutated arguments

    def forgetful(input, residual, weight, eps):
        input.copy_((input + residual) * 0 + input)

    prepared = case.prepare(plan_for(forgetful))
    prepared.function()
    v = prepared.validate(lambda: None)
    assert not v.passed and any("mutation residual" in f for f in v.failures), v.failures


def test_tensor_case_catches_undeclared_aliasing_and_wrong_output_count():
    case = TensorCase("silu_and_mul", {"tokens": 2, "hidden": 4}, silu_and_mul_example)
    prepared = case.prepare(plan_for(lambda x: x[..., :4]))  # a view of the input
    prepared.function()
    v = prepared.validate(lambda: prepared.function())
    assert any("aliases input input" in f for f in v.failures), v.failures
    v = prepared.validate(lambda: (torch.zeros(2, 4), torch.zeros(2, 4)))
    assert v.failures == ["returned 2 outputs, expected 1"]


def test_inputs_are_fixed_by_seed_and_case():
    a = inputs.randn((4, 4), inputs.generator(7, "case/a"))
    assert torch.equal(a, inputs.randn((4, 4), inputs.generator(7, "case/a")))
    assert not torch.equal(a, inputs.randn((4, 4), inputs.generator(7, "case/b")))
    assert not torch.equal(a, inputs.randn((4, 4), inputs.generator(8, "case/a")))
    padded = torch.arange(24.0).reshape(4, 6)[:, :4]
    moved = inputs.to_device(padded, "cpu")
    assert moved.stride() == padded.stride() and moved.storage_offset() == padded.storage_offset()
    assert moved.untyped_storage().data_ptr() != padded.untyped_storage().data_ptr()
    assert torch.equal(moved, padded)


def test_verify_is_the_cpp_comparison():
    want = torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)
    v = verify.compare("out0", torch.tensor([1.0, 2.5, float("nan")]), want, atol=0.1, rtol=0.1)
    assert not v.passed and v.mismatches == 2 and v.max_abs_error == float("inf")
    assert v.checks[0]["name"] == "out0" and v.checks[0]["elements"] == 3
    merged = Validation().compare("a", want.float(), want, atol=0, rtol=0).merge(v)
    assert not merged.passed and len(merged.checks) == 2
    assert verify.unit_roundoff(torch.bfloat16) == 2.0 ** -8
    assert verify.accumulate_tolerance(torch.float32, 1)[0] > 2 * 2.0 ** -24
    assert verify.bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))


# ---- tensor_suite ----

def test_tensor_suite_builds_the_cartesian_product_and_rejects_empty_dimensions():
    suite = tensor_suite(operation="silu_and_mul", implementations=("cpu.native.silu_and_mul",),
                         dimensions=(Dimension("tokens", (1, 3)), Dimension("hidden", (4,)),
                                     Dimension("dtype", ("float32",), choices=("float32", "bfloat16"))),
                         builder=silu_and_mul_example)
    adapter = SuiteAdapter(suite, "test")
    ids = [case_id for _, case_id, _ in adapter.cases({"hidden": ["4", "8"]})]
    assert ids == ["silu_and_mul/dtype=float32/hidden=4/tokens=1", "silu_and_mul/dtype=float32/hidden=8/tokens=1",
                   "silu_and_mul/dtype=float32/hidden=4/tokens=3", "silu_and_mul/dtype=float32/hidden=8/tokens=3"]
    with pytest.raises(ValueError, match=r"silu_and_mul: --tokens: values must be positive integers, got 0; "
                                         r".*custom KernelCase"):
        adapter.cases({"tokens": ["0"]})
    with pytest.raises(ValueError, match="default values must be positive"):
        tensor_suite(operation="x", implementations=(), dimensions={"tokens": (0, 1)}, builder=silu_and_mul_example)


# ---- catalog ----

def test_builtin_suite_modules_are_discovered_by_scanning(tmp_path):
    from xllm_kernel.numerics import catalog

    (tmp_path / "my_op.py").write_text("from x import OperationSuite\nSUITE = OperationSuite(...)\n")
    (tmp_path / "annotated.py").write_text("SUITE: object = None\n")
    (tmp_path / "helpers.py").write_text("def f():\n    SUITE = 1  # not at top level\n")
    (tmp_path / "_private.py").write_text("SUITE = None\n")
    (tmp_path / "broken.py").write_text("SUITE = (\n")  # a syntax error: not a suite module
    (tmp_path / "notes.txt").write_text("SUITE = None\n")
    assert catalog._discover(tmp_path, "pkg.numerics") == ("pkg.numerics.annotated", "pkg.numerics.my_op")
    # The package's own folder: what it scans is what _BUILTINS holds (suite.py, factory.py, ... export none).
    assert catalog._BUILTINS == catalog._discover()
    assert "xllm_kernel.numerics.suite" not in catalog._BUILTINS


def _package_with_a_builtin_suite(root, suite_source: str):
    """A copy of the package under test whose numerics/ folder also holds my_scale.py: every entry
    linked, the numerics modules copied (the catalog scans the folder it was imported from)."""
    import pathlib

    import xllm_kernel

    package = pathlib.Path(xllm_kernel.__file__).parent
    copy = root / "xllm_kernel"
    copy.mkdir(parents=True)
    for entry in package.iterdir():
        if entry.name not in ("numerics", "__pycache__"):
            (copy / entry.name).symlink_to(entry.resolve())
    (copy / "numerics").mkdir()
    for module in (package / "numerics").glob("*.py"):
        (copy / "numerics" / module.name).write_text(module.read_text())
    (copy / "numerics" / "my_scale.py").write_text(suite_source)
    return root


def test_a_builtin_suite_module_is_discovered_loaded_and_run(tmp_path):
    # The guide's in-package route (numerics/<operation>.py exporting SUITE, listed in
    # numerics.catalog._BUILTINS), end to end: the fixture suite of my_scale placed in the package's
    # numerics folder, with only its operator group as an extension.
    import json
    import os
    import pathlib
    import subprocess
    import sys

    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    root = _package_with_a_builtin_suite(tmp_path / "site", (fixtures / "xk_numerics_my_scale.py").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLLM_KERNEL_OVERRIDE_")}
    env.update(PYTHONPATH=os.pathsep.join([str(root), str(fixtures)]), XLLM_KERNEL_EXTENSIONS="xk_numerics_ops",
               XLLM_KERNEL_LOG="off", CUDA_VISIBLE_DEVICES="")
    check = ("import xllm_kernel\n"
             "from xllm_kernel.numerics import catalog\n"
             f"assert xllm_kernel.__file__.startswith({str(root)!r}), xllm_kernel.__file__\n"
             "assert catalog._BUILTINS == ('xllm_kernel.numerics.my_scale',), catalog._BUILTINS\n"
             "assert list(catalog.load()) == ['my_scale']\n"
             "assert ('my_scale', 'Python module xllm_kernel.numerics.my_scale') in catalog.suites(), catalog.suites()\n")
    r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "n.json"
    r = subprocess.run([sys.executable, "-m", "xllm_kernel.numerics", "--operation", "my_scale", "--dtype", "float32",
                        "--implementation", "cpu.python.my_scale", "--output", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["implementations"][0]["results"]
    assert [x["status"] for x in rows] == ["passed", "passed"], rows  # --tokens 1 7 by default


def test_a_python_suite_for_an_operation_with_a_cpp_suite_is_an_error_naming_both():
    result = run_python(
        """
        from xllm_kernel.numerics import catalog
        from xllm_kernel.numerics.suite import OperationSuite
        suite = OperationSuite(operation="silu_and_mul", implementations=(), add_arguments=lambda p: None,
                               cases=lambda a: [])
        try:
            catalog.add(suite, origin="Python module my_pkg.numerics.silu_and_mul")
        except ValueError as e:
            print(e)
        else:
            raise AssertionError("a second silu_and_mul suite was accepted")
        assert ("silu_and_mul", "the C++ suite (XLLM_REGISTER_SUITE)") in catalog.suites()
        """
    )
    assert "operation silu_and_mul already has a suite, the C++ suite (XLLM_REGISTER_SUITE)" in result.stdout
    assert "Python module my_pkg.numerics.silu_and_mul" in result.stdout
