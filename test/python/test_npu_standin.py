"""The Ascend stand-in (test/npu_standin) and its fake torch_npu package: npu tensors on host memory,
aten ops through the aliasing CPU fallback, and the vendor norms against a float64 reference.

Each scenario runs in a fresh interpreter: loading the stand-in registers PrivateUse1 for the whole
process. Tests of the npu path reuse STANDIN_LIBRARY, STANDIN_PACKAGE and standin_env()."""

from __future__ import annotations

import os
import pathlib
import textwrap

import pytest

from conftest import PACKAGE_PARENT, ROOT, python_env, run_python

# The build tree the package comes from (<build>/python), else $BUILD_DIR as in scripts/test.sh.
_LIBRARY_NAME = "test/libxllm_kernel_npu_standin.so"
STANDIN_LIBRARY = next(
    (d / _LIBRARY_NAME for d in (PACKAGE_PARENT.parent, ROOT / os.environ.get("BUILD_DIR", "build"))
     if (d / _LIBRARY_NAME).exists()),
    None,
)
# The directory that holds the fake torch_npu package.
STANDIN_PACKAGE = pathlib.Path(__file__).resolve().parent / "fixtures" / "torch_npu_standin"

pytestmark = pytest.mark.skipif(STANDIN_LIBRARY is None, reason="the npu stand-in is not built (tests off)")


def standin_env(**extra: str) -> dict[str, str]:
    """Variables for run_python(env=...) that make `import torch_npu` load the stand-in."""
    pythonpath = os.pathsep.join([str(STANDIN_PACKAGE), python_env()["PYTHONPATH"]])
    return {"XLLM_KERNEL_NPU_STANDIN": str(STANDIN_LIBRARY), "PYTHONPATH": pythonpath, **extra}


def run(code: str, **extra: str):
    return run_python("import torch, torch_npu\n" + textwrap.dedent(code), env=standin_env(**extra))


def test_package_makes_npu_a_device():
    out = run("""
        assert torch_npu.STANDIN is True and torch_npu.__version__ == "2.14.0+standin"
        assert torch.device("npu:1").type == "npu" and torch.device("npu:1").index == 1
        assert torch.npu.is_available() and torch.npu.device_count() == 2
        assert torch.accelerator.current_accelerator().type == "npu" and torch.accelerator.device_count() == 2
        x = torch.arange(6.0).npu()
        assert x.is_npu and x.device == torch.device("npu:0")
        assert torch.nn.Linear(2, 2).npu().weight.device.type == "npu"
        torch.npu.set_device("npu:1")
        assert torch.npu.current_device() == 1
        assert torch.empty(2, device="npu").device == torch.device("npu:1")
        torch.npu.set_device(0)
        torch.npu.synchronize()
        print(repr(x))
    """)
    assert "device='npu:0'" in out.stdout


def test_round_trips_and_copies():
    run("""
        x = torch.randn(5, 7)
        n = x.to("npu")
        assert n.device.type == "npu" and torch.equal(n.cpu(), x)
        m = n.to("npu:1")
        assert m.device == torch.device("npu:1") and torch.equal(m.cpu(), x)
        assert m.data_ptr() != n.data_ptr()
        assert torch.equal(n.clone().cpu(), x) and n.clone().data_ptr() != n.data_ptr()
        h2d = torch.empty(5, 7, device="npu"); h2d.copy_(x)
        d2h = torch.empty(5, 7); d2h.copy_(n)
        d2d = torch.empty(5, 7, device="npu:1"); d2d.copy_(n)
        for t in (h2d, d2h, d2d):
            assert torch.equal(t.cpu(), x)
        assert d2d.device == torch.device("npu:1") and d2h.device.type == "cpu"
        # A copy between two views of one storage, and a dtype conversion on the way.
        b = torch.arange(8.0).npu(); b[:4].copy_(b[4:])
        assert b.cpu().tolist() == [4, 5, 6, 7, 4, 5, 6, 7]
        half = torch.empty(5, 7, dtype=torch.float16, device="npu"); half.copy_(n)
        assert torch.equal(half.cpu(), x.half())
        e = torch.empty_like(n)
        assert e.device == n.device and e.shape == n.shape
        assert torch.zeros(3, device="npu").cpu().tolist() == [0, 0, 0]
        assert torch.full((2,), 2.5, device="npu:1").device == torch.device("npu:1")
        assert torch.equal(n.to(torch.bfloat16).cpu(), x.to(torch.bfloat16))
        assert n.to("cpu", torch.float64).dtype == torch.float64
        assert torch.ops.aten._to_copy(n, device=torch.device("cpu")).device.type == "cpu"
        assert torch.tensor([1.5, 2.0], device="npu:1").device == torch.device("npu:1")
        assert n.data_ptr() % 64 == 0
    """)


