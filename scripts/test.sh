#!/usr/bin/env bash
# Sets up, builds and runs every test: CTest (GoogleTest suites, CLI checks, the installed-package
# consumer), then pytest on the Python package in the build tree (test/python, including the wheel
# installed into a fresh virtual environment).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
echo "[test] built in $(( $(date +%s) - start )) s" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" ${CTEST_ARGS:-}
echo "[test] ctest done at $(( $(date +%s) - start )) s" >&2

# The Python the build used (scripts/setup.sh's virtual environment), on the build tree's package.
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
rc=0
PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m pytest -q test/python ${PYTEST_ARGS:-} || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: test/python must hold the package's tests" >&2
  exit 1
fi
echo "[test] total $(( $(date +%s) - start )) s" >&2
exit "$rc"
