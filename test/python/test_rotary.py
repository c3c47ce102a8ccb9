"""The rotary family from Python: xllm_kernel.ops.rotary_embedding through
torch.ops.xllm_kernel.rotary_embedding (opcheck: schema with its mutations, fake, AOT dispatch), the
selected binding against a float64 reference (NeoX and GPT-J, partial rotary, GQA, fused qkv slices,
no key, zero tokens), errors, and torch.compile(fullgraph=True). Every implementation (not only the
selected one) runs through its numerics suite in test/numerics."""

from __future__ import annotations

import pytest
import torch

import xllm_kernel
from xllm_kernel.ops import rotary, rotary_embedding

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def cos_sin_cache(max_position, rot_dim, dtype=torch.float32):
    freq = 10000.0 ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    angle = torch.arange(max_position, dtype=torch.float64)[:, None] * freq[None, :]
    return torch.cat([angle.cos(), angle.sin()], 1).to(dtype)


def reference(positions, x, head_size, cache, is_neox):
    """float64 [tokens, heads, head_size]; the first rot_dim elements of each head rotated."""
    rot_dim = cache.shape[1]
    half = rot_dim // 2
    out = x.double().reshape(x.shape[0], -1, head_size).clone()
    rows = cache.double()[positions]
    c, s = rows[:, None, :half], rows[:, None, half:]
    rot = out[..., :rot_dim]
    if is_neox:
        x1, x2 = rot[..., :half].clone(), rot[..., half:].clone()
        rot[..., :half], rot[..., half:] = x1 * c - x2 * s, x2 * c + x1 * s
    else:
        x1, x2 = rot[..., 0::2].clone(), rot[..., 1::2].clone()
        rot[..., 0::2], rot[..., 1::2] = x1 * c - x2 * s, x2 * c + x1 * s
    return out


def check(got, want, dtype, head_size, rot_dim, before):
    # The suite's model: float32 evaluation within 4 u32 (|x1 c| + |x2 s|) <= 4 u32 * 2 max|x|,
    # then one rounding (2 u relative).
    atol = 8 * 2.0**-24 * max(before.double().abs().max().item() if before.numel() else 0.0, 1.0)
    got = got.reshape(got.shape[0], -1, head_size)
    torch.testing.assert_close(got.double(), want, atol=atol, rtol=2 * ROUNDOFF[dtype])
    # Past rot_dim: bitwise unchanged.
    assert torch.equal(got[..., rot_dim:], before.reshape(got.shape)[..., rot_dim:])


def test_the_group_module_exports_the_catalog():
    assert [op.name for op in rotary.OPERATIONS] == ["rotary_embedding"]
    assert rotary.ROTARY_EMBEDDING_CONTRACT.schema == (
        "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()")
    assert list(rotary.ROTARY_EMBEDDING_CONTRACT.mutates) == ["query", "key"]
    assert {m.name for m in rotary.MODULES} == {
        "rotary.torch_cpu", "rotary.native_cpu", "rotary.torch_cuda", "rotary.native_cuda"}
    assert xllm_kernel.ops.rotary_embedding is rotary_embedding


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("head_size,rot_dim", [(128, 128), (80, 40), (64, 32)])
@pytest.mark.parametrize("cache_dtype", ["float32", "input"])
def test_separate_query_and_key_match_the_reference(cpu, dtype, is_neox, head_size, rot_dim, cache_dtype):
    g = torch.Generator().manual_seed(0)
    tokens, heads, kv_heads = 5, 4, 2
    positions = torch.randint(0, 1000, (tokens,), generator=g)
    cache = cos_sin_cache(1000, rot_dim, torch.float32 if cache_dtype == "float32" else dtype)
    query = torch.randn(tokens, heads * head_size, generator=g).to(dtype)
    key = torch.randn(tokens, kv_heads, head_size, generator=g).to(dtype)
    q0, k0 = query.clone(), key.clone()
    torch.library.opcheck(torch.ops.xllm_kernel.rotary_embedding.default,
                          (positions, query.clone(), key.clone(), head_size, cache, is_neox))
    rotary_embedding(positions, query, key, head_size, cache, is_neox)
    check(query, reference(positions, q0, head_size, cache, is_neox), dtype, head_size, rot_dim, q0)
    check(key, reference(positions, k0, head_size, cache, is_neox), dtype, head_size, rot_dim, k0)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_fused_qkv_slices_rotate_in_place_and_leave_the_value_part(cpu, is_neox):
    g = torch.Generator().manual_seed(1)
    tokens, heads, kv_heads, head_size = 9, 8, 1, 64
    q_size, kv_size = heads * head_size, kv_heads * head_size
    qkv = torch.randn(tokens, q_size + 2 * kv_size, generator=g).to(torch.bfloat16)
    before = qkv.clone()
    positions = torch.randint(0, 300, (tokens,), generator=g)
    cache = cos_sin_cache(300, head_size)
    query, key = qkv[:, :q_size], qkv[:, q_size:q_size + kv_size]
    rotary_embedding(positions, query, key, head_size, cache, is_neox)
    check(query, reference(positions, before[:, :q_size], head_size, cache, is_neox), torch.bfloat16, head_size,
          head_size, before[:, :q_size])
    check(key, reference(positions, before[:, q_size:q_size + kv_size], head_size, cache, is_neox), torch.bfloat16,
          head_size, head_size, before[:, q_size:q_size + kv_size])
    assert torch.equal(qkv[:, q_size + kv_size:], before[:, q_size + kv_size:])  # the value part


