"""Shared fixtures. The package under test is the build tree's (scripts/test.sh puts
$BUILD_DIR/python on PYTHONPATH) or, failing that, build/python, or an installed one.

initialize() selects once per process, so this process initializes the CPU with the defaults
(session fixture `cpu`) and never registers kernels; tests that need another configuration run
Python in a subprocess (run_python)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

try:
    import xllm_kernel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / os.environ.get("BUILD_DIR", "build") / "python"))
    import xllm_kernel  # noqa: F401

# The directory that holds the package (not resolved: the build tree links its sources in).
PACKAGE_PARENT = pathlib.Path(xllm_kernel.__file__).parent.parent


# What torchrun sets for its ranks (and the tools' test fault hook): removed before starting one.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                      "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_RESTART_COUNT", "XLLM_KERNEL_TEST_FAULT")


def python_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLLM_KERNEL_OVERRIDE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_PARENT), env.get("PYTHONPATH")]))
    env["XLLM_KERNEL_LOG"] = "off"
    env.update(extra)
    return env


def run_python(code: str, *, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (a process of its own for initialize())."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=python_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def run_e2e(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m xllm_kernel.e2e ARGS` on one intra-op thread, outside any torchrun launch."""
    env = {k: v for k, v in python_env(OMP_NUM_THREADS="1").items() if k not in TORCHRUN_VARIABLES}
    return subprocess.run([sys.executable, "-m", "xllm_kernel.e2e", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def explain_run(result: subprocess.CompletedProcess) -> str:
    """A failed run's exit code and the tails of its output, for an assertion message."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-4000:]}"


@pytest.fixture(scope="session")
def cpu():
    """The CPU bindings of this process: the whole catalog, default selection."""
    import xllm_kernel

    for key in list(os.environ):
        if key.startswith("XLLM_KERNEL_OVERRIDE_"):
            del os.environ[key]
    return xllm_kernel.initialize(device="cpu")


# ---- optional tools: a test that needs one skips with the reason where it is missing -------------

def missing_compiler() -> str | None:
    """Why there is no C++ compiler here (torch.compile's inductor, the wheel build), or None."""
    import shutil

    given = os.environ.get("CXX")
    if given:
        return None if shutil.which(given) else f"no C++ compiler: CXX={given} is not found"
    if any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return None
    return "no C++ compiler (c++, g++ or clang++) on PATH"


def missing_torchrun() -> str | None:
    """Why torchrun (torch.distributed.run) cannot start ranks here, or None."""
    import importlib.util

    import torch

    if not torch.distributed.is_available():
        return "this torch is built without torch.distributed (torchrun)"
    if importlib.util.find_spec("torch.distributed.run") is None:
        return "torch.distributed.run (torchrun) is not importable"
    return None


def missing_pip() -> str | None:
    """Why `python -m pip` cannot build or install a wheel here, or None."""
    import importlib.util

    return None if importlib.util.find_spec("pip") is not None else "pip is not installed in this environment"


needs_compiler = pytest.mark.skipif(missing_compiler() is not None, reason=str(missing_compiler()))
needs_torchrun = pytest.mark.skipif(missing_torchrun() is not None, reason=str(missing_torchrun()))
