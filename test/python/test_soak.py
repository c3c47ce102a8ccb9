"""The soaks stay working: scripts/soak.py (torch.ops.xllm_kernel.* and xllm_kernel.ops) with few calls
covers every catalog operation and passes; scripts/soak.sh runs 10^6."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xllm_kernel import _C

from conftest import ROOT, python_env


def test_python_soak_small(cpu):
    if not hasattr(_C, "soak_cases"):
        pytest.skip("this build has no tools")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--calls", "5000"],
                            env=python_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| 5000 |" in result.stdout
    # Every operation of the catalog was called (the warm-up calls every case twice: 5000 calls do;
    # 20000 took 46 s and covered no more).
    for operation in cpu:
        assert f"| {operation} |" in result.stdout, operation


def test_python_soak_rejects_bad_flags():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--calls", "0"],
                            env=python_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "--calls" in result.stderr
