"""The quantization family from Python: xllm_kernel.ops.<op> through torch.ops.xllm_kernel.<op>
(opcheck: schema, fake, AOT dispatch) for every operation; every CPU implementation against a
reference written here in float64 Python (the contract's float32 steps, its e4m3 and int8
rounding), the two CPU implementations bit for bit, fused == composition, the NaN rule, errors,
and torch.compile(fullgraph=True). Every implementation runs through its numerics suite in
test/numerics."""

from __future__ import annotations

import struct

import pytest
import torch

import xllm_kernel
from conftest import run_python
from xllm_kernel.ops import (fused_add_rms_norm, fused_add_rms_norm_per_token_quant, fused_add_rms_norm_static_quant,
                             per_token_quant, per_token_quant_int8_azp, quantization, rms_norm,
                             rms_norm_per_token_quant, rms_norm_static_quant, silu_and_mul,
                             silu_and_mul_per_token_quant, static_quant)

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
QDTYPES = (torch.int8, torch.float8_e4m3fn)
OPS = ("per_token_quant", "per_token_quant_int8_azp", "static_quant", "rms_norm_per_token_quant",
       "fused_add_rms_norm_per_token_quant", "rms_norm_static_quant", "fused_add_rms_norm_static_quant",
       "silu_and_mul_per_token_quant")


def f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def e4m3(v: float) -> float:
    """The float8_e4m3fn value of v: nearest, ties to even, saturated to +-448."""
    if v != v:
        return v
    a = abs(v)
    if a >= 448:
        return 448.0 if v > 0 else -448.0
    import math
    e = max(-6, math.floor(math.log2(a))) if a > 0 else -6
    spacing = 2.0 ** (e - 3)
    r = min(448.0, round(a / spacing) * spacing)  # round(): ties to even
    return r if v >= 0 else -r


def int8(v: float) -> int:
    if v != v:
        return 0
    return int(max(-128, min(127, round(v))))


def reference_per_token(x: torch.Tensor, qdtype, scale_ub=None):
    """q values (floats) and scales of rows x (float64 values of the input's dtype), the contract's steps."""
    qs, scales = [], []
    for row in x.double().tolist():
        amax = max(abs(v) for v in row)
        if qdtype == torch.float8_e4m3fn:
            b = min(amax, scale_ub) if scale_ub is not None else amax
            s = max(f32(b / 448), f32(1 / (448 * 512)))
            qs.append([e4m3(f32(v / s)) for v in row])
        else:
            s = f32(amax / 127)
            m = 0.0 if amax == 0 else f32(127 / amax)
            qs.append([float(int8(f32(v * m))) for v in row])
        scales.append(s)
    return torch.tensor(qs, dtype=torch.float64), torch.tensor(scales, dtype=torch.float64).reshape(-1, 1)


def test_contracts_modules_and_exports():
    assert quantization.PER_TOKEN_QUANT_CONTRACT.schema == (
        "per_token_quant(Tensor input, ScalarType dtype, Tensor? scale_ub) -> (Tensor out, Tensor scale)")
    assert quantization.FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT_CONTRACT.mutates == ("residual",) or list(
        quantization.FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT_CONTRACT.mutates) == ["residual"]
    assert {m.name for m in quantization.MODULES} == {
        "quantization.torch_cpu", "quantization.native_cpu", "quantization.torch_cuda", "quantization.native_cuda"}
    for op in OPS:
        assert getattr(xllm_kernel.ops, op) is getattr(quantization, op)
    names = {s.name for s in xllm_kernel.kernels("cpu")}
    for op in OPS:
        assert {f"cpu.native.{op}", f"cpu.torch.{op}"} <= names


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("qdtype", QDTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("bound", [False, True])
def test_per_token_quant_against_the_python_reference(cpu, dtype, qdtype, bound):
    if bound and qdtype == torch.int8:
        pytest.skip("scale_ub is fp8 only")
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(7, 37, generator=g) * 3).to(dtype)
    ub = torch.tensor([2.5]) if bound else None
    q, s = per_token_quant(x, qdtype, ub)
    want_q, want_s = reference_per_token(x, qdtype, 2.5 if bound else None)
    assert q.dtype == qdtype and q.shape == x.shape and s.shape == (7, 1) and s.dtype == torch.float32
    assert torch.equal(s.double(), want_s)
    assert torch.equal(q.double(), want_q)


