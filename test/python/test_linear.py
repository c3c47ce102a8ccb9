"""The linear family from Python: xllm_kernel.ops.linear_pack and linear through
torch.ops.xllm_kernel.* (opcheck: schema, fake, AOT dispatch), the selected binding against a
float64 reference with the contract's W, errors, and torch.compile(fullgraph=True). Every
implementation (not only the selected one) runs through its numerics suite in test/numerics."""

from __future__ import annotations

import pytest
import torch

import xllm_kernel
from xllm_kernel.ops import linear, linear_pack

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def canonical(scheme, n, k, g=None, seed=0):
    """(weight, scales, zeros, group_size, W float32) in the scheme's canonical form."""
    gen = torch.Generator().manual_seed(seed)
    if scheme in ("f32", "bf16", "f16"):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[scheme]
        w = (torch.randn(n, k, generator=gen) / 4).to(dtype)
        return w, None, None, 0, w.float()
    if scheme == "int8":
        q = torch.randint(-128, 128, (n, k), generator=gen).to(torch.int8)
        s = torch.rand(n, generator=gen) * 0.02 + 0.005
        return q, s, None, 0, q.float() * s[:, None]
    q = torch.randint(0, 16, (n, k), generator=gen).to(torch.int8)
    s = torch.rand(n, k // g, generator=gen) * 0.02 + 0.005
    z = torch.randint(0, 16, (n, k // g), generator=gen).to(torch.int32)
    w = (q.float() - z.float().repeat_interleave(g, 1)) * s.repeat_interleave(g, 1)
    return q, s, z, g, w


def check(y, x, w, bias=None):
    want = x.double() @ w.double().t()
    if bias is not None:
        want = want + bias.double()
    u = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[x.dtype]
    mag = x.double().abs() @ w.double().abs().t()
    err = (y.double() - want).abs()
    assert y.dtype == x.dtype and y.shape == want.shape
    assert bool((err <= (x.shape[-1] + 2) * 2.0**-24 * mag + 2 * u * want.abs() + 1e-30).all())


def test_the_group_module_exports_the_catalog():
    import importlib
    module = importlib.import_module("xllm_kernel.ops.linear")
    assert [op.name for op in module.OPERATIONS] == ["linear_pack", "linear", "scaled_mm", "linear_dynamic_quant"]
    assert module.linear is linear and module.linear_pack is linear_pack


@pytest.mark.parametrize("scheme", ["bf16", "int8", "int4"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_public_api_matches_the_reference(cpu, scheme, dtype):
    weight, scales, zeros, g, w = canonical(scheme, 70, 256, g=64)
    packed = linear_pack(weight, scales, zeros, scheme, g)
    assert packed.dtype == torch.uint8 and packed.shape[0] == 70
    x = torch.randn(2, 3, 256).to(dtype)
    bias = torch.randn(70)
    check(linear(x, packed, bias), x, w, bias)
    check(linear(x[:, 1], packed), x[:, 1], w)
    torch.library.opcheck(torch.ops.xllm_kernel.linear.default, (x, packed, None))
    torch.library.opcheck(torch.ops.xllm_kernel.linear_pack.default, (weight, scales, zeros, scheme, g))


def test_native_is_bound_and_both_cpu_implementations_are_registered(cpu):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation in ("linear", "linear_pack")}
    assert {"cpu.native.linear", "cpu.torch.linear", "cpu.native.linear_pack", "cpu.torch.linear_pack"} <= names
    assert cpu["linear"].spec.name == "cpu.native.linear"
    assert cpu["linear_pack"].spec.name == "cpu.native.linear_pack"


def test_a_row_alone_has_the_bits_it_has_in_a_batch(cpu):
    weight, scales, zeros, g, _ = canonical("int4", 96, 512, g=128)
    packed = linear_pack(weight, scales, zeros, "int4", g)
    row = torch.randn(1, 512).to(torch.bfloat16)
    alone = linear(row, packed)
    for m in (2, 7, 16, 64, 512):
        x = torch.randn(m, 512).to(torch.bfloat16)
        x[m // 2] = row[0]
        assert torch.equal(linear(x, packed)[m // 2], alone[0]), m


def test_errors_name_the_operation_and_the_argument(cpu):
    weight, scales, zeros, g, _ = canonical("int4", 40, 64, g=32)
    with pytest.raises(RuntimeError, match=r"linear_pack: scheme must be one of f32, bf16, f16, int8, fp8, int4"):
        linear_pack(weight, scales, zeros, "int3", g)
    with pytest.raises(RuntimeError, match=r"linear_pack: group_size must divide K = 64"):
        linear_pack(weight, scales, zeros, "int4", 48)
    q8 = weight.clamp(-8, 7)
    with pytest.raises(RuntimeError, match=r"linear_pack: scales must be \[N\] = \[40\] for scheme int8 with group_size 0"):
        linear_pack(q8, scales, None, "int8", 0)
    with pytest.raises(RuntimeError, match=r"linear_pack: scales must be \[N, K / group_size\] = \[40, 4\] for scheme int8"):
        linear_pack(q8, scales, None, "int8", 16)
    with pytest.raises(RuntimeError, match=r"linear_pack: weight must hold values in \[-8, 7\]"):
        linear_pack(weight + 8, scales, None, "int4", g)
    packed = linear_pack(weight, scales, zeros, "int4", g)
    with pytest.raises(RuntimeError, match=r"linear: input's last dimension must be K = 64"):
        linear(torch.randn(2, 63), packed)
    with pytest.raises(RuntimeError, match=r"linear: packed is not a packed weight"):
        linear(torch.randn(2, 64), torch.zeros_like(packed))
    other = packed.clone()
    name = b"cpu.torch.linear_pack"
    header = other.view(-1)
    start = 8 + 4 * 6 + 8 * 7  # LinearHeader.packer
    header[start:start + 40] = 0
    header[start:start + len(name)] = torch.tensor(list(name), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"linear: packed was packed by cpu.torch.linear_pack"):
        linear(torch.randn(2, 64), other)


class Mlp(torch.nn.Module):
    def __init__(self, packed_up, packed_down):
        super().__init__()
        self.up, self.down = packed_up, packed_down

    def forward(self, x):
        return linear(torch.relu(linear(x, self.up)), self.down)


def test_compiles_without_graph_breaks(cpu):
    up = linear_pack(*canonical("bf16", 48, 32)[:3], "bf16", 0)
    down = linear_pack(*canonical("bf16", 32, 48, seed=1)[:3], "bf16", 0)
    model = Mlp(up, down)
    x = torch.randn(5, 32).to(torch.bfloat16)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
