"""The package tests' root, for the guide's command (run from the repository root after installing
the package):

    python -m pytest -q test --ignore=test/npu

It collects test/test_*.py (the kernel CLI protocol, test_kernel_cli.py) and test/python/ (the
package's tests); the C++ tests' folders hold no Python tests, and test/npu needs an Ascend NPU.
The package under test is the installed one, else the build tree's ($BUILD_DIR/python, default
build/python: what scripts/test.sh puts on PYTHONPATH).

Optional tools (jsonschema, matplotlib, torchrun, a compiler, pip for the wheel build) are skipped
with their reason where missing; tests marked `slow` (the wheel build and installation, a large
statistical test) run only when selected: `-m slow`, or `-m "slow or not slow"` for everything, as
scripts/test.sh does.
"""

from __future__ import annotations

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

try:
    import xllm_kernel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / os.environ.get("BUILD_DIR", "build") / "python"))
    import xllm_kernel  # noqa: F401
