"""The package's import layering, read from its sources (ast), function-local imports included:
the registry imports neither the catalog nor the runtime (they install what it needs from them),
the numerics suite protocol builds on verify and never the other way round, and no module of the
package imports another that imports it back."""

from __future__ import annotations

import ast
import pathlib

import pytest

SOURCES = pathlib.Path(__file__).resolve().parents[2] / "python"
PACKAGE = SOURCES / "xllm_kernel"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SOURCES).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(path: pathlib.Path) -> set[str]:
    """Every module name an import statement anywhere in `path` may import (for `from a import b`,
    both a and a.b), and every string given to importlib.import_module or __import__."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _imports_of_the_package(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    # The package itself (xllm_kernel/__init__.py, the front door that imports every layer) is left
    # out: importing any submodule runs it first, which is not an edge of the layering.
    return {m for m in _imported(path) if m in modules and m != "xllm_kernel" and m != _module_name(path)}


def test_the_registry_imports_neither_the_catalog_nor_the_runtime():
    imported = _imported(PACKAGE / "registry.py")
    above = {"xllm_kernel.catalog", "xllm_kernel.runtime", "xllm_kernel.numerics"}
    offending = sorted(m for m in imported if any(m == a or m.startswith(a + ".") for a in above))
    assert not offending, f"registry.py imports {offending}; install a hook from the layer above instead"


def test_the_catalog_does_not_import_the_runtime():
    imported = _imported(PACKAGE / "catalog.py")
    assert "xllm_kernel.runtime" not in imported


def test_numerics_verify_does_not_import_the_suite_protocol():
    imported = _imported(PACKAGE / "numerics" / "verify.py")
    assert "xllm_kernel.numerics.suite" not in imported
    # suite.py builds on verify (Validation lives there); the dependency is one-way.
    assert "xllm_kernel.numerics.verify" in _imported(PACKAGE / "numerics" / "suite.py")


def test_the_hooks_reach_the_layers_above(cpu, monkeypatch):
    from xllm_kernel import catalog, registry, runtime

    assert set(registry._above) == {"load_catalog", "prepared"}
    op = registry.Operation(registry.contract("rms_norm"))
    assert op.get_prepared("cpu") is runtime.bindings("cpu")["rms_norm"]
    # The hooks look the layer's function up when called, as the registry's own imports did.
    calls = []
    monkeypatch.setattr(catalog, "load", lambda: calls.append("load"))
    with pytest.raises(ValueError):
        registry.contract("no_such_operation")
    assert calls == ["load"]


def test_no_module_of_the_package_imports_itself_back():
    modules = _modules()
    graph = {name: _imports_of_the_package(path, modules) for name, path in modules.items()}
    assert graph["xllm_kernel.catalog"] >= {"xllm_kernel.registry"}  # the walk sees the edges it should

    # Depth-first search for a back edge; the cycle it closes is the failure message.
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_result_modules_sit_above_what_they_read():
    # selection reads the runtime, distributed reads report; never the other way round.
    assert "xllm_kernel.runtime" in _imported(PACKAGE / "selection.py")
    assert "xllm_kernel.selection" not in _imported(PACKAGE / "runtime.py")
    assert "xllm_kernel.numerics.report" in _imported(PACKAGE / "numerics" / "distributed.py")
    assert "xllm_kernel.numerics.distributed" not in _imported(PACKAGE / "numerics" / "report.py")
    # The suite protocol and the shared arguments need no report or distributed layer.
    for module in ("suite.py", "arguments.py", "verify.py"):
        imported = _imported(PACKAGE / "numerics" / module)
        assert not {"xllm_kernel.numerics.report", "xllm_kernel.numerics.distributed"} & imported, module