def test_views_share_memory_and_in_place_writes_reach_the_base():
    run("""
        b = torch.zeros(4, 6, device="npu")
        views = {
            "view": b.view(6, 4), "reshape": b.reshape(24), "slice": b[1:3, ::2], "select": b.select(1, 2),
            "transpose": b.t(), "unsqueeze": b.unsqueeze(0), "as_strided": b.as_strided((2, 2), (1, 6), 1),
            "expand": b[:1].expand(3, 6), "index": b[2],
        }
        for name, v in views.items():
            assert v.device == b.device, name
            assert v.untyped_storage().data_ptr() == b.untyped_storage().data_ptr(), name
            assert v._is_view(), name
        for t in (b, want := torch.zeros(4, 6)):  # the same writes through views, on npu and on CPU
            t[1:3, ::2].fill_(1.0)
            t.t()[5].add_(2.0)
            t.select(0, 0).mul_(3.0)
            t.view(24)[1] = 7.0
            t.unsqueeze(0)[0, 3].sub_(1.0)
        assert torch.equal(b.cpu(), want), b.cpu()
        assert want.abs().sum().item() == 29.0
        # In-place ops return the tensor they were called on.
        y = b.add_(1.0)
        assert y is b
        assert b.zero_() is b and b.cpu().abs().sum().item() == 0.0
        # In-place metadata ops change the npu tensor itself.
        q = torch.zeros(2, 3, device="npu")
        q.unsqueeze_(0); assert q.shape == (1, 2, 3)
        q.squeeze_(0).t_(); assert q.shape == (3, 2) and q.stride() == (1, 3)
        # An out= tensor is written where it lives; one of another size is resized.
        x = torch.randn(4, 6); n = x.npu()
        out = torch.empty(0, device="npu")
        assert torch.add(n, n, out=out) is out and torch.equal(out.cpu(), x + x)
    """)


def test_ops_match_their_cpu_results():
    run("""
        torch.manual_seed(0)
        x = torch.randn(6, 8); w = torch.randn(8); bias = torch.randn(8)
        n = x.to("npu"); wn = w.npu(); bn = bias.npu()
        cases = {
            "add": (n + 1.5, x + 1.5), "mul": (n * wn, x * w), "sub": (n - wn, x - w), "div": (n / 3, x / 3),
            "eq": (n.eq(n), x.eq(x)), "abs": (n.abs(), x.abs()), "max": (n.max(), x.max()),
            "max_dim": (n.max(dim=1).values, x.max(dim=1).values), "sum": (n.sum(-1), x.sum(-1)),
            "isnan": (torch.isnan(n), torch.isnan(x)), "rsqrt": (n.abs().rsqrt(), x.abs().rsqrt()),
            "mean": (n.mean(-1, keepdim=True), x.mean(-1, keepdim=True)), "pow": (n.pow(2), x.pow(2)),
            "scalar_tensor": (n * torch.tensor(3.0), x * 3.0), "contiguous": (n.t().contiguous(), x.t().contiguous()),
            "layer_norm": (torch.nn.functional.layer_norm(n, (8,), wn, bn, 1e-5),
                           torch.nn.functional.layer_norm(x, (8,), w, bias, 1e-5)),
            "index": (n[torch.tensor([0, 3])], x[torch.tensor([0, 3])]), "cat": (torch.cat([n, n]), torch.cat([x, x])),
            "where": (torch.where(n > 0, n, 0.0), torch.where(x > 0, x, 0.0)),
        }
        for name, (got, want) in cases.items():
            assert got.device.type == "npu", name
            assert torch.equal(got.cpu(), want), name
        lay = torch.ops.aten.native_layer_norm(n, [8], wn, bn, 1e-5)
        assert all(t.device.type == "npu" for t in lay)
        for op in ("add_", "mul_", "sub_", "div_"):
            a = n.clone(); b = x.clone()
            assert getattr(a, op)(wn) is a
            getattr(b, op)(w)
            assert torch.equal(a.cpu(), b), op
        assert torch.equal(n, n) and not torch.equal(n, n + 1)
        assert torch.allclose(n, n + 1e-9) and not torch.allclose(n, n + 1)
        assert n.sum().item() == x.sum().item()
        r = torch.randn(3, 4)
        assert torch.equal(r.to("npu").cpu(), r)
    """)


