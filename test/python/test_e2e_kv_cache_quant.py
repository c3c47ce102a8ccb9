"""The end-to-end runner with a quantized KV cache (python -m xllm_kernel.e2e --kv-cache-dtype fp8|int8):
the model writes with reshape_and_cache_quant and reads with paged_attention_quant, the float64
reference puts its K/V through the same quantization (and would not pass without it), fp8's scales
are calibrated once and reused, the report gives the cache's dtype and the KV bytes a decode step
reads, batch invariance holds, and bad flags are usage errors."""

from __future__ import annotations

import json

import pytest
import torch

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (the report schema checks need it)")

import subprocess
import sys

from conftest import ROOT, TORCHRUN_VARIABLES, needs_torchrun, python_env
from conftest import explain_run as _explain
from conftest import run_e2e as e2e

from xllm_kernel.e2e.config import (UsageError, Workload, kv_cache_operations, kv_cache_report, model_config,
                                    normalize_kv_cache_dtype)
from xllm_kernel.e2e.model import OPERATIONS, Runner, library_ops, make_weights
from xllm_kernel.e2e.reference import kv_round_trip, reference_logits
from xllm_kernel.e2e.worker import validate
from xllm_kernel.ops import per_token_quant, reshape_and_cache_quant

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "e2e-report.schema.json").read_text())
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SMALL = ["--preset", "tiny", "--batch", "3", "--prompt-len", "24,9", "--output-len", "6", "--block-size", "8"]
WORK = Workload(prompt_lens=(37, 20, 5), output_len=5, block_size=8, seed=3)


def runner(cpu, preset, dtype, kv, work=WORK, weights=None, **kwargs):
    m = model_config(preset)
    weights = weights if weights is not None else make_weights(m, DTYPES[dtype], seed=0)
    return m, weights, Runner(m, weights, work, ops=library_ops(cpu, kv_cache_dtype=kv), device=torch.device("cpu"),
                              dtype=DTYPES[dtype], kv_cache_dtype=kv, **kwargs)


def test_the_quantized_cache_swaps_the_write_and_the_attention():
    assert kv_cache_operations(OPERATIONS, "auto") == OPERATIONS
    for kv in ("fp8", "int8"):
        ops = kv_cache_operations(OPERATIONS, kv)
        assert ops == tuple({"reshape_and_cache": "reshape_and_cache_quant",
                             "paged_attention": "paged_attention_quant"}.get(op, op) for op in OPERATIONS)


