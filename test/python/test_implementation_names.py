"""Every implementation name is written where it registers (issue 43): a search for a name that explain(),
a report or an override shows finds its bridge. A C++ bridge registers with
XLLM_REGISTER_NAMED("<device>.<solution>.<operation>[.<variant>]", ...) (src/ops/common/registration.h, which
checks the written name against the module's when the library loads); a Python implementation module with
@register_kernel(name="...", ...). This test reads the sources under src/ and python/: every implementation the
catalog declares has such a registration, and every written name is one the catalog declares (the CUDA and NPU
plugins' names included, which this machine may never load)."""

from __future__ import annotations

import ast
import re

import pytest

from conftest import ROOT

import xllm_kernel.catalog as catalog

CPP_SUFFIXES = {".cpp", ".h", ".cu", ".cuh"}
CPP_REGISTRATION = re.compile(r'\bXLLM_REGISTER_NAMED\(\s*"([^"]+)"')
CPP_COMMENT = re.compile(r"//[^\n]*")


def _python_registrations(text: str) -> list[str]:
    """The name= of every register_kernel(...) call (docstrings and comments are not calls)."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if called != "register_kernel":
            continue
        for keyword in node.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                names.append(keyword.value.value)
    return names


def registered_names(roots=("src", "python")) -> dict[str, list[str]]:
    """Each name written at a registration (outside comments and docstrings), with the files that write it."""
    found: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted((ROOT / root).rglob("*")):
            if not path.is_file() or path.suffix not in CPP_SUFFIXES | {".py"}:
                continue
            text = path.read_text(errors="replace")
            if path.suffix == ".py":
                names = _python_registrations(text)
            else:
                names = CPP_REGISTRATION.findall(CPP_COMMENT.sub("", text))
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def declared_names() -> set[str]:
    return {i.name for g in catalog.groups() for m in g.modules for i in m.implementations}


def test_the_catalog_declares_implementations_of_every_kind():
    names = declared_names()
    # Not vacuous: every device and solution of the library's families is there.
    for prefix in ("cpu.torch.", "cpu.native.", "cuda.torch.", "cuda.native.", "npu.torch."):
        assert any(n.startswith(prefix) for n in names), prefix
    assert "cpu.native.rms_norm_per_token_quant" in names


def test_every_declared_implementation_is_written_at_its_registration():
    written = registered_names()
    assert "npu.torch.rms_norm" in written and len(written["npu.torch.rms_norm"]) == 2, written.get(
        "npu.torch.rms_norm")  # the C++ plugin's and the Python module's
    missing = sorted(declared_names() - written.keys())
    assert not missing, (
        "implementations the catalog declares whose name no registration under src/ or python/ writes out "
        f"(XLLM_REGISTER_NAMED(\"<name>\", ...) or @register_kernel(name=\"<name>\", ...)): {missing}"
    )


def test_every_written_name_is_declared():
    declared = declared_names()
    stale = {n: files for n, files in registered_names().items() if n not in declared}
    assert not stale, f"registrations whose written name the catalog does not declare: {stale}"


@pytest.mark.parametrize("name", ["cpu.native.rms_norm_per_token_quant", "cuda.native.static_quant"])
def test_a_quantization_name_is_found_by_a_plain_search(name):
    hits = [
        p for p in (ROOT / "src").rglob("*.cpp") if f'"{name}"' in p.read_text(errors="replace")
    ]
    assert hits, f"no source under src/ contains \"{name}\""