def test_ties_round_to_even(cpu):
    # amax 127: scale 1 and multiplier 1, every element a tie of int8; 448 * 2: fp8 scale 2.
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5]])
    q, s = per_token_quant(x, torch.int8)
    assert s.item() == 1.0 and q.tolist() == [[127, 0, 2, 2, 0, -2, 126]]
    y = torch.tensor([[896.0, 2 * 1.0625, 2 * 1.1875, 2 * 9.0 / 1024]])  # midpoints of e4m3 neighbours
    q8, s8 = per_token_quant(y, torch.float8_e4m3fn)
    assert s8.item() == 2.0
    assert q8.float().tolist() == [[448.0, 1.0, 1.25, 4.0 / 512]]  # 4.5 * 2^-9 (subnormal) to even: 4


def test_both_cpu_implementations_agree_bit_for_bit():
    code = """
        import torch, xllm_kernel
        from xllm_kernel.ops import per_token_quant, per_token_quant_int8_azp, static_quant
        xllm_kernel.initialize(device="cpu")
        g = torch.Generator().manual_seed(4)
        x = (torch.randn(9, 1025, generator=g) * 40).to(torch.bfloat16)
        outs = [*per_token_quant(x, torch.int8), *per_token_quant(x, torch.float8_e4m3fn, torch.tensor([30.0])),
                *per_token_quant_int8_azp(x), static_quant(x, torch.tensor([0.25]), torch.int8, torch.tensor([3], dtype=torch.int32))]
        print([o.view(torch.uint8).flatten().tolist() if o.element_size() == 1 else o.flatten().tolist() for o in outs])
    """
    env = {f"XLLM_KERNEL_OVERRIDE_{op.upper()}": f"cpu.torch.{op}"
           for op in ("per_token_quant", "per_token_quant_int8_azp", "static_quant")}
    torch_out = run_python(code, env=env).stdout.strip().splitlines()[-1]
    native_out = run_python(code).stdout.strip().splitlines()[-1]
    assert torch_out == native_out


@pytest.mark.parametrize("qdtype", QDTYPES, ids=lambda d: str(d).split(".")[-1])
def test_fused_equals_composition(cpu, qdtype):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, 300, generator=g).to(torch.bfloat16)
    w = (torch.randn(300, generator=g) * 0.3 + 1).to(torch.bfloat16)
    q, s = rms_norm_per_token_quant(x, w, 1e-6, qdtype)
    cq, cs = per_token_quant(rms_norm(x, w, 1e-6), qdtype)
    assert torch.equal(q.view(torch.uint8), cq.view(torch.uint8)) and torch.equal(s, cs)
    scale = torch.tensor([0.02])
    assert torch.equal(rms_norm_static_quant(x, w, 1e-6, scale, qdtype).view(torch.uint8),
                       static_quant(rms_norm(x, w, 1e-6), scale, qdtype).view(torch.uint8))
    r = torch.randn(5, 300, generator=g).to(torch.bfloat16)
    r1, r2 = r.clone(), r.clone()
    q1, s1 = fused_add_rms_norm_per_token_quant(x, r1, w, 1e-6, qdtype)
    x2 = x.clone()
    fused_add_rms_norm(x2, r2, w, 1e-6)
    q2, s2 = per_token_quant(x2, qdtype)
    assert torch.equal(r1, r2) and torch.equal(q1.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s1, s2)
    r3 = r.clone()
    assert torch.equal(fused_add_rms_norm_static_quant(x, r3, w, 1e-6, scale, qdtype).view(torch.uint8),
                       static_quant(x2, scale, qdtype).view(torch.uint8))
    gu = torch.randn(5, 600, generator=g).to(torch.bfloat16)
    q3, s3 = silu_and_mul_per_token_quant(gu, qdtype)
    q4, s4 = per_token_quant(silu_and_mul(gu), qdtype)
    assert q3.shape == (5, 300) and torch.equal(q3.view(torch.uint8), q4.view(torch.uint8)) and torch.equal(s3, s4)


