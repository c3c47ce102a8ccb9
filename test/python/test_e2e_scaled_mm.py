"""The end-to-end runner on quantized activations (python -m xllm_kernel.e2e --weights
w8a8-int8|w8a8-fp8|w4a8): the weights made as the issue says, the norms and the activation that feed
qkv, gate_up and down quantizing per token as they write (rms_norm_per_token_quant,
fused_add_rms_norm_per_token_quant, silu_and_mul_per_token_quant) into scaled_mm, o_proj and the LM
head through linear_dynamic_quant; the float64 reference quantizing its inputs with the same
arithmetic (and failing without it), the report's weights section and profile, the sides'
overrides, and bad flags as usage errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (the report schema checks need it)")

from conftest import ROOT, TORCHRUN_VARIABLES, needs_torchrun, python_env
from conftest import explain_run as _explain
from conftest import run_e2e as e2e

from xllm_kernel.e2e import invariance
from xllm_kernel.e2e.config import (UsageError, Workload, check_weights, linear_bytes, model_config, weight_operations,
                                    weight_report, weight_spec)
from xllm_kernel.e2e.model import OPERATIONS, Profiler, Runner, library_ops, load, make_weights
from xllm_kernel.e2e.quantize import quantize, quantize_shards, reference_weights
from xllm_kernel.e2e.reference import quantize_activations
from xllm_kernel.e2e.worker import tolerance_unit, validate
from xllm_kernel.ops import per_token_quant

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "e2e-report.schema.json").read_text())
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SCHEMES = ("w8a8-int8", "w8a8-fp8", "w4a8")
SMALL = ["--preset", "tiny", "--batch", "3", "--prompt-len", "24,9", "--output-len", "6", "--block-size", "8"]
WORK = Workload(prompt_lens=(37, 20, 5), output_len=5, block_size=8, seed=3)


def quantized_runner(cpu, preset, dtype, scheme, lm_head=None, group_size=64, work=WORK):
    """A runner on `scheme`'s packed weights and the reference's model and weights."""
    m = model_config(preset)
    weights = make_weights(m, DTYPES[dtype], seed=0)
    spec = weight_spec(scheme, lm_head, group_size)
    shards = [quantize_shards(m, weights, spec)]
    loaded = load(m, weights, device=torch.device("cpu"), dtype=DTYPES[dtype], linears=shards[0],
                  pack=cpu["linear_pack"].function)
    r = Runner(m, loaded, work, ops=library_ops(cpu, weights=spec), device=torch.device("cpu"), dtype=DTYPES[dtype])
    ref_m, ref = reference_weights(m, weights, shards)
    return r, ref_m, ref


# ---- the weights and the operations ----------------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
def test_weights_are_made_as_the_scheme_says_and_scaled_mm_multiplies_them(cpu, scheme):
    from xllm_kernel.ops.linear import linear_dynamic_quant, linear_pack, scaled_mm

    g = torch.Generator().manual_seed(5)
    w = (torch.randn((160, 256), generator=g) * 0.02).to(torch.bfloat16)
    q = quantize(w, scheme, group_size=64)
    assert q.scheme == scheme and q.group_size == (64 if scheme == "w4a8" else 0)
    if scheme == "w8a8-int8":  # symmetric per channel in [-127, 127]: every row reaches 127
        assert q.weight.dtype == torch.int8 and q.scales.shape == (160,)
        assert torch.equal(q.weight.abs().amax(1), torch.full((160,), 127, dtype=torch.int8))
        assert torch.equal(q.weight, quantize(w, "int8").weight)
    elif scheme == "w4a8":  # int4 symmetric groups, as --weights int4
        assert q.weight.dtype == torch.int8 and q.scales.shape == (160, 4)
        assert q.weight.min() == -8 and q.weight.max() == 7
        assert torch.equal(q.weight, quantize(w, "int4", 64).weight)
    else:  # e4m3 with a scale per channel (vLLM's w8a8-fp8 checkpoints): each row's amax becomes 448
        assert q.weight.dtype == torch.float8_e4m3fn and q.scales.shape == (160,)
        assert torch.equal(q.weight.float().abs().amax(1), torch.full((160,), 448.0))
    W = q.dequantize(0, 160).double()
    assert (W - w.double()).abs().max() <= {"w8a8-int8": 0.5 / 127, "w8a8-fp8": 2 ** -4, "w4a8": 1 / 8}[scheme] \
        * w.abs().max().item() * 1.01
    packed = linear_pack(q.weight, q.scales, None, scheme, q.group_size)
    x = (torch.randn((5, 256), generator=g)).to(torch.bfloat16)
    qdtype = torch.int8 if scheme != "w8a8-fp8" else torch.float8_e4m3fn
    a, scale_a = per_token_quant(x, qdtype)
    y = scaled_mm(a, packed, scale_a, None, None, torch.bfloat16)
    assert torch.equal(y, linear_dynamic_quant(x, packed))  # the fused form, bit for bit
    # The reference's activations are the kernel's, and its product matches within the epilogue's
    # float32 roundings and the output's bfloat16 one.
    xa = quantize_activations(x.double(), {"dtype": "bfloat16", "layers": "int8" if qdtype == torch.int8 else "fp8"},
                              "qkv")
    assert torch.equal(xa, a.double() * scale_a.double())
    ref = xa @ W.T
    assert ((y.double() - ref).abs() <= 2 ** -8 * ref.abs() + 1e-4 * ref.abs().max()).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_the_reference_quantizes_activations_as_per_token_quant(cpu, kind, dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(9, 96, generator=g, dtype=torch.float64) * 3
    x[4] = 0  # a zero row: int8 scale 0, fp8 the smallest scale; q 0 either way
    qdtype = torch.int8 if kind == "int8" else torch.float8_e4m3fn
    spec = {"dtype": str(dtype).removeprefix("torch."), "layers": kind, "lm_head": None}
    q, s = per_token_quant(x.to(dtype), qdtype)
    assert torch.equal(quantize_activations(x, spec, "down"), q.double() * s.double())
    # Sharded (a row-parallel linear's input on each of 3 ranks): each slice of columns by itself.
    parts = [per_token_quant(p.contiguous(), qdtype) for p in x.to(dtype).chunk(3, dim=-1)]
    assert torch.equal(quantize_activations(x, spec, "o_proj", 3),
                       torch.cat([q.double() * s.double() for q, s in parts], dim=-1))
    assert quantize_activations(x, spec, "lm_head") is x and quantize_activations(x, None, "qkv") is x


def test_the_forward_calls_the_quantizing_producers():
    ops = OPERATIONS
    for scheme in SCHEMES:
        got = weight_operations(ops, weight_spec(scheme, None, 64))
        assert got == ("rms_norm_per_token_quant", "fused_add_rms_norm", "fused_add_rms_norm_per_token_quant",
                       "rotary_embedding", "reshape_and_cache", "paged_attention", "silu_and_mul_per_token_quant",
                       "sample", "linear_pack", "scaled_mm", "linear_dynamic_quant")
    assert weight_operations(ops, weight_spec("int8", None, 64)) == ops + ("linear_pack", "linear")
    assert weight_operations(ops, None) == ops
    # Mixed: weight-only layers with a quantized LM head, and the reverse.
    assert weight_operations(ops, weight_spec("int4", "w8a8-fp8", 64)) == ops + ("linear_pack", "linear",
                                                                                  "linear_dynamic_quant")
    mixed = weight_operations(ops, weight_spec("w4a8", "bf16", 64))
    assert mixed[-4:] == ("linear_pack", "linear", "scaled_mm", "linear_dynamic_quant") and "rms_norm" not in mixed


def test_sides_override_every_operation_of_the_quantized_forward():
    from xllm_kernel.e2e.cli import sides

    spec = weight_spec("w8a8-int8", None, 128)
    torch_side = sides("torch", linear=True, weights=spec)[0]
    assert set(torch_side["overrides"]) == set(weight_operations(OPERATIONS, spec))
    assert set(torch_side["overrides"].values()) == {"torch"}
    # A packed weight is accepted only by the implementation that packed it: the others follow.
    (side,) = sides("x=scaled_mm:cpu.native.scaled_mm", linear=True, weights=spec)
    assert side["overrides"] == {"scaled_mm": "cpu.native.scaled_mm", "linear_pack": "cpu.native.linear_pack",
                                 "linear_dynamic_quant": "cpu.native.linear_dynamic_quant"}
    (side,) = sides("x=linear_pack:torch", linear=True, weights=weight_spec("w4a8", "int8", 128))
    assert side["overrides"] == {op: "torch" for op in ("linear_pack", "linear", "scaled_mm", "linear_dynamic_quant")}


# ---- validation against the float64 reference -----------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("preset, scheme, lm_head", [
    ("tiny", "w8a8-int8", None), ("tiny", "w8a8-fp8", None), ("tiny", "w4a8", None),
    ("tiny-qwen2", "w8a8-int8", "bf16"), ("tiny-mistral", "int4", "w8a8-fp8"), ("tiny-qwen2", "w4a8", None),
])
def test_tiny_presets_on_quantized_activations_match_the_float64_reference(cpu, preset, scheme, lm_head, dtype):
    r, ref_m, ref = quantized_runner(cpu, preset, dtype, scheme, lm_head)
    v = validate(ref_m, ref, r, dtype)
    assert v["status"] == "passed" and v["greedy_tokens_equal"] and v["headroom"] <= 1, v
    assert v["activations"]["layers"] == {"w8a8-int8": "int8", "w8a8-fp8": "fp8", "w4a8": "int8",
                                          "int4": None}[scheme]
    assert "the reference quantizes each such linear's input" in v["tolerance"]
    # The tolerance's unit: max(u, u_a) for the coarsest activations the linears take.
    u = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8}[dtype]
    kinds = {k for k in (v["activations"]["layers"], v["activations"]["lm_head"]) if k}
    unit = max([u] + [{"int8": 2.0 ** -7, "fp8": 2.0 ** -6}[k] for k in kinds])
    assert tolerance_unit(dtype, v["activations"]) == unit and v["logit_atol"] >= 16 * unit * 3 ** 0.5
    assert tolerance_unit(dtype, None) == u


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_reference_measures_the_kernels_not_the_quantization(cpu, scheme):
    # float32 on the tiny presets, where no element crosses a quantization boundary the reference's
    # does not: within a few float32 roundings of the reference that quantizes its activations the
    # same way, and hundreds of times that from the one that does not (the quantization error).
    r, ref_m, ref = quantized_runner(cpu, "tiny", "float32", scheme)
    like = validate(ref_m, ref, r, "float32")
    r.activation_spec = lambda: None  # the reference multiplies the unquantized activations
    unlike = validate(ref_m, ref, r, "float32")
    assert like["status"] == "passed" and like["max_abs_logit_error"] < 1e-5, like
    assert unlike["max_abs_logit_error"] > 100 * like["max_abs_logit_error"], unlike
    # Without quantized activations the tolerance is float32's, which the quantization error is far past.
    assert unlike["status"] == "failed" and unlike["logit_atol"] < 1e-4


def test_the_residual_stream_is_the_plain_paths_and_each_producer_runs_once(cpu):
    # Every fused_add_rms_norm_per_token_quant of the forward writes the residual that
    # fused_add_rms_norm writes, and quantizes the row fused_add_rms_norm normalizes, bit for bit.
    r, _, _ = quantized_runner(cpu, "tiny", "bfloat16", "w8a8-int8")
    fused, plain = r.ops.fused_add_rms_norm_per_token_quant, cpu["fused_add_rms_norm"].function
    checked = [0]

    def compared(h, residual, weight, eps, dtype, scale_ub):
        h2, residual2 = h.clone(), residual.clone()
        q, scale = fused(h, residual, weight, eps, dtype, scale_ub)
        plain(h2, residual2, weight, eps)  # residual2 += h2; h2 = the normalized row
        q2, scale2 = per_token_quant(h2, dtype)
        assert torch.equal(residual, residual2) and torch.equal(q, q2) and torch.equal(scale, scale2)
        checked[0] += 1
        return q, scale

    r.generate(dataclasses.replace(r.ops, fused_add_rms_norm_per_token_quant=compared))
    assert checked[0] == (2 * r.m.num_layers - 1) * WORK.output_len
    # The profile of one generation: per layer one quantizing norm before qkv and one before gate_up
    # (the first layer's without a residual), silu_and_mul_per_token_quant before down, the plain
    # fused_add_rms_norm once (the final norm), and no plain rms_norm or silu_and_mul.
    prof = Profiler(torch.device("cpu"))
    r.generate(prof.ops(r.ops))
    steps = WORK.output_len
    layers = r.m.num_layers
    assert prof.calls["rms_norm_per_token_quant"] == steps
    assert prof.calls["fused_add_rms_norm_per_token_quant"] == (2 * layers - 1) * steps
    assert prof.calls["silu_and_mul_per_token_quant"] == layers * steps
    assert prof.calls["fused_add_rms_norm"] == steps
    for role in ("qkv", "gate_up", "down"):
        assert prof.calls[f"scaled_mm.{role}"] == layers * steps
    assert prof.calls["linear_dynamic_quant.o_proj"] == layers * steps
    assert prof.calls["linear_dynamic_quant.lm_head"] == steps
    assert not {"rms_norm", "silu_and_mul"} & set(prof.calls) and not any(k.startswith("linear.") for k in prof.calls)


def test_the_traced_forward_records_the_quantized_steps(cpu):
    # The batch invariance check's tracer (it names the first step whose rows differ): the producers'
    # q and scale, the residual written in place, each scaled_mm and linear_dynamic_quant by role.
    r, _, _ = quantized_runner(cpu, "tiny", "bfloat16", "w4a8", work=Workload(prompt_lens=(7, 3), output_len=2,
                                                                              block_size=8))
    records = invariance._traced(r, 1, 1, 0)
    seen = [(rec["operation"], rec["tensor"], rec["where"]) for rec in records]
    assert ("rms_norm_per_token_quant", "quantized", "layer 0") in seen
    assert ("fused_add_rms_norm_per_token_quant", "residual", "layer 0") in seen
    assert ("fused_add_rms_norm_per_token_quant", "scale", "layer 1") in seen
    assert ("scaled_mm.down", "output", "layer 0") in seen and ("scaled_mm.qkv", "output", "layer 1") in seen
    assert ("linear_dynamic_quant.lm_head", "output", "after the layers") in seen
    assert all(rec["library"] for rec in records if rec["operation"] != "embedding")


# ---- the command line ------------------------------------------------------------------------------

def _check_report(report: dict, scheme: str, sides: list[str]) -> None:
    w = report["weights"]
    m = model_config(report["model"]["name"])
    assert w["scheme"] == w["lm_head_scheme"] == scheme and "scaled_mm" in w["linear"]
    assert set(w["quantization"]) == {scheme} and "activations" in w["quantization"][scheme]
    assert w["group_size"] == (64 if scheme == "w4a8" else None)
    roles = {r["role"]: r for r in w["roles"]}
    h, inter, n = m.hidden_size, m.intermediate_size, m.num_layers
    # Weights + float32 scales + (w8a8-int8, w4a8) int32 sums, one per channel and K group.
    per_channel = {"w8a8-int8": lambda k: k + 4 + 4, "w8a8-fp8": lambda k: k + 4,
                   "w4a8": lambda k: k // 2 + 8 * (k // 64)}[scheme]
    assert roles["down"]["bytes"] == n * h * per_channel(inter) == n * linear_bytes(scheme, h, inter, 64)
    assert roles["lm_head"]["bytes"] == m.vocab_size * per_channel(h)
    assert roles["down"]["operations"] == ["silu_and_mul_per_token_quant", "scaled_mm"]
    assert roles["o_proj"]["operations"] == roles["lm_head"]["operations"] == ["linear_dynamic_quant"]
    assert all(r["activations"] == ("fp8" if scheme == "w8a8-fp8" else "int8") for r in w["roles"])
    assert all(r["weight_bytes"] + r["scale_bytes"] + r["sum_bytes"] == r["bytes"] for r in w["roles"])
    assert (roles["qkv"]["sum_bytes"] > 0) == (scheme != "w8a8-fp8")
    assert w["bytes_per_decode_step"] == sum(r["bytes"] for r in w["roles"])
    assert w == weight_report(m, weight_spec(scheme, None, 64), "bfloat16")
    assert [s["name"] for s in report["sides"]] == sides
    for side in report["sides"]:
        assert side["status"] == "timed", side.get("reason")
        v = side["validation"]
        assert v["status"] == "passed" and v["greedy_tokens_equal"], v
        solution = "native" if side["kind"] == "selected" else "torch"
        impl = side["implementations"]
        assert set(impl) == set(weight_operations(OPERATIONS, weight_spec(scheme, None, 64)))
        for op in ("linear_pack", "scaled_mm", "linear_dynamic_quant", "fused_add_rms_norm_per_token_quant"):
            assert impl[op] == f"cpu.{solution}.{op}"
        assert w["bytes_per_decode_step"] <= side["weights"]["packed_bytes"] < 1.3 * w["bytes_per_decode_step"]
        if side["kind"] == "compile":
            continue
        calls = {r["operation"]: r["calls"] for r in side["profile"]["operations"]}
        assert calls["scaled_mm.qkv"] == calls["scaled_mm.gate_up"] == calls["scaled_mm.down"] == n * 6
        assert calls["linear_dynamic_quant.o_proj"] == n * 6 and calls["linear_dynamic_quant.lm_head"] == 6
        assert calls["rms_norm_per_token_quant"] == 6 and calls["silu_and_mul_per_token_quant"] == n * 6
        assert not any(op.startswith(("linear.", "gemm.")) or op in ("rms_norm", "silu_and_mul") for op in calls)


@pytest.mark.parametrize("scheme, sides", [
    ("w8a8-int8", "selected,torch,compile"),
    ("w8a8-fp8", "selected,torch"),
    ("w4a8", "selected,torch"),
])
def test_weights_flag_runs_every_side_on_quantized_activations(tmp_path, scheme, sides):
    out, md = tmp_path / "w.json", tmp_path / "w.md"
    args = [*SMALL, "--weights", scheme, "--group-size", "64", "--sides", sides, "--output", str(out),
            "--markdown", str(md)]
    if "compile" in sides:
        args.append("--fullgraph")  # the fakes let torch.compile trace the producers and scaled_mm whole
    result = e2e(*args)
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    _check_report(report, scheme, sides.split(","))
    text = md.read_text()
    assert f"weights {scheme}" in text and "scaled_mm.qkv" in text and "linear_dynamic_quant.o_proj" in text
    assert "down: silu_and_mul_per_token_quant → scaled_mm" in text and "16·u·√(layers + 1)" in text
    assert ("int32 weight sums" in text) == (scheme != "w8a8-fp8")


def test_batch_invariance_holds_on_quantized_activations(tmp_path):
    out = tmp_path / "bi.json"
    result = e2e("--preset", "tiny", "--batch", "3", "--prompt-len", "5,9,13", "--output-len", "3", "--block-size", "8",
                 "--weights", "w8a8-int8", "--batch-invariant", "--sides", "selected", "--output", str(out))
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    b = report["batch_invariance"]
    assert b["status"] == "identical" and b["identical_sequences"] == 3, b


@needs_torchrun
def test_two_cpu_ranks_quantize_their_shards_of_the_row_parallel_inputs(tmp_path):
    # o_proj's and down's inputs are quantized per token over each rank's columns; every rank's
    # reference (the whole model) quantizes them per shard too: float32 agrees closely.
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    out = tmp_path / "tp.json"
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                             "-m", "xllm_kernel.e2e", "--distributed", *SMALL, "--preset", "tiny-qwen2", "--dtype",
                             "float32", "--weights", "w8a8-fp8", "--lm-head-weights", "w4a8", "--group-size", "64",
                             "--sides", "selected", "--output", str(out)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, _explain(result)
    aggregate = json.loads(out.read_text())
    jsonschema.validate(aggregate, SCHEMA)
    for r in (0, 1):
        rank = json.loads((tmp_path / f"tp.rank{r}.json").read_text())
        v = rank["sides"][0]["validation"]
        assert v["status"] == "passed" and v["max_abs_logit_error"] < 1e-5 and v["activations"]["shards"] == 2, v
    (side,) = aggregate["sides"]
    assert side["status"] == "timed" and side["tokens_agree"]


@pytest.mark.parametrize("args, message", [
    (["--weights", "w4a8", "--group-size", "12"],
     "--group-size 12 must be a multiple of 8 for --weights w4a8"),
    (["--weights", "int8", "--lm-head-weights", "w4a8", "--group-size", "20"],
     "--group-size 20 must be a multiple of 8 for --lm-head-weights w4a8"),
    (["--weights", "w4a8", "--group-size", "48"],
     "--group-size 48 must divide K of every w4a8 linear: qkv has K = 128"),
    (["--weights", "w8a8-int4"], "--weights: expected one of bf16, f16, f32, int8, fp8, int4, w8a8-int8, w8a8-fp8, "
                                 "w4a8, got 'w8a8-int4'"),
    (["--weights", "w8a8-int8", "--lm-head-weights", "a8"], "--lm-head-weights: expected one of"),
    (["--lm-head-weights", "w8a8-fp8"], "--lm-head-weights w8a8-fp8 needs --weights"),
    (["--weights", "int8", "--sides", "x=scaled_mm:torch"],
     "overrides scaled_mm, which runs only with --weights w8a8-int8, w8a8-fp8, w4a8"),
    (["--sides", "x=linear_dynamic_quant:torch"], "overrides linear_dynamic_quant, which runs only with --weights"),
    (["--weights", "w8a8-int8", "--sides", "x=silu_and_mul:torch"],
     "overrides silu_and_mul, which runs only with no --weights or --weights bf16, f16, f32, int8, fp8, int4"),
    (["--weights", "w8a8-fp8", "--lm-head-weights", "w8a8-fp8", "--sides", "x=linear:torch"],
     "overrides linear, which runs only with --weights (or --lm-head-weights) bf16"),
])
def test_bad_weight_flags_are_usage_errors(args, message):
    result = e2e("--preset", "tiny", *args, timeout=120)
    assert result.returncode == 2, _explain(result)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_scaled_mm_bounds_k(tmp_path):
    # scaled_mm's int32 sums are exact up to K = 65535: a longer down projection is a usage error.
    config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 65600,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = e2e("--config", str(path), "--weights", "w8a8-int8", timeout=120)
    assert result.returncode == 2, _explain(result)
    assert "scaled_mm's int32 sums are exact for K up to 65535, and down has K = 65600" in result.stderr
    m = model_config(config_file=str(path))
    check_weights(m, weight_spec("int8", None, 128))  # linear has no such bound
    check_weights(m, weight_spec("w8a8-fp8", None, 128), 2)  # two ranks halve down's K: 32800, within it
    with pytest.raises(UsageError, match="down has K = 65600"):
        check_weights(m, weight_spec("w4a8", None, 64))
