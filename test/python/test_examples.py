"""examples/softcap_example, the extension package the README and examples/README.md describe,
loaded as a user would: through XLLM_KERNEL_EXTENSIONS, with examples/ on PYTHONPATH. Its group
joins the catalog (selection, explain, torch.ops with its fake), its two implementations pass its
suite in the numerics tool, and the benchmark times them side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from xllm_kernel import _C

from conftest import ROOT, python_env, run_python

EXAMPLES = ROOT / "examples"
EXTENSIONS = "softcap_example,softcap_example.numerics"
IMPLEMENTATIONS = ("cpu.python.logit_softcap", "cpu.torch.logit_softcap")
needs_tools = pytest.mark.skipif(not getattr(_C, "numerics_built", False), reason="built without the tools")


def example_env() -> dict[str, str]:
    env = python_env(XLLM_KERNEL_EXTENSIONS=EXTENSIONS, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), env["PYTHONPATH"]])
    return env


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"xllm_kernel.{name}", *args], env=example_env(),
                          capture_output=True, text=True, timeout=600)


def test_the_example_group_joins_the_catalog_and_is_selected():
    out = run_python(
        """
        import torch, xllm_kernel
        import softcap_example
        bindings = xllm_kernel.initialize(device="cpu", operations=("logit_softcap",))
        assert bindings["logit_softcap"].spec.name == "cpu.python.logit_softcap"  # priority 20 over torch's 10
        ex = xllm_kernel.explain("cpu", "logit_softcap")
        assert [(c.name, c.verdict) for c in ex.candidates] == [
            ("cpu.python.logit_softcap", "selected"), ("cpu.torch.logit_softcap", "lower priority")], str(ex)
        x = torch.randn(5, 300, dtype=torch.float64).mul_(60).to(torch.bfloat16)
        want = (30 * torch.tanh(x.double() / 30)).to(torch.bfloat16)
        got = softcap_example.logit_softcap(x, 30.0)
        assert got.dtype == torch.bfloat16 and got.shape == x.shape
        assert (got.double() - want.double()).abs().max().item() <= 2 ** -7 * 30  # an ulp of bfloat16 at the cap
        assert torch.equal(torch.ops.xllm_kernel.logit_softcap(x, 30.0), got)  # the dispatcher reaches the binding
        compiled = torch.compile(lambda t: torch.ops.xllm_kernel.logit_softcap(t, 30.0) * 2, backend="eager",
                                 fullgraph=True)
        assert torch.equal(compiled(x), got * 2)  # the fake traces it
        for bad, message in ((lambda: softcap_example.logit_softcap(x, 0.0), "logit_softcap: cap: expected a finite number > 0, got 0.0"),
                             (lambda: softcap_example.logit_softcap(x.int(), 30.0), "logit_softcap: input: expected float32")):
            try:
                bad()
            except (TypeError, ValueError) as e:
                assert message in str(e), e
            else:
                raise AssertionError(message)
        print("ok")
        """,
        env={"XLLM_KERNEL_EXTENSIONS": EXTENSIONS, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), python_env()["PYTHONPATH"]])},
    )
    assert out.stdout.strip().endswith("ok")


@needs_tools
def test_the_example_suite_validates_both_implementations(tmp_path):
    r = tool("numerics", "--operation", "logit_softcap", "--help")
    assert r.returncode == 0 and "--cap" in r.stdout and "--hidden" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "numerics.json"
    r = tool("numerics", "--operation", "logit_softcap", "--tokens", "1,7", "--hidden", "1000",
             "--implementation", "all", "--output", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [i["implementation"]["name"] for i in report["implementations"]] == list(IMPLEMENTATIONS)
    for implementation in report["implementations"]:
        rows = implementation["results"]
        assert len(rows) == 6 and {x["status"] for x in rows} == {"passed"}, rows  # 2 token counts x 3 dtypes
        assert {x["parameters"]["dtype"] for x in rows} == {"float32", "bfloat16", "float16"}
        assert all(0 < x["headroom"] <= 1 for x in rows), rows
    assert report["summary"]["status"] == "passed"


@needs_tools
def test_the_example_suite_fails_a_wrong_implementation(tmp_path):
    # The suite can fail: an override module registering an implementation 1% off is caught.
    wrong = tmp_path / "softcap_wrong.py"
    wrong.write_text(
        "from xllm_kernel import register_kernel\n"
        "from softcap_example import LOGIT_SOFTCAP_CONTRACT\n"
        "import torch\n"
        "@register_kernel(name='cpu.python.logit_softcap.wrong', variant='wrong', contract=LOGIT_SOFTCAP_CONTRACT,"
        " device='cpu', priority=1)\n"
        "def f(input, cap):\n"
        "    return (torch.tanh(input.float() / cap) * cap * 1.01).to(input.dtype)\n"
    )
    env = example_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    code = ("import softcap_example, softcap_wrong, sys\n"
            "from xllm_kernel import _tools\n"
            "sys.exit(_tools.run('numerics', sys.argv[1:]))\n")
    out = tmp_path / "n.json"
    r = subprocess.run([sys.executable, "-c", code, "--operation", "logit_softcap", "--tokens", "7", "--hidden", "256",
                        "--dtype", "float32", "--implementation", "cpu.python.logit_softcap.wrong", "--output", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(out.read_text())["implementations"][0]["results"]
    assert row["status"] == "failed" and row["headroom"] > 1 and "output out0" in row["failures"][0], row


@needs_tools
def test_the_example_benchmark_times_both_implementations(tmp_path):
    out = tmp_path / "benchmark.json"
    r = tool("benchmark", "--operation", "logit_softcap", "--tokens", "64", "--hidden", "1000", "--dtype", "float32",
             "--implementation", "all", "--iterations", "3", "--warmup", "1", "--copy-bytes", "1048576",
             "--output", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["summary"]["timed"] == 2
    rows = {x["implementation"]: x for x in report["results"]}
    assert set(rows) == set(IMPLEMENTATIONS)
    for row in rows.values():
        assert row["status"] == "timed" and len(row["samples"]["device"]) == 3
        assert row["bytes_read"] == 64 * 1000 * 4 and row["bytes_written"] == 64 * 1000 * 4
    assert rows["cpu.torch.logit_softcap"]["speedup_vs_torch"] == 1.0
    assert rows["cpu.python.logit_softcap"]["speedup_vs_torch"] > 0
