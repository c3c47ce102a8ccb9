"""The guide's package-test command (section 6.2), as written, where only the package, PyTorch,
pytest and setuptools are installed:

    python -m pytest -q test --ignore=test/npu

A fresh virtual environment sees exactly those distributions and their requirements (linked from
this environment; nothing is downloaded), no jsonschema, matplotlib or pip, and no C++ compiler
(CXX names none). There the whole command collects without an error, and the tests of the optional
tools skip, each with its reason, while the rest pass; the slow wheel build, selected with -m slow,
skips for want of pip."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import PACKAGE_PARENT, ROOT

pytestmark = pytest.mark.slow

GIVEN = ("torch", "pytest", "setuptools")
OPTIONAL = ("jsonschema", "matplotlib", "pip")


def _closure(names) -> list[importlib.metadata.Distribution]:
    """The distributions `names` need (requirements without extras, markers evaluated here)."""
    from packaging.requirements import Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement this platform does not install
        seen[name] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _link_site(folder: pathlib.Path, dists) -> set[str]:
    """Links every top-level entry of `dists` (packages, modules, .dist-info) into `folder`."""
    folder.mkdir(parents=True)
    linked = set()
    for dist in dists:
        base = pathlib.Path(dist.locate_file(""))
        for f in dist.files or ():
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth") or top in linked:
                continue
            source = base / top
            if source.exists():
                (folder / top).symlink_to(source)
                linked.add(top)
    return linked


def test_the_guides_command_in_an_environment_without_the_optional_tools(tmp_path):
    dists = _closure(GIVEN)
    names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in dists}
    assert {"torch", "pytest", "setuptools"} <= names and not names & set(OPTIONAL), sorted(names)
    site = tmp_path / "site"
    linked = _link_site(site, dists)
    assert "torch" in linked and "pytest" in linked
    (site / "xllm_kernel").symlink_to(PACKAGE_PARENT / "xllm_kernel")  # the package under test

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    pathlib.Path(purelib, "minimal.pth").write_text(f"{site}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS") and not k.startswith("XLLM_KERNEL_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", CXX=str(tmp_path / "no-compiler" / "c++"),
               XLLM_KERNEL_LOG="off", CUDA_VISIBLE_DEVICES="", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    missing = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in "
                              f"{list(OPTIONAL)!r} if u.find_spec(m)])"], env=env, capture_output=True, text=True)
    assert missing.stdout.strip() == "[]", missing.stdout + missing.stderr

    def pytest_(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1200)

    # The whole command collects there: no test needs an optional tool to be imported.
    r = pytest_("test", "--ignore=test/npu", "--collect-only")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "error" not in r.stdout.lower().splitlines()[-1], r.stdout[-2000:]
    assert re.search(r"test/test_kernel_cli\.py::", r.stdout) and "test/python/test_examples.py::" in r.stdout

    # The tests of the optional tools: skipped with their reasons, the rest of those modules passes.
    optional = ["test/python/test_report_schemas.py", "test/python/test_plot.py",
                "test/python/test_compile.py", "test/python/test_python_results.py::test_reports_validate_against_their_schemas"]
    r = pytest_("-rs", *optional)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-6000:]
    skipped = re.findall(r"^SKIPPED \[\d+\] (\S+): (.+)$", r.stdout, re.M)
    reasons: dict[str, set[str]] = {}  # a module may skip several tests, each with its reason
    for where, why in skipped:
        reasons.setdefault(pathlib.Path(where.split(":")[0]).name, set()).add(why)
    assert "jsonschema is not installed (pip install jsonschema)" in reasons.get("test_report_schemas.py", ()), text
    assert "matplotlib is not installed (pip install matplotlib)" in reasons.get("test_plot.py", ()), text
    assert any(w.startswith("no C++ compiler: CXX=") for w in reasons.get("test_compile.py", ())), text
    assert "jsonschema is not installed (pip install jsonschema)" in reasons.get("test_python_results.py", ()), text
    assert re.search(r"\b[1-9]\d* passed", r.stdout), text  # test_plot's others, test_compile's tracing

    # The slow wheel build, selected by its marker: no pip here, so it skips saying so.
    r = pytest_("-rs", "-m", "slow", "test/python/test_wheel.py")
    assert r.returncode == 0 and "SKIPPED" in r.stdout and "pip is not installed in this environment" in r.stdout, (
        r.stdout[-3000:] + r.stderr[-3000:])
