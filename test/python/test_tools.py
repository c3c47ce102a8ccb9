"""The -m entry points: python -m xllm_kernel.numerics / .benchmark run the C++ tools with the same
flags (or say clearly that this build has none); --help needs no device SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xllm_kernel import _C

from conftest import python_env


def run_module(*args: str) -> subprocess.CompletedProcess:
    # No device visible: --help must not need one.
    return subprocess.run([sys.executable, "-m", *args], env=python_env(CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("tool", ["numerics", "benchmark"])
def test_tool_help(tool):
    result = run_module(f"xllm_kernel.{tool}", "--help")
    if hasattr(_C, f"{tool}_main"):
        assert result.returncode == 0, result.stderr
        assert "--operation" in result.stdout and "--device" in result.stdout
    else:
        assert result.returncode == 2
        assert f"this build of xllm_kernel has no {tool} tool" in result.stderr


def test_listing_and_explain_entry_point():
    result = run_module("xllm_kernel", "--explain", "cpu")
    assert result.returncode == 0, result.stderr
    assert "registered implementations:" in result.stdout
    assert "rms_norm on cpu (eager)" in result.stdout and "cpu.native.rms_norm" in result.stdout
