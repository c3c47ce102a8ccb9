"""The wheel: the package in python/xllm_kernel plus the same CMake project scripts/build.sh builds.

    pip install --no-build-isolation .        # builds against the environment's torch (an isolated build stops)
    pip wheel --no-build-isolation --no-deps -w dist .

Nothing compiles at import time: CMake builds libxllm_kernel (+ libxllm_kernel_tools, + any device
plugin such as libxllm_kernel_cuda.so) and the extension xllm_kernel._C, and its install component
xllm_kernel_python lays them out side by side in the package, RPATH $ORIGIN. The extension is
built against one torch's C++ ABI, so the wheel requires exactly that torch version.

Environment:
  XLLM_KERNEL_CMAKE_BUILD_DIR  an already configured and built tree (e.g. build/ from scripts/build.sh)
                               to take the libraries and plugins from as they are, building only the
                               extension; default: build-wheel/, configured here with the tests off
                               and built whole
  CMAKE_ARGS                   extra arguments for configuring build-wheel/
  JOBS                         parallel build jobs (default: the CPU count)
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def project_version() -> str:
    """The CMake project's version: one number for the C++ package and the wheel."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(xllm_kernel\s+VERSION\s+([0-9.]+)", text).group(1)


def torch_requirement() -> str:
    try:
        import torch
    except ImportError:  # metadata only (an sdist): any torch the code builds with
        return "torch>=2.4"
    # The extension is built against this torch's C++ ABI.
    return "torch==" + torch.__version__.split("+")[0]


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if importlib.util.find_spec("torch") is None:
            raise RuntimeError(
                f"torch is not importable from {sys.executable}: build in the environment that has the torch "
                "to build against, without build isolation: pip install --no-build-isolation ."
            )
        given = os.environ.get("XLLM_KERNEL_CMAKE_BUILD_DIR")
        build_dir = pathlib.Path(given).resolve() if given else ROOT / "build-wheel"
        reuse = bool(given) and (build_dir / "CMakeCache.txt").exists()
        if not reuse:
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            self._run(
                ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
                 "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython3_EXECUTABLE={sys.executable}",
                 "-DXLLM_KERNEL_BUILD_TESTS=OFF",
                 "-DXLLM_KERNEL_BUILD_PYTHON=ON",
                 *shlex.split(os.environ.get("CMAKE_ARGS", ""))]
            )
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 1))
        # A tree of one's own is built whole (device plugins are targets setup.py cannot name); a
        # reused one only as far as the extension needs, leaving its other targets to their owner.
        self._run(["cmake", "--build", str(build_dir), "-j", jobs, *(["--target", "xllm_kernel_python"] if reuse else [])])
        # The package directory's parent: build/lib.* for a wheel, python/ for an in-place build.
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        prefix = target.parent.parent
        self._run(["cmake", "--install", str(build_dir), "--component", "xllm_kernel_python", "--prefix", str(prefix)])
        if not target.exists():
            raise RuntimeError(
                f"{build_dir} did not produce {target.name}: it was configured for another Python than "
                f"{sys.executable} (or with XLLM_KERNEL_BUILD_PYTHON=OFF)"
            )

    @staticmethod
    def _run(command: list[str]) -> None:
        print("+", shlex.join(command), flush=True)
        subprocess.run(command, check=True)


setup(
    version=project_version(),
    install_requires=[torch_requirement()],
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[CMakeExtension("xllm_kernel._C")],
    cmdclass={"build_ext": CMakeBuild},
    # build/ is the CMake tree of scripts/build.sh; keep setuptools' staging out of it.
    options={"build": {"build_base": "build-wheel/setuptools"}},
    zip_safe=False,
)