def test_set_and_resize_act_on_the_npu_storage():
    run("""
        x = torch.arange(12.0); n = x.npu()
        s = torch.empty(0, device="npu")
        s.set_(n.untyped_storage(), 4, (2, 2), (1, 2))
        assert s.untyped_storage().data_ptr() == n.untyped_storage().data_ptr()
        assert s.cpu().tolist() == [[4, 6], [5, 7]]
        s.fill_(-1.0)
        assert n.cpu()[4:8].tolist() == [-1, -1, -1, -1]
        t = torch.empty(0, device="npu"); t.set_(n)
        assert t.shape == n.shape and t.data_ptr() == n.data_ptr()
        r = torch.arange(4.0).npu()
        r.resize_(3, 3)
        assert r.shape == (3, 3) and r.device.type == "npu" and r.untyped_storage().nbytes() == 36
        assert r.view(9)[:4].cpu().tolist() == [0, 1, 2, 3]
        st = torch.empty(2, device="npu").untyped_storage(); st.resize_(64)
        assert st.nbytes() == 64 and st.device.type == "npu"
    """)


def test_device_indices_and_mixed_devices():
    out = run("""
        a = torch.ones(3, device="npu:1")
        assert (a + a).device == torch.device("npu:1") and a.sum().device == torch.device("npu:1")
        assert (a * torch.tensor(2.0)).device == torch.device("npu:1")  # a 0-dim CPU scalar mixes
        for bad in (lambda: a + torch.ones(3, device="npu:0"), lambda: a + torch.ones(3)):
            try:
                bad()
            except RuntimeError as e:
                print("ERROR:", str(e).splitlines()[0])
            else:
                raise AssertionError("mixed devices ran")
    """)
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERROR:")]
    assert "Expected all tensors to be on the same device" in errors[0] and "npu:1 and npu:0" in errors[0]
    assert "Expected all tensors to be on the same device" in errors[1] and "npu:1 and cpu" in errors[1]


def test_streams_events_generators_and_pinned_memory():
    run("""
        s = torch.Stream(device="npu:1")
        assert s.device == torch.device("npu:1") and s.query()
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_stream().stream_id == 0
        start = torch.Event(device="npu", enable_timing=True); end = torch.Event(device="npu", enable_timing=True)
        start.record(); x = torch.randn(64, 64, device="npu") @ torch.randn(64, 64, device="npu"); end.record()
        end.synchronize()
        assert start.query() and start.elapsed_time(end) >= 0.0
        g = torch.Generator(device="npu"); g.manual_seed(7)
        a = torch.randn(5, device="npu", generator=g); g.manual_seed(7)
        assert torch.equal(a, torch.randn(5, device="npu", generator=g)) and a.device.type == "npu"
        torch.manual_seed(3); b = torch.randn(5, device="npu"); torch.manual_seed(3)
        assert torch.equal(b, torch.randn(5, device="npu"))
        host = torch.randn(4)
        assert not host.is_pinned() and host.pin_memory().is_pinned()
    """)


def test_an_op_without_a_cpu_kernel_is_refused_by_name():
    out = run("""
        g = torch.randn(2, 12, device="npu"); c = torch.randn(2, 3, device="npu")
        try:
            torch.ops.aten._thnn_fused_lstm_cell(g, g, c)
        except (RuntimeError, NotImplementedError) as e:
            print("ERROR:", e)
    """)
    assert "npu stand-in: aten::_thnn_fused_lstm_cell has no CPU kernel to run on the host" in out.stdout


REFERENCE = """
import torch, torch_npu

def rms_norm_reference(x, gamma, eps):  # float64, the vendor's formula
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    x64 = x.double()
    rstd = torch.rsqrt(x64.pow(2).mean(dims, keepdim=True) + eps)
    return x64 * rstd * gamma.double(), rstd

def check(name, got, want, dtype):
    # One rounding of a float32 result to `dtype`: within one ulp of the float64 value (float32:
    # a few ulps more for the sum of squares over up to 512 elements).
    eps = torch.finfo(dtype).eps * (8 if dtype == torch.float32 else 1)
    err = (got.cpu().double() - want).abs()
    bound = eps * want.abs() + 1e-6
    assert (err <= bound).all(), f"{name}: {(err - bound).max().item()} over the bound"
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_vendor_norms_match_a_float64_reference(dtype):
    run_python(REFERENCE + f"""
