"""The quantized KV cache from Python: xllm_kernel.ops.reshape_and_cache_quant and
paged_attention_quant through torch.ops.xllm_kernel.* (opcheck: schema with its mutations, fake,
AOT dispatch). int8 rows are per_token_quant's bit for bit, fp8 rows torch's float8_e4m3fn
conversion of x / scale saturated to +-448 (NaN 0x7F); the attention against a float64 reference
over the dequantized pages; errors; torch.compile(fullgraph=True) of a write and an attention
against eager. Every implementation runs through its numerics suite in test/numerics."""

from __future__ import annotations

import pytest
import torch

import xllm_kernel
from xllm_kernel.ops import attention, kv_cache, paged_attention_quant, per_token_quant, reshape_and_cache_quant

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CACHE_DTYPES = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9}
NAN = float("nan")


def as_bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(as_bits(a), as_bits(b)), (a, b)


def fp8_reference(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The contract's q = e4m3(x / scale): a true division in float32, saturating at +-448 (torch's
    conversion gives NaN past it, hence the clamp), every NaN 0x7F (torch keeps a negative NaN's sign)."""
    q = (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return torch.where(torch.isnan(x), torch.tensor(0x7F, dtype=torch.uint8), q.view(torch.uint8)).view(q.dtype)


def sample(tokens, heads, head_size, blocks, block_size, dtype, kind, seed=0, fused=False):
    """Inputs of a write: random key/value (some rows special), caches and int8 scales of random
    bits (so that an untouched element shows), slots with skipped tokens."""
    g = torch.Generator().manual_seed(seed)
    if fused:  # key and value slices of a qkv tensor; caches halves of one [blocks, 2, ...] tensor
        qkv = torch.randn((tokens, 3, heads, head_size), generator=g).to(dtype)
        key, value = qkv[:, 1], qkv[:, 2]
        kv = torch.randint(-128, 128, (blocks, 2, block_size, heads, head_size), generator=g, dtype=torch.int8)
        key_cache, value_cache = kv[:, 0], kv[:, 1]
    else:
        key, value = (torch.randn((tokens, heads, head_size), generator=g).to(dtype) * 3 for _ in range(2))
        key_cache, value_cache = (torch.randint(-128, 128, (blocks, block_size, heads, head_size), generator=g,
                                                dtype=torch.int8) for _ in range(2))
    if kind == "fp8":
        key_cache, value_cache = key_cache.view(torch.float8_e4m3fn), value_cache.view(torch.float8_e4m3fn)
        key_scale, value_scale = torch.tensor([0.0123]), torch.tensor([0.5])
    else:
        key_scale, value_scale = (torch.randn((blocks, block_size, heads), generator=g) for _ in range(2))
    if tokens >= 4:  # special rows: zeros, a NaN (with a negative NaN), infinities, values past fp8's range
        key[0, 0] = 0
        key[1, 0, 1], key[1, 0, 2] = NAN, -NAN
        value[2, -1, 0], value[2, -1, 3] = float("inf"), -float("inf")
        value[3, 0, :4] = torch.tensor([1e4, -1e4, 1e-6, -1e-6]).to(dtype)
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens].clone()
    slots[2::5] = -1
    return key, value, key_cache, value_cache, slots, key_scale, value_scale


def expected(key, value, key_cache, value_cache, slots, key_scale, value_scale, kind):
    """The caches and scales after the write, from per_token_quant (int8) or torch's conversion (fp8)."""
    out = [t.clone() for t in (key_cache, value_cache, key_scale, value_scale)]
    block_size = key_cache.shape[1]
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, block_size)
        for i, rows in enumerate((key[t], value[t])):
            if kind == "int8":
                q, scale = per_token_quant(rows.contiguous(), torch.int8)
                out[i][b, o] = q
                out[2 + i][b, o] = scale[:, 0]
            else:
                out[i][b, o] = fp8_reference(rows, (key_scale, value_scale)[i])
    return out


