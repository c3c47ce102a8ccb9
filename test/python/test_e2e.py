"""The end-to-end runner (python -m xllm_kernel.e2e): the tiny presets against the float64 reference
and against transformers' models with the same random weights, tensor parallel over two CPU ranks
equal to one rank, --weights (the linears through the library's linear on quantized, packed
weights), bad configurations as usage errors, the report schema, and the profile."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest
import torch

# Optional (the guide's command runs without it): the schema checks skip with the reason.
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (the report schema checks need it)")

from conftest import ROOT, TORCHRUN_VARIABLES, python_env
from conftest import explain_run as _explain
from conftest import run_e2e as e2e

from xllm_kernel.e2e.config import (UsageError, Workload, check, check_weights, linear_bytes, model_config,
                                    weight_report, weight_spec)
from xllm_kernel.e2e.model import OPERATIONS, Runner, library_ops, load, make_weights
from xllm_kernel.e2e.quantize import quantize, quantize_shards, reference_weights
from xllm_kernel.e2e.reference import reference_logits
from xllm_kernel.e2e.worker import validate

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "e2e-report.schema.json").read_text())
TIMEOUT = 600
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def runner(cpu, preset: str, dtype: str, work: Workload, weights=None):
    m = model_config(preset)
    weights = weights if weights is not None else make_weights(m, DTYPES[dtype], seed=0)
    return m, weights, Runner(m, weights, work, ops=library_ops(cpu), device=torch.device("cpu"),
                              dtype=DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2", "tiny-mistral"])
def test_tiny_presets_match_the_float64_reference(cpu, preset, dtype):
    # Prompts past tiny-mistral's window of 16, unequal lengths, blocks of 8 from a shuffled list.
    work = Workload(prompt_lens=(37, 20, 5), output_len=5, block_size=8, seed=3)
    m, weights, r = runner(cpu, preset, dtype, work)
    v = validate(m, weights, r, dtype)
    assert v["status"] == "passed", v
    assert v["greedy_tokens_equal"] and 0 < v["headroom"] <= 1
    assert len(v["tokens"]) == 3 and all(len(t) == 5 for t in v["tokens"])
    # The block tables really are shuffled (not the identity order).
    used = [b for row, p in zip(r.block_tables.tolist(), work.prompt_lens) for b in row[:-(-(p + 5) // 8)]]
    assert len(set(used)) == len(used) and used != sorted(used)


def test_validation_fails_on_a_wrong_model(cpu):
    # The check can fail: the window matters for tiny-mistral, and a changed weight shows.
    work = Workload(prompt_lens=(40,), output_len=3, block_size=16)
    m, weights, r = runner(cpu, "tiny-mistral", "float32", work)
    gen = r.generate(record_logits=True)
    got = torch.stack(gen.logits).to(torch.float64)[:, 0]
    ref = reference_logits(m, weights, r.prompts()[0], gen.tokens[0])
    windowless = reference_logits(dataclasses.replace(m, sliding_window=0), weights, r.prompts()[0], gen.tokens[0])
    assert (got - ref).abs().max() < 1e-3
    assert (got - windowless).abs().max() > 1e-2
    broken = dict(weights)
    broken["model.layers.1.mlp.down_proj.weight"] = weights["model.layers.1.mlp.down_proj.weight"] * 1.5
    assert validate(m, broken, r, "float32")["status"] == "failed"


def _transformers_model(m, weights):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (scripts/setup.sh "
                                                              "installs the pinned test dependency)")
    common = dict(vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
                  num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                  num_key_value_heads=m.num_kv_heads, head_dim=m.head_dim, rms_norm_eps=m.rms_norm_eps,
                  rope_theta=m.rope_theta, max_position_embeddings=m.max_position,
                  tie_word_embeddings=m.tie_word_embeddings, attn_implementation="eager")
    if m.architecture == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    elif m.architecture == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, use_sliding_window=False))
    else:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**common, sliding_window=m.sliding_window))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return model.eval()


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2", "tiny-mistral"])
def test_tiny_presets_match_transformers(cpu, preset):
    work = Workload(prompt_lens=(33, 12), output_len=6, block_size=16, seed=1)
    m, weights, r = runner(cpu, preset, "float32", work)
    model = _transformers_model(m, weights)
    gen = r.generate(record_logits=True)
    for s, prompt in enumerate(r.prompts()):
        ids = torch.cat([prompt, gen.tokens[s, :-1]])[None]
        with torch.no_grad():
            theirs = model(ids).logits[0, prompt.numel() - 1:].to(torch.float64)
        ours = torch.stack([step[s] for step in gen.logits]).to(torch.float64)
        assert (ours - theirs).abs().max().item() < 2e-3 * max(1.0, theirs.abs().max().item())
        assert torch.equal(theirs.argmax(-1), gen.tokens[s])  # greedy: their argmax is our token


SMALL = ["--preset", "tiny", "--batch", "3", "--prompt-len", "24,9", "--output-len", "6", "--block-size", "8"]


def test_report_of_three_sides_validates_and_its_profile_adds_up(tmp_path):
    out, md, png = tmp_path / "e.json", tmp_path / "e.md", tmp_path / "e.png"
    result = e2e(*SMALL, "--repeats", "2", "--output", str(out), "--markdown", str(md), "--plot", str(png),
                 "--revision", "test")
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    assert [s["name"] for s in report["sides"]] == ["selected", "torch", "compile"]
    # Without --weights the GEMMs are torch's on the bfloat16 weights: 2 bytes per weight per step.
    w = report["weights"]
    assert w["scheme"] is None and w["linear"].startswith("torch F.linear")
    m = model_config("tiny")
    assert w["bytes_per_decode_step"] == 2 * (m.parameters() - m.vocab_size * m.hidden_size - (2 * m.num_layers + 1)
                                              * m.hidden_size)
    selected, torch_side, compiled = report["sides"]
    assert all(v.startswith("cpu.native.") for v in selected["implementations"].values())
    assert all(v.startswith("cpu.torch.") for v in torch_side["implementations"].values())
    assert compiled["status"] in ("timed", "compile_failed")
    if compiled["status"] == "compile_failed":
        assert compiled["reason"]  # Inductor's error, reported
    else:
        assert compiled["profile"]["status"] == "unavailable" and compiled["profile"]["reason"]
    for side in (selected, torch_side):
        assert side["status"] == "timed" and side["validation"]["status"] == "passed"
        t = side["timing"]
        assert t["prefill_tokens"] == 24 + 9 + 24 and t["decode_tokens"] == 3 * 5
        assert t["decode_tokens_per_s"] == pytest.approx(15 / t["decode_seconds"])
        p = side["profile"]
        # Every step of the forward is timed: the calls cover the profiled interval, whose total is
        # of the order of the uninstrumented pass's.
        assert sum(r["seconds"] for r in p["operations"]) == pytest.approx(p["attributed_seconds"])
        assert p["attributed_seconds"] <= p["total_seconds"] * (1 + 1e-9)
        assert p["attributed_share"] > 0.6, p
        assert 0.2 < p["total_seconds"] / (t["prefill_seconds"] + t["decode_seconds"]) < 5
        calls = {r["operation"]: r["calls"] for r in p["operations"]}
        assert calls["paged_attention"] == 2 * 6 and calls["rms_norm"] == 6 and calls["sample"] == 6
        assert calls["fused_add_rms_norm"] == (2 * 2) * 6 and calls["gemm.lm_head"] == 6
        assert side["tokens"] == selected["tokens"]  # greedy: the same tokens on every side
        assert side["peak_memory_bytes"] > 0
        assert t["decode_weight_gb_per_s"] == pytest.approx(w["bytes_per_decode_step"] * 5 / t["decode_seconds"] / 1e9)
    text = md.read_text()
    assert "| selected |" in text and "paged_attention" in text and text in result.stdout
    assert "| weight GB/s |" in text and "F.linear" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["plot"] == {"path": str(png)}
    broken = dict(report, sides=[{k: v for k, v in selected.items() if k != "timing"}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


@pytest.mark.parametrize("args, message", [
    (["--preset", "tiny", "--prompt-len", "2040", "--output-len", "16"], "past the model's max_position 2048"),
    (["--preset", "tiny", "--batch", "2", "--prompt-len", "30", "--num-blocks", "3"], "past the cache's --num-blocks 3"),
    (["--preset", "nope"], "--preset: expected one of"),
    (["--preset", "tiny", "--sides", "selected,bogus"], "--sides"),
    (["--preset", "tiny", "--sides", "x=rms_nrm:torch"], "must be OPERATION:TARGET"),
    (["--preset", "tiny", "--output-len", "0"], "--output-len must be at least 1"),
    (["--preset", "tiny", "--dtype", "int8"], "--dtype"),
    (["--preset", "tiny", "--distributed"], "--distributed needs torchrun's environment"),
    (["--preset", "tiny", "--batch", "x"], "invalid int value"),
    ([], "give --preset NAME or --config FILE"),
    (["--preset", "tiny", "--weights", "int3"],
     "--weights: expected one of bf16, f16, f32, int8, fp8, int4, w8a8-int8, w8a8-fp8, w4a8, got 'int3'"),
    (["--preset", "tiny", "--weights", "int8", "--lm-head-weights", "fp4"],
     "--lm-head-weights: expected one of bf16, f16, f32, int8, fp8, int4, w8a8-int8, w8a8-fp8, w4a8, got 'fp4'"),
    (["--preset", "tiny", "--lm-head-weights", "int8"], "--lm-head-weights int8 needs --weights"),
    (["--preset", "tiny", "--weights", "int4", "--group-size", "96"],
     "--group-size 96 must divide K of every int4 linear: qkv has K = 128"),
    (["--preset", "tiny", "--weights", "int4", "--group-size", "0"], "--group-size must be at least 1, got 0"),
    (["--preset", "tiny", "--sides", "x=linear:torch"], "overrides linear, which runs only with --weights"),
])
def test_bad_configurations_are_usage_errors(args, message):
    result = e2e(*args, timeout=120)
    assert result.returncode == 2, _explain(result)
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_config_file_with_heads_not_divisible_by_kv_heads(tmp_path):
    config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 48, "intermediate_size": 96,
              "num_hidden_layers": 1, "num_attention_heads": 6, "num_key_value_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = e2e("--config", str(path), timeout=120)
    assert result.returncode == 2, _explain(result)
    assert "num_heads (6) must be a multiple of num_kv_heads (4)" in result.stderr
    path.write_text("{")
    result = e2e("--config", str(path), timeout=120)
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_tensor_parallel_degree_must_divide_the_heads():
    m = model_config("tiny")  # 4 heads, 2 KV heads
    work = Workload(prompt_lens=(4,), output_len=2)
    check(m, work, world_size=2)
    with pytest.raises(UsageError, match="num_kv_heads \\(2\\) must be a multiple of the world size"):
        check(m, work, world_size=4)


def test_two_cpu_ranks_of_tensor_parallel_give_the_tokens_of_one(tmp_path):
    # float32: the all-reduce sums in another order than one rank's GEMM, a difference bfloat16
    # rounding could turn into a different greedy token at a near tie.
    args = [*SMALL, "--sides", "selected,torch", "--preset", "tiny-qwen2", "--dtype", "float32"]
    single = e2e(*args, "--output", str(tmp_path / "one.json"))
    assert single.returncode == 0, _explain(single)
    one = json.loads((tmp_path / "one.json").read_text())
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    out = tmp_path / "tp.json"
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                             "-m", "xllm_kernel.e2e", "--distributed", *args, "--output", str(out), "--markdown",
                             str(tmp_path / "tp.md")], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, _explain(result)
    aggregate = json.loads(out.read_text())
    jsonschema.validate(aggregate, SCHEMA)
    assert aggregate["schema"] == "xllm-kernel/e2e-distributed-report/1" and aggregate["world_size"] == 2
    ranks = [json.loads((tmp_path / f"tp.rank{r}.json").read_text()) for r in (0, 1)]
    for r, report in enumerate(ranks):
        jsonschema.validate(report, SCHEMA)
        assert report["distributed"]["rank"] == r and report["world_size"] == 2
    for i, side in enumerate(aggregate["sides"]):
        assert side["status"] == "timed" and side["tokens_agree"], side
        assert side["validation"]["status"] == "passed"
        for report in ranks:
            assert report["sides"][i]["tokens"] == one["sides"][i]["tokens"]
        assert side["timing"]["decode_seconds"] == max(rep["sides"][i]["timing"]["decode_seconds"] for rep in ranks)
    assert "on 2 cpu ranks" in result.stdout and (tmp_path / "tp.rank1.md").exists()


def test_synthetic_prefill_times_decode_only(tmp_path):
    out = tmp_path / "s.json"
    result = e2e("--preset", "tiny", "--batch", "2", "--prompt-len", "100", "--output-len", "4", "--synthetic-prefill",
                 "--sides", "selected", "--output", str(out))
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    (side,) = report["sides"]
    assert report["workload"]["synthetic_prefill"] is True
    assert side["validation"]["status"] == "passed"  # validation runs a real prefill
    t = side["timing"]
    assert t["prefill_seconds"] is None and t["prefill_tokens_per_s"] is None and t["decode_tokens"] == 2 * 3
    calls = {r["operation"]: r["calls"] for r in side["profile"]["operations"]}
    assert calls["paged_attention"] == 2 * 3 and calls["sample"] == 3  # the decode steps alone
    assert "Synthetic prefill" in result.stdout


def test_report_figures_read_as_numbers():
    # Tables show 3 significant digits below 1000 and whole numbers from there on (a prefill rate
    # of 1848 tokens/s, not 1.85e+03); a missing figure is a dash.
    from xllm_kernel.e2e.report import _fmt

    assert _fmt(1847.9) == "1848"
    assert _fmt(157258.4) == "157258"
    assert _fmt(154.11) == "154"
    assert _fmt(0.10382) == "0.104"
    assert _fmt(0.12345, 2) == "0.12"
    assert _fmt(None) == "—"
    assert _fmt(16) == "16"


# ---- --weights: the linears through the library's linear -----------------------------------------

@pytest.mark.parametrize("scheme", ["int8", "fp8", "int4", "bf16"])
def test_quantized_weights_are_what_linear_multiplies(cpu, scheme):
    # N past a 128-row fp8 block and not a multiple of it; the reference's W (dequantize) is the one
    # the packed weight multiplies: float32 input, float32 sums, so they agree within K roundings.
    g = torch.Generator().manual_seed(5)
    w = (torch.randn((160, 256), generator=g) * 0.02).to(torch.bfloat16)
    q = quantize(w, scheme, group_size=64)
    again = quantize(w, scheme, group_size=64)
    assert torch.equal(q.weight.view(torch.uint8) if scheme == "fp8" else q.weight,
                       again.weight.view(torch.uint8) if scheme == "fp8" else again.weight)
    scales = {"int8": (160,), "fp8": (2, 2), "int4": (160, 4), "bf16": None}[scheme]
    assert (q.scales is None and scales is None) or tuple(q.scales.shape) == scales
    if scheme == "int8":
        assert q.weight.abs().max() == 127
    if scheme == "int4":
        assert q.weight.min() == -8 and q.weight.max() == 7  # the whole range
    W = q.dequantize(0, 160)
    assert (W.double() - w.double()).abs().max() <= {"int8": 0.5 / 127, "fp8": 2 ** -4, "int4": 1 / 8,
                                                     "bf16": 0}[scheme] * w.abs().max().item() * 1.01
    assert torch.equal(q.dequantize(70, 150), W[70:150])
    from xllm_kernel.ops.linear import linear, linear_pack

    packed = linear_pack(q.weight, q.scales, None, scheme, q.group_size)
    x = torch.randn((3, 256), generator=g)
    ref = x.double() @ W.double().T
    bound = 256 * 2.0 ** -24 * (x.double().abs() @ W.double().abs().T)
    assert ((linear(x, packed).double() - ref).abs() <= bound).all()


def test_the_reference_reads_every_rank_shard_in_place():
    # Under tensor parallel every rank's reference is the whole model assembled from all ranks'
    # shards: with f32 (no quantization) it is the original weights, bit for bit.
    m = model_config("tiny-qwen2")
    weights = make_weights(m, torch.float32, seed=0)
    spec = weight_spec("f32", None, 128)
    ref_m, ref = reference_weights(m, weights, [quantize_shards(m, weights, spec, r, 2) for r in (0, 1)])
    linears = [k for k in weights if k.endswith("_proj.weight")] + ["lm_head.weight"]
    assert len(linears) == 7 * m.num_layers + 1
    for k in linears:
        view = ref[k]
        assert view.shape == weights[k].shape and torch.equal(view[0:view.shape[0]], weights[k]), k
        assert torch.equal(view[5:40], weights[k][5:40])
    assert ref["model.layers.0.self_attn.q_proj.bias"] is weights["model.layers.0.self_attn.q_proj.bias"]
    # int4 groups of 128 cannot cut the o_proj shards of 64 columns on two ranks.
    check_weights(m, spec, 2)
    with pytest.raises(UsageError, match="--group-size 128 must divide K of every int4 linear: o_proj has K = 64"):
        check_weights(m, weight_spec("int4", None, 128), 2)


@pytest.mark.parametrize("preset, scheme, lm_head", [("tiny", "int8", None), ("tiny-qwen2", "int4", "bf16"),
                                                     ("tiny-mistral", "fp8", None)])
def test_tiny_presets_with_packed_weights_match_the_float64_reference(cpu, preset, scheme, lm_head):
    work = Workload(prompt_lens=(37, 5), output_len=4, block_size=8, seed=3)
    m = model_config(preset)
    weights = make_weights(m, torch.bfloat16, seed=0)
    spec = weight_spec(scheme, lm_head, 64)
    shards = [quantize_shards(m, weights, spec)]
    loaded = load(m, weights, device=torch.device("cpu"), dtype=torch.bfloat16, linears=shards[0],
                  pack=cpu["linear_pack"].function)
    assert loaded.packed and all(t.dtype == torch.uint8 for t in loaded.linear_tensors())
    r = Runner(m, loaded, work, ops=library_ops(cpu, linear=True), device=torch.device("cpu"), dtype=torch.bfloat16)
    ref_m, ref = reference_weights(m, weights, shards)
    # The reference multiplies the dequantized W (so it measures the kernels, not the quantization).
    q = m.num_heads * m.head_dim
    assert torch.equal(ref["model.layers.1.self_attn.k_proj.weight"][0:8],
                       shards[0]["layers"][1]["qkv"].dequantize(q, q + 8))
    v = validate(ref_m, ref, r, "bfloat16")
    assert v["status"] == "passed" and v["greedy_tokens_equal"], v


def _check_weights_report(report: dict, scheme: str, lm_head: str) -> None:
    w = report["weights"]
    m = model_config(report["model"]["name"])
    assert w["scheme"] == scheme and w["lm_head_scheme"] == lm_head and w["linear"].startswith("xllm_kernel linear")
    assert set(w["quantization"]) == {scheme, lm_head}
    roles = {r["role"]: r for r in w["roles"]}
    h, inter = m.hidden_size, m.intermediate_size
    assert roles["gate_up"]["bytes"] == m.num_layers * linear_bytes(scheme, 2 * inter, h, 128)
    assert roles["lm_head"]["bytes"] == linear_bytes(lm_head, m.vocab_size, h, 128)
    assert w["bytes_per_decode_step"] == sum(r["bytes"] for r in w["roles"])
    for side in report["sides"]:
        assert side["status"] == "timed" and side["validation"]["status"] == "passed", side.get("reason")
        solution = "native" if side["kind"] == "selected" else "torch"
        assert side["implementations"]["linear_pack"] == f"cpu.{solution}.linear_pack"
        assert side["implementations"]["linear"] == f"cpu.{solution}.linear"
        # The packed tensors hold the counted bytes plus headers and alignment.
        assert w["bytes_per_decode_step"] <= side["weights"]["packed_bytes"] < 1.2 * w["bytes_per_decode_step"]
        t = side["timing"]
        assert t["decode_weight_gb_per_s"] == pytest.approx(
            w["bytes_per_decode_step"] * t["decode_steps"] / t["decode_seconds"] / 1e9)
        if side["kind"] != "compile":
            calls = {r["operation"]: r["calls"] for r in side["profile"]["operations"]}
            assert calls["linear.qkv"] == m.num_layers * 6 and calls["linear.lm_head"] == 6
            assert not any(op.startswith("gemm.") for op in calls)


@pytest.mark.parametrize("preset, scheme, lm_head, sides", [
    ("tiny", "int8", None, "selected,torch,compile"),
    ("tiny-qwen2", "int4", "fp8", "selected,torch"),
    ("tiny-mistral", "fp8", None, "selected,torch"),
])
def test_weights_flag_runs_every_side_on_packed_weights(tmp_path, preset, scheme, lm_head, sides):
    out, md = tmp_path / "w.json", tmp_path / "w.md"
    args = [*SMALL, "--preset", preset, "--weights", scheme, "--sides", sides, "--output", str(out), "--markdown",
            str(md)]
    if lm_head:
        args += ["--lm-head-weights", lm_head]
    if "compile" in sides:
        args.append("--fullgraph")  # the fakes let torch.compile trace linear whole
    result = e2e(*args)
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    _check_weights_report(report, scheme, lm_head or scheme)
    text = md.read_text()
    assert f"weights {scheme}" in text and "| weight GB/s |" in text
    assert (f"(LM head {lm_head})" in text) == bool(lm_head)
    broken = dict(report, weights=dict(report["weights"], scheme="int3"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_a_custom_side_overrides_linear_and_linear_pack_together():
    from xllm_kernel.e2e.cli import sides

    (side,) = sides("lin=linear:torch", linear=True)
    assert side["overrides"] == {"linear": "torch", "linear_pack": "torch"}
    (side,) = sides("lin=linear_pack:cpu.native.linear_pack", linear=True)
    assert side["overrides"] == {"linear_pack": "cpu.native.linear_pack", "linear": "cpu.native.linear"}
    torch_side = sides("torch", linear=True)[0]
    assert torch_side["overrides"]["linear"] == torch_side["overrides"]["linear_pack"] == "torch"
    assert "linear" not in sides("torch")[0]["overrides"]


def test_two_cpu_ranks_with_packed_weights_validate_against_the_whole_model(tmp_path):
    # Each rank quantizes and packs its own shards; its reference is the whole model assembled
    # from every rank's shards. The aggregate counts the bytes every rank reads.
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    out = tmp_path / "tp.json"
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                             "-m", "xllm_kernel.e2e", "--distributed", *SMALL, "--preset", "tiny-qwen2", "--dtype",
                             "float32", "--weights", "fp8", "--lm-head-weights", "int4", "--sides", "selected",
                             "--output", str(out)], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, _explain(result)
    aggregate = json.loads(out.read_text())
    jsonschema.validate(aggregate, SCHEMA)
    ranks = [json.loads((tmp_path / f"tp.rank{r}.json").read_text()) for r in (0, 1)]
    for report in ranks:
        jsonschema.validate(report, SCHEMA)
        assert report["sides"][0]["validation"]["status"] == "passed"
    per_rank = ranks[0]["weights"]["bytes_per_decode_step"]
    assert per_rank == ranks[1]["weights"]["bytes_per_decode_step"]
    assert aggregate["weights"]["bytes_per_decode_step"] == 2 * per_rank
    (side,) = aggregate["sides"]
    assert side["status"] == "timed" and side["tokens_agree"]
    t = side["timing"]
    assert t["decode_weight_gb_per_s"] == pytest.approx(2 * per_rank * t["decode_steps"] / t["decode_seconds"] / 1e9)
