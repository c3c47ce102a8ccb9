"""The npu implementations here, without an NPU: the exclusion rules (no torch_npu; the real
torch-npu wheel, whose import fails without the CANN runtime) and, on the CPU stand-in of an NPU
(test/npu_standin, loaded by the fake torch_npu package in fixtures/torch_npu_standin), the Python
front door (xllm_kernel/ops/normalization/torch_npu.py, the guide's form), torch.ops.xllm_kernel.*
on npu tensors, torch.compile, and the numerics and benchmark tools with --device npu. The vendor
kernels themselves and ACLGraph run only on Ascend hardware (test/npu)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from conftest import PACKAGE_PARENT, ROOT, run_python

STANDIN_LIBRARY = PACKAGE_PARENT.parent / "test" / "libxllm_kernel_npu_standin.so"
STANDIN_PACKAGE = ROOT / "test" / "python" / "fixtures" / "torch_npu_standin"
TORCH_NPU_WHEEL = pathlib.Path(
    os.environ.get("XLLM_KERNEL_TORCH_NPU_DIR") or pathlib.Path.home() / ".cache/xllm-kernel/torch-npu-2.14.0"
)
OPERATIONS = ("rms_norm", "fused_add_rms_norm", "layer_norm")

needs_standin = pytest.mark.skipif(
    not STANDIN_LIBRARY.exists(), reason=f"the NPU stand-in is not built ({STANDIN_LIBRARY})"
)


def with_path(*paths: pathlib.Path, **extra: str) -> dict[str, str]:
    """Environment for run_python: `paths` before the package on PYTHONPATH."""
    return {"PYTHONPATH": os.pathsep.join([*map(str, paths), str(PACKAGE_PARENT)]), **extra}


def standin(**extra: str) -> dict[str, str]:
    return with_path(STANDIN_PACKAGE, XLLM_KERNEL_NPU_STANDIN=str(STANDIN_LIBRARY), **extra)


EXCLUDED = """
import xllm_kernel
for op in {ops!r}:
    ex = xllm_kernel.explain("npu", op)
    (c,) = [c for c in ex.candidates if c.name == "npu.torch." + op]
    assert c.verdict == "excluded" and c.rejection == "missing_dependency", str(ex)
    assert {expected!r} in c.reason, c.reason
    assert "no eligible implementation on npu" in ex.error, ex.error
try:
    xllm_kernel.initialize("npu", operations={ops!r})
except RuntimeError as e:
    message = str(e)
else:
    raise AssertionError("initialize('npu') succeeded")
