#!/usr/bin/env bash
# Sets up, builds and runs every test (CTest: GoogleTest suites, CLI checks, the installed-package
# consumer).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
echo "[test] built in $(( $(date +%s) - start )) s" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" ${CTEST_ARGS:-}
echo "[test] total $(( $(date +%s) - start )) s" >&2
