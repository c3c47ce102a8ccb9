#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (sm_80 / sm_90): build with the CUDA plugin, run
# the CUDA tests, validate every CUDA implementation in eager and graph mode, and benchmark the
# normalization group side by side with cuda.torch (PyTorch's own kernels) from 1 x 4096 to
# 16384 x 8192 in bfloat16, against the copy bandwidth measured in the same run. Reports go to
# ${REPORT_DIR:-reports/gpu}/. Meant to finish in under ten minutes on one GPU.
#
#   bash scripts/gpu-check.sh                 # set up (scripts/setup.sh) and build first
#   SKIP_BUILD=1 BUILD_DIR=build bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT_DIR="${REPORT_DIR:-reports/gpu}"
mkdir -p "$REPORT_DIR"
if [ -z "${SKIP_BUILD:-}" ]; then
  BUILD_DIR="$(CMAKE_ARGS="-DXLLM_KERNEL_CUDA=ON ${CMAKE_ARGS:-}" bash scripts/build.sh | tail -n 1)" || exit 1
fi
BUILD_DIR="${BUILD_DIR:-build}"
REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
export XLLM_KERNEL_LOG=off
status=0
step() { echo; echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$BUILD_DIR/xllm-kernel-info" --device cuda --explain --run || status=1

step "CUDA tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -R 'cuda|Cuda|CUDA' || status=1

for op in $("$BUILD_DIR/xllm-kernel-info" --operations-list); do
  for mode in eager graph; do
    step "numerics: $op, cuda, $mode"
    "$BUILD_DIR/xllm-kernel-numerics" --operation "$op" --device cuda --mode "$mode" --implementation all \
      --layout contiguous,strided,3d --revision "$REVISION" \
      --output "$REPORT_DIR/numerics-$op-$mode.json" --markdown "$REPORT_DIR/numerics-$op-$mode.md" \
      | sed -n '1,10p'
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
done

for op in $("$BUILD_DIR/xllm-kernel-info" --operations-list); do
  for mode in eager graph; do
    step "benchmark: $op, cuda, $mode, bfloat16"
    "$BUILD_DIR/xllm-kernel-benchmark" --operation "$op" --device cuda --mode "$mode" --implementation all \
      --tokens 1,16,128,1024,4096,16384 --hidden 4096,8192 --dtype bfloat16 --weight-dtype input \
      --iterations 30 --warmup 5 --copy-bytes 1073741824 --revision "$REVISION" \
      --output "$REPORT_DIR/benchmark-$op-$mode.json" --markdown "$REPORT_DIR/benchmark-$op-$mode.md" || status=1
  done
done
echo; echo "reports in $REPORT_DIR/ (status $status)"
exit "$status"
