#!/usr/bin/env bash
# scripts/main.sh's quick default on an existing build (SKIP_BUILD=1): every operation's numerics and
# benchmark report on the headline grid, the end-to-end report, the summary, and the progress lines.
# Not timed: the benchmark runs with few samples here (MAIN_BENCHMARK_ARGS), which the reports record.
#   bash test/tools/main_quick_test.sh BUILD_DIR OUT_DIR PYTHON
set -euo pipefail
build="$1" out="$2" python="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$out"
mkdir -p "$out"
log="$out/stderr.log"
rc=0
SKIP_BUILD=1 BUILD_DIR="$build" REPORT_DIR="$out/reports" MAIN_BENCHMARK_ARGS="--iterations 2 --warmup 1" \
  XLLM_KERNEL_LOG=off bash "$root/scripts/main.sh" >"$out/stdout.log" 2>"$log" || rc=$?
fail() { echo "main_quick_test: $*" >&2; tail -n 40 "$log" >&2; exit 1; }
[ "$rc" -eq 0 ] || fail "scripts/main.sh exited $rc"
ops="$("$build/xllm-kernel-info" --operations-list)"
n=$(echo "$ops" | wc -w)
steps=$((n + 2))
for k in 1 "$steps"; do
  grep -q "^\[main\] $k/$steps " "$log" || fail "no progress line '[main] $k/$steps' on stderr"
done
grep -q "left)$" "$log" || fail "no progress line with an estimate of the time left"
"$python" - "$out/reports" $ops <<'PY' || fail "the reports above are not the quick default's"
import json, pathlib, sys
folder, ops = pathlib.Path(sys.argv[1]), sys.argv[2:]
problems = []
for op in ops:
    for kind in ("numerics", "benchmark"):
        path = folder / f"{kind}-{op}.json"
        if not path.exists() or not (folder / f"{kind}-{op}.md").exists():
            problems.append(f"{path} or its .md is missing")
            continue
        report = json.loads(path.read_text())
        if report.get("grid") != "headline":
            problems.append(f"{path}: grid {report.get('grid')!r}, expected 'headline'")
        if report["summary"]["exit_code"] != 0:
            problems.append(f"{path}: exit code {report['summary']['exit_code']}")
    numerics = folder / f"numerics-{op}.json"
    if numerics.exists():
        impls = json.loads(numerics.read_text())["implementations"]
        if not any(i["coverage"]["passed"] for i in impls):
            problems.append(f"{numerics}: no case passed")
    bench = folder / f"benchmark-{op}.json"
    if bench.exists():
        names = json.loads(bench.read_text())["implementations"]
        if not any(".torch." in n for n in names) or len(names) > 2:
            problems.append(f"{bench}: implementations {names}, expected the selected one and torch's")
for name in ("e2e.json", "summary.md"):
    if not (folder / name).exists():
        problems.append(f"{folder / name} is missing")
summary = (folder / "summary.md").read_text() if (folder / "summary.md").exists() else ""
for op in ops:
    if f"`{op}`" not in summary:
        problems.append(f"summary.md has no line of {op}")
print("\n".join(problems), file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "main_quick_test: $n operations, each with its numerics and benchmark reports on the headline grid; e2e and summary written"
