#!/usr/bin/env bash
# The soak: builds if needed, then runs the C++ soak (xllm-kernel-soak) and the Python soak
# (scripts/soak.py), each making CALLS calls of every catalog operation through its public path
# and failing when resident memory grows more than 5% after the warm-up or the CPU output block
# cache exceeds its bound. CALLS defaults to 2*10^5, the CI size (about 75 s in all on 2 shared
# cores); the full soak is 10^6 calls (about 3 minutes each for C++ and Python there):
#   CALLS=1000000 bash scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS="${CALLS:-200000}"
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -x "$BUILD_DIR/xllm-kernel-soak" ]; then
  BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
fi
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
export XLLM_KERNEL_LOG="${XLLM_KERNEL_LOG:-off}"
rc=0
"$BUILD_DIR/xllm-kernel-soak" --calls "$CALLS" ${SOAK_ARGS:-} || rc=1
echo
PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" scripts/soak.py --calls "$CALLS" ${SOAK_ARGS:-} || rc=1
exit "$rc"