@pytest.mark.parametrize("kv", ["fp8", "int8"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2", "tiny-mistral"])
def test_tiny_presets_with_a_quantized_cache_match_the_float64_reference(cpu, preset, dtype, kv):
    m, weights, r = runner(cpu, preset, dtype, kv)
    storage = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}[kv]
    assert all(c.dtype == storage for c in (*r.key_caches, *r.value_caches))
    v = validate(m, weights, r, dtype)
    assert v["status"] == "passed" and v["greedy_tokens_equal"], v
    if kv == "int8":  # a scale per (slot, KV head), written with the rows
        assert r.key_scales[0].shape == r.key_caches[0].shape[:3] and r.key_scales[0].abs().sum() > 0
        assert r.kv_cache_scales() is None and r.kv_cache_spec() == {"dtype": "int8"}
    else:  # one per layer, calibrated on the first prefill
        k, v_scales = r.kv_cache_scales()
        assert len(k) == len(v_scales) == m.num_layers and all(0 < x < 1 for x in k + v_scales)
        assert r.kv_cache_spec() == {"dtype": "fp8", "k_scales": k, "v_scales": v_scales}


@pytest.mark.parametrize("kv", ["fp8", "int8"])
def test_the_reference_measures_the_kernels_not_the_quantization(cpu, kv):
    # float32: the runner's logits are within a few float32 roundings of the reference that quantizes
    # its K/V the same way, and far from the one that does not (the quantization error shows).
    m, weights, r = runner(cpu, "tiny", "float32", kv)
    gen = r.generate(record_logits=True)
    got = torch.stack([step[0] for step in gen.logits]).to(torch.float64)
    prompt = r.prompts()[0]
    like = (got - reference_logits(m, weights, prompt, gen.tokens[0], kv_cache=r.kv_cache_spec())).abs().max()
    plain = (got - reference_logits(m, weights, prompt, gen.tokens[0])).abs().max()
    assert like < 1e-5 and plain > 20 * like, (like, plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reference_quantizes_as_the_cache_does(cpu, dtype):
    # kv_round_trip's arithmetic is the contract's: the rows the cache holds, dequantized, bit for bit.
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(12, 2, 32, generator=g) * 0.3).to(dtype)
    slots = torch.arange(12)
    int8_cache, fp8_cache = torch.zeros(3, 4, 2, 32, dtype=torch.int8), torch.zeros(3, 4, 2, 32,
                                                                                   dtype=torch.float8_e4m3fn)
    scales = [torch.zeros(3, 4, 2) for _ in range(2)]
    reshape_and_cache_quant(x, x, int8_cache, int8_cache.clone(), slots, *scales)
    got = kv_round_trip(x.double(), {"dtype": "int8"}, "k", 0)
    q, s = per_token_quant(x, torch.int8)
    assert torch.equal(int8_cache.view(12, 2, 32), q) and torch.equal(scales[0].view(12, 2, 1), s)
    assert torch.equal(got, (q.float() * s).double())
    k_scale = torch.tensor([0.0031])
    reshape_and_cache_quant(x, x, fp8_cache, fp8_cache.clone(), slots, k_scale, torch.tensor([1.0]))
    got = kv_round_trip(x.double(), {"dtype": "fp8", "k_scales": [k_scale.item()]}, "k", 0)
    assert torch.equal(got, (fp8_cache.view(12, 2, 32).float() * k_scale).double())


def test_fp8_scales_are_calibrated_once_then_given(cpu):
    m, weights, first = runner(cpu, "tiny", "bfloat16", "fp8")
    gen = first.generate(record_logits=True)
    scales = first.kv_cache_scales()
    assert first.kv_cache_scales() == scales  # the decode steps keep them
    # A runner given them computes the same bits (no second calibration), whatever its workload.
    _, _, again = runner(cpu, "tiny", "bfloat16", "fp8", weights=weights, kv_scales=scales)
    gen2 = again.generate(record_logits=True)
    assert again.kv_cache_scales() == scales
    assert torch.equal(gen.tokens, gen2.tokens) and all(torch.equal(a, b) for a, b in zip(gen.logits, gen2.logits))
    # The calibration: each layer's scale is amax / 448 over the first prefill's K (V) rows, so that
    # the largest of them is stored as +-448 (the decode steps' rows saturate there at most).
    for cache in (*first.key_caches, *first.value_caches):
        assert cache.float().abs().max().item() == 448.0
    with pytest.raises(ValueError, match="kv_scales must give 2 key and value scales"):
        runner(cpu, "tiny", "bfloat16", "fp8", weights=weights, kv_scales=([1.0], [1.0]))


@pytest.mark.parametrize("kv", ["fp8", "int8"])
def test_synthetic_prefill_writes_the_same_rows_alone_as_in_the_batch(cpu, kv):
    # The random rows go through the cache's write; fp8's scales come from the whole batch's rows,
    # so that a sequence alone gets the bits it has in the batch.
    work = Workload(prompt_lens=(21, 6), output_len=3, block_size=8, seed=5, synthetic_prefill=True)
    m, weights, batch = runner(cpu, "tiny", "bfloat16", kv, work=work)
    _, _, alone = runner(cpu, "tiny", "bfloat16", kv, work=work, weights=weights, rows=(1,))
    batch.fill_cache()
    alone.fill_cache()
    assert batch.kv_cache_scales() == alone.kv_cache_scales()
    slots = alone._slots(0, torch.arange(6))
    for mine, theirs in zip((*alone.key_caches, *alone.value_caches), (*batch.key_caches, *batch.value_caches)):
        a, b = (c.view(-1, m.num_kv_heads, m.head_dim).index_select(0, slots).view(torch.uint8) for c in (mine, theirs))
        assert torch.equal(a, b) and a.any()


def _check_kv_report(report: dict, kv: str) -> None:
    m = model_config("tiny")
    work = Workload(prompt_lens=(24, 9, 24), output_len=6, block_size=8)
    k = report["kv_cache"]
    assert k["dtype"] == kv and k["storage_dtype"] == {"fp8": "float8_e4m3fn", "int8": "int8"}[kv]
    assert k["write"] == "reshape_and_cache_quant" and k["attention"] == "paged_attention_quant"
    # context x kv_heads x head_dim x 1 byte x 2 per layer and sequence, the mean over the 5 decode steps
    # (contexts prompt + 1 .. prompt + 5), plus the scales.
    contexts = sum(p + 3 for p in work.prompt_lens)
    payload = m.num_layers * contexts * m.num_kv_heads * m.head_dim * 2
    scales = 2 * 4 * m.num_layers if kv == "fp8" else m.num_layers * contexts * m.num_kv_heads * 4 * 2
    assert k["scale_bytes_per_decode_step"] == scales and k["bytes_per_decode_step"] == payload + scales
    bf16 = kv_cache_report(m, work, "bfloat16", "auto")["bytes_per_decode_step"]
    assert bf16 == 2 * payload and 0.5 < k["bytes_per_decode_step"] / bf16 < 0.6
    for side in report["sides"]:
        assert side["status"] == "timed" and side["validation"]["status"] == "passed", side.get("reason")
        solution = "native" if side["kind"] == "selected" else "torch"
        impl = side["implementations"]
        assert impl["reshape_and_cache_quant"] == f"cpu.{solution}.reshape_and_cache_quant"
        assert impl["paged_attention_quant"] == f"cpu.{solution}.paged_attention_quant"
        assert "reshape_and_cache" not in impl and "paged_attention" not in impl
        t = side["timing"]
        assert t["decode_kv_gb_per_s"] == pytest.approx(k["bytes_per_decode_step"] * 5 / t["decode_seconds"] / 1e9)
        if side["kind"] != "compile":
            calls = {r["operation"]: r["calls"] for r in side["profile"]["operations"]}
            assert calls["paged_attention_quant"] == calls["reshape_and_cache_quant"] == m.num_layers * 6
        if kv == "fp8":
            scales = side["kv_cache"]
            assert len(scales["k_scales"]) == len(scales["v_scales"]) == m.num_layers
        assert side["tokens"] == report["sides"][0]["tokens"]


@pytest.mark.parametrize("kv, sides", [("fp8", "selected,torch,compile"), ("int8", "selected,torch")])
def test_quantized_cache_runs_validate_and_report_the_kv_bytes(tmp_path, kv, sides):
    out, md = tmp_path / "kv.json", tmp_path / "kv.md"
    args = [*SMALL, "--kv-cache-dtype", kv, "--sides", sides, "--output", str(out), "--markdown", str(md)]
    if "compile" in sides:
        args.append("--fullgraph")  # the fakes let torch.compile trace both quantized operations whole
    result = e2e(*args)
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    _check_kv_report(report, kv)
    text = md.read_text()
    assert f"KV cache: {kv} (" in text and "reshape_and_cache_quant" in text and "KV read per decode step" in text
    broken = dict(report, kv_cache=dict(report["kv_cache"], write="reshape_and_cache"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_the_plain_cache_may_be_named_by_its_dtype():
    """--kv-cache-dtype bf16 (the issue's spelling) is auto where --dtype is bfloat16, and a usage error naming
    both flags where it is not."""
    assert normalize_kv_cache_dtype("bf16", "bfloat16") == "auto"
    assert normalize_kv_cache_dtype("f32", "float32") == "auto"
    assert normalize_kv_cache_dtype("int8", "float32") == "int8"
    with pytest.raises(UsageError, match="--kv-cache-dtype f16: the plain cache holds the --dtype values, and --dtype "
                                         "is bfloat16"):
        normalize_kv_cache_dtype("f16", "bfloat16")


def test_the_default_cache_reports_its_dtype_and_bytes(cpu):
    m = model_config("tiny")
    work = Workload(prompt_lens=(24, 9, 24), output_len=6, block_size=8)
    auto = kv_cache_report(m, work, "float32", "auto")
    assert auto["storage_dtype"] == "float32" and auto["element_bytes"] == 4
    assert auto["scale_bytes_per_decode_step"] == 0
    assert auto["bytes_per_decode_step"] == m.num_layers * sum(p + 3 for p in (24, 9, 24)) * 2 * 32 * 4 * 2
    # Tensor parallel: each rank reads its KV heads' share.
    assert kv_cache_report(m, work, "float32", "int8", 2)["bytes_per_decode_step"] * 2 == \
        kv_cache_report(m, work, "float32", "int8")["bytes_per_decode_step"]


@pytest.mark.parametrize("kv", ["int8", "fp8"])
def test_batch_invariance_holds_with_a_quantized_cache(tmp_path, kv):
    out = tmp_path / "bi.json"
    result = e2e("--preset", "tiny", "--batch", "3", "--prompt-len", "5,9,13", "--output-len", "3", "--block-size", "8",
                 "--batch-invariant", "--sides", "selected", "--kv-cache-dtype", kv, "--output", str(out))
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    b = report["batch_invariance"]
    assert b["status"] == "identical" and b["identical_sequences"] == 3, b
    assert b["implementations_changed"]["paged_attention_quant"]["invariant"] == \
        "cpu.native.paged_attention_quant.batch_invariant"


@needs_torchrun
def test_two_cpu_ranks_share_one_fp8_scale_per_layer(tmp_path):
    # Each rank calibrates on its KV heads; the amax is the max over the ranks, so that every rank's
    # reference (the whole model) quantizes with the scales the ranks used: float32 agrees closely.
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    out = tmp_path / "tp.json"
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                             "-m", "xllm_kernel.e2e", "--distributed", *SMALL, "--preset", "tiny-qwen2", "--dtype",
                             "float32", "--kv-cache-dtype", "fp8", "--sides", "selected", "--output", str(out)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, _explain(result)
    aggregate = json.loads(out.read_text())
    jsonschema.validate(aggregate, SCHEMA)
    ranks = [json.loads((tmp_path / f"tp.rank{r}.json").read_text()) for r in (0, 1)]
    scales = [rank["sides"][0]["kv_cache"] for rank in ranks]
    assert scales[0]["k_scales"] == scales[1]["k_scales"] and scales[0]["v_scales"] == scales[1]["v_scales"]
    for rank in ranks:
        jsonschema.validate(rank, SCHEMA)
        v = rank["sides"][0]["validation"]
        assert v["status"] == "passed" and v["max_abs_logit_error"] < 1e-5, v
    assert aggregate["kv_cache"]["bytes_per_decode_step"] == 2 * ranks[0]["kv_cache"]["bytes_per_decode_step"]


@pytest.mark.parametrize("args, message", [
    (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype: expected one of auto, fp8, int8 (or bf16, f16, f32: auto "
                                  "spelled as the --dtype), got 'fp4'"),
    (["--kv-cache-dtype", "bf16", "--dtype", "float32"], "--kv-cache-dtype bf16: the plain cache holds the --dtype "
                                                          "values, and --dtype is float32"),
    (["--kv-cache-dtype", "int8", "--sides", "x=paged_attention:torch"],
     "overrides paged_attention, which runs only with --kv-cache-dtype auto"),
    (["--sides", "x=reshape_and_cache_quant:torch"],
     "overrides reshape_and_cache_quant, which runs only with --kv-cache-dtype fp8 or int8"),
])
def test_bad_kv_cache_flags_are_usage_errors(args, message):
    result = e2e("--preset", "tiny", *args, timeout=120)
    assert result.returncode == 2, _explain(result)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_custom_side_may_override_the_quantized_operations():
    from xllm_kernel.e2e.cli import sides

    (side,) = sides("attn=paged_attention_quant:torch", kv_cache_dtype="fp8")
    assert side["overrides"] == {"paged_attention_quant": "torch"}
    torch_side = sides("torch", kv_cache_dtype="int8")[0]
    assert torch_side["overrides"]["reshape_and_cache_quant"] == "torch"
    assert "reshape_and_cache" not in torch_side["overrides"]