dtype = torch.{dtype}
torch.manual_seed(0)
torch_npu.reset_calls()
for shape, gamma_shape in [((7, 256), (256,)), ((2, 3, 4, 32), (4, 32)), ((5, 1, 512), (512,))]:
    x = (torch.randn(shape) * 3).to(dtype); x2 = torch.randn(shape).to(dtype)
    gamma = (torch.rand(gamma_shape) + 0.5).to(dtype)
    rstd_shape = shape[:len(shape) - len(gamma_shape)] + (1,) * len(gamma_shape)

    y, rstd = torch_npu.npu_rms_norm(x.npu(), gamma.npu(), epsilon=1e-5)
    want_y, want_rstd = rms_norm_reference(x, gamma, 1e-5)
    assert y.device.type == "npu" and y.dtype == dtype and y.shape == shape
    assert rstd.dtype == torch.float32 and rstd.shape == rstd_shape
    check("npu_rms_norm y", y, want_y, dtype)
    assert torch.allclose(rstd.cpu().double(), want_rstd, rtol=1e-5)

    y, rstd, xs = torch_npu.npu_add_rms_norm(x.npu(), x2.npu(), gamma.npu(), 1e-6)
    added = (x.float() + x2.float()).to(dtype)  # float32 sum rounded once: exact
    assert xs.dtype == dtype and torch.equal(xs.cpu(), added)
    want_y, want_rstd = rms_norm_reference(added, gamma, 1e-6)
    check("npu_add_rms_norm y", y, want_y, dtype)
    assert rstd.shape == rstd_shape and torch.allclose(rstd.cpu().double(), want_rstd, rtol=1e-5)
    # y is the norm of the rounded sum, not of the float32 sum: bitwise npu_rms_norm(x).
    y_of_x, rstd_of_x = torch_npu.npu_rms_norm(xs, gamma.npu(), 1e-6)
    assert torch.equal(y.cpu(), y_of_x.cpu()) and torch.equal(rstd.cpu(), rstd_of_x.cpu())

