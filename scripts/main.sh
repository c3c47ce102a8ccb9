#!/usr/bin/env bash
# The main job: set up, build, select implementations on the device, explain the selection, run
# every operation once, then validate (numerics) and time (benchmark) every implementation of every
# operation. Reports (JSON and Markdown) go to ${REPORT_DIR:-reports}/.
#   DEVICE=cuda bash scripts/main.sh     # on a GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
DEVICE="${DEVICE:-cpu}"
REPORT_DIR="${REPORT_DIR:-reports}"
REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
mkdir -p "$REPORT_DIR"

"$BUILD_DIR/xllm-kernel-info" --device "$DEVICE" --explain --run

status=0
for op in $("$BUILD_DIR/xllm-kernel-info" --operations-list); do
  echo "== numerics: $op on $DEVICE"
  "$BUILD_DIR/xllm-kernel-numerics" --operation "$op" --device "$DEVICE" --implementation all \
    --revision "$REVISION" --output "$REPORT_DIR/numerics-$op.json" --markdown "$REPORT_DIR/numerics-$op.md" \
    | sed -n '1,12p' || status=1
  echo "== benchmark: $op on $DEVICE"
  "$BUILD_DIR/xllm-kernel-benchmark" --operation "$op" --device "$DEVICE" --implementation all \
    --revision "$REVISION" --output "$REPORT_DIR/benchmark-$op.json" --markdown "$REPORT_DIR/benchmark-$op.md" \
    || status=1
done
echo "reports in $REPORT_DIR/:" && ls "$REPORT_DIR"
exit "$status"