def test_a_nan_row_has_a_nan_scale(cpu):
    x = torch.randn(3, 64)
    x[1, 5] = float("nan")
    q, s = per_token_quant(x, torch.float8_e4m3fn)
    assert torch.isnan(s[1]).all() and not torch.isnan(s[0]).any()
    assert (q[1].view(torch.uint8) == 0x7F).all()
    q8, s8, z8 = per_token_quant_int8_azp(x)
    assert torch.isnan(s8[1]).all() and (q8[1] == 0).all() and z8[1].item() == 0


def test_errors_name_the_operation_and_the_argument(cpu):
    x = torch.randn(3, 16)
    with pytest.raises(RuntimeError, match=r"per_token_quant: scale_ub must be None with dtype torch.int8"):
        per_token_quant(x, torch.int8, torch.ones(1))
    with pytest.raises(RuntimeError, match=r"per_token_quant: dtype must be torch.int8 or torch.float8_e4m3fn"):
        per_token_quant(x, torch.float16)
    with pytest.raises(RuntimeError, match=r"static_quant: azp must be None with dtype torch.float8_e4m3fn"):
        static_quant(x, torch.ones(1), torch.float8_e4m3fn, torch.zeros(1, dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"static_quant: scale must hold exactly one element"):
        static_quant(x, torch.ones(2), torch.int8)
    with pytest.raises(RuntimeError, match=r"rms_norm_per_token_quant: weight must have 16 elements"):
        rms_norm_per_token_quant(x, torch.ones(15), 1e-6, torch.int8)
    with pytest.raises(RuntimeError, match=r"silu_and_mul_per_token_quant: input"):
        silu_and_mul_per_token_quant(torch.randn(3, 15), torch.int8)


def _samples():
    x = torch.randn(4, 64).to(torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)
    s = torch.tensor([0.05])
    z = torch.tensor([2], dtype=torch.int32)
    ub = torch.tensor([1.5])
    return {
        "per_token_quant": (x, torch.float8_e4m3fn, ub),
        "per_token_quant_int8_azp": (x,),
        "static_quant": (x, s, torch.int8, z),
        "rms_norm_per_token_quant": (x, w, 1e-6, torch.int8, None),
        "fused_add_rms_norm_per_token_quant": (x, torch.randn(4, 64).to(torch.bfloat16), w, 1e-6, torch.float8_e4m3fn, None),
        "rms_norm_static_quant": (x, w, 1e-6, s, torch.float8_e4m3fn, None),
        "fused_add_rms_norm_static_quant": (x, torch.randn(4, 64).to(torch.bfloat16), w, 1e-6, s, torch.int8, z),
        "silu_and_mul_per_token_quant": (torch.randn(4, 128).to(torch.bfloat16), torch.int8, None),
    }


@pytest.mark.parametrize("op", OPS)
def test_opcheck_and_the_fake(cpu, op):
    args = _samples()[op]
    torch.library.opcheck(getattr(torch.ops.xllm_kernel, op).default, args)
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    out = getattr(torch.ops.xllm_kernel, op)(*meta_args)
    real = getattr(torch.ops.xllm_kernel, op)(*args)
    outs = out if isinstance(out, tuple) else (out,)
    reals = real if isinstance(real, tuple) else (real,)
    assert [(o.shape, o.dtype) for o in outs] == [(r.shape, r.dtype) for r in reals]


class Block(torch.nn.Module):
    """The end of a decoder layer: residual add, RMSNorm and quantization for the next GEMM, then the
    MLP's activation quantized."""

    def forward(self, x, residual, weight, gate_up):
        q, s = fused_add_rms_norm_per_token_quant(x, residual, weight, 1e-6, torch.float8_e4m3fn)
        qa, sa = silu_and_mul_per_token_quant(gate_up, torch.int8)
        return q.float() * s, qa.float() * sa


def test_compiles_without_graph_breaks(cpu):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(6, 128, generator=g).to(torch.bfloat16)
    w = torch.ones(128, dtype=torch.bfloat16)
    gu = torch.randn(6, 256, generator=g).to(torch.bfloat16)
    r1 = torch.randn(6, 128, generator=g).to(torch.bfloat16)
    r2 = r1.clone()
    expected = Block()(x, r1, w, gu)
    compiled = torch.compile(Block(), backend="eager", fullgraph=True)
    got = compiled(x, r2, w, gu)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert torch.equal(r1, r2)
