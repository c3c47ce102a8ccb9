"""python -m xllm_kernel.benchmark.summary: the performance page from benchmark and e2e reports.

The reports here are made up, small and valid against docs/schemas (checked where jsonschema is installed): a
memory-bound operation above 70% of its roofline, one below it beside a torch.compile implementation, and an
end-to-end run with the selected, torch and compile sides. docs/performance.md itself must be what the command
makes of the reports it names."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import ROOT, python_env
from xllm_kernel.benchmark import summary

SCHEMAS = ROOT / "docs" / "schemas"

ENVIRONMENT = {
    "host": "testhost", "cpu_model": "Made-up CPU @ 2.0GHz", "cpu_simd_target": "AVX3", "torch": "2.14.1",
    "revision": "abc1234", "load_average": [0.1, 0.2, 0.3], "threads": 2, "device": "cpu",
    "device_description": "cpu", "compiler": "gcc 12.2.0", "build_type": "Release",
    "cpu_pages": {"huge_page_kb_of_8_mib_tensor": 8192, "thp_mem_alloc_enable": "1", "system_thp": "madvise"},
    "cpu_stream_policy": "outputs >= 32 MiB streamed",
}


def _stats(median: float) -> dict:
    return {"count": 5, "min": median * 0.9, "p10": median * 0.95, "median": median, "mean": median,
            "p90": median * 1.05, "max": median * 1.1, "stddev": median * 0.05}


def _ceilings(read: float, copy: float) -> dict:
    return {"read": {"gbps": read, "method": "read_stream: threads 2, cursors 4, prefetch 1024 B",
                     "methods": {"read_stream: threads 2, cursors 4, prefetch 1024 B": read}},
            "copy": {"gbps": copy, "method": "non-temporal copy"},
            "compute": {"f32_fma": {"gops": 150.0, "method": "MulAdd of AVX3 vectors, 12 chains, on 2 threads"}},
            "compute_absent": {"amx_bf16": "no AMX-BF16 on this CPU"}}


def _row(case: str, parameters: dict, implementation: str, solution: str, median: float, percent: float,
         bound: str, speedup, ideal: float) -> dict:
    return {"case_id": case, "parameters": parameters, "implementation": implementation, "status": "timed",
            "implementation_detail": {"name": implementation, "solution": solution, "variant": "",
                                      "binding": "highway", "contract_version": 1},
            "bytes_read": 1 << 20, "bytes_written": 1 << 20, "device": _stats(median), "wall": _stats(median),
            "host_enqueue": _stats(median), "percent_of_copy": percent, "percent_of_roofline": percent,
            "roofline": {"ideal_seconds": ideal, "bound": bound, "read_seconds": ideal if bound == "read" else ideal / 2,
                         "copy_seconds": ideal if bound == "copy" else ideal / 2, "compute_seconds": ideal / 10,
                         "compute_class": "f32_fma", "percent": percent},
            "rotation": {"enabled": True, "copies": 4, "working_set_bytes": 1 << 28,
                         "last_level_cache_bytes": 1 << 25, "exceeds_cache": True},
            "warm_cache": False, "unsteady": False, "ratio_to_fastest": 1.0, "speedup_vs_torch": speedup,
            "calls_per_sample": 1, "achieved_gbps": 2.0 * (1 << 20) / median / 1e9, "copy_gbps": 16.0,
            "read_gbps": 20.0, "work": {"f32_fma": 1e6}, "reset": None,
            "samples": {"host_enqueue": [median] * 5, "device": [median] * 5, "wall": [median] * 5, "reset": []}}


def _benchmark(operation: str, results: list[dict], *, read: float, copy: float, timestamp: str,
               idle: bool = True) -> dict:
    env = dict(ENVIRONMENT, ceilings=_ceilings(read, copy), timestamp=timestamp)
    return {
        "schema": "xllm-kernel/benchmark-report/1", "tool": "benchmark", "operation": operation, "device": "cpu",
        "mode": "eager", "seed": 0, "environment": env,
        "occupancy": {"idle": idle, "warnings": [] if idle else ["the 1-minute load average was 4.1 before the run"],
                      "host": {"load_average_before": [4.1 if not idle else 0.1, 0.2, 0.3],
                               "load_average_after": [0.1, 0.2, 0.3], "other_processes_cpu_cores": 0.0,
                               "this_process_cpu_cores": 2.0, "cpus": 2, "seconds": 3.0},
                      "device": {"kind": "cpu", "before": {}, "after": {}}},
        "timing": {"warmup": 3, "iterations": 5, "graph_calls": 64, "reset": "none"},
        "device_timer": "the call's wall time", "copy_bandwidth_gbps": copy, "copy_method": "non-temporal copy",
        "copy_methods": {"non-temporal copy": copy}, "copy_bytes": 1 << 28,
        "implementations": sorted({r["implementation"] for r in results}), "results": results,
        "summary": {"timed": len(results), "failed": 0, "exit_code": 0},
    }


def _norm_report() -> dict:
    p = {"tokens": 8192, "hidden": 4096, "dtype": "bfloat16"}
    case = "rms_norm/dtype=bfloat16/hidden=4096/tokens=8192"
    return _benchmark("rms_norm", [
        _row(case, p, "cpu.native.rms_norm", "native", 0.004, 85.0, "copy", 12.5, 0.0034),
        _row(case, p, "cpu.torch.rms_norm", "torch", 0.05, 6.8, "copy", 1.0, 0.0034),
    ], read=20.0, copy=16.0, timestamp="2026-12-03T10:00:00Z")


def _attention_report() -> dict:
    rows = []
    for seqs, native_percent in ((1, 75.0), (16, 60.0)):
        p = {"batch": "decode", "seqs": seqs, "context": 4096, "dtype": "bfloat16"}
        case = f"paged_attention/batch=decode/context=4096/dtype=bfloat16/seqs={seqs}"
        rows += [
            _row(case, p, "cpu.native.paged_attention", "native", 0.010, native_percent, "read", 3.0, 0.001),
            _row(case, p, "cpu.compile.paged_attention", "compile", 0.020, 30.0, "read", 1.5, 0.001),
            _row(case, p, "cpu.torch.paged_attention", "torch", 0.030, 20.0, "read", 1.0, 0.001),
        ]
    return _benchmark("paged_attention", rows, read=18.0, copy=15.0, timestamp="2026-12-03T11:30:00Z", idle=False)


def _e2e_report() -> dict:
    model = {"name": "tiny", "architecture": "llama", "vocab_size": 256, "hidden_size": 64,
             "intermediate_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
             "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position": 512, "qkv_bias": False,
             "sliding_window": 0, "tie_word_embeddings": False, "parameters": 123456}
    workload = {"batch": 2, "prompt_lens": [16], "output_len": 8, "block_size": 16, "num_blocks": 8, "seed": 0,
                "temperature": 0.0, "prompt_tokens": 32, "max_context": 24}

    def side(name: str, kind: str, decode: float, prefill: float) -> dict:
        return {"name": name, "kind": kind, "status": "timed", "implementations": {"rms_norm": f"cpu.{kind}.x"},
                "validation": {"status": "passed", "greedy_tokens_equal": True, "max_abs_logit_error": 1e-3,
                               "logit_atol": 1e-2, "headroom": 0.1},
                "timing": {"repeats": 1, "warmup": 1, "prefill_seconds": 32 / prefill, "prefill_tokens": 32,
                           "prefill_tokens_per_s": prefill, "decode_steps": 7, "decode_seconds": 14 / decode,
                           "decode_tokens": 14, "decode_tokens_per_s": decode,
                           "time_per_output_token_s": 2 / decode},
                "profile": {"status": "unavailable", "reason": "not profiled in this made-up report"},
                "peak_memory_bytes": 3 << 30, "tokens_digest": "0" * 16}

    return {"schema": "xllm-kernel/e2e-report/1", "tool": "e2e", "model": model, "dtype": "bfloat16",
            "device": "cpu", "workload": workload, "validation_workload": workload, "repeats": 1, "warmup": 1,
            "world_size": 1, "environment": dict(ENVIRONMENT, timestamp="2026-12-03T12:00:00Z"),
            "sides": [side("selected", "selected", 150.0, 1800.0), side("torch", "torch", 60.0, 1200.0),
                      side("compile", "compile", 50.0, 1300.0)],
            "summary": {"sides": 3, "timed": 3, "failed": 0, "exit_code": 0}}


def _validate(data: dict, schema: str) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    jsonschema.validate(data, json.loads((SCHEMAS / f"{schema}.schema.json").read_text()))


@pytest.fixture
def report_dir(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "benchmark-rms_norm.json").write_text(json.dumps(_norm_report()))
    (folder / "benchmark-paged_attention.json").write_text(json.dumps(_attention_report()))
    (folder / "e2e.json").write_text(json.dumps(_e2e_report()))
    # What the main job writes beside them: skipped, named in the page.
    (folder / "numerics-rms_norm.json").write_text(json.dumps({"schema": "xllm-kernel/numerics-report/1"}))
    (folder / "notes.txt").write_text("not a report, and not JSON: ignored")
    return folder


def test_made_up_reports_are_valid():
    _validate(_norm_report(), "benchmark-report")
    _validate(_attention_report(), "benchmark-report")
    _validate(_e2e_report(), "e2e-report")


def _generate(folder: pathlib.Path, output: pathlib.Path) -> str:
    assert summary.main([str(folder), "--output", str(output)]) == 0
    return output.read_text()


def _table_row(text: str, *cells: str) -> str:
    """The one table line holding every cell."""
    rows = [line for line in text.splitlines() if line.startswith("|") and all(f"| {c} |" in line for c in cells)]
    assert len(rows) == 1, (cells, rows)
    return rows[0]


def test_operation_tables(report_dir, tmp_path):
    text = _generate(report_dir, tmp_path / "performance.md")
    assert text.startswith("# Performance\n")
    assert f"python -m xllm_kernel.benchmark.summary {report_dir} --output {tmp_path / 'performance.md'}" in text
    # Operations in name order; the parameters every case shares said once.
    assert text.index("### `paged_attention`") < text.index("### `rms_norm`")
    assert "every case has dtype=bfloat16, hidden=4096, tokens=8192" in text
    row = _table_row(text, "`cpu.native.rms_norm`")
    assert "| 4 ms | 85.0% | copy | 12.5× | — | cold |" in row
    assert "| 50 ms | 6.8% | copy | 1× | — |" in _table_row(text, "`cpu.torch.rms_norm`")
    # × torch.compile: the compile implementation's median over this one's, in the same case.
    row = _table_row(text, "seqs=16", "`cpu.native.paged_attention`")
    assert "| 10 ms | 60.0% | read | 3× | 2× |" in row
    assert "| × cpu.torch | × torch.compile |" in text


def test_machine_section(report_dir, tmp_path):
    text = _generate(report_dir, tmp_path / "performance.md")
    machine = text.split("## Machine")[1].split("## Operations")[0]
    for cell in ("| CPU model | Made-up CPU @ 2.0GHz |", "| SIMD target (Highway) | AVX3 |", "| revision | abc1234 |",
                 "| torch | 2.14.1 |", "| intra-op threads | 2 |",
                 "| date | 2026-12-03T10:00:00Z to 2026-12-03T12:00:00Z |",
                 "8192 kB of huge pages under an 8 MiB tensor"):
        assert cell in machine, cell
    # Each report's ceilings, a column each (in the order of the file names).
    assert "| ceiling | method | `paged_attention` | `rms_norm` |" in machine
    assert "| read GB/s | read_stream: threads 2, cursors 4, prefetch 1024 B | 18 | 20 |" in machine
    assert "| copy GB/s | non-temporal copy | 15 | 16 |" in machine
    assert "| f32_fma Gop/s | MulAdd of AVX3 vectors, 12 chains, on 2 threads | 150 | 150 |" in machine
    assert "`amx_bf16` (no AMX-BF16 on this CPU)" in machine
    assert "`benchmark-paged_attention.json`: **not idle**" in machine and "indicative" in machine


def test_rows_below_70_percent(report_dir, tmp_path):
    text = _generate(report_dir, tmp_path / "performance.md")
    below = text.split("## Below 70% of roofline")[1].split("\n## ")[0]
    rows = [line for line in below.splitlines() if line.startswith("| `")]
    # Only the library's own row under 70%: not the 75% one, not the torch or compile baselines.
    assert len(rows) == 1, rows
    assert rows[0].startswith("| `paged_attention` | batch=decode, context=4096, dtype=bfloat16, seqs=16 | "
                              "`cpu.native.paged_attention` | 60.0% | read | 1 ms | 10 ms | read 1 ms, copy 500 µs, "
                              "f32_fma 100 µs |")


def test_end_to_end_and_sources(report_dir, tmp_path):
    text = _generate(report_dir, tmp_path / "performance.md")
    e2e = text.split("## End to end")[1].split("## Sources")[0]
    assert "### `tiny` (2 layers), bfloat16, weights bfloat16, on cpu" in e2e
    assert "| `selected` | timed | 0.1 | 1800 | 150 | 13.3 ms | 2.5× | 3× | 3 GiB |" in e2e
    assert "| `torch` | timed | 0.1 | 1200 | 60 | 33.3 ms | 1× | 1.2× | 3 GiB |" in e2e
    sources = text.split("## Sources")[1]
    assert "| `e2e.json` | xllm-kernel/e2e-report/1 | `tiny` | abc1234 | 2026-12-03T12:00:00Z |" in sources
    assert "Skipped (no figure for this page): `numerics-rms_norm.json` (xllm-kernel/numerics-report/1)." in sources


def test_same_reports_same_page(report_dir, tmp_path):
    first = _generate(report_dir, tmp_path / "a.md")
    # Written again over an existing page (atomically: nothing else is left beside it).
    (tmp_path / "a.md").write_text("an older page")
    assert _generate(report_dir, tmp_path / "a.md") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "reports"]
    # The files' order on disk or their times do not matter.
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in sorted(report_dir.iterdir(), reverse=True):
        (copy / path.name).write_text(path.read_text())
    text = summary.render(*summary.load_directory(str(copy)), directory=str(report_dir),
                          output=str(tmp_path / "a.md"))
    assert text == first


@pytest.mark.parametrize("content, message", [
    ('{"hello": 1}', "not a report of the benchmark or e2e tools (schema None"),
    ("[1, 2]", "not a report of the benchmark or e2e tools (a JSON list"),
    ("{not json", "not JSON"),
    (json.dumps({"schema": "xllm-kernel/benchmark-report/1", "tool": "benchmark"}),
     "a xllm-kernel/benchmark-report/1 without operation"),
])
def test_bad_input_names_the_file(report_dir, tmp_path, capsys, content, message):
    bad = report_dir / "bad.json"
    bad.write_text(content)
    assert summary.main([str(report_dir), "--output", str(tmp_path / "p.md")]) == 2
    err = capsys.readouterr().err
    assert f"summary: {bad}: " in err and message in err, err
    assert not (tmp_path / "p.md").exists()


def test_a_report_that_does_not_validate_names_the_file_and_field(tmp_path, capsys):
    pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    report = _norm_report()
    report["results"][0]["roofline"]["bound"] = 7
    (tmp_path / "benchmark.json").write_text(json.dumps(report))
    assert summary.main([str(tmp_path), "--output", str(tmp_path / "p.md")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'benchmark.json'}: not a valid xllm-kernel/benchmark-report/1: at results/0/roofline/bound" \
        in err, err


def test_a_folder_without_reports(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert summary.main([str(empty)]) == 2
    assert f"summary: {empty}: no JSON file in it, so no benchmark or e2e report" in capsys.readouterr().err
    (empty / "numerics.json").write_text(json.dumps({"schema": "xllm-kernel/numerics-report/1"}))
    assert summary.main([str(empty)]) == 2
    assert f"summary: {empty}: 1 JSON file(s), none of them a benchmark or e2e report" in capsys.readouterr().err
    assert summary.main([str(tmp_path / "missing")]) == 2
    assert f"summary: {tmp_path / 'missing'}: not a folder of reports" in capsys.readouterr().err


def test_the_module_command(report_dir, tmp_path):
    out = tmp_path / "p.md"
    result = subprocess.run([sys.executable, "-m", "xllm_kernel.benchmark.summary", str(report_dir), "--output",
                             str(out)], capture_output=True, text=True, env=python_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and out.read_text().startswith("# Performance")


def test_docs_performance_is_generated_from_its_reports(tmp_path):
    """docs/performance.md is what the command at its top makes of the reports it names."""
    page = ROOT / "docs" / "performance.md"
    command = re.search(r"^python -m xllm_kernel\.benchmark\.summary (\S+) --output (\S+)$", page.read_text(),
                        re.MULTILINE)
    assert command, "docs/performance.md does not start with the command that generates it"
    folder, output = command.groups()
    assert output == "docs/performance.md"
    assert (ROOT / folder).is_dir(), f"{folder}, the reports docs/performance.md names, is not in the repository"
    text = summary.render(*summary.load_directory(str(ROOT / folder)), directory=folder, output=output)
    assert text == page.read_text(), (f"docs/performance.md is not what `python -m xllm_kernel.benchmark.summary "
                                      f"{folder} --output {output}` writes: run it from the repository root")
