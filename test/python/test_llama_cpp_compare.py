"""scripts/llama_cpp_compare.py without llama.cpp: its bf16 rounding, how it reads the tools' JSON
(stand-in executables print what llama-bench and llama-batched-bench print), that a short batched
run (a context too small: fewer rows) is an error, and that the report marks failed cells."""
import json
import os
import stat
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import llama_cpp_compare as lcc  # noqa: E402


def test_bf16_bits_round_to_nearest_even_like_torch():
    np = pytest.importorskip("numpy")  # the script's own dependency (with gguf), not the project's
    x = np.concatenate([np.random.default_rng(0).standard_normal(4096).astype(np.float32),
                        np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 3.0e38, 1e-40], np.float32)])
    want = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(lcc.to_bf16_bits(x), want)


def fake_tool(tmp_path, name, stdout):
    path = tmp_path / name
    path.write_text("#!/bin/sh\ncat <<'XK_EOF'\n" + stdout + "\nXK_EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_reads_llama_bench_and_batched_bench_output(tmp_path):
    fake_tool(tmp_path, "llama-bench", json.dumps([{
        "samples_ts": [10.0, 12.0, 11.0], "n_prompt": 512, "n_gen": 0, "n_depth": 0, "n_threads": 2,
        "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "type_k": "f16", "type_v": "f16"}]))
    rows = [{"speed_tg": v, "speed_pp": 100.0, "flash_attn": -1, "n_threads": 2} for v in (5.0, 7.0, 6.0)]
    fake_tool(tmp_path, "llama-batched-bench", "\n".join(["main: loading"] + [json.dumps(r) for r in rows]))
    runner = lcc.Runner(timeout=30, log_dir=str(tmp_path / "logs"))
    result, _ = lcc.llama_bench(runner, str(tmp_path), "m.gguf", 2, 3, 512, 0, 0, "prefill")
    assert result["tokens_per_s_best"] == 12.0 and result["tokens_per_s_mean"] == 11.0
    batched = lcc.batched_bench(runner, str(tmp_path), "m.gguf", 2, 3, 2048, 16, 16, True, "batched")
    assert batched["tokens_per_s_best"] == 7.0 and batched["npl"] == 16
    assert "-npl 16,16,16" in runner.commands[-1]["command"] and "-pps" in runner.commands[-1]["command"]
    # Every sequence gets a context of pp + tg + 1 rounded up to 256.
    assert batched["n_ctx"] == 16 * 2304
    with pytest.raises(RuntimeError, match="expected 4 rows, got 3"):
        lcc.batched_bench(runner, str(tmp_path), "m.gguf", 2, 4, 2048, 16, 16, True, "batched")


def test_a_failing_tool_is_an_error_naming_it(tmp_path):
    path = tmp_path / "llama-bench"
    path.write_text("#!/bin/sh\necho 'model not found' >&2\nexit 3\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    runner = lcc.Runner(timeout=30, log_dir=str(tmp_path / "logs"))
    with pytest.raises(RuntimeError, match="(?s)prefill failed \\(3\\).*model not found"):
        lcc.llama_bench(runner, str(tmp_path), "m.gguf", 2, 3, 512, 0, 0, "prefill")


def test_markdown_marks_failed_cells():
    entry = {"tokens_per_s_best": 10.0, "tokens_per_s_mean": 9.5}
    report = {
        "sizes": {"prefill": 512, "decode_depth": 2048, "batched_pl": 16, "batched_pp": 2048},
        "llama_cpp": {"reported": "version 1"}, "generated_at": "now", "quick": False,
        "cpu": {"model_name": "cpu"}, "threads": 2, "quantize_pure": True, "repetitions": 3,
        "results": {"q8_0": {"file_bytes": 2**30, "prefill": entry, "decode": {"error": "decode failed (1): x"},
                             "batched": entry}},
        "commands": [{"command": "llama-bench -m m.gguf"}],
    }
    text = lcc.markdown(report)
    assert "| Q8_0 | 1.00 | 10.00 / 9.50 | failed | 10.00 / 9.50 |" in text
    assert "- q8_0 decode: decode failed (1): x" in text
