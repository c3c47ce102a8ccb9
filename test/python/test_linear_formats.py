"""Checkpoint formats into the linear family's canonical form (xllm_kernel.ops.linear.formats, the C++
importers of include/xllm_kernel/ops/linear.h). Each format's tensors are built here by hand from its
documented layout, with plain integer loops (not the importers' unpacking): GPTQ v1 / v2 with and without
act-order, 8-bit GPTQ, AWQ's interleaved words, GGUF Q8_0 / Q4_0 blocks byte by byte, fp8 with
weight_scale_inv. The format's own W (its documented dequantization) must equal the W of the canonical
form exactly, and linear over the packed weight must match it in float64 within the contract's bound."""

from __future__ import annotations

import struct

import pytest
import torch

from xllm_kernel.ops.linear import formats, linear


def signed32(word: int) -> int:
    return word - (1 << 32) if word >= 1 << 31 else word


def pack_words(values, bits, order=None):
    """Python ints (one row of fields, each < 2**bits) into int32 words, field i at bits [i*bits, ...),
    with field i of word c holding values[c * per + order[i]] (order: identity unless given)."""
    per = 32 // bits
    order = order or list(range(per))
    words = []
    for c in range(len(values) // per):
        word = 0
        for i in range(per):
            word |= int(values[c * per + order[i]]) << (i * bits)
        words.append(signed32(word))
    return words


def canonical_w(w: formats.LinearWeight) -> torch.Tensor:
    """W float32 [N, K] of the canonical form, as linear_pack's contract defines it."""
    q = w.weight.float()
    n, k = q.shape
    if w.scheme == "fp8":
        s = w.scales.float().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        return q * s
    g = k if w.group_size in (0, -1) else w.group_size
    s = w.scales.float().reshape(n, -1).repeat_interleave(g, 1)
    if w.zeros is not None:
        q = q - w.zeros.float().repeat_interleave(g, 1)
    return q * s


def check_linear(w: formats.LinearWeight, format_w: torch.Tensor, cpu):
    """linear(permute_input(x), pack()) against x @ format_w^T in float64."""
    packed = w.pack()
    x = torch.randn(5, format_w.shape[1], generator=torch.Generator().manual_seed(1))
    y = linear(w.permute_input(x), packed)
    want = x.double() @ format_w.double().t()
    mag = x.double().abs() @ format_w.double().abs().t()
    bound = (x.shape[1] + 2) * 2.0**-24 * mag + 2.0**-23 * want.abs() + 1e-30
    assert bool(((y.double() - want).abs() <= bound).all())


def gptq_tensors(q, z, s, g_idx, bits, format):
    """GPTQ's qweight [K * bits / 32, N], qzeros [G, N * bits / 32], scales [G, N] from q [N, K], zeros
    and scales [N, G] (zeros stored as z - 1 in v1)."""
    n, k = q.shape
    groups = s.shape[1]
    per = 32 // bits
    qweight = torch.zeros(k // per, n, dtype=torch.int32)
    for col in range(n):
        qweight[:, col] = torch.tensor(pack_words(q[col].tolist(), bits), dtype=torch.int32)
    stored = z - 1 if format == "v1" else z
    qzeros = torch.zeros(groups, n // per, dtype=torch.int32)
    for grp in range(groups):
        qzeros[grp] = torch.tensor(pack_words(stored[:, grp].tolist(), bits), dtype=torch.int32)
    return qweight, qzeros, s.t().contiguous().half()


def format_dequant(q, z, s, g_idx):
    """The GPTQ/AWQ W[n, k] = (q[n, k] - z[n, g_idx[k]]) * s[n, g_idx[k]] in float32."""
    return (q.float() - z.float()[:, g_idx]) * s.half().float()[:, g_idx]


@pytest.mark.parametrize("format", ["v1", "v2"])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_int4(cpu, format, act_order):
    gen = torch.Generator().manual_seed(3)
    n, k, g = 24, 128, 32
    q = torch.randint(0, 16, (n, k), generator=gen)
    z = torch.randint(1, 16, (n, k // g), generator=gen)  # v1 cannot store the zero 0
    s = torch.rand(n, k // g, generator=gen) * 0.02 + 0.005
    if act_order:  # GPTQ's desc_act: channel k belongs to group rank(k) // g
        rank = torch.randperm(k, generator=gen)
        g_idx = (rank // g).to(torch.int32)
    else:
        g_idx = torch.arange(k, dtype=torch.int32) // g
    qweight, qzeros, scales = gptq_tensors(q, z, s, g_idx, 4, format)
    w = formats.from_gptq(qweight, qzeros, scales, g_idx if act_order else None, bits=4, format=format)
    assert w.scheme == "int4" and w.group_size == g and w.zeros is not None
    want = format_dequant(q, z, s, g_idx.long())
    if act_order:
        perm = w.input_permutation
        assert perm is not None and sorted(perm.tolist()) == list(range(k))
        assert torch.equal(canonical_w(w), want[:, perm])
    else:
        assert w.input_permutation is None
        assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)


def test_gptq_symmetric_zeros_become_the_symmetric_form(cpu):
    gen = torch.Generator().manual_seed(4)
    n, k, g = 16, 64, 64
    q = torch.randint(0, 16, (n, k), generator=gen)
    z = torch.full((n, 1), 8)
    s = torch.rand(n, 1, generator=gen) * 0.02 + 0.005
    qweight, qzeros, scales = gptq_tensors(q, z, s, None, 4, "v1")
    w = formats.from_gptq(qweight, qzeros, scales, bits=4, format="v1")
    assert w.zeros is None and int(w.weight.min()) >= -8 and int(w.weight.max()) <= 7
    want = format_dequant(q, z, s, torch.zeros(k, dtype=torch.long))
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)


@pytest.mark.parametrize("groups", [1, 2])
def test_gptq_8bit_symmetric_is_int8(cpu, groups):
    gen = torch.Generator().manual_seed(5)
    n, k = 8, 64
    q = torch.randint(0, 256, (n, k), generator=gen)
    z = torch.full((n, groups), 128)
    s = torch.rand(n, groups, generator=gen) * 0.02 + 0.005
    qweight, qzeros, scales = gptq_tensors(q, z, s, None, 8, "v2")
    w = formats.from_gptq(qweight, qzeros, scales, bits=8, format="v2")
    assert w.scheme == "int8" and w.group_size == (0 if groups == 1 else k // groups)
    want = format_dequant(q, z, s, torch.arange(k) // (k // groups))
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)


def test_gptq_errors():
    gen = torch.Generator().manual_seed(6)
    q = torch.randint(0, 16, (8, 32), generator=gen)
    s = torch.rand(8, 1, generator=gen)
    qweight, qzeros, scales = gptq_tensors(q, torch.full((8, 1), 8), s, None, 4, "v2")
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gptq: format must be 'v1' .* got 'v3'"):
        formats.from_gptq(qweight, qzeros, scales, format="v3")
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gptq: bits must be 4 or 8, got 3"):
        formats.from_gptq(qweight, qzeros, scales, bits=3)
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gptq: qweight must be int32, got float32"):
        formats.from_gptq(qweight.float(), qzeros, scales)
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gptq: scales must be \[G, N\] with N = 8"):
        formats.from_gptq(qweight, qzeros, scales[:, :4])
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gptq: g_idx must be \[K\] = \[32\], got shape \[31\]"):
        formats.from_gptq(qweight, qzeros, scales, torch.zeros(31, dtype=torch.int32))
    # v1 stores zero - 1: a stored 15 would be the zero 16.
    _, qzeros_v1, _ = gptq_tensors(q, torch.zeros(8, 1, dtype=torch.long), s, None, 4, "v2")
    qzeros_v1 = torch.full_like(qzeros_v1, signed32(0xFFFFFFFF))
    with pytest.raises(RuntimeError, match=r"a v1 zero field of 15 stands for the zero 16"):
        formats.from_gptq(qweight, qzeros_v1, scales, format="v1")
    # Act-order groups must each hold K / G channels.
    with pytest.raises(RuntimeError, match=r"g_idx must give every group K / G = 16 input channels"):
        qw2, qz2, sc2 = gptq_tensors(q, torch.full((8, 2), 8), torch.rand(8, 2), None, 4, "v2")
        formats.from_gptq(qw2, qz2, sc2, torch.tensor([0] * 20 + [1] * 12, dtype=torch.int32)[torch.randperm(32)])


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # field i of a word holds column 8 c + AWQ_ORDER[i]


def test_awq(cpu):
    gen = torch.Generator().manual_seed(7)
    n, k, g = 32, 128, 64
    q = torch.randint(0, 16, (n, k), generator=gen)
    z = torch.randint(0, 16, (n, k // g), generator=gen)
    s = torch.rand(n, k // g, generator=gen) * 0.02 + 0.005
    qweight = torch.tensor([pack_words(q[:, row].tolist(), 4, AWQ_ORDER) for row in range(k)], dtype=torch.int32)
    qzeros = torch.tensor([pack_words(z[:, grp].tolist(), 4, AWQ_ORDER) for grp in range(k // g)], dtype=torch.int32)
    assert qweight.shape == (k, n // 8) and qzeros.shape == (k // g, n // 8)
    w = formats.from_awq(qweight, qzeros, s.t().contiguous().half())
    assert w.scheme == "int4" and w.group_size == g and w.input_permutation is None
    want = format_dequant(q, z, s, torch.arange(k) // g)
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)
    with pytest.raises(RuntimeError, match=r"linear_weight_from_awq: qzeros must be \[G, N / 8\] = \[2, 4\]"):
        formats.from_awq(qweight, qzeros[:, :3], s.t().contiguous().half())


def gguf_bytes(rows):
    return torch.frombuffer(bytearray(b"".join(rows)), dtype=torch.uint8)


def test_gguf_q8_0(cpu):
    gen = torch.Generator().manual_seed(8)
    n, k = 6, 96
    d = (torch.rand(n, k // 32, generator=gen) * 0.02 + 0.001).half()
    q = torch.randint(-128, 128, (n, k), generator=gen)
    blocks = []
    for row in range(n):
        for b in range(k // 32):
            blocks.append(struct.pack("<e32b", float(d[row, b]), *q[row, 32 * b:32 * b + 32].tolist()))
    data = gguf_bytes(blocks).view(n, -1)
    assert data.shape == (n, k // 32 * 34)
    w = formats.from_gguf(data, "Q8_0", (n, k))
    assert w.scheme == "int8" and w.group_size == 32
    want = q.float() * d.float().repeat_interleave(32, 1)
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)


def test_gguf_q4_0(cpu):
    gen = torch.Generator().manual_seed(9)
    n, k = 5, 64
    d = (torch.rand(n, k // 32, generator=gen) * 0.02 + 0.001).half()
    q = torch.randint(0, 16, (n, k), generator=gen)
    blocks = []
    for row in range(n):
        for b in range(k // 32):
            qs = q[row, 32 * b:32 * b + 32].tolist()
            packed = [qs[j] | (qs[j + 16] << 4) for j in range(16)]
            blocks.append(struct.pack("<e16B", float(d[row, b]), *packed))
    data = gguf_bytes(blocks)  # flat, as a file's tensor data
    w = formats.from_gguf(data, "Q4_0", (n, k))
    assert w.scheme == "int4" and w.group_size == 32 and w.zeros is None
    want = (q.float() - 8) * d.float().repeat_interleave(32, 1)
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gguf: type must be Q8_0 or Q4_0, got 'Q4_K'"):
        formats.from_gguf(data, "Q4_K", (n, k))
    with pytest.raises(RuntimeError, match=r"linear_weight_from_gguf: data must hold N \* K / 32 \* 18 = 180 bytes"):
        formats.from_gguf(data[:-1], "Q4_0", (n, k))
    with pytest.raises(RuntimeError, match=r"K a multiple of 32 \(Q4_0 blocks\), got \[5, 48\]"):
        formats.from_gguf(data, "Q4_0", (n, 48))


def test_fp8_blocks(cpu):
    gen = torch.Generator().manual_seed(10)
    n, k = 200, 256
    weight = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    scale_inv = torch.rand(2, 2, generator=gen) * 0.02 + 0.001
    w = formats.from_fp8_blocks(weight, scale_inv)
    assert w.scheme == "fp8"
    want = torch.empty(n, k)
    for r in range(n):
        for c in range(k):
            want[r, c] = float(weight[r, c].float()) * float(scale_inv[r // 128, c // 128])
    assert torch.equal(canonical_w(w), want)
    check_linear(w, want, cpu)
    with pytest.raises(RuntimeError, match=r"weight_scale_inv must be \[ceil\(N / 128\), ceil\(K / 128\)\] .* = \[2, 2\], "
                                           r"got shape \[1, 2\]"):
        formats.from_fp8_blocks(weight, scale_inv[:1])