def test_no_key_and_zero_tokens(cpu):
    cache = cos_sin_cache(16, 32)
    query = torch.randn(3, 2, 32)
    q0 = query.clone()
    positions = torch.tensor([0, 5, 15])
    rotary_embedding(positions, query, None, 32, cache, True)
    check(query, reference(positions, q0, 32, cache, True), torch.float32, 32, 32, q0)
    empty = torch.empty(0, 64)
    rotary_embedding(torch.empty(0, dtype=torch.long), empty, torch.empty(0, 32), 32, cache, False)


@pytest.mark.parametrize("impl", ["cpu.native.rotary_embedding", "cpu.torch.rotary_embedding"])
def test_both_cpu_implementations_are_registered(cpu, impl):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation == "rotary_embedding"}
    assert impl in names


def test_native_is_bound(cpu):
    plan = cpu["rotary_embedding"]
    assert plan.spec.name == "cpu.native.rotary_embedding" and plan.detail  # the SIMD target
    g = torch.Generator().manual_seed(2)
    positions = torch.randint(0, 64, (4,), generator=g)
    cache = cos_sin_cache(64, 128)
    query = torch.randn(4, 32 * 128, generator=g).to(torch.bfloat16)
    key = torch.randn(4, 8 * 128, generator=g).to(torch.bfloat16)
    q0, k0 = query.clone(), key.clone()
    plan.function(positions, query, key, 128, cache, True)
    check(query, reference(positions, q0, 128, cache, True), torch.bfloat16, 128, 128, q0)
    check(key, reference(positions, k0, 128, cache, True), torch.bfloat16, 128, 128, k0)


def test_errors_name_the_operation_and_the_argument(cpu):
    cache = cos_sin_cache(8, 64)
    q, k = torch.randn(2, 128), torch.randn(2, 64)
    pos = torch.tensor([0, 1])
    with pytest.raises(RuntimeError, match=r"rotary_embedding: positions must be int64, got int32"):
        rotary_embedding(pos.int(), q, k, 64, cache, True)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: query's last dimension must be a multiple of head_size"):
        rotary_embedding(pos, torch.randn(2, 100), k, 64, cache, True)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: key must have query's dtype float32, got bfloat16"):
        rotary_embedding(pos, q, k.bfloat16(), 64, cache, True)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: cos_sin_cache's last dimension rot_dim must be even"):
        rotary_embedding(pos, q, k, 32, cache, True)
    qkv = torch.randn(2, 256)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: query and key must not overlap"):
        rotary_embedding(pos, qkv[:, :128], qkv[:, 64:128], 64, cache, True)
    before = q.clone()
    with pytest.raises(RuntimeError, match=r"rotary_embedding: positions must be in \[0, max_position = 8\).*"
                                           r"positions\[1\] = 8"):
        rotary_embedding(torch.tensor([3, 8]), q, k, 64, cache, True)
    assert torch.equal(q, before)  # checked before anything is written


class Attention(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_size: int):
        super().__init__()
        self.sizes = (heads * head_size, kv_heads * head_size, kv_heads * head_size)
        self.head_size = head_size
        self.qkv = torch.nn.Linear(hidden, sum(self.sizes), bias=False)
        self.register_buffer("cache", cos_sin_cache(128, head_size))

    def forward(self, positions, x):
        q, k, v = self.qkv(x).split(self.sizes, dim=-1)
        q, k = q.contiguous(), k.contiguous()
        rotary_embedding(positions, q, k, self.head_size, self.cache, True)
        return q.sum(-1) + k.sum(-1) + v.sum(-1)


def test_compiles_without_graph_breaks(cpu):
    torch.manual_seed(0)
    model = Attention(32, 4, 2, 16).eval()
    x, positions = torch.randn(5, 32), torch.arange(5)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(positions, x), model(positions, x))
