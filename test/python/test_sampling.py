"""The sampling family from Python: xllm_kernel.ops.sample through torch.ops.xllm_kernel.sample
(opcheck: schema, fake, AOT dispatch), every CPU implementation against a float64 reference and a
Philox4x32-10 written here in Python integers (independent of the C++ one), greedy and top_k = 1
as the argmax, batch invariance, the distribution by a chi-squared test (a large vocabulary behind
the slow marker), errors, and torch.compile(fullgraph=True). Every implementation runs through its
numerics suite in test/numerics."""

from __future__ import annotations

import math

import pytest
import torch

import xllm_kernel
from conftest import run_python
from xllm_kernel.ops import sample, sampling

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 of a counter (4 words) under a key (2 words), in Python integers."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def uniform(seed, offset, token):
    s, o = seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF
    word = philox((token >> 2, 0, o & MASK, o >> 32), (s & MASK, s >> 32))[token & 3]
    return ((word >> 9) + 0.5) * 2.0 ** -23


def test_philox_known_answers():
    assert philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox((MASK,) * 4, (MASK, MASK)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert philox((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def allowed(logits, t, k, p, m, seed, offset, margin=1e-4):
    """The tokens a correct implementation may return for one row, in float64 (the suite's rule:
    tokens within a rounding margin of the top-p or min-p threshold may be kept or not)."""
    logits = logits.double().tolist()
    vocab = len(logits)
    order = sorted(range(vocab), key=lambda i: (-logits[i], i))
    if t == 0:
        return {order[0]}
    kk = k if 0 < k < vocab else vocab
    top = logits[order[0]]
    w = [math.exp((logits[i] - top) / t) for i in order[:kk]]
    mass = sum(w)
    status, before = [], 0.0
    for j, x in enumerate(w):
        s = 2
        if j > 0 and p < 1:
            if before > p * mass + margin * mass:
                s = 0
            elif before >= p * mass - margin * mass:
                s = 1
        if j > 0 and m > 0:
            if x < m * (1 - margin):
                s = 0
            elif x < m * (1 + margin):
                s = min(s, 1)
        status.append(s)
        before += x
    score = [w[j] / -math.log(uniform(seed, offset, order[j])) if status[j] else -1.0 for j in range(kk)]
    best = max(score[j] for j in range(kk) if status[j] == 2)
    return {order[j] for j in range(kk) if status[j] and score[j] >= best * (1 - 1e-5)}


def params(batch, t, k, p, m, seed=0):
    return (torch.full((batch,), t), torch.full((batch,), k, dtype=torch.int32), torch.full((batch,), p),
            torch.full((batch,), m), torch.arange(batch, dtype=torch.int64) * 7919 + seed,
            torch.arange(batch, dtype=torch.int64))


def test_contract_modules_and_exports():
    assert sampling.SAMPLE_CONTRACT.schema == (
        "sample(Tensor logits, Tensor temperature, Tensor top_k, Tensor top_p, Tensor min_p, Tensor seeds, "
        "Tensor offsets) -> Tensor")
    assert {m.name for m in sampling.MODULES} == {
        "sampling.torch_cpu", "sampling.native_cpu", "sampling.torch_cuda", "sampling.native_cuda"}
    assert xllm_kernel.ops.sample is sample


def cpu_implementations():
    return sorted(s.name for s in xllm_kernel.kernels("cpu") if s.operation == "sample")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("t,k,p,m", [(0.0, 0, 1.0, 0.0), (1.0, 1, 1.0, 0.0), (0.8, 50, 0.9, 0.0),
                                     (1.3, 0, 0.5, 0.0), (0.7, 100, 1.0, 0.2), (1.0, 10, 0.1, 0.05)])
def test_public_api_returns_an_allowed_token(cpu, dtype, t, k, p, m):
    g = torch.Generator().manual_seed(11)
    logits = (torch.randn(9, 2000, generator=g) * 2).to(dtype)
    args = params(9, t, k, p, m, seed=-5)
    tokens = sample(logits, *args)
    for r in range(9):
        want = allowed(logits[r], t, k, p, m, args[4][r].item(), args[5][r].item())
        assert tokens[r].item() in want, (r, tokens[r].item(), sorted(want)[:5])
    if t == 0 or k == 1:
        assert torch.equal(tokens, logits.float().argmax(1))


def test_both_cpu_implementations_are_registered_native_is_bound_and_torch_agrees(cpu):
    names = {s.name for s in xllm_kernel.kernels("cpu") if s.operation == "sample"}
    assert {"cpu.native.sample", "cpu.torch.sample"} <= names
    binding = cpu["sample"]
    assert binding.spec.name == "cpu.native.sample" and binding.detail  # the SIMD target
    # cpu.torch, selected by an override in a process of its own, gives the same tokens.
    code = """
        import torch, xllm_kernel
        from xllm_kernel.ops import sample
        b = xllm_kernel.initialize(device="cpu", operations=["sample"])
        assert b["sample"].spec.name == "cpu.torch.sample", b["sample"].spec.name
        g = torch.Generator().manual_seed(2)
        logits = torch.randn(12, 3000, generator=g)
        t = torch.linspace(0.0, 1.5, 12)
        print(sample(logits, t, torch.full((12,), 40, dtype=torch.int32), torch.full((12,), 0.9),
                     torch.zeros(12), torch.arange(12), torch.arange(12) * 3).tolist())
    """
    out = run_python(code, env={"XLLM_KERNEL_OVERRIDE_SAMPLE": "cpu.torch.sample"})
    torch_tokens = eval(out.stdout.strip().splitlines()[-1])
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(12, 3000, generator=g)
    native = sample(logits, torch.linspace(0.0, 1.5, 12), torch.full((12,), 40, dtype=torch.int32),
                    torch.full((12,), 0.9), torch.zeros(12), torch.arange(12), torch.arange(12) * 3)
    assert native.tolist() == torch_tokens


def test_public_api_is_batch_invariant_and_deterministic(cpu):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(16, 5000, generator=g)
    args = params(16, 0.9, 40, 0.95, 0.01)
    tokens = sample(logits, *args)
    assert tokens.dtype == torch.int64 and tokens.shape == (16,)
    assert torch.equal(sample(logits, *args), tokens)
    for r in (0, 7, 15):
        alone = sample(logits[r:r + 1], *(a[r:r + 1] for a in args))
        assert alone.item() == tokens[r].item()


def chi2_survival(x, df):
    """P(X >= x), X chi-squared with integer df (closed forms)."""
    h = x / 2
    if df % 2 == 0:
        return math.exp(-h) * sum(h ** i / math.factorial(i) for i in range(df // 2))
    return math.erfc(math.sqrt(h)) + sum(math.exp(-h) * h ** (i - 0.5) / math.gamma(i + 0.5)
                                         for i in range(1, df // 2 + 1))


def frequencies_pass(logits_row, t, k, p, m, draws, chunk=2000):
    """Pearson's chi-squared of `draws` tokens (offsets 0..draws-1) against the renormalized kept
    distribution, at a false-alarm rate of 1e-6; and never a token outside the kept set."""
    vocab = logits_row.numel()
    lv = logits_row.double().tolist()
    order = sorted(range(vocab), key=lambda i: (-lv[i], i))[: (k if 0 < k < vocab else vocab)]
    w = [math.exp((lv[i] - lv[order[0]]) / t) for i in order]
    mass, before, kept = sum(w), 0.0, []
    for i, x in zip(order, w):
        if (before < p * mass or p == 1) and x >= m:
            kept.append((i, x))
        before += x
    total = sum(x for _, x in kept)
    counts = dict.fromkeys((i for i, _ in kept), 0)
    for start in range(0, draws, chunk):
        n = min(chunk, draws - start)
        tokens = sample(logits_row.expand(n, vocab).contiguous(), torch.full((n,), t),
                        torch.full((n,), k, dtype=torch.int32), torch.full((n,), p), torch.full((n,), m),
                        torch.full((n,), 424242, dtype=torch.int64), torch.arange(start, start + n))
        for tok in tokens.tolist():
            assert tok in counts, f"token {tok} is not kept"
            counts[tok] += 1
    stat = sum((counts[i] - draws * x / total) ** 2 / (draws * x / total) for i, x in kept)
    return chi2_survival(stat, len(kept) - 1) > 1e-6


def test_distribution_small_vocabulary(cpu):
    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0, 0.25])
    assert frequencies_pass(logits, 0.9, 6, 0.95, 0.05, 40000)
    assert frequencies_pass(logits, 1.5, 0, 1.0, 0.0, 40000)


@pytest.mark.slow
def test_distribution_large_vocabulary(cpu):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(32000, generator=g)
    logits[torch.randint(32000, (12,), generator=g)] += 4
    assert frequencies_pass(logits, 0.8, 12, 0.9, 0.0, 24000)


def test_errors_name_the_operation_and_the_argument(cpu):
    logits = torch.randn(3, 50)
    t, k, p, m, s, o = params(3, 1.0, 0, 1.0, 0.0)
    with pytest.raises(RuntimeError, match=r"sample: temperature\[1\] must be >= 0 and finite"):
        sample(logits, torch.tensor([1.0, -1.0, 1.0]), k, p, m, s, o)
    with pytest.raises(RuntimeError, match=r"sample: top_p\[0\] must be in \(0, 1\]"):
        sample(logits, t, k, torch.tensor([1.5, 1.0, 1.0]), m, s, o)
    with pytest.raises(RuntimeError, match=r"sample: min_p\[2\] must be in \[0, 1\)"):
        sample(logits, t, k, p, torch.tensor([0.0, 0.0, 1.0]), s, o)
    with pytest.raises(RuntimeError, match=r"sample: logits row 1 must not hold NaN"):
        bad = logits.clone()
        bad[1, 3] = float("nan")
        sample(bad, t, k, p, m, s, o)
    with pytest.raises(RuntimeError, match=r"sample: logits row 0 must hold a logit above -inf"):
        sample(torch.cat([torch.full((1, 50), -math.inf), logits[1:]]), t, k, p, m, s, o)
    with pytest.raises(RuntimeError, match=r"sample: top_k must be int32, got int64"):
        sample(logits, t, k.long(), p, m, s, o)
    with pytest.raises(RuntimeError, match=r"sample: logits must be float32, bfloat16 or float16, got float64"):
        sample(logits.double(), t, k, p, m, s, o)


def test_opcheck_and_the_fake():
    logits = torch.randn(4, 300)
    torch.library.opcheck(torch.ops.xllm_kernel.sample.default, (logits, *params(4, 0.8, 20, 0.9, 0.0)))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fake = torch.ops.xllm_kernel.sample(torch.empty(5, 100), *params(5, 1.0, 0, 1.0, 0.0))
        assert fake.shape == (5,) and fake.dtype == torch.int64


class Head(torch.nn.Module):
    """The end of a decode step: the LM head's logits, then one token per row."""

    def forward(self, hidden, weight, t, k, p, m, s, o):
        return sample(hidden @ weight, t, k, p, m, s, o)


def test_compiles_without_graph_breaks(cpu):
    hidden, weight = torch.randn(4, 64), torch.randn(64, 1000)
    args = params(4, 0.7, 30, 0.9, 0.0)
    expected = Head()(hidden, weight, *args)
    compiled = torch.compile(Head(), backend="eager", fullgraph=True)
    assert torch.equal(compiled(hidden, weight, *args), expected)