assert "no eligible implementation on npu" in message, message
assert "npu.torch." in message and {expected!r} in message, message
print("excluded")
"""


def test_without_torch_npu_every_npu_implementation_is_a_missing_dependency():
    result = run_python(EXCLUDED.format(ops=OPERATIONS, expected="torch_npu is not loaded in this process"))
    assert "excluded" in result.stdout


@needs_standin
def test_a_torch_npu_whose_import_fails_is_a_missing_dependency_with_the_import_error():
    code = EXCLUDED.format(ops=OPERATIONS, expected="ImportError: libhccl.so: cannot open shared object file")
    assert "excluded" in run_python(code, env=standin(XLLM_KERNEL_NPU_STANDIN_FAIL="cann")).stdout


@pytest.mark.skipif(not (TORCH_NPU_WHEEL / "torch_npu" / "__init__.py").exists(),
                    reason=f"the torch-npu wheel is not unpacked at {TORCH_NPU_WHEEL} (scripts/torch-npu.sh)")
def test_the_real_torch_npu_wheel_without_cann_is_a_missing_dependency():
    # torch imports an installed torch_npu itself unless TORCH_DEVICE_BACKEND_AUTOLOAD=0 (and then
    # `import torch` fails without CANN): the README says so; here the package's own import runs.
    env = with_path(TORCH_NPU_WHEEL, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    code = EXCLUDED.format(ops=OPERATIONS, expected="python module xllm_kernel.ops.normalization.torch_npu cannot "
                           "import its dependency (ImportError: libhccl.so")
    assert "excluded" in run_python(code, env=env).stdout


@needs_standin
def test_the_python_front_door_registers_the_guide_form_and_calls_the_vendor_operators():
    code = """
    import torch, torch_npu
    import xllm_kernel
    from xllm_kernel.ops import rms_norm, fused_add_rms_norm, layer_norm

    assert getattr(torch_npu, "STANDIN", False)
    bindings = xllm_kernel.initialize("npu", operations=("rms_norm", "fused_add_rms_norm", "layer_norm"))
    for op in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        ex = xllm_kernel.explain("npu", op)
        assert ex.selected.name == "npu.torch." + op, str(ex)
        assert "plugin libxllm_kernel_npu.so not loaded" in ex.selected.detail, ex.selected.detail
    spec = next(s for s in xllm_kernel.kernels("npu") if s.name == "npu.torch.rms_norm")
    assert (spec.solution, spec.binding, spec.execution_modes) == ("torch", "torch_npu", ("eager", "graph"))

    calls = torch.ops.npu_standin.calls
    torch.manual_seed(0)
    x = torch.randn(5, 96, dtype=torch.bfloat16)
    w = torch.randn(96, dtype=torch.bfloat16)
    before = calls("npu_rms_norm")
    y = rms_norm(x.to("npu"), w.to("npu"), 1e-6)
    assert calls("npu_rms_norm") == before + 1
    assert y.device.type == "npu" and y.dtype == torch.bfloat16
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    torch.testing.assert_close(y.cpu().double(), ref, atol=2e-2, rtol=2e-2)

    # In place: residual <- input + residual (rounded), input <- rms_norm of it.
    r = torch.randn(5, 96, dtype=torch.bfloat16)
    inp, res = x.to("npu"), r.to("npu")
    before = calls("npu_add_rms_norm")
    fused_add_rms_norm(inp, res, w.to("npu"), 1e-6)
    assert calls("npu_add_rms_norm") == before + 1
    s = (x.float() + r.float()).bfloat16()
    assert torch.equal(res.cpu(), s)
    sd = s.double()
    torch.testing.assert_close(inp.cpu().double(), sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(),
                               atol=2e-2, rtol=2e-2)

    b = torch.randn(96)
    out = layer_norm(x.float().to("npu"), w.float().to("npu"), b.to("npu"), 1e-5)
    torch.testing.assert_close(out.cpu(), torch.nn.functional.layer_norm(x.float(), (96,), w.float(), b, 1e-5))

    # torch.ops.xllm_kernel.* on npu tensors (PrivateUse1), and traced by torch.compile.
    direct = torch.ops.xllm_kernel.rms_norm(x.to("npu"), w.to("npu"), 1e-6)
    assert torch.equal(direct.cpu(), y.cpu())
    compiled = torch.compile(lambda a, g: rms_norm(a, g, 1e-6) * 2, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x.to("npu"), w.to("npu")).cpu(), (y * 2).cpu())
    print("front door ok")
    """
    assert "front door ok" in run_python(code, env=standin()).stdout


@needs_standin
@pytest.mark.parametrize("operation", OPERATIONS)
def test_numerics_on_npu_runs_every_case_of_the_npu_implementation(tmp_path, operation):
    out = tmp_path / "report.json"
    code = f"""
    import sys
    from xllm_kernel import _tools
    sys.exit(_tools.run("numerics", ["--operation", "{operation}", "--device", "npu", "--tokens", "0,3",
                                     "--hidden", "1,64,257", "--output", r"{out}"]))
    """
    run_python(code, env=standin())
    report = json.loads(out.read_text())
    assert report["device"] == "npu" and report["summary"]["status"] == "passed", report["summary"]
    names = [i["implementation"]["name"] for i in report["implementations"]]
    assert names == [f"npu.torch.{operation}"], names
    assert report["summary"]["passed"] > 0 and report["summary"]["unsupported"] == 0, report["summary"]


LINEAR_OPERATIONS = ("linear_pack", "linear", "scaled_mm", "linear_dynamic_quant")


@needs_standin
def test_linear_on_npu_is_the_torch_arithmetic_with_npu_quant_matmul_for_the_int32_sums():
    code = """
    import torch, torch_npu
    import xllm_kernel
    from xllm_kernel.ops import linear_pack, linear, scaled_mm, linear_dynamic_quant, rms_norm

    ops = ("linear_pack", "linear", "scaled_mm", "linear_dynamic_quant")
    # normalization's Python front door registers its npu implementations, and the linear module then
    # loads the plugin, which skips the registrations of the module already provided.
    xllm_kernel.initialize("npu", operations=("rms_norm",) + ops)
    assert "plugin libxllm_kernel_npu.so not loaded" in xllm_kernel.explain("npu", "rms_norm").selected.detail
    for op in ops:
        ex = xllm_kernel.explain("npu", op)
        assert ex.selected.name == "npu.torch." + op, str(ex)
    spec = next(s for s in xllm_kernel.kernels("npu") if s.name == "npu.torch.scaled_mm")
    assert spec.execution_modes == ("eager",), spec.execution_modes  # the header is read on the host
    xllm_kernel.initialize("cpu", operations=ops, overrides={op: "cpu.torch." + op for op in ops})
    calls = torch.ops.npu_standin.calls
    w = torch.randn(1, 8).npu()
    assert rms_norm(w, torch.ones(8).npu(), 1e-6).device.type == "npu"

    torch.manual_seed(0)
    n, k = 24, 96
    x = torch.randn(5, k, dtype=torch.bfloat16)
    bias = torch.randn(n)
    # The same bits as cpu.torch: the same ATen forms (the stand-in runs the CPU kernels).
    for weight, scales, zeros, scheme, group in (
        (torch.randn(n, k, dtype=torch.bfloat16), None, None, "bf16", 0),
        (torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n) + 0.5, None, "int8", 0),
        (torch.randint(0, 16, (n, k), dtype=torch.int8), torch.rand(n, 3) + 0.5, torch.randint(0, 16, (n, 3)).float(),
         "int4", 32),
    ):
        on_npu = linear_pack(weight.npu(), None if scales is None else scales.npu(),
                             None if zeros is None else zeros.npu(), scheme, group)
        assert on_npu.device.type == "npu" and on_npu.dtype == torch.uint8
        on_cpu = linear_pack(weight, scales, zeros, scheme, group)
        y = linear(x.npu(), on_npu, bias.npu())
        assert y.device.type == "npu" and y.dtype == torch.bfloat16
        assert torch.equal(y.cpu(), linear(x, on_cpu, bias)), scheme
    # A weight packed by another implementation is refused by name.
    try:
        linear(x.npu(), on_cpu.npu(), None)
    except RuntimeError as e:
        assert "cpu.torch.linear_pack" in str(e) and "npu.torch.linear_pack" in str(e), str(e)
    else:
        raise AssertionError("a cpu.torch packing was accepted on npu")

    # scaled_mm, w8a8-int8 and w4a8: the int32 sums from npu_quant_matmul, one call per K group.
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    s = torch.rand(n) + 0.5
    a = torch.randint(-128, 128, (7, k), dtype=torch.int8)
    sa = torch.rand(7, 1) + 0.1
    azp = torch.randint(-128, 128, (7, 1), dtype=torch.int32)
    for scheme, weight, scales, zeros, group, groups, use_azp in (
        ("w8a8-int8", q, s, None, 0, 1, True),
        ("w4a8", torch.randint(0, 16, (n, k), dtype=torch.int8), torch.rand(n, 3) + 0.5,
         torch.randint(0, 16, (n, 3)).float(), 32, 3, False),
    ):
        on_npu = linear_pack(weight.npu(), scales.npu(), None if zeros is None else zeros.npu(), scheme, group)
        on_cpu = linear_pack(weight, scales, zeros, scheme, group)
        z = azp if use_azp else None
        before = calls("npu_quant_matmul")
        y = scaled_mm(a.npu(), on_npu, sa.npu(), None if z is None else z.npu(), bias.npu(), torch.float16)
        assert calls("npu_quant_matmul") == before + groups, scheme
        assert y.dtype == torch.float16 and torch.equal(y.cpu(), scaled_mm(a, on_cpu, sa, z, bias, torch.float16))
        before = calls("npu_quant_matmul")
        y = linear_dynamic_quant(x.npu(), on_npu, bias.npu())
        assert calls("npu_quant_matmul") == before + groups, scheme
        assert torch.equal(y.cpu(), linear_dynamic_quant(x, on_cpu, bias)), scheme
    # w8a8-fp8: a float32 matmul of the e4m3 values; the vendor op is not called.
    fp8 = (torch.randn(n, k) * 4).to(torch.float8_e4m3fn)
    on_npu = linear_pack(fp8.npu(), torch.tensor([0.5]).npu(), None, "w8a8-fp8", 0)
    on_cpu = linear_pack(fp8, torch.tensor([0.5]), None, "w8a8-fp8", 0)
    before = calls("npu_quant_matmul")
    y = linear_dynamic_quant(x.npu(), on_npu, None)
    assert calls("npu_quant_matmul") == before
    assert torch.equal(y.cpu(), linear_dynamic_quant(x, on_cpu, None))
    # Zero rows.
    assert scaled_mm(a[:0].npu(), linear_pack(q.npu(), s.npu(), None, "w8a8-int8", 0), sa[:0].npu(), None, None,
                     torch.bfloat16).shape == (0, n)
    print("linear ok")
    """
    assert "linear ok" in run_python(code, env=standin()).stdout


@needs_standin
@pytest.mark.parametrize("operation", LINEAR_OPERATIONS)
def test_numerics_on_npu_runs_every_linear_case_of_the_npu_implementation(tmp_path, operation):
    out = tmp_path / "report.json"
    code = f"""
    import sys
    from xllm_kernel import _tools
    sys.exit(_tools.run("numerics", ["--operation", "{operation}", "--device", "npu", "--tokens", "0,3,17",
                                     "--output", r"{out}"]))
    """
    run_python(code, env=standin())
    report = json.loads(out.read_text())
    assert report["device"] == "npu" and report["summary"]["status"] == "passed", report["summary"]
    names = [i["implementation"]["name"] for i in report["implementations"]]
    assert names == [f"npu.torch.{operation}"], names
    assert report["summary"]["passed"] > 0 and report["summary"]["unsupported"] == 0, report["summary"]


@needs_standin
def test_aclgraph_mode_on_npu_is_unsupported_here_with_its_reason(tmp_path):
    out = tmp_path / "report.json"
    code = f"""
    import sys
    from xllm_kernel import _tools
    sys.exit(_tools.run("numerics", ["--operation", "rms_norm", "--device", "npu", "--mode", "aclgraph",
                                     "--tokens", "3", "--hidden", "64", "--output", r"{out}"]))
    """
    result = run_python(code, env=standin(), check=False)
    assert result.returncode == 3, result.stdout + result.stderr
    text = out.read_text()
    assert "ACLGraph" in text and "libxllm_kernel_npu_graph.so" in text, text[:2000]


@needs_standin
def test_benchmark_on_npu_times_the_npu_implementation(tmp_path):
    out = tmp_path / "benchmark.json"
    code = f"""
    import sys
    from xllm_kernel import _tools
    sys.exit(_tools.run("benchmark", ["--operation", "rms_norm", "--device", "npu", "--tokens", "16",
                                      "--hidden", "256", "--dtype", "bfloat16", "--output", r"{out}"]))
    """
    run_python(code, env=standin())
    report = json.loads(out.read_text())
    assert report["device"] == "npu", report.keys()
    assert "npu.torch.rms_norm" in json.dumps(report["implementations"])
    # The NPU timer has no hold: the report says so, rather than the CUDA timer's hold.
    assert "without a hold" in report["device_timer"], report["device_timer"]
    assert "eager intervals include the host's submission gaps" in report["device_timer"]
    assert "the device held" not in report["device_timer"]
    # Occupancy: the NPU's readings, or why not (the stand-in is neither torch_npu nor CANN).
    device = report["occupancy"]["device"]
    assert device["kind"] == "npu"
    for reading in (device["before"], device["after"]):
        for key in ("memory_used_bytes", "memory_total_bytes", "chip", "torch_npu", "cann", "other_processes"):
            assert key in reading, reading
        assert reading["torch_npu"] == "unavailable: libtorch_npu.so is not loaded in this process"
        assert reading["chip"].startswith("unavailable: ")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "schemas" / "benchmark-report.schema.json").read_text())
    jsonschema.validate(report, schema)
