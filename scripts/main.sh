#!/usr/bin/env bash
# The main job: set up, build, select implementations on the device, explain the selection, run
# every operation once, then validate (numerics) and time (benchmark) every implementation of every
# operation, then a short end-to-end run of a decoder (python -m xllm_kernel.e2e). Reports (JSON and
# Markdown) go to ${REPORT_DIR:-reports}/, with a plot of each benchmark (benchmark-OP.png: % of copy
# bandwidth per case and implementation; skipped without matplotlib).
#   DEVICE=cuda bash scripts/main.sh     # on a GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
# The Python the build used (scripts/setup.sh's virtual environment, with matplotlib for the plots).
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
DEVICE="${DEVICE:-cpu}"
REPORT_DIR="${REPORT_DIR:-reports}"
REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# CPU tensors of 2 MiB and more on transparent huge pages, as docs/operator-notes.md recommends for CPU KV
# caches (scattered rows on 4 KiB pages pay a page walk each); THP_MEM_ALLOC_ENABLE=0 turns it off.
# The reports record which pages the tensors got (environment.cpu_pages).
export THP_MEM_ALLOC_ENABLE="${THP_MEM_ALLOC_ENABLE:-1}"
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
bash scripts/plot-reports.sh "$REPORT_DIR" "$PYTHON" "$BUILD_DIR" || status=1
# End to end (python -m xllm_kernel.e2e): a short run of the tiny Llama preset, the selected
# implementations beside the torch solution and torch.compile of it, each validated against the
# float64 reference first (one to two minutes on two cores, most of it starting processes and
# compiling). E2E_ARGS replaces the model and workload flags, e.g.
# E2E_ARGS="--preset llama-3-8b --layers 2 --batch 16 --prompt-len 2048 --output-len 9 --synthetic-prefill".
echo "== end to end on $DEVICE"
# shellcheck disable=SC2086
PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" XLLM_KERNEL_LOG=off \
  "$PYTHON" -m xllm_kernel.e2e ${E2E_ARGS:---preset tiny --batch 4 --prompt-len 64,32 --output-len 16} \
  --device "$DEVICE" --revision "$REVISION" --output "$REPORT_DIR/e2e.json" --markdown "$REPORT_DIR/e2e.md" \
  --plot "$REPORT_DIR/e2e.png" || status=1
echo "reports in $REPORT_DIR/:" && ls "$REPORT_DIR"
exit "$status"
