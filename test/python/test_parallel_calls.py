"""at::parallel_for is called only in src/core/parallel.cpp: it is a header template whose body is an
OpenMP region compiled into the caller, and only parallel.cpp is built with OpenMP against torch's libgomp.
Anywhere else it runs every range on one thread, silently (src/core/parallel.h): bridges use
detail::parallel_rows."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_only_parallel_cpp_calls_at_parallel_for():
    allowed = {pathlib.Path("src/core/parallel.cpp")}
    callers = []
    for folder in ("src", "csrc"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in {".cpp", ".h", ".cc", ".cu", ".cuh"}:
                continue
            rel = path.relative_to(ROOT)
            text = path.read_text(errors="replace")
            code = re.sub(r"//[^\n]*", "", text)  # comments may name it
            if re.search(r"\bat::parallel_for\s*\(", code) and rel not in allowed:
                callers.append(str(rel))
    assert not callers, f"at::parallel_for outside src/core/parallel.cpp (use detail::parallel_rows): {callers}"
