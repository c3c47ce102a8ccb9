#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and builds into ${BUILD_DIR:-build}. Prints the build dir last.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="$(bash scripts/setup.sh | tail -n 1)"
BUILD_DIR="${BUILD_DIR:-build}"
# Clones in other folders share the compiler cache (paths become relative to the checkout).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# The precompiled ATen headers (XLLM_KERNEL_TORCH_PCH): ccache caches a translation unit that uses
# one only with these sloppinesses (its manual, "Precompiled headers"), else it compiles it afresh.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
# The torch-npu wheel's headers for the ACLGraph library (scripts/torch-npu.sh; empty: none).
TORCH_NPU_DIR="$(bash scripts/torch-npu.sh "$PYTHON" | tail -n 1)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DPython3_EXECUTABLE="$PYTHON" -DXLLM_KERNEL_TORCH_NPU_DIR="$TORCH_NPU_DIR" ${CMAKE_ARGS:-} >&2
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" >&2
echo "$BUILD_DIR"
