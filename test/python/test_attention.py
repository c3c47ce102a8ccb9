"""The attention family from Python: xllm_kernel.ops.paged_attention through
torch.ops.xllm_kernel.paged_attention (opcheck: schema, fake, AOT dispatch), the selected binding
against a float64 reference written here from the pages, errors, and
torch.compile(fullgraph=True). Every implementation runs through its numerics suite in
test/numerics."""

from __future__ import annotations

import math

import pytest
import torch

import xllm_kernel
from xllm_kernel.ops import attention, paged_attention

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9}


def reference(query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, soft_cap=0.0,
              window=0):
    """paged_attention in float64, row by row, reading each position's block from the table."""
    out = torch.zeros(query.shape, dtype=torch.float64)
    block_size, kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = query.shape[1] // kv_heads
    for s, length in enumerate(seq_lens.tolist()):
        begin, end = query_start_loc[s].item(), query_start_loc[s + 1].item()
        for i, t in enumerate(range(begin, end)):
            pos = length - (end - begin) + i
            lo = max(0, pos - window + 1) if window > 0 else 0
            positions = range(lo, pos + 1)
            blocks = [block_tables[s, j // block_size].item() for j in positions]
            k = torch.stack([key_cache[b, j % block_size] for b, j in zip(blocks, positions)]).double()
            v = torch.stack([value_cache[b, j % block_size] for b, j in zip(blocks, positions)]).double()
            for h in range(query.shape[1]):
                logits = (k[:, h // group] @ query[t, h].double()) * scale
                if soft_cap > 0:
                    logits = soft_cap * torch.tanh(logits / soft_cap)
                out[t, h] = torch.softmax(logits, 0) @ v[:, h // group]
    return out


def batch(lengths, q_lens, q_heads=8, kv_heads=2, head_size=64, block_size=16, dtype=torch.float32, seed=0,
          padding_rows=0):
    """A batch over shuffled pages; cache rows past each length and the spare blocks hold NaN."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) for n in lengths]
    num_blocks = sum(need) + 2
    order = torch.randperm(num_blocks, generator=g).tolist()
    key_cache = torch.full((num_blocks, block_size, kv_heads, head_size), float("nan"), dtype=dtype)
    value_cache = torch.full_like(key_cache, float("nan"))
    table = torch.full((len(lengths), max(need, default=0) + 1), order[-1], dtype=torch.int32)
    used = 0
    for s, n in enumerate(lengths):
        for b in range(need[s]):
            block = order[used]
            used += 1
            table[s, b] = block
            rows = min(block_size, n - b * block_size)
            key_cache[block, :rows] = torch.randn(rows, kv_heads, head_size, generator=g).to(dtype)
            value_cache[block, :rows] = torch.randn(rows, kv_heads, head_size, generator=g).to(dtype)
    starts = [0]
    for q in q_lens:
        starts.append(starts[-1] + q)
    query = torch.randn(starts[-1] + padding_rows, q_heads, head_size, generator=g).to(dtype)
    return (query, key_cache, value_cache, table, torch.tensor(starts, dtype=torch.int32),
            torch.tensor(lengths, dtype=torch.int32))


def test_the_group_module_exports_the_catalog():
    assert [op.name for op in attention.OPERATIONS] == ["paged_attention", "paged_attention_quant"]
    assert attention.PAGED_ATTENTION_CONTRACT.schema == (
        "paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
        "Tensor query_start_loc, Tensor seq_lens, float scale, float soft_cap, int sliding_window) -> Tensor")
    assert attention.PAGED_ATTENTION_CONTRACT.numerical_mode == "fp32_accumulate"
    assert {m.name for m in attention.MODULES} == {
        "attention.torch_cpu", "attention.native_cpu", "attention.torch_cuda", "attention.native_cuda"}
    assert xllm_kernel.ops.paged_attention is paged_attention


CASES = {
    "decode": ([37, 16, 1, 70], [1, 1, 1, 1], {}),
    "prefill": ([19, 33], [19, 33], {}),
    "chunked-mixed": ([50, 40, 9], [12, 1, 9], {}),
    "padding": ([0, 21, 0], [0, 3, 0], {"padding_rows": 2}),
    "mqa-tail": ([23, 5], [4, 1], {"q_heads": 3, "kv_heads": 1, "head_size": 33, "block_size": 32}),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("soft_cap,window", [(0.0, 0), (5.0, 0), (0.0, 7)], ids=["plain", "soft-cap", "window"])
def test_public_api_matches_the_reference(cpu, dtype, name, soft_cap, window):
    lengths, q_lens, shape = CASES[name]
    args = batch(lengths, q_lens, dtype=dtype, **shape)
    scale = args[0].shape[-1] ** -0.5
    out = paged_attention(*args, scale, soft_cap, window)
    assert out.dtype == dtype and out.shape == args[0].shape and out.is_contiguous()
    want = reference(*args, scale, soft_cap, window)
    torch.testing.assert_close(out.double(), want, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    assert torch.all(out[sum(q_lens):] == 0)  # padding rows


def test_opcheck_and_the_fake():
    args = batch([20, 9], [4, 1])
    torch.library.opcheck(torch.ops.xllm_kernel.paged_attention.default, (*args, 0.125, 0.0, 0))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fake = torch.ops.xllm_kernel.paged_attention(torch.empty(5, 8, 64), torch.empty(4, 16, 2, 64),
                                                     torch.empty(4, 16, 2, 64), torch.empty(2, 3, dtype=torch.int32),
                                                     torch.empty(3, dtype=torch.int32),
                                                     torch.empty(2, dtype=torch.int32), 0.125, 0.0, 0)
        assert fake.shape == (5, 8, 64)


def test_both_cpu_implementations_are_registered_and_native_is_bound(cpu):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation == "paged_attention"}
    assert {"cpu.native.paged_attention", "cpu.torch.paged_attention"} <= names
    binding = cpu["paged_attention"]
    assert binding.spec.name == "cpu.native.paged_attention" and binding.detail  # the SIMD target
    args = batch([45, 17, 3], [45, 2, 1], q_heads=8, kv_heads=8, head_size=80, dtype=torch.bfloat16, seed=3)
    out = binding.function(*args, 80 ** -0.5, 0.0, 0)
    want = reference(*args, 80 ** -0.5)
    torch.testing.assert_close(out.double(), want, atol=2 ** -6, rtol=2 ** -6)


def test_errors_name_the_operation_and_the_argument(cpu):
    query, key_cache, value_cache, table, qsl, lens = batch([20, 9], [4, 1])
    with pytest.raises(RuntimeError, match=r"paged_attention: block_tables\[1, 0\] must be a block in \[0, 5\) "
                                           r"\(sequence 1 reads it\), got 99"):
        bad = table.clone()
        bad[1, 0] = 99
        paged_attention(query, key_cache, value_cache, bad, qsl, lens, 0.125)
    with pytest.raises(RuntimeError, match=r"paged_attention: seq_lens\[1\] must be in \[1 "):
        paged_attention(query, key_cache, value_cache, table, qsl, torch.tensor([20, 0], dtype=torch.int32), 0.125)
    with pytest.raises(RuntimeError, match=r"paged_attention: query_start_loc must not decrease"):
        paged_attention(query, key_cache, value_cache, table, torch.tensor([0, 5, 4], dtype=torch.int32), lens, 0.125)
    with pytest.raises(RuntimeError, match=r"paged_attention: block_tables must be int32, got int64"):
        paged_attention(query, key_cache, value_cache, table.long(), qsl, lens, 0.125)
    with pytest.raises(RuntimeError, match=r"paged_attention: key_cache must have query's dtype float32, got float16"):
        paged_attention(query, key_cache.half(), value_cache, table, qsl, lens, 0.125)
    with pytest.raises(RuntimeError, match=r"paged_attention: scale must be positive and finite"):
        paged_attention(query, key_cache, value_cache, table, qsl, lens, math.inf)
    with pytest.raises(RuntimeError, match=r"paged_attention: query's heads \(6\) must be a multiple"):
        paged_attention(query[:, :6], key_cache[:, :, :1].expand(-1, -1, 4, -1), value_cache[:, :, :1].expand(
            -1, -1, 4, -1), table, qsl, lens, 0.125)


class Decode(torch.nn.Module):
    """One attention call between two projections, as a decode step has it."""

    def forward(self, query, key_cache, value_cache, table, qsl, lens):
        out = paged_attention(query * 2, key_cache, value_cache, table, qsl, lens, 0.125)
        return out.sum(-1)


def test_compiles_without_graph_breaks(cpu):
    args = batch([20, 9], [1, 1])
    expected = Decode()(*args)
    compiled = torch.compile(Decode(), backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(*args), expected)
