"""The end-to-end runner (python -m xllm_kernel.e2e): the tiny presets against the float64 reference
and against transformers' models with the same random weights, tensor parallel over two CPU ranks
equal to one rank, bad configurations as usage errors, the report schema, and the profile."""

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

from xllm_kernel.e2e.config import UsageError, Workload, check, model_config
from xllm_kernel.e2e.model import OPERATIONS, Runner, library_ops, make_weights
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


def e2e(*args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    return subprocess.run([sys.executable, "-m", "xllm_kernel.e2e", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-4000:]}"


SMALL = ["--preset", "tiny", "--batch", "3", "--prompt-len", "24,9", "--output-len", "6", "--block-size", "8"]


def test_report_of_three_sides_validates_and_its_profile_adds_up(tmp_path):
    out, md, png = tmp_path / "e.json", tmp_path / "e.md", tmp_path / "e.png"
    result = e2e(*SMALL, "--repeats", "2", "--output", str(out), "--markdown", str(md), "--plot", str(png),
                 "--revision", "test")
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    assert [s["name"] for s in report["sides"]] == ["selected", "torch", "compile"]
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
    text = md.read_text()
    assert "| selected |" in text and "paged_attention" in text and text in result.stdout
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
