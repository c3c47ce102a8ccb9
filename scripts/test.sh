#!/usr/bin/env bash
# Sets up, builds and runs every test: the torch-free kernel tests under ASan+UBSan (clang,
# scripts/sanitize.sh kernels), the compile guard (every translation unit with clang++ against
# the oldest supported torch's headers, scripts/compile-guard.sh), CTest (GoogleTest suites, CLI
# checks, the installed-package consumer), then pytest on the Python package in the build tree with
# the guide's command (`python -m pytest -q test --ignore=test/npu`: test/test_*.py and test/python),
# slow tests included (the wheel installed into a fresh virtual environment, the guide's command in a
# minimal one).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
echo "[test] built in $(( $(date +%s) - start )) s" >&2
# The torch-free kernels and their tests under ASan+UBSan (clang), in a build of their own.
SAN_DIR="${SAN_BUILD_DIR:-build-asan-kernels}"
san=0
BUILD_DIR="$SAN_DIR" bash scripts/sanitize.sh kernels >&2 || san=$?
echo "[test] kernel sanitizers done at $(( $(date +%s) - start )) s (exit $san)" >&2
guard=0
bash scripts/compile-guard.sh "$BUILD_DIR" || guard=$?
echo "[test] compile guard done at $(( $(date +%s) - start )) s (exit $guard)" >&2
# Parallel test processes each run torch's OpenMP threads: with OpenMP's default spin-waiting, the
# idle threads of one process spin on the cores another needs (two real-suite tests under -j2 on
# 2 cores: 132 s, against 65 s with passive waiting).
# A CTest failure does not stop pytest: one run shows every failure.
ctest_rc=0
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" ${CTEST_ARGS:-} || ctest_rc=$?
echo "[test] ctest done at $(( $(date +%s) - start )) s (exit $ctest_rc)" >&2
# Which kernel variants (CPU classes) ran here and which were skipped, from CTest's log.
python3 scripts/kernel_variants.py "$BUILD_DIR" --output "$BUILD_DIR/kernel-variants.md" >&2 || true

# The Python the build used (scripts/setup.sh's virtual environment), on the build tree's package.
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
rc=0
# One pytest worker per core (pytest-xdist, from scripts/setup.sh; PYTEST_WORKERS=0 runs them in
# this process).
workers="${PYTEST_WORKERS:-${JOBS:-$(nproc)}}"
xdist=()
[ "$workers" -gt 0 ] && "$PYTHON" -c "import xdist" 2>/dev/null && xdist=(-n "$workers")
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m pytest -q test --ignore=test/npu -m "slow or not slow" "${xdist[@]}" ${PYTEST_ARGS:-} || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: test/ and test/python must hold the package's tests" >&2
  exit 1
fi
echo "[test] total $(( $(date +%s) - start )) s" >&2
if [ "$ctest_rc" -ne 0 ]; then
  echo "[test] CTest failed (exit $ctest_rc): see 'The following tests FAILED' above" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
if [ "$guard" -ne 0 ]; then
  echo "[test] the compile guard failed (exit $guard): see its FAILED lines above" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
if [ "$san" -ne 0 ]; then
  echo "[test] the kernel tests under ASan+UBSan failed (exit $san):" >&2
  cat "$SAN_DIR/first-report.txt" >&2 2>/dev/null || echo "[test] (no sanitizer report: see the build or CTest output above)" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
