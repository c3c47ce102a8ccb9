"""The README stays a short entry point whose commands and links are true (issue 42): at most 260 lines; its two
commands are the scripts CI runs; the scripts, `build/` tools and `python -m` modules it names exist; every
relative link in README.md and docs/*.md reaches a file (and a heading, where it names one); every docs page is
reachable from the README."""

from __future__ import annotations

import pathlib
import re

import pytest

from conftest import ROOT

MAX_LINES = 260
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where Markdown links and headings live."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(page: pathlib.Path) -> set[str]:
    """GitHub's heading ids: lowercase, punctuation dropped (letters, digits, '_', '-' and spaces kept), spaces to
    '-', repeats suffixed -1, -2, ..."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    ids = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def _links(page: pathlib.Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked here


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_is_an_entry_point():
    lines = _readme().count("\n")
    assert lines <= MAX_LINES, (f"README.md has {lines} lines, more than {MAX_LINES}: move the detail into a docs/ "
                                f"page and link it")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(ROOT) if ROOT in resolved.parents else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists() or page.suffix != ".md":
            continue
        seen.add(page)
        for target in _links(page):
            path = target.partition("#")[0]
            if path:
                todo.append((page.parent / path).resolve())
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in seen]
    assert not missing, f"docs pages no link from README.md leads to: {missing}"


def test_the_two_commands_are_what_ci_runs():
    readme = _readme()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "README.md: the two commands are not in a bash block under '## The two commands'"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["bash scripts/main.sh", "bash scripts/test.sh"], commands
    for command in commands:
        assert (ROOT / command.split()[1]).is_file(), command
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec bash scripts/test\.sh\b", ci, re.MULTILINE), ".ci/run no longer runs bash scripts/test.sh"


def test_named_scripts_tools_and_modules_exist():
    """The scripts, the build tree's CLIs and the `python -m` modules the README's commands use."""
    readme = _readme()
    for script in sorted(set(re.findall(r"\bbash (scripts/[\w.-]+\.sh)", readme))):
        assert (ROOT / script).is_file(), f"README.md names {script}, which does not exist"
    tools = {p.stem for p in (ROOT / "tools").glob("*.cpp")}
    for tool in sorted(set(re.findall(r"\bbuild/xllm-kernel-([\w-]+)", readme))):
        assert tool in tools, f"README.md names build/xllm-kernel-{tool}; tools/ has {sorted(tools)}"
    package = ROOT / "python"
    for module in sorted(set(re.findall(r"python -m (xllm_kernel(?:\.\w+)*)", readme))):
        path = package / module.replace(".", "/")
        assert (path / "__main__.py").is_file() or path.with_suffix(".py").is_file(), \
            f"README.md runs `python -m {module}`, which has no __main__.py or module file"