def test_the_group_modules_export_the_quantized_operations():
    assert [op.name for op in kv_cache.OPERATIONS] == ["reshape_and_cache", "reshape_and_cache_quant"]
    assert [op.name for op in attention.OPERATIONS] == ["paged_attention", "paged_attention_quant"]
    assert kv_cache.RESHAPE_AND_CACHE_QUANT_CONTRACT.schema == (
        "reshape_and_cache_quant(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slot_mapping, Tensor(c!) key_scale, Tensor(d!) value_scale) -> ()")
    assert kv_cache.RESHAPE_AND_CACHE_QUANT_CONTRACT.numerical_mode == "exact"
    assert attention.PAGED_ATTENTION_QUANT_CONTRACT.schema == (
        "paged_attention_quant(Tensor query, Tensor key_cache, Tensor value_cache, Tensor key_scale, "
        "Tensor value_scale, Tensor block_tables, Tensor query_start_loc, Tensor seq_lens, float scale, "
        "float soft_cap, int sliding_window) -> Tensor")
    assert attention.PAGED_ATTENTION_QUANT_CONTRACT.numerical_mode == "fp32_accumulate"
    assert xllm_kernel.ops.reshape_and_cache_quant is reshape_and_cache_quant
    assert xllm_kernel.ops.paged_attention_quant is paged_attention_quant
    assert {"reshape_and_cache_quant", "paged_attention_quant"} <= set(xllm_kernel.ops.__all__)


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape,fused", [((11, 8, 128, 2, 16), False), ((7, 1, 80, 1, 32), True),
                                         ((0, 2, 64, 1, 16), False)], ids=["contiguous", "fused", "zero-tokens"])
def test_public_api_writes_quantized_rows(cpu, kind, dtype, shape, fused):
    args = sample(*shape, dtype, kind, fused=fused)
    want = expected(*args, kind)
    reshape_and_cache_quant(*args)
    key, value, key_cache, value_cache, slots, key_scale, value_scale = args
    for got, ref in zip((key_cache, value_cache, key_scale, value_scale), want):
        assert_bits_equal(got, ref)
    if kind == "fp8":
        assert torch.equal(key_scale, torch.tensor([0.0123])) and torch.equal(value_scale, torch.tensor([0.5]))


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_the_special_rows_follow_the_contract(cpu, kind):
    # A row of zeros, one with NaNs (either sign), infinities and values past fp8's range.
    key, value, key_cache, value_cache, _, key_scale, value_scale = sample(4, 2, 8, 1, 4, torch.float32, kind)
    slots = torch.arange(4)
    reshape_and_cache_quant(key, value, key_cache, value_cache, slots, key_scale, value_scale)
    k, v = key_cache.view(-1, 2, 8), value_cache.view(-1, 2, 8)
    if kind == "int8":
        ks, vs = key_scale.view(-1, 2), value_scale.view(-1, 2)
        assert ks[0, 0] == 0 and torch.all(k[0, 0] == 0)  # zeros: scale 0, q 0
        assert torch.isnan(ks[1, 0]) and torch.all(k[1, 0] == 0)  # a NaN: scale NaN, q 0
        assert vs[2, 1] == float("inf") and torch.all(v[2, 1] == 0)  # an infinity: scale inf, q 0
    else:
        kb, vb = k.view(torch.uint8), v.view(torch.uint8)
        assert torch.all(kb[0, 0] == 0)
        assert kb[1, 0, 1] == 0x7F and kb[1, 0, 2] == 0x7F  # NaN 0x7F whatever its sign
        assert vb[2, 1, 0] == 0x7E and vb[2, 1, 3] == 0xFE  # +-inf saturate to +-448
        assert vb[3, 0, 0] == 0x7E and vb[3, 0, 1] == 0xFE  # past 448 * scale: saturated