# A non-contiguous input, through the dispatcher by name, on the second device.
x = torch.randn(64, 6).to(dtype); gamma = (torch.rand(64) + 0.5).to(dtype)
xt = x.to("npu:1").t()  # [6, 64], strides (1, 6)
y, rstd = torch.ops.npu.npu_rms_norm(xt, gamma.to("npu:1"))
assert y.device == torch.device("npu:1") and y.shape == (6, 64) and rstd.device == torch.device("npu:1")
check("non-contiguous", y, rms_norm_reference(x.t(), gamma, 1e-6)[0], dtype)
assert torch_npu.calls("npu_rms_norm") == 7 and torch_npu.calls("npu_add_rms_norm") == 3
""", env=standin_env())


def test_vendor_quant_matmul_is_the_documented_formula_over_the_exact_int32_product():
    out = run("""
        torch.manual_seed(0)
        torch_npu.reset_calls()
        m, k, n = 5, 300, 24
        x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8)
        acc = x1.long() @ w.long().t()  # exact
        # int32 output, scale 1: the accumulator itself; x2 as the transposed view [k, n].
        one = torch.ones(1, device="npu")
        out = torch_npu.npu_quant_matmul(x1.npu(), w.npu().t(), one, output_dtype=torch.int32)
        assert out.device.type == "npu" and out.dtype == torch.int32 and torch.equal(out.cpu().long(), acc)
        # The largest sums: K = 65535 of (-128) * (-128), beyond float32's exact integers.
        big = torch.full((2, 65535), -128, dtype=torch.int8)
        out = torch.ops.npu.npu_quant_matmul(big.npu(), big.npu().t(), one, output_dtype=3)
        assert out.cpu().tolist() == [[65535 * 16384] * 2] * 2
        # Float outputs: ((acc + int32 bias) * scale * pertoken_scale), one rounding.
        scale = torch.rand(n) + 0.5
        pertoken = torch.rand(m) + 0.5
        bias = torch.randint(-100, 100, (n,), dtype=torch.int32)
        want = (acc + bias).double() * scale.double() * pertoken.double()[:, None]
        out = torch_npu.npu_quant_matmul(x1.npu(), w.t().contiguous().npu(), scale.npu(), pertoken_scale=pertoken.npu(),
                                         bias=bias.npu(), output_dtype=torch.bfloat16)
        assert out.dtype == torch.bfloat16 and torch.equal(out.cpu(), want.to(torch.bfloat16))
        # int8 output (the default): rounded and saturated, offset added.
        offset = torch.randn(n)
        out = torch_npu.npu_quant_matmul(x1.npu(), w.npu().t(), scale.npu() * 1e-3, offset=offset.npu())
        want = (acc.double() * (scale * 1e-3).double() + offset.double()).round().clamp(-128, 127).to(torch.int8)
        assert out.dtype == torch.int8 and torch.equal(out.cpu(), want)
        assert torch_npu.calls("npu_quant_matmul") == 4
        # Meta: shape and dtype.
        meta = torch.ops.npu.npu_quant_matmul(x1.to("meta"), w.t().to("meta"), one.to("meta"), output_dtype=15)
        assert meta.shape == (m, n) and meta.dtype == torch.bfloat16
        # The vendor's refusals, without a count.
        bad = {
            "float_x1": lambda: torch.ops.npu.npu_quant_matmul(x1.float().npu(), w.npu().t(), one, output_dtype=3),
            "k": lambda: torch.ops.npu.npu_quant_matmul(x1.npu(), w.npu(), one, output_dtype=3),
            "k_bound": lambda: torch.ops.npu.npu_quant_matmul(torch.zeros(1, 65536, dtype=torch.int8, device="npu"),
                                                              torch.zeros(65536, 1, dtype=torch.int8, device="npu"),
                                                              one, output_dtype=3),
            "int32_scale": lambda: torch.ops.npu.npu_quant_matmul(x1.npu(), w.npu().t(), torch.ones(1, dtype=torch.int64,
                                                                  device="npu"), output_dtype=3),
            "output_dtype": lambda: torch.ops.npu.npu_quant_matmul(x1.npu(), w.npu().t(), one, output_dtype=6),
            "unmodelled": lambda: torch.ops.npu.npu_quant_matmul(x1.npu(), w.npu().t(), one, output_dtype=3, x1_dtype=1),
        }
        for name, call in bad.items():
            try:
                call()
            except RuntimeError as e:
                print(name, "=", str(e).splitlines()[0])
            else:
                raise AssertionError(name + " was accepted")
        assert torch_npu.calls("npu_quant_matmul") == 4
        print("quant matmul ok")
    """)
    errors = dict(line.split(" = ", 1) for line in out.stdout.splitlines() if " = " in line)
    assert "quant matmul ok" in out.stdout
    assert errors["float_x1"].startswith("npu_quant_matmul: x1 and x2 dtype must be int8"), errors
    assert errors["k"].startswith("npu_quant_matmul: x1 [m, k] and x2 [k, n] must share k"), errors
    assert errors["k_bound"].startswith("npu_quant_matmul: the last dim of x1 and x2 must not exceed 65535"), errors
    assert errors["int32_scale"].startswith("npu_quant_matmul: scale dtype must be float32 or bfloat16"), errors
    assert errors["output_dtype"].startswith("npu_quant_matmul: output_dtype must be torch.int8"), errors
    assert errors["unmodelled"].startswith("npu_quant_matmul: x1_dtype, x2_dtype"), errors


def test_vendor_errors_name_the_op_and_do_not_count():
    out = run("""
        x = torch.randn(4, 8, device="npu"); g = torch.ones(8, device="npu")
        bad = {
            "gamma_dtype": lambda: torch_npu.npu_rms_norm(x, g.half()),
            "gamma_shape": lambda: torch_npu.npu_rms_norm(x, torch.ones(7, device="npu")),
            "gamma_dims": lambda: torch_npu.npu_rms_norm(x, torch.ones(4, 4, 8, device="npu")),
            "input_dtype": lambda: torch_npu.npu_rms_norm(x.double(), g.double()),
            "gamma_on_cpu": lambda: torch_npu.npu_rms_norm(x, g.cpu()),
            "two_devices": lambda: torch_npu.npu_rms_norm(x, g.to("npu:1")),
            "x2_shape": lambda: torch_npu.npu_add_rms_norm(x, x[:2], g),
            "x2_dtype": lambda: torch_npu.npu_add_rms_norm(x, x.half(), g),
            "add_gamma_dtype": lambda: torch_npu.npu_add_rms_norm(x, x, g.bfloat16()),
        }
        for name, fn in bad.items():
            try:
                fn()
            except RuntimeError as e:
                print(f"{name}:", str(e).splitlines()[0])
            else:
                raise AssertionError(name + " ran")
        assert torch_npu.calls("npu_rms_norm") == 0 and torch_npu.calls("npu_add_rms_norm") == 0
    """)
    errors = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert errors["gamma_dtype"].startswith("npu_rms_norm: gamma dtype must equal self dtype Float, got Half")
    assert errors["gamma_shape"].startswith("npu_rms_norm: gamma shape [7] must equal the last 1 dims of self [4, 8]")
    assert errors["gamma_dims"].startswith("npu_rms_norm: gamma must have 1 to 2 dims")
    assert errors["input_dtype"].startswith("npu_rms_norm: self dtype must be float16, bfloat16 or float32, got Double")
    assert errors["gamma_on_cpu"].startswith("npu_rms_norm: gamma must be on npu, got cpu")
    assert errors["two_devices"].startswith("npu_rms_norm: all tensors must be on one npu device")
    assert errors["x2_shape"].startswith("npu_add_rms_norm: x2 shape must equal x1 shape [4, 8], got [2, 8]")
    assert errors["x2_dtype"].startswith("npu_add_rms_norm: x2 dtype must equal x1 dtype Float, got Half")
    assert errors["add_gamma_dtype"].startswith("npu_add_rms_norm: gamma dtype must equal x1 dtype Float")


def test_call_counters_count_and_reset():
    out = run("""
        x = torch.randn(2, 8, device="npu"); g = torch.ones(8, device="npu")
        counts = lambda: (torch.ops.npu_standin.calls("npu_rms_norm"), torch.ops.npu_standin.calls("npu_add_rms_norm"))
        assert counts() == (0, 0)
        torch_npu.npu_rms_norm(x, g); torch.ops.npu.npu_rms_norm(x, g); torch_npu.npu_add_rms_norm(x, x, g)
        assert counts() == (2, 1), counts()
        torch.ops.npu_standin.reset_calls()
        assert counts() == (0, 0)
        try:
            torch.ops.npu_standin.calls("rms_norm")
        except RuntimeError as e:
            print("ERROR:", str(e).splitlines()[0])
    """)
    assert "no counter for 'rms_norm'; counted: npu_rms_norm, npu_add_rms_norm" in out.stdout


def test_meta_kernels_give_shapes_and_dtypes():
    run("""
        from torch._subclasses.fake_tensor import FakeTensorMode
        x = torch.empty(2, 3, 4, 16, device="meta", dtype=torch.bfloat16)
        g = torch.empty(4, 16, device="meta", dtype=torch.bfloat16)
        y, rstd = torch.ops.npu.npu_rms_norm(x, g)
        assert y.shape == x.shape and y.dtype == torch.bfloat16 and y.device.type == "meta"
        assert rstd.shape == (2, 3, 1, 1) and rstd.dtype == torch.float32
        y, rstd, xs = torch.ops.npu.npu_add_rms_norm(x, x, g[0])
        assert rstd.shape == (2, 3, 4, 1) and xs.shape == x.shape and xs.dtype == torch.bfloat16
        torch_npu.reset_calls()
        with FakeTensorMode():
            f = torch.empty(5, 64, device="npu", dtype=torch.float16)
            y, rstd = torch_npu.npu_rms_norm(f, torch.empty(64, device="npu", dtype=torch.float16))
            assert y.device.type == "npu" and y.shape == (5, 64) and rstd.shape == (5, 1)
        assert torch_npu.calls("npu_rms_norm") == 0
    """)


def test_import_fails_like_the_real_wheel_without_cann():
    out = run_python("""
        try:
            import torch_npu
        except ImportError as e:
            print("ERROR:", type(e).__name__, e)
    """, env=standin_env(XLLM_KERNEL_NPU_STANDIN_FAIL="cann"))
    want = "ERROR: ImportError libhccl.so: cannot open shared object file: No such file or directory"
    assert out.stdout.strip() == want


def test_import_without_the_library_says_what_to_set():
    code = """
        try:
            import torch_npu
        except ImportError as e:
            print("ERROR:", e)
    """
    unset = run_python(code, env=standin_env(XLLM_KERNEL_NPU_STANDIN=""))
    assert "set XLLM_KERNEL_NPU_STANDIN" in unset.stdout
    missing = run_python(code, env=standin_env(XLLM_KERNEL_NPU_STANDIN="/nonexistent/libx.so"))
    assert "/nonexistent/libx.so does not exist" in missing.stdout
