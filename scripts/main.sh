#!/usr/bin/env bash
# The main job: set up, build, select implementations on the device, explain the selection, run
# every operation once, then per operation the numerics and the benchmark, then a short end-to-end
# run of a decoder (python -m xllm_kernel.e2e), and a one-screen summary (REPORT_DIR/summary.md).
# Reports (JSON and Markdown) go to ${REPORT_DIR:-reports}/; each says which grid its cases came from.
#
#   bash scripts/main.sh          # quick (a few minutes after the build on 2 cores): each suite's
#                                 # headline cases (--grid headline), the numerics of every
#                                 # implementation, the benchmark of the selected one beside torch's,
#                                 # the e2e run without the torch.compile side
#   FULL=1 bash scripts/main.sh   # the full sweep: every implementation over each tool's default
#                                 # grid, a plot per benchmark (benchmark-OP.png), e2e with torch.compile
#   DEVICE=cuda bash scripts/main.sh     # on a GPU machine
#   SKIP_BUILD=1 BUILD_DIR=build bash scripts/main.sh   # an existing build as it is (its test)
#   MAIN_BENCHMARK_ARGS="--iterations 5"                # more flags for every benchmark run
#
# Progress (step k/n, elapsed, an estimate of what is left) goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ "${SKIP_BUILD:-0}" = 1 ]; then
  BUILD_DIR="${BUILD_DIR:-build}"
else
  BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
fi
echo "[main] built in $(( $(date +%s) - start )) s" >&2
# The Python the build used (scripts/setup.sh's virtual environment, with matplotlib for the plots).
PYTHON="$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
DEVICE="${DEVICE:-cpu}"
REPORT_DIR="${REPORT_DIR:-reports}"
REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
FULL="${FULL:-0}"
# CPU tensors of 2 MiB and more on transparent huge pages, as docs/operator-notes.md recommends for CPU KV
# caches (scattered rows on 4 KiB pages pay a page walk each); THP_MEM_ALLOC_ENABLE=0 turns it off.
# The reports record which pages the tensors got (environment.cpu_pages).
export THP_MEM_ALLOC_ENABLE="${THP_MEM_ALLOC_ENABLE:-1}"
mkdir -p "$REPORT_DIR"
export PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}"

if [ "$FULL" = 1 ]; then
  grid=(--grid default)
  numerics_impl=all
  bench_impl=all
  bench_quick=()
  # E2E_ARGS replaces the model and workload flags, e.g.
  # E2E_ARGS="--preset llama-3-8b --layers 2 --batch 16 --prompt-len 2048 --output-len 9 --synthetic-prefill".
  e2e_default="--preset tiny --batch 4 --prompt-len 64,32 --output-len 16"
else
  grid=(--grid headline)
  numerics_impl=all
  bench_impl=selected,torch
  # A slow baseline (torch's int8 linear: a second a call) takes a few samples, not 20.
  bench_quick=(--budget 0.3)
  e2e_default="--preset tiny --batch 4 --prompt-len 64,32 --output-len 16 --sides selected,torch"
fi

clock() { printf '%d:%02d' $(( $1 / 60 )) $(( $1 % 60 )); }
ops=($("$BUILD_DIR/xllm-kernel-info" --operations-list))
steps=$(( ${#ops[@]} + 2 ))  # explain, every operation, end to end
step_start=$(date +%s)
ops_start=$step_start
# progress STEP WHAT: the step's number, what runs, the time since the first step and, from the
# mean time of the operations done so far, about how long the rest takes (the end-to-end step
# counted as one operation).
progress() {
  local k="$1" what="$2" now elapsed left=""
  now=$(date +%s)
  elapsed=$(( now - step_start ))
  [ "$k" -eq 2 ] && ops_start=$now
  if [ "$k" -gt 2 ]; then
    left=", about $(clock $(( (now - ops_start) * (steps - k + 1) / (k - 2) ))) left"
  fi
  echo "[main] $k/$steps $what (elapsed $(clock "$elapsed")$left)" >&2
}

status=0
progress 1 "initialize, explain and one call of every operation on $DEVICE"
"$BUILD_DIR/xllm-kernel-info" --device "$DEVICE" --explain --run

k=1
for op in "${ops[@]}"; do
  k=$(( k + 1 ))
  progress "$k" "$op: numerics ($numerics_impl), then benchmark ($bench_impl)"
  echo "== numerics: $op on $DEVICE (${grid[1]} grid)"
  "$BUILD_DIR/xllm-kernel-numerics" --operation "$op" --device "$DEVICE" --implementation "$numerics_impl" \
    "${grid[@]}" --revision "$REVISION" --output "$REPORT_DIR/numerics-$op.json" \
    --markdown "$REPORT_DIR/numerics-$op.md" | sed -n '1,12p' || status=1
  echo "== benchmark: $op on $DEVICE (${grid[1]} grid)"
  # shellcheck disable=SC2086
  "$BUILD_DIR/xllm-kernel-benchmark" --operation "$op" --device "$DEVICE" --implementation "$bench_impl" \
    "${grid[@]}" ${bench_quick[@]+"${bench_quick[@]}"} ${MAIN_BENCHMARK_ARGS:-} --revision "$REVISION" --output "$REPORT_DIR/benchmark-$op.json" \
    --markdown "$REPORT_DIR/benchmark-$op.md" || status=1
done
if [ "$FULL" = 1 ]; then
  bash scripts/plot-reports.sh "$REPORT_DIR" "$PYTHON" "$BUILD_DIR" || status=1
fi
# End to end (python -m xllm_kernel.e2e): a short run of the tiny Llama preset, the selected
# implementations beside the torch solution (and, with FULL=1, torch.compile of it), each validated
# against the float64 reference first.
progress "$steps" "end to end on $DEVICE"
echo "== end to end on $DEVICE"
# shellcheck disable=SC2086
XLLM_KERNEL_LOG=off "$PYTHON" -m xllm_kernel.e2e ${E2E_ARGS:-$e2e_default} \
  --device "$DEVICE" --revision "$REVISION" --output "$REPORT_DIR/e2e.json" --markdown "$REPORT_DIR/e2e.md" \
  --plot "$REPORT_DIR/e2e.png" > "$REPORT_DIR/e2e.log" || { status=1; cat "$REPORT_DIR/e2e.log"; }
echo "[main] done in $(clock $(( $(date +%s) - start ))) ($(clock $(( $(date +%s) - step_start ))) after the build)" >&2
"$PYTHON" -m xllm_kernel.benchmark.brief "$REPORT_DIR" --output "$REPORT_DIR/summary.md" || status=1
exit "$status"