def test_errors_name_the_operation_and_the_argument(cpu):
    key, value, key_cache, value_cache, slots, key_scale, value_scale = sample(4, 1, 16, 1, 4, torch.float32, "fp8")
    for bad in (0.0, -1.0, NAN, float("inf")):
        with pytest.raises(RuntimeError, match=r"reshape_and_cache_quant: key_scale .* must be positive and finite"):
            reshape_and_cache_quant(key, value, key_cache, value_cache, slots, torch.tensor([bad]), value_scale)
    with pytest.raises(RuntimeError, match=r"reshape_and_cache_quant: value_cache must have key_cache's dtype"):
        reshape_and_cache_quant(key, value, key_cache, value_cache.view(torch.int8), slots, key_scale, value_scale)
    with pytest.raises(RuntimeError, match=r"reshape_and_cache_quant: key_scale must be \[num_blocks, block_size, "
                                           r"kv_heads\]"):
        reshape_and_cache_quant(key, value, key_cache.view(torch.int8), value_cache.view(torch.int8), slots,
                                key_scale, value_scale)
    with pytest.raises(RuntimeError, match=r"reshape_and_cache_quant: slot_mapping\[1\] = 9 is out of range"):
        reshape_and_cache_quant(key, value, key_cache, value_cache, torch.tensor([0, 9, -1, 2]), key_scale,
                                value_scale)
    with pytest.raises(RuntimeError, match=r"key_cache must be float8_e4m3fn or int8"):
        paged_attention_quant(torch.randn(1, 1, 16), key_cache.float(), value_cache.float(), key_scale, value_scale,
                              torch.zeros(1, 1, dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32),
                              torch.tensor([1], dtype=torch.int32), 0.25)


# ---- paged_attention_quant ----------------------------------------------------------------------

