"""The wheel builds (from the CMake tree under test, so nothing recompiles), installs into a fresh
virtual environment that sees the pinned torch, and works there."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

from conftest import PACKAGE_PARENT, ROOT, missing_compiler, missing_pip

pytestmark = pytest.mark.slow


def run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def test_wheel_builds_installs_and_imports(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("XLLM_KERNEL_OVERRIDE_")}
    # build/python/xllm_kernel -> build/: reuse that tree; without one setup.py builds build-wheel/.
    tree = PACKAGE_PARENT.parent
    if missing_pip():
        pytest.skip(missing_pip())
    if (tree / "CMakeCache.txt").exists():
        env["XLLM_KERNEL_CMAKE_BUILD_DIR"] = str(tree)
    else:  # setup.py configures and builds the CMake project from scratch
        if missing_compiler():
            pytest.skip(f"the wheel build compiles the library: {missing_compiler()}")
        if shutil.which("cmake") is None:
            pytest.skip("the wheel build needs CMake, which is not on PATH")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", str(dist),
         str(ROOT)], env=env)
    (wheel,) = dist.glob("xllm_kernel-*.whl")

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        extension = next(n for n in names if n.startswith("xllm_kernel/_C.") and n.endswith(".so"))
        z.extract(extension, tmp_path / "unpacked")
    assert {"xllm_kernel/libxllm_kernel.so.0", "xllm_kernel/ops/normalization/__init__.py",
            "xllm_kernel/numerics/__main__.py"} <= names
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in metadata
    if shutil.which("readelf"):
        dynamic = run(["readelf", "-d", str(tmp_path / "unpacked" / extension)]).stdout
        assert "[$ORIGIN]" in dynamic and str(ROOT) not in dynamic

    # A fresh environment; torch comes from the environment under test through a .pth file, so the
    # pinned wheel is neither downloaded nor installed again, and --no-index proves it. Without a pip
    # of its own (this one installs into it): the venv's bundled setuptools would shadow the newer
    # one torch requires.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    pathlib.Path(site, "pinned_torch.pth").write_text(str(pathlib.Path(torch.__file__).parent.parent) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", str(wheel)], env=env)

    check = textwrap.dedent(
        f"""
        import subprocess, sys, torch, xllm_kernel
        from xllm_kernel.ops import rms_norm
        assert xllm_kernel.__file__.startswith({str(venv)!r}), xllm_kernel.__file__
        b = xllm_kernel.initialize("cpu")
        x, w = torch.randn(4, 64), torch.rand(64)
        torch.testing.assert_close(rms_norm(x, w, 1e-6), b["rms_norm"].function(x, w, 1e-6))
        tool = subprocess.run([sys.executable, "-m", "xllm_kernel.numerics", "--help"], capture_output=True)
        assert tool.returncode == (0 if hasattr(xllm_kernel._C, "numerics_main") else 2), tool
        print(b["rms_norm"].spec.name)
        """
    )
    out = run([str(python), "-c", check], cwd=tmp_path, env={**env, "XLLM_KERNEL_LOG": "off"}).stdout
    assert out.strip() == "cpu.native.rms_norm"
