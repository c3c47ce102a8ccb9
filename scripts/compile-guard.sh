#!/usr/bin/env bash
# The compile guard (scripts/compile_guard.py): every C++ translation unit of a configured build,
# syntax only, with clang++ and against the headers of the oldest supported torch (2.11.0, the GPU
# test machines'), so that a translation unit that compiles only with g++, or only because torch
# 2.14 includes a header for it, fails CI here instead of the GPU check or the sanitizer build.
# scripts/test.sh (and so .ci/run) runs it after the build.
#   bash scripts/compile-guard.sh [BUILD_DIR]   (default build; JOBS=N; GUARD_TORCH=2.11.0;
#                                               GUARD_ONLY=REGEX checks only the files it matches;
#                                               GUARD_CACHE=DIR keeps the passes of unchanged translation
#                                               units, default ~/.cache/xllm-kernel/compile-guard, none: off)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)"
if [ -z "$PYTHON" ]; then
  echo "compile-guard: $BUILD_DIR is not a configured build (no Python3_EXECUTABLE in its CMakeCache.txt)" >&2
  exit 2
fi
command -v clang++ >/dev/null 2>&1 || bash scripts/install-clang.sh >&2
HEADERS="$(bash scripts/torch-headers.sh "$PYTHON" "${GUARD_TORCH:-2.11.0}" | tail -n 1)"
exec "$PYTHON" scripts/compile_guard.py --build-dir "$BUILD_DIR" --torch-headers "$HEADERS" \
  --jobs "${JOBS:-$(nproc)}" --only "${GUARD_ONLY:-}" \
  --cache "$( [ "${GUARD_CACHE:-}" = none ] || echo "${GUARD_CACHE:-$HOME/.cache/xllm-kernel/compile-guard}")"