def dequantized(cache: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What paged_attention_quant reads: float(q) * scale in float32."""
    return cache.float() * (scale if scale.dim() < 3 else scale[..., None])


def attention_reference(query, key, value, block_tables, query_start_loc, seq_lens, scale, soft_cap=0.0, window=0):
    """paged_attention in float64 over the dequantized pages, row by row."""
    out = torch.zeros(query.shape, dtype=torch.float64)
    block_size, kv_heads = key.shape[1], key.shape[2]
    group = query.shape[1] // kv_heads
    for s, length in enumerate(seq_lens.tolist()):
        begin, end = query_start_loc[s].item(), query_start_loc[s + 1].item()
        for i, t in enumerate(range(begin, end)):
            pos = length - (end - begin) + i
            lo = max(0, pos - window + 1) if window > 0 else 0
            at = [(block_tables[s, j // block_size].item(), j % block_size) for j in range(lo, pos + 1)]
            k = torch.stack([key[b, o] for b, o in at]).double()
            v = torch.stack([value[b, o] for b, o in at]).double()
            for h in range(query.shape[1]):
                logits = (k[:, h // group] @ query[t, h].double()) * scale
                if soft_cap > 0:
                    logits = soft_cap * torch.tanh(logits / soft_cap)
                out[t, h] = torch.softmax(logits, 0) @ v[:, h // group]
    return out


def quant_batch(kind, lengths, q_lens, q_heads=8, kv_heads=2, head_size=64, block_size=16, dtype=torch.float32,
                seed=0):
    """A batch over shuffled pages written by reshape_and_cache_quant; the rows past each length and
    the spare blocks hold NaN (fp8 0x7F; int8 scale NaN), which must never reach the output."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) for n in lengths]
    num_blocks = sum(need) + 2
    order = torch.randperm(num_blocks, generator=g).tolist()
    shape = (num_blocks, block_size, kv_heads, head_size)
    key_cache = torch.full(shape, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn) if kind == "fp8" else \
        torch.zeros(shape, dtype=torch.int8)
    value_cache = key_cache.clone()
    if kind == "fp8":
        key_scale, value_scale = torch.tensor([0.01]), torch.tensor([0.02])
    else:
        key_scale, value_scale = torch.full(shape[:3], NAN), torch.full(shape[:3], NAN)
    table = torch.full((len(lengths), max(need, default=0) + 1), order[-1], dtype=torch.int32)
    slots, used = [], 0
    for s, n in enumerate(lengths):
        for b in range(need[s]):
            table[s, b] = order[used]
            used += 1
        slots += [table[s, j // block_size].item() * block_size + j % block_size for j in range(n)]
    tokens = len(slots)
    key = (torch.randn(tokens, kv_heads, head_size, generator=g) * 2).to(dtype)
    value = torch.randn(tokens, kv_heads, head_size, generator=g).to(dtype)
    reshape_and_cache_quant(key, value, key_cache, value_cache, torch.tensor(slots), key_scale, value_scale)
    starts = [0]
    for q in q_lens:
        starts.append(starts[-1] + q)
    query = torch.randn(starts[-1], q_heads, head_size, generator=g).to(dtype)
    return (query, key_cache, value_cache, key_scale, value_scale, table, torch.tensor(starts, dtype=torch.int32),
            torch.tensor(lengths, dtype=torch.int32))


CASES = {
    "decode": ([37, 16, 1, 70], [1, 1, 1, 1], {}),
    "prefill": ([19, 33], [19, 33], {}),
    "chunked-mixed": ([50, 40, 9], [12, 1, 9], {}),
    "mqa-tail": ([23, 5], [4, 1], {"q_heads": 3, "kv_heads": 1, "head_size": 33, "block_size": 32}),
}


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("soft_cap,window", [(0.0, 0), (5.0, 7)], ids=["plain", "soft-cap-window"])
def test_attention_matches_the_float64_reference_over_dequantized_pages(cpu, kind, dtype, name, soft_cap, window):
    lengths, q_lens, shape = CASES[name]
    query, key_cache, value_cache, key_scale, value_scale, *meta = quant_batch(kind, lengths, q_lens, dtype=dtype,
                                                                               **shape)
    scale = query.shape[-1] ** -0.5
    out = paged_attention_quant(query, key_cache, value_cache, key_scale, value_scale, *meta, scale, soft_cap, window)
    assert out.dtype == dtype and out.shape == query.shape and out.is_contiguous()
    assert torch.isfinite(out).all()  # the NaN rows past the lengths and in the spare blocks are never read
    want = attention_reference(query, dequantized(key_cache, key_scale), dequantized(value_cache, value_scale), *meta,
                               scale, soft_cap, window)
    torch.testing.assert_close(out.double(), want, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    same = torch.ops.xllm_kernel.paged_attention_quant(query, key_cache, value_cache, key_scale, value_scale, *meta,
                                                        scale, soft_cap, window)
    assert torch.equal(same, out)


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_every_cpu_implementation_is_registered_and_native_is_bound(cpu, kind):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation.endswith("_quant")}
    assert {"cpu.native.reshape_and_cache_quant", "cpu.torch.reshape_and_cache_quant",
            "cpu.native.paged_attention_quant", "cpu.torch.paged_attention_quant"} <= names
    assert cpu["reshape_and_cache_quant"].spec.name == "cpu.native.reshape_and_cache_quant"
    assert cpu["paged_attention_quant"].spec.name == "cpu.native.paged_attention_quant"
    # The bound implementation through the dispatcher writes what the public API does.
    args = sample(30, 4, 64, 6, 8, torch.bfloat16, kind, seed=3)
    want = expected(*args, kind)
    torch.ops.xllm_kernel.reshape_and_cache_quant(*args)
    for got, ref in zip((args[2], args[3], args[5], args[6]), want):
        assert_bits_equal(got, ref)


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_opcheck_and_the_fakes(cpu, kind):
    key, value, key_cache, value_cache, slots, key_scale, value_scale = sample(9, 2, 32, 3, 8, torch.float32, kind)
    key, value = torch.randn_like(key), torch.randn_like(value)  # opcheck compares runs: no NaN rows
    # torch's schema check (SchemaCheckMode) compares tensors with arithmetic float8_e4m3fn lacks on the
    # CPU ("mul_cpu_reduced_float" not implemented): fp8 runs the other checks, int8 the schema's too.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic") if kind == "fp8" else \
        ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.xllm_kernel.reshape_and_cache_quant.default,
                          (key, value, key_cache.clone(), value_cache.clone(), slots, key_scale.clone(),
                           value_scale.clone()), test_utils=utils)
    args = quant_batch(kind, [20, 9], [4, 1], head_size=32)
    torch.library.opcheck(torch.ops.xllm_kernel.paged_attention_quant.default, (*args, 0.125, 0.0, 0),
                          test_utils=utils)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        cache = torch.empty(4, 16, 2, 64, dtype=CACHE_DTYPES[kind])
        scales = torch.empty(1) if kind == "fp8" else torch.empty(4, 16, 2)
        fake = torch.ops.xllm_kernel.paged_attention_quant(torch.empty(5, 8, 64, dtype=torch.bfloat16), cache, cache,
                                                           scales, scales, torch.empty(2, 3, dtype=torch.int32),
                                                           torch.empty(3, dtype=torch.int32),
                                                           torch.empty(2, dtype=torch.int32), 0.125, 0.0, 0)
        assert fake.shape == (5, 8, 64) and fake.dtype == torch.bfloat16
        with pytest.raises(RuntimeError, match="key_cache must be float8_e4m3fn or int8"):
            torch.ops.xllm_kernel.reshape_and_cache_quant(torch.empty(2, 2, 64), torch.empty(2, 2, 64),
                                                          torch.empty(4, 16, 2, 64), torch.empty(4, 16, 2, 64),
                                                          torch.empty(2, dtype=torch.int64), scales, scales)


def step(query, key, value, key_cache, value_cache, slots, key_scale, value_scale, tables, starts, lens):
    """One forward's cache write and attention, as the e2e model calls them."""
    reshape_and_cache_quant(key, value, key_cache, value_cache, slots, key_scale, value_scale)
    return paged_attention_quant(query, key_cache, value_cache, key_scale, value_scale, tables, starts, lens,
                                 0.25, 0.0, 0) * 2


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_compiles_without_graph_breaks_and_matches_eager(cpu, kind):
    g = torch.Generator().manual_seed(4)
    blocks, block_size, heads, head_size = 4, 8, 2, 16
    shape = (blocks, block_size, heads, head_size)
    key, value = (torch.randn(6, heads, head_size, generator=g) for _ in range(2))
    query = torch.randn(6, 4, head_size, generator=g)
    tables = torch.tensor([[1, 0], [3, 2]], dtype=torch.int32)
    slots = torch.tensor([8, 9, 10, 24, 25, 26])  # a prefill of 3 tokens each, in blocks 1 and 3
    starts, lens = torch.tensor([0, 3, 6], dtype=torch.int32), torch.tensor([3, 3], dtype=torch.int32)

    def fresh():
        cache = torch.zeros(shape, dtype=CACHE_DTYPES[kind])
        scales = (torch.tensor([0.01]), torch.tensor([0.02])) if kind == "fp8" else \
            (torch.zeros(shape[:3]), torch.zeros(shape[:3]))
        return cache, cache.clone(), *scales

    eager_state, compiled_state = fresh(), fresh()
    want = step(query, key, value, *eager_state[:2], slots, *eager_state[2:], tables, starts, lens)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    got = compiled(query, key, value, *compiled_state[:2], slots, *compiled_state[2:], tables, starts, lens)
    assert_bits_equal(got, want)
    for a, b in zip(compiled_state, eager_state):  # the in-place writes happened in the compiled graph too
        assert_bits_equal(a, b)
    assert torch.count_nonzero(compiled_state[0].view(torch.uint8)) > 0
