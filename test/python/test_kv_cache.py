"""The kv_cache family from Python: xllm_kernel.ops.reshape_and_cache through
torch.ops.xllm_kernel.reshape_and_cache (opcheck: schema with its mutations, fake, AOT dispatch),
the selected binding and every CPU implementation against a reference written here (bits compared),
errors, and torch.compile(fullgraph=True). Every implementation runs through its numerics suite in
test/numerics."""

from __future__ import annotations

import pytest
import torch

import xllm_kernel
from xllm_kernel.ops import kv_cache, reshape_and_cache

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def random_bits(shape, dtype, g):
    info = torch.iinfo(BITS[dtype])
    return torch.randint(info.min, info.max, shape, dtype=BITS[dtype], generator=g).view(dtype)


def reference(cache, rows, slots):
    want = cache.clone()
    block_size = cache.shape[1]
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[s // block_size, s % block_size] = rows[t]
    return want


def sample(tokens, heads, head_size, blocks, block_size, dtype, fused=False):
    g = torch.Generator().manual_seed(0)
    if fused:  # key and value slices of qkv; caches halves of one [blocks, 2, ...] tensor
        qkv = random_bits((tokens, 3, heads, head_size), dtype, g)
        kv = random_bits((blocks, 2, block_size, heads, head_size), dtype, g)
        key, value, key_cache, value_cache = qkv[:, 1], qkv[:, 2], kv[:, 0], kv[:, 1]
    else:
        key, value = (random_bits((tokens, heads, head_size), dtype, g) for _ in range(2))
        key_cache, value_cache = (random_bits((blocks, block_size, heads, head_size), dtype, g) for _ in range(2))
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens].clone()
    slots[::4] = -1
    return key, value, key_cache, value_cache, slots


def assert_bits_equal(a, b):
    assert torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


def test_the_group_module_exports_the_catalog():
    assert [op.name for op in kv_cache.OPERATIONS] == ["reshape_and_cache", "reshape_and_cache_quant"]
    assert kv_cache.RESHAPE_AND_CACHE_CONTRACT.schema == (
        "reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slot_mapping) -> ()")
    assert kv_cache.RESHAPE_AND_CACHE_CONTRACT.numerical_mode == "exact"
    assert {m.name for m in kv_cache.MODULES} == {
        "kv_cache.torch_cpu", "kv_cache.native_cpu", "kv_cache.torch_cuda", "kv_cache.native_cuda"}
    assert xllm_kernel.ops.reshape_and_cache is reshape_and_cache


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape,fused", [((9, 8, 128, 2, 16), False), ((7, 1, 80, 1, 32), True),
                                         ((0, 2, 64, 1, 16), False)], ids=["contiguous", "fused", "zero-tokens"])
def test_public_api_writes_the_addressed_slots(cpu, dtype, shape, fused):
    key, value, key_cache, value_cache, slots = sample(*shape, dtype, fused)
    torch.library.opcheck(torch.ops.xllm_kernel.reshape_and_cache.default,
                          (key, value, key_cache.clone(), value_cache.clone(), slots))
    want_k, want_v = reference(key_cache, key, slots), reference(value_cache, value, slots)
    reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert_bits_equal(key_cache, want_k)
    assert_bits_equal(value_cache, want_v)


@pytest.mark.parametrize("solution", ["native", "torch"])
def test_every_cpu_implementation_is_registered_and_native_is_bound(cpu, solution):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation == "reshape_and_cache"}
    assert {"cpu.native.reshape_and_cache", "cpu.torch.reshape_and_cache"} <= names
    binding = cpu["reshape_and_cache"]
    assert binding.spec.name == "cpu.native.reshape_and_cache" and binding.detail  # the SIMD target
    key, value, key_cache, value_cache, slots = sample(300, 8, 128, 30, 16, torch.bfloat16)
    want_k, want_v = reference(key_cache, key, slots), reference(value_cache, value, slots)
    torch.ops.xllm_kernel.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert_bits_equal(key_cache, want_k)
    assert_bits_equal(value_cache, want_v)


def test_errors_name_the_operation_and_the_argument(cpu):
    key, value, key_cache, value_cache, slots = sample(4, 2, 64, 1, 16, torch.float16)
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: slot_mapping\[1\] = 16 is out of range"):
        reshape_and_cache(key, value, key_cache, value_cache, torch.tensor([0, 16, -1, 2]))
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: slot_mapping must not give a non-negative slot twice"):
        reshape_and_cache(key, value, key_cache, value_cache, torch.tensor([3, 1, 3, -1]))
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: slot_mapping must be int64, got int32"):
        reshape_and_cache(key, value, key_cache, value_cache, slots.int())
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: key_cache must have key's dtype float16, got float32"):
        reshape_and_cache(key, value, key_cache.float(), value_cache, slots)
    with pytest.raises(RuntimeError, match=r"reshape_and_cache: key_cache and value_cache must not share an element"):
        reshape_and_cache(key, value, key_cache, key_cache, slots)


class Step(torch.nn.Module):
    """Writes the step's keys and values into the caches, then reads them back through the slots."""

    def forward(self, key, value, key_cache, value_cache, slots):
        reshape_and_cache(key, value, key_cache, value_cache, slots)
        flat = key_cache.flatten(0, 1)
        return flat[slots.clamp(min=0)] + value_cache.flatten(0, 1)[slots.clamp(min=0)]


def test_compiles_without_graph_breaks(cpu):
    key, value, key_cache, value_cache, slots = sample(6, 2, 16, 2, 16, torch.float32)
    key, value = torch.randn_like(key), torch.randn_like(value)
    key_cache, value_cache = torch.zeros_like(key_cache), torch.zeros_like(value_cache)
    slots = torch.tensor([5, 0, 17, 3, 30, 8])
    eager_k, eager_v = key_cache.clone(), value_cache.clone()
    expected = Step()(key, value, eager_k, eager_v, slots)
    compiled = torch.compile(Step(), backend="eager", fullgraph=True)
    got = compiled(key, value, key_cache, value_cache, slots)
    torch.testing.assert_close(got, expected)
    assert torch.equal(key_cache, eager_k) and torch.equal(value_cache, eager_v)
