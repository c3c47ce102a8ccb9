"""The numerics catalog: Python suites, added to the C++ tools' suite list before a tool runs.

_BUILTINS: the package's own suite modules, xllm_kernel.numerics.<operation>, found by scanning
this folder for modules that assign SUITE at top level (read, not imported: nothing to list by
hand). Extensions: every module named by XLLM_KERNEL_EXTENSIONS or the xllm_kernel.extensions entry
points (xllm_kernel._extensions) that exports SUITE. Loading imports only those modules; a suite
module imports no device SDK at import time (torch is fine), so `--help` works anywhere.

    from xllm_kernel.numerics import catalog
    catalog.load()        # {operation: OperationSuite}; the tools now know these operations
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import threading

from xllm_kernel._extensions import extension_modules
from xllm_kernel.numerics.suite import OperationSuite

_PACKAGE = __name__.rsplit(".", 1)[0]


def _exports_suite(path: pathlib.Path) -> bool:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == "SUITE" for t in targets):
            return True
    return False


def _discover(folder: pathlib.Path | None = None, package: str = _PACKAGE) -> tuple[str, ...]:
    """`package`.<stem> for every <stem>.py in `folder` (default: this module's folder, as the
    package was imported from it, symbolic links not followed) that assigns SUITE at top level."""
    folder = pathlib.Path(__file__).absolute().parent if folder is None else pathlib.Path(folder)
    return tuple(f"{package}.{p.stem}" for p in sorted(folder.glob("*.py"))
                 if not p.stem.startswith("_") and _exports_suite(p))


_BUILTINS: tuple[str, ...] = _discover()

_lock = threading.Lock()
_added: dict[str, tuple[OperationSuite, str]] = {}  # operation -> (suite, module) added to the tools


def suite_modules() -> tuple[str, ...]:
    """Module paths that may export SUITE: the built-in ones, then the extensions."""
    return _BUILTINS + tuple(m for m in extension_modules() if m not in _BUILTINS)


def load() -> dict[str, OperationSuite]:
    """Imports the suite modules and adds each SUITE to the tools' suite list (once per process).

    An extension module without SUITE (an operator group) is skipped. Import errors propagate; an
    operation that already has a suite (a C++ one, or another module's) raises ValueError naming both.
    """
    with _lock:
        for name in suite_modules():
            module = importlib.import_module(name)
            suite = getattr(module, "SUITE", None)
            if suite is None:
                continue
            if not isinstance(suite, OperationSuite):
                raise TypeError(f"{name}.SUITE must be an xllm_kernel.numerics.suite.OperationSuite, "
                                f"got {type(suite).__name__}")
            known = _added.get(suite.operation)
            if known is not None and known[0] is suite:
                continue
            add(suite, origin=f"Python module {name}")
            _added[suite.operation] = (suite, name)
        return {op: suite for op, (suite, _) in _added.items()}


def add(suite: OperationSuite, origin: str) -> None:
    """Adds one suite to the tools' suite list (load() does this for every suite module)."""
    from xllm_kernel.numerics._bridge import SuiteAdapter
    from xllm_kernel.numerics.verify import _numerics

    _numerics().add_suite(SuiteAdapter(suite, origin))


def suites() -> tuple[tuple[str, str], ...]:
    """(operation, origin) of every suite the tools know, C++ and Python."""
    from xllm_kernel.numerics.verify import _numerics

    return tuple(tuple(s) for s in _numerics().suites())
