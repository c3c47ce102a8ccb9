"""scaled_mm and linear_dynamic_quant from Python: torch.ops.xllm_kernel.* (opcheck: schema, fake,
AOT dispatch), the int8 schemes bit for bit against the contract's formula (int32 sums, then the
float32 epilogue one operation at a time), linear_dynamic_quant as the composition with
per_token_quant, the documented snippet, errors and torch.compile(fullgraph=True). Every
implementation runs its numerics suite in test/numerics and the C++ tests."""

from __future__ import annotations

import pytest
import torch

from xllm_kernel.ops.linear import linear_dynamic_quant, linear_pack, scaled_mm
from xllm_kernel.ops.quantization import per_token_quant


def weight(scheme, n, k, group=0, zeros=False, seed=0):
    """(q, scales, zeros, group_size, (q - z) int64, scales [N, groups]) of one scheme."""
    gen = torch.Generator().manual_seed(seed)
    if scheme == "w8a8-int8":
        q = torch.randint(-127, 128, (n, k), generator=gen).to(torch.int8)
        s = torch.rand(n, generator=gen) * 0.02 + 0.004
        return q, s, None, 0, q.long(), s[:, None]
    if scheme == "w4a8":
        lo, hi = (0, 16) if zeros else (-8, 8)
        q = torch.randint(lo, hi, (n, k), generator=gen).to(torch.int8)
        s = torch.rand(n, k // group, generator=gen) * 0.02 + 0.004
        z = torch.randint(0, 16, (n, k // group), generator=gen).to(torch.int32) if zeros else None
        centered = q.long() - (z.long().repeat_interleave(group, 1) if zeros else 0)
        return q, s, z, group, centered, s
    q = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    s = torch.rand(n, generator=gen) * 0.02 + 0.004
    return q, s, None, 0, q.double(), s[:, None]


def formula(a, scale_a, centered, s, azp=None, bias=None, out_dtype=torch.bfloat16):
    """The contract's output for int8 a [M, K]: exact sums per group, then float32 steps in order."""
    groups = s.shape[1]
    group = centered.shape[1] // groups
    al = a.long() - (azp.long() if azp is not None else 0)
    t = None
    for g in range(groups):
        sl = slice(g * group, (g + 1) * group)
        acc = al[:, sl].double() @ centered[:, sl].double().t()  # exact: |acc| < 2^31
        term = (acc.float() * scale_a.reshape(-1, 1)) * s[:, g].float()
        t = term if t is None else t + term
    if bias is not None:
        t = t + bias.float()
    return t.to(out_dtype)


@pytest.mark.parametrize("scheme,group,zeros", [("w8a8-int8", 0, False), ("w4a8", 32, False), ("w4a8", 64, True)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_int8_schemes_are_the_formula_bit_for_bit(cpu, scheme, group, zeros, out_dtype):
    q, s, z, g, centered, s2 = weight(scheme, 70, 256, group, zeros)
    packed = linear_pack(q, s, z, scheme, g)
    a = torch.randint(-128, 128, (2, 3, 256), dtype=torch.int8)
    scale_a = torch.rand(2, 3, 1) + 0.01
    bias = torch.randn(70)
    y = scaled_mm(a, packed, scale_a, None, bias, out_dtype)
    assert y.shape == (2, 3, 70) and y.dtype == out_dtype
    want = formula(a.reshape(6, 256), scale_a, centered, s2, bias=bias, out_dtype=out_dtype).reshape(2, 3, 70)
    assert torch.equal(y.view(torch.uint8) if out_dtype != torch.float32 else y.view(torch.int32),
                       want.view(torch.uint8) if out_dtype != torch.float32 else want.view(torch.int32))
    torch.library.opcheck(torch.ops.xllm_kernel.scaled_mm.default, (a, packed, scale_a, None, bias, out_dtype))


def test_activation_zero_points_and_a_per_tensor_scale(cpu):
    q, s, z, g, centered, s2 = weight("w8a8-int8", 40, 128)
    packed = linear_pack(q, s, None, "w8a8-int8", 0)
    a = torch.randint(-128, 128, (5, 128), dtype=torch.int8)
    azp = torch.randint(-128, 128, (5, 1), dtype=torch.int32)
    scale_a = torch.rand(5, 1) + 0.01
    assert torch.equal(scaled_mm(a, packed, scale_a, azp, None, torch.float32),
                       formula(a, scale_a, centered, s2, azp=azp, out_dtype=torch.float32))
    one = torch.tensor([0.03])
    assert torch.equal(scaled_mm(a, packed, one, None, None, torch.float32),
                       formula(a, one.expand(5, 1), centered, s2, out_dtype=torch.float32))


@pytest.mark.parametrize("scheme,group", [("w8a8-int8", 0), ("w4a8", 128), ("w8a8-fp8", 0)])
def test_linear_dynamic_quant_is_the_composition(cpu, scheme, group):
    q, s, z, g, _, _ = weight(scheme, 96, 512, group)
    packed = linear_pack(q, s, z, scheme, g)
    x = torch.randn(4, 512, dtype=torch.bfloat16)
    qdtype = torch.float8_e4m3fn if scheme == "w8a8-fp8" else torch.int8
    a, scale_a = per_token_quant(x, qdtype)
    composed = scaled_mm(a, packed, scale_a, None, None, torch.bfloat16)
    assert torch.equal(linear_dynamic_quant(x, packed).view(torch.int16), composed.view(torch.int16))
    torch.library.opcheck(torch.ops.xllm_kernel.linear_dynamic_quant.default, (x, packed, None))


def test_fp8_is_within_the_float32_bound(cpu):
    q, s, _, _, q64, _ = weight("w8a8-fp8", 50, 300)
    packed = linear_pack(q, s, None, "w8a8-fp8", 0)
    a = (torch.randn(7, 300) * 3).to(torch.float8_e4m3fn)
    scale_a = torch.rand(7, 1) + 0.01
    y = scaled_mm(a, packed, scale_a, None, None, torch.float32).double()
    prods = a.double() @ (q64 * s.double()[:, None]).t() * scale_a.double()
    mag = a.double().abs() @ (q64.abs() * s.double()[:, None]).t() * scale_a.double()
    assert bool(((y - prods).abs() <= 304 * 2.0**-24 * mag + 2.0**-23 * prods.abs()).all())


def test_the_documented_snippet_runs(cpu):
    n, k = 256, 512
    w = torch.randn(n, k) * 0.02
    scales = w.abs().amax(dim=1) / 127
    q8 = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
    packed = linear_pack(q8, scales, None, "w8a8-int8", 0)
    x = torch.randn(16, k, dtype=torch.bfloat16)
    a, scale_a = per_token_quant(x, torch.int8)
    y = scaled_mm(a, packed, scale_a, None, None, torch.bfloat16)
    assert torch.equal(y, linear_dynamic_quant(x, packed))
    assert (y.float() - x.float() @ w.t()).abs().max() < 0.1


def test_errors_name_the_operation_and_the_argument(cpu):
    q, s, _, _, _, _ = weight("w8a8-int8", 40, 64)
    packed = linear_pack(q, s, None, "w8a8-int8", 0)
    a = torch.randint(-128, 128, (3, 64), dtype=torch.int8)
    with pytest.raises(RuntimeError, match="scaled_mm: a must be int8 for a weight of scheme w8a8-int8"):
        scaled_mm(a.float(), packed, torch.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"scaled_mm: scale_a must be \[3, 1\] \(per token\)"):
        scaled_mm(a, packed, torch.ones(2, 1))
    with pytest.raises(RuntimeError, match="linear: packed holds a weight of scheme w8a8-int8"):
        torch.ops.xllm_kernel.linear(torch.randn(3, 64), packed, None)
    with pytest.raises(RuntimeError, match="linear_pack: group_size must be a multiple of 8 for scheme w4a8"):
        linear_pack(torch.zeros(8, 64, dtype=torch.int8), torch.ones(8, 16), None, "w4a8", 4)


def test_compiles_without_graph_breaks(cpu):
    q, s, _, _, _, _ = weight("w8a8-int8", 48, 64)
    packed = linear_pack(q, s, None, "w8a8-int8", 0)

    def model(x):
        a, scale_a = per_token_quant(x, torch.int8)
        return scaled_mm(a, packed, scale_a, None, None, torch.bfloat16) + linear_dynamic_quant(x, packed)

    x = torch.randn(5, 64, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), model(x))
