"""Reports survive a crash: a tool killed (SIGKILL) while it writes a report leaves the previous
report byte-identical at its path and nothing partial under that name; a leftover temporary file is
named as one (<path>.tmp.<pid>) and the next run still writes its report.

XLLM_KERNEL_TEST_FAULT=stall-report-write[:N] (src/tools/distributed/test_fault.h) stops the Nth
report write half-way, its first half flushed to the temporary file, until the process is killed."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from xllm_kernel import _C

from conftest import python_env

# Small, fast runs of the first suite's operation would do as well; rms_norm has the flags below.
TOOL_ARGS = {
    "numerics": ["--operation", "rms_norm", "--tokens", "3", "--hidden", "64", "--dtype", "float32",
                 "--weight-dtype", "input", "--layout", "contiguous"],
    "benchmark": ["--operation", "rms_norm", "--tokens", "3", "--hidden", "64", "--dtype", "float32",
                  "--weight-dtype", "input", "--layout", "contiguous", "--iterations", "2", "--warmup", "0",
                  "--copy-bytes", "1048576"],
}
# The order publish() writes them in: JSON (--output), then Markdown (--markdown).
WRITES = {"json": 1, "markdown": 2}
HEADINGS = {"numerics": "# Numerics", "benchmark": "# Benchmark"}


def tool_command(tool: str, output: pathlib.Path, markdown: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", f"xllm_kernel.{tool}", *TOOL_ARGS[tool], "--output", str(output),
            "--markdown", str(markdown)]


def run_tool(tool: str, output: pathlib.Path, markdown: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(tool_command(tool, output, markdown), env=python_env(**env), capture_output=True,
                          text=True, timeout=300)


def check_report(tool: str, output: pathlib.Path, markdown: pathlib.Path) -> None:
    report = json.loads(output.read_text())
    assert report["summary"]["exit_code"] == 0, report["summary"]
    assert markdown.read_text().startswith(HEADINGS[tool])


def kill_mid_write(tool: str, output: pathlib.Path, markdown: pathlib.Path, which: str) -> pathlib.Path:
    """Starts the tool stalling in the write of `which`, kills it once the temporary file holds data;
    returns the temporary file's path."""
    target = output if which == "json" else markdown
    process = subprocess.Popen(tool_command(tool, output, markdown),
                               env=python_env(XLLM_KERNEL_TEST_FAULT=f"stall-report-write:{WRITES[which]}"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    temporary = target.with_name(f"{target.name}.tmp.{process.pid}")
    try:
        deadline = time.monotonic() + 240
        while not (temporary.exists() and temporary.stat().st_size > 0):
            if process.poll() is not None:
                pytest.fail(f"{tool} ended ({process.returncode}) before stalling: {process.stderr.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{tool} did not reach the write of {temporary}")
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    return temporary


@pytest.fixture(params=["numerics", "benchmark"])
def tool(request):
    if not hasattr(_C, f"{request.param}_main"):
        pytest.skip(f"this build has no {request.param} tool")
    return request.param


@pytest.mark.parametrize("which", ["json", "markdown"])
def test_killed_while_writing_keeps_previous_report(tool, which, tmp_path):
    output, markdown = tmp_path / "report.json", tmp_path / "report.md"
    first = run_tool(tool, output, markdown)
    assert first.returncode == 0, first.stderr
    check_report(tool, output, markdown)
    previous = {output: output.read_bytes(), markdown: markdown.read_bytes()}

    temporary = kill_mid_write(tool, output, markdown, which)

    target = output if which == "json" else markdown
    # The report being written is the previous one, byte for byte; the partial data went only into
    # the temporary file, which is named as one and holds the first half of a report.
    assert target.read_bytes() == previous[target]
    assert 0 < temporary.stat().st_size < len(previous[target]) * 2
    if which == "json":
        assert markdown.read_bytes() == previous[markdown]  # never reached
        with pytest.raises(json.JSONDecodeError):
            json.loads(temporary.read_text())
    else:
        # The JSON, written before it, is the new report, whole.
        assert json.loads(output.read_text())["summary"]["exit_code"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.json", "report.md", temporary.name])

    # The next run writes over both despite the leftover.
    again = run_tool(tool, output, markdown)
    assert again.returncode == 0, again.stderr
    check_report(tool, output, markdown)
    assert temporary.exists() and len(list(tmp_path.iterdir())) == 3


def test_killed_on_first_report_leaves_no_report(tool, tmp_path):
    output, markdown = tmp_path / "report.json", tmp_path / "report.md"
    temporary = kill_mid_write(tool, output, markdown, "json")
    assert not output.exists() and not markdown.exists()
    assert [p.name for p in tmp_path.iterdir()] == [temporary.name]


def test_stall_fault_is_a_usage_error_when_malformed(tmp_path):
    if not hasattr(_C, "numerics_main"):
        pytest.skip("this build has no numerics tool")
    output, markdown = tmp_path / "report.json", tmp_path / "report.md"
    result = run_tool("numerics", output, markdown, XLLM_KERNEL_TEST_FAULT="stall-report-write:0")
    assert result.returncode == 2
    assert "stall-report-write takes N >= 1" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_writer_syncs_file_and_directory(tmp_path):
    """strace shows fsync of the temporary file before the rename and of the directory after it."""
    import shutil

    if shutil.which("strace") is None or not hasattr(_C, "numerics_main"):
        pytest.skip("needs strace and the numerics tool")
    output, markdown = tmp_path / "report.json", tmp_path / "report.md"
    trace = tmp_path.parent / f"{tmp_path.name}.strace"
    command = ["strace", "-f", "-e", "trace=openat,fsync,rename,renameat,renameat2", "-o", str(trace),
               *tool_command("numerics", output, markdown)]
    result = subprocess.run(command, env=python_env(), capture_output=True, text=True, timeout=300)
    if result.returncode != 0 and "ptrace" in result.stderr:
        pytest.skip("ptrace is not permitted here")
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    events = []
    fds = {}
    for line in lines:
        call = line.split(None, 1)[1] if " " in line else line
        if call.startswith("openat(") and "= " in call and str(tmp_path) in call:
            path = call.split('"')[1]
            fd = call.rsplit("= ", 1)[1].split()[0]
            fds[fd] = path
            events.append(("open", path))
        elif call.startswith("fsync("):
            fd = call[len("fsync("):].split(")")[0]
            if fd in fds:
                events.append(("fsync", fds[fd]))
        elif call.startswith("rename") and str(tmp_path) in call:
            events.append(("rename", call.split('"')[3]))
    for final in (output, markdown):
        names = [e for e in events if e[1] in (str(final), str(tmp_path))
                 or e[1].startswith(f"{final}.tmp.")]
        kinds = [(kind, "dir" if path == str(tmp_path) else "tmp" if ".tmp." in path else "final")
                 for kind, path in names]
        assert ("fsync", "tmp") in kinds and ("rename", "final") in kinds, kinds
        assert kinds.index(("fsync", "tmp")) < kinds.index(("rename", "final")), kinds
        after = kinds[kinds.index(("rename", "final")):]
        assert ("fsync", "dir") in after, kinds
