#!/usr/bin/env bash
# The GPU check, for an offline machine with an NVIDIA GPU (sm_80 / sm_90), CUDA's nvcc, CMake and
# a Python whose torch is a CUDA build (any torch from 2.10). Offline by construction: no apt-get,
# no pip, no downloads. Third-party pieces come from the bundle made here by
# scripts/device-bundle.sh (.device/); torch, its headers and libraries from ${PYTHON:-python3}.
#
#   bash scripts/device-bundle.sh     # here, with the network: .device/ (git-ignored)
#   bash scripts/gpu-check.sh         # there, from the source tree with .device/ beside it
#   bash scripts/gpu-check.sh --dry-run   # here: scripts/gpu-check-dry-run.sh (no network, no GPU)
#   bash scripts/gpu-check.sh --phase build,tests        # the check in two commands, each within the
#   bash scripts/gpu-check.sh --phase numerics,benchmark # device tool's 10 minutes (same machine, warm)
#   bash scripts/gpu-check.sh --phase numerics,benchmark --budget 420   # this command within 420 s
#
# Phases, each timed: environment; configure (prints where CMake found each bundled package); build
# (library, CUDA plugin, tools, CUDA tests, and the Python extension where Python's headers are there;
# the CPU tests too with CPU_TESTS=1);
# tests (ctest: the CUDA tests, or every test with CPU_TESTS=1); numerics of every operation
# (`xllm-kernel-info --operations-list`) with --device cuda --implementation all in eager and graph
# mode; benchmark of every operation, every implementation (cuda.torch side by side), eager and
# graph, in two passes: first the headline grid of every operation (tokens 1,8192 x hidden 4096,
# bfloat16; weights 4096x4096 bf16 and int4/g128), then, operation by operation while the budget
# allows, the full grid (tokens 1,128,8192; bfloat16, float16, float32; bf16, int8, int4/g128), whose
# time is estimated from that operation's headline pass (an operation left at its headline grid is
# named in the verdict; it is not a failure). Without a GPU the
# numerics and benchmark phases report "no GPU". Last comes one verdict table, read from the JSON
# reports (scripts/gpu_check_verdict.py); a failed build shows its first compiler error there.
# --budget SECONDS: this command's time (BUDGET_S). Each phase's estimate (configure, build and
# tests from the last dry run's times, scaled by cores: .device/phase-times.tsv, which
# scripts/device-bundle.sh copies from the dry run) is printed first and beside the real time.
# --phase LIST runs only those phases (build: environment, configure, build; tests; numerics;
# benchmark; all, the default), each command within its own BUDGET_S: a later command reuses the
# build and the reports of an earlier one, and its verdict covers every phase run so far (a run
# that includes build starts the reports afresh; a numerics or benchmark phase run again replaces
# that phase's reports). Reports go to gpu-reports/ (REPORTS_DIR); when
# OUT is set, the log, the verdict, summary.json and gpu-check-reports.tar.gz (all the reports) are
# copied there.
#
# Environment: PYTHON (python3), OUT, REPORTS_DIR (gpu-reports), BUILD_DIR
# (build-gpu-check), XLLM_KERNEL_BUNDLE (.device), JOBS (all cores), CUDA_ARCHITECTURES ("80;90",
# what ships), CPU_TESTS (0), BUDGET_S (540: the phases stop there, leaving time for the verdict),
# ALLOW_NO_GPU (0: without a GPU the check exits 3), VERIFY_BUNDLE (0: 1 fails unless CMake found
# every bundled package in the bundle), CHECK_DEVICE (cuda; cpu runs the numerics and benchmark
# phases on the CPU, to try the check's logic on a machine without a GPU), OPERATIONS (every
# operation; a comma list narrows the numerics and benchmark phases to those), NUMERICS_JOBS (numerics
# runs side by side: 4 on the GPU, 1 on the CPU), CPU_TARGETS (native: the
# CPU kernels for this machine's best Highway target; portable: every target CI builds).
# Exit: 0 passed, 1 a phase failed, 2 usage, 3 no GPU (unless ALLOW_NO_GPU=1).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--dry-run" ]; then
  shift
  exec bash scripts/gpu-check-dry-run.sh "$@"
fi
usage() {
  echo "usage: bash scripts/gpu-check.sh [--dry-run] [--phase build|tests|numerics|benchmark|all[,...]]" \
       "[--budget SECONDS]" \
       "(settings through the environment; see the script's header)" >&2
  exit 2
}
PHASE_LIST="all"
while [ $# -gt 0 ]; do
  case "$1" in
    --phase) [ $# -ge 2 ] || usage; PHASE_LIST="$2"; shift 2 ;;
    --budget)
      [ $# -ge 2 ] || usage
      case "$2" in
        ''|*[!0-9]*) echo "gpu-check: --budget: expected a whole number of seconds, given '$2'" >&2; exit 2 ;;
      esac
      BUDGET_S="$2"
      shift 2 ;;
    *) usage ;;
  esac
done
RUN_BUILD=0 RUN_TESTS=0 RUN_NUMERICS=0 RUN_BENCHMARK=0
for p in ${PHASE_LIST//,/ }; do
  case "$p" in
    all) RUN_BUILD=1 RUN_TESTS=1 RUN_NUMERICS=1 RUN_BENCHMARK=1 ;;
    build) RUN_BUILD=1 ;;
    tests) RUN_TESTS=1 ;;
    numerics) RUN_NUMERICS=1 ;;
    benchmark) RUN_BENCHMARK=1 ;;
    *) echo "gpu-check: --phase: expected build, tests, numerics, benchmark or all (comma-separated), given '$p'" >&2
       exit 2 ;;
  esac
done
[ $((RUN_BUILD + RUN_TESTS + RUN_NUMERICS + RUN_BENCHMARK)) -gt 0 ] || usage

T0=$(date +%s)
PYTHON="${PYTHON:-python3}"
PYTHON_PATH="$(command -v "$PYTHON")" || { echo "gpu-check: no Python '$PYTHON'" >&2; exit 1; }
BUNDLE_ARG="${XLLM_KERNEL_BUNDLE:-.device}"
if [ ! -f "$BUNDLE_ARG/MANIFEST" ]; then
  echo "gpu-check: no bundle at $BUNDLE_ARG (make it with the network: bash scripts/device-bundle.sh, and send it along)" >&2
  exit 1
fi
BUNDLE="$(cd "$BUNDLE_ARG" && pwd)"
REPORTS="${REPORTS_DIR:-gpu-reports}"
mkdir -p "$REPORTS" && REPORTS="$(cd "$REPORTS" && pwd)"
BUILD_DIR="${BUILD_DIR:-build-gpu-check}"
JOBS="${JOBS:-$(nproc)}"
CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-80;90}"
CPU_TESTS="${CPU_TESTS:-0}"
# The CPU kernels for this machine's best Highway target only: the check is about the GPU, and on
# the GPU machine's compiler (GCC 13) the portable targets made csrc/cpu/quantization alone run past
# 500 s of a 15-minute device lease.
CPU_TARGETS="${CPU_TARGETS:-native}"
BUDGET_S="${BUDGET_S:-540}"
RESERVE_S=15  # kept for the verdict
CHECK_DEVICE="${CHECK_DEVICE:-cuda}"
case "$CHECK_DEVICE" in cuda|cpu) ;; *) echo "gpu-check: CHECK_DEVICE: expected cuda or cpu, given '$CHECK_DEVICE'" >&2; exit 2 ;; esac
REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# A run that builds starts the reports afresh; a later phase adds to them.
if [ "$RUN_BUILD" = 1 ]; then
  rm -f "$REPORTS"/*.json "$REPORTS"/*.md "$REPORTS"/*.log "$REPORTS"/*.xml "$REPORTS"/phases.tsv "$REPORTS"/*.tar.gz
fi
exec > >(tee -a "$REPORTS/gpu-check.log") 2>&1
export XLLM_KERNEL_LOG=off PYTHONDONTWRITEBYTECODE=1

echo "gpu-check: revision $REVISION, phases $PHASE_LIST, bundle $BUNDLE, build $BUILD_DIR, reports $REPORTS," \
     "$JOBS jobs, budget ${BUDGET_S}s"

# ---- estimates: the last dry run's phase times (phase, seconds, cores), scaled to this machine's jobs ----
TIMES="$BUNDLE/phase-times.tsv"
# estimate PHASE: seconds, or nothing when there is no measured time to scale.
estimate() {
  [ -f "$TIMES" ] || return 0
  awk -F'\t' -v p="$1" -v jobs="$JOBS" '$1 == p && $3 > 0 {
    s = (p == "environment") ? $2 : $2 * $3 / jobs; printf "%d\n", s + 0.999 }' "$TIMES" | tail -n 1
}
if [ -f "$TIMES" ]; then
  line=""
  for p in configure build tests; do line="$line $p $(estimate "$p") s,"; done
  echo "estimates for $JOBS jobs, from $(sed -n 's/^# //p' "$TIMES" | head -n 1):${line%,};" \
       "numerics and benchmark: measured in the run (the benchmark's headline pass first)"
else
  echo "estimates: none (no $TIMES: run the dry run, then scripts/device-bundle.sh)"
fi

# ---- helpers ----
left() { echo $((BUDGET_S - ($(date +%s) - T0) - RESERVE_S)); }
# Runs a command within what is left of the budget (exit 124 when it ran out).
limited() {
  local limit
  limit="$(left)"
  if [ "$limit" -le 5 ]; then
    echo "  (no time left of the ${BUDGET_S}s budget for: $*)"
    return 124
  fi
  timeout -k 10 "$limit" "$@"
}
NOTE=""
# phase NAME FUNCTION: runs it, times it, records "name<TAB>seconds<TAB>status<TAB>estimate" in phases.tsv.
# The function sets NOTE; return 0 ok, 1 failed, 4 skipped (NOTE says why), 124 out of time.
phase() {
  local name="$1" fn="$2" start rc status guess
  start=$(date +%s)
  NOTE=""
  guess="$(estimate "$name")"
  [ -f "$REPORTS/phases.tsv" ] && sed -i "/^$name\t/d" "$REPORTS/phases.tsv"
  echo
  echo "== $name${guess:+ (estimate $guess s)}"
  "$fn"
  rc=$?
  case "$rc" in
    0) status="ok${NOTE:+: $NOTE}" ;;
    4) status="skipped: $NOTE" ;;
    124) status="out of time${NOTE:+ ($NOTE)}"; FAILED=1 ;;
    *) status="failed${NOTE:+: $NOTE}"; FAILED=1 ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$status" "$guess" >>"$REPORTS/phases.tsv"
  echo "-- $name: $status ($(($(date +%s) - start)) s)"
}
# first_error LOG: the log's first compiler/linker error line.
first_error() { "$PYTHON" scripts/gpu_check_verdict.py first-error "$1" 2>/dev/null; }
# built: whether an earlier phase left the build this one runs.
built() {
  [ -x "$BUILD_DIR/xllm-kernel-info" ] && { [ "$CHECK_DEVICE" = cpu ] || [ -e "$BUILD_DIR/libxllm_kernel_cuda.so" ]; } &&
    return 0
  NOTE="no build in $BUILD_DIR (run --phase build first, on the same machine)"
  return 1
}
# supports TOOL OPERATION FLAG: whether the operation's suite takes FLAG (a new operation may not).
# (The help is read whole first: grep -q would stop reading at the match, and under pipefail the
# tool's SIGPIPE would then make the answer no.)
# help_has TOOL OPERATION REGEX: whether the operation's help has a line matching REGEX.
help_has() {
  local help
  help="$("$BUILD_DIR/xllm-kernel-$1" --operation "$2" --help 2>/dev/null)"
  grep -q -- "$3" <<<"$help"
}
supports() { help_has "$1" "$2" "$3[ =,]"; }
FAILED=0
GPUS=0
PYTHON_EXT=ON

# ---- phases ----
phase_environment() {
  echo "host: $(uname -srm), $(nproc) cores"
  if ! "$PYTHON" - >"$REPORTS/environment.txt" 2>&1 <<'EOF'; then
import os, platform, sys
import torch
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "at", os.path.dirname(torch.__file__))
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print("gpus", n)
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    print("gpu", i, p.name, "sm_%d%d" % (p.major, p.minor), "%d SMs" % p.multi_processor_count)
EOF
    cat "$REPORTS/environment.txt"
    NOTE="$PYTHON cannot import torch"
    return 1
  fi
  cat "$REPORTS/environment.txt"
  GPUS="$(sed -n 's/^gpus //p' "$REPORTS/environment.txt")"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
  echo "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
  echo "cmake: $(cmake --version | head -n1); ninja: $(ninja --version 2>/dev/null || echo 'not found'); c++: $(c++ --version | head -n1)"
  if ! "$PYTHON" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then
    PYTHON_EXT=OFF
    echo "skipped: the Python extension xllm_kernel._C (no Python.h for $PYTHON_PATH)"
  fi
  NOTE="torch $(sed -n 's/^torch \([^ ]*\).*/\1/p' "$REPORTS/environment.txt"), $GPUS GPU(s)"
}

phase_configure() {
  # Only the bundle's pkg-config files, with the bundle's pkg-config.
  export PKG_CONFIG_LIBDIR="$BUNDLE/root/usr/lib/x86_64-linux-gnu/pkgconfig:$BUNDLE/root/usr/share/pkgconfig"
  unset PKG_CONFIG_PATH
  local usr="$BUNDLE/root/usr" generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  limited cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$PYTHON_PATH" -DXLLM_KERNEL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHITECTURES" \
    -DXLLM_KERNEL_CPU_TARGETS="$CPU_TARGETS" \
    -DXLLM_KERNEL_BUILD_PYTHON="$PYTHON_EXT" -DCMAKE_PREFIX_PATH="$usr" -DPKG_CONFIG_EXECUTABLE="$BUNDLE/bin/pkg-config" \
    -DGTest_DIR="$usr/lib/x86_64-linux-gnu/cmake/GTest" -DCLI11_DIR="$usr/share/cmake/CLI11" \
    -Dnlohmann_json_DIR="$usr/share/cmake/nlohmann_json" >"$REPORTS/configure.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$REPORTS/configure.log"
    NOTE="cmake failed: $(first_error "$REPORTS/configure.log") (configure.log)"
    return "$rc"
  fi
  grep -E '^-- (xllm_kernel|Found GTest|Found nlohmann|Found Python3|Found CUDAToolkit)' "$REPORTS/configure.log"
  # Where each third-party package came from.
  local outside=0 var value
  for var in PKG_CONFIG_EXECUTABLE HWY_INCLUDE_DIRS pkgcfg_lib_HWY_hwy GTest_DIR CLI11_DIR nlohmann_json_DIR; do
    value="$(sed -n "s/^$var:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt" | head -n1)"
    [ -n "$value" ] && value="$(realpath -m -s "$value")"
    local where="the bundle"
    case "$value" in "$BUNDLE"/*) ;; *) where="NOT the bundle"; outside=1 ;; esac
    printf '  %-22s %s (%s)\n' "$var" "$value" "$where"
  done
  if [ "$outside" -ne 0 ] && [ "${VERIFY_BUNDLE:-0}" = 1 ]; then
    NOTE="a package was found outside the bundle"
    return 1
  fi
  NOTE="packages from the bundle"
  [ "$outside" -eq 0 ] || NOTE="some packages from the system"
}

# What the later phases use: the library, the CUDA plugin, the tools, the CUDA tests and the Python
# extension. The CPU tests (and the NPU stand-in, the consumer, the fuzzers) are built only with
# CPU_TESTS=1, which runs them: on the 16-core GPU machine they would double the build's time for
# tests the GPU adds nothing to (CI builds and runs them everywhere).
gpu_targets() {
  [ "$CPU_TESTS" = 1 ] && return
  echo --target xllm_kernel xllm_kernel_cuda xllm-kernel-info xllm-kernel-numerics xllm-kernel-benchmark \
    xllm_kernel_cuda_kernels_host_test xllm_kernel_cuda_test
  [ "$PYTHON_EXT" = ON ] && echo xllm_kernel_python
}

phase_build() {
  # shellcheck disable=SC2046  # the target names are words
  limited cmake --build "$BUILD_DIR" -j "$JOBS" $(gpu_targets) >"$REPORTS/build.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    grep -E -B2 -A12 'error|FAILED' "$REPORTS/build.log" | head -n 60
    NOTE="build failed: $(first_error "$REPORTS/build.log") (build.log)"
    [ "$rc" -eq 124 ] && NOTE="the build ran past the budget (build.log); run it alone: --phase build"
    return "$rc"
  fi
  local built=()
  for f in libxllm_kernel.so libxllm_kernel_cuda.so xllm-kernel-info xllm-kernel-numerics xllm-kernel-benchmark \
           test/cuda/xllm_kernel_cuda_test; do
    [ -e "$BUILD_DIR/$f" ] && built+=("${f##*/}")
  done
  ls "$BUILD_DIR"/python/xllm_kernel/_C*.so >/dev/null 2>&1 && built+=("xllm_kernel._C")
  echo "built: ${built[*]}"
  [ "$PYTHON_EXT" = ON ] || echo "skipped: xllm_kernel._C (no Python headers)"
  if [ ! -e "$BUILD_DIR/libxllm_kernel_cuda.so" ]; then
    NOTE="no CUDA plugin"
    return 1
  fi
}

phase_tests() {
  built || return 1
  local dir="$BUILD_DIR/test/cuda"
  [ "$CPU_TESTS" = 1 ] && dir="$BUILD_DIR"
  echo "ctest in $dir"
  # The GPU tests' lists come from this machine's registry (DISCOVERY_MODE PRE_TEST): drop lists an
  # earlier run elsewhere (without a GPU) left behind. (Lists discovered after the build stay.)
  local include
  for include in "$BUILD_DIR"/test/cuda/*_include.cmake; do
    grep -q gtest_discover_tests_impl "$include" 2>/dev/null && rm -f "${include%_include.cmake}_tests.cmake"
  done
  # The bundle's libhwy stands in for an installed one (the installed-package test links against
  # the installed libxllm_kernel.so, which needs it).
  export LD_LIBRARY_PATH="$BUNDLE/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Passive OpenMP waiting: the parallel test processes' idle threads do not spin on each other's
  # cores (scripts/test.sh says why).
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
  limited ctest --test-dir "$dir" -j "$JOBS" --timeout 300 --output-on-failure \
    --output-junit "$REPORTS/ctest.xml" >"$REPORTS/ctest.log" 2>&1
  local rc=$?
  grep -E '^[0-9]+% tests passed|^The following tests|^\s+[0-9]+ - |Total Test time' "$REPORTS/ctest.log"
  [ "$rc" -eq 0 ] || NOTE="ctest exit $rc (ctest.log)"
  return "$rc"
}

# OPERATIONS (a comma list; default every operation of the catalog) narrows the numerics and
# benchmark phases, e.g. to the family a change touched; a name the catalog lacks is an error.
operations() {
  local all; all="$("$BUILD_DIR/xllm-kernel-info" --operations-list)" || return 1
  [ -n "${OPERATIONS:-}" ] || { echo "$all"; return; }
  local op
  for op in ${OPERATIONS//,/ }; do
    grep -qx -- "$op" <<<"$all" || { echo "gpu-check: OPERATIONS: no operation '$op' in the catalog" >&2; return 1; }
    echo "$op"
  done
}
# Exit 3 (nothing passed) in graph mode: no implementation of the operation captures a graph on this
# device (eager-only ones report every case unsupported); not a failure.
uncapturable() {
  [ "$1" = graph ] && [ "$2" -eq 3 ] || return 1
  echo "    (no implementation captures it in graph mode: every case unsupported)"
}

# no_device: the numerics and benchmark phases need the GPU (unless CHECK_DEVICE=cpu).
no_device() { [ "$GPUS" -eq 0 ] && [ "$CHECK_DEVICE" = cuda ]; }

phase_numerics() {
  if no_device; then NOTE="no GPU"; return 4; fi
  built || return 1
  local op mode rc bad=0 ops out_of_time=0 pid pids=() alive
  ops="$(operations)" || { NOTE="bad OPERATIONS"; return 1; }
  rm -f "$REPORTS"/numerics-*  # a rerun of the phase replaces the reports of the one before
  # NUMERICS_JOBS runs side by side (default 4 on the GPU, 1 on the CPU): a run spends most of its
  # time in the float64 references and its CUDA start-up, not on the GPU, and one at a time the
  # catalog's 46 runs did not fit a lease (2026-12-04: 18 of them in 297 s).
  local jobs="${NUMERICS_JOBS:-}"
  [ -n "$jobs" ] || { [ "$CHECK_DEVICE" = cuda ] && jobs=4 || jobs=1; }
  for op in $ops; do
    for mode in eager graph; do
      local args=(--operation "$op" --device "$CHECK_DEVICE" --mode "$mode" --implementation all --revision "$REVISION"
                  --output "$REPORTS/numerics-$op-$mode.json" --markdown "$REPORTS/numerics-$op-$mode.md")
      # The row families' layouts (an operation whose --layout has no 3d keeps its own defaults).
      help_has numerics "$op" "--layout.*3d" && args+=(--layout contiguous,strided,3d)
      # Waits on its own runs by pid (a bare wait would also wait on the log's tee).
      while [ "${#pids[@]}" -ge "$jobs" ]; do
        wait -n "${pids[@]}"
        alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        pids=("${alive[@]}")
      done
      (
        limited "$BUILD_DIR/xllm-kernel-numerics" "${args[@]}" >"$REPORTS/numerics-$op-$mode.log" 2>&1
        echo "$?" >"$REPORTS/numerics-$op-$mode.rc"
      ) &
      pids+=("$!")
    done
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  for op in $ops; do
    for mode in eager graph; do
      rc="$(cat "$REPORTS/numerics-$op-$mode.rc" 2>/dev/null || echo 124)"
      rm -f "$REPORTS/numerics-$op-$mode.rc"
      echo "  $op $mode: exit $rc"
      uncapturable "$mode" "$rc" && continue
      [ "$rc" -eq 0 ] || { bad=1; tail -n 5 "$REPORTS/numerics-$op-$mode.log"; }
      [ "$rc" -ne 124 ] || out_of_time=1
    done
  done
  [ "$out_of_time" -eq 0 ] || return 124
  [ "$bad" -eq 0 ] || NOTE="a numerics run did not pass"
  return "$bad"
}

# benchmark_args OP GRID: the grid's arguments the operation's suite takes. headline: tokens 1,8192 x
# hidden 4096, bfloat16, weights 4096x4096 bf16 and int4/g128; full: tokens 1,128,8192, bfloat16,
# float16 and float32, bf16, int8 and int4/g128 (one 8B shape, so that the float64 references of
# 8192 rows stay within the budget). Prints the arguments, then the grid's case count relative to
# the headline's (an integer percentage), on its own last line.
benchmark_args() {
  local op="$1" grid="$2" scale=100
  if supports benchmark "$op" --tokens; then
    if [ "$grid" = full ]; then echo --tokens 1,128,8192; scale=$((scale * 3 / 2)); else echo --tokens 1,8192; fi
  fi
  supports benchmark "$op" --hidden && echo --hidden 4096
  if supports benchmark "$op" --dtype; then
    if [ "$grid" = full ]; then echo --dtype bfloat16,float16,float32; scale=$((scale * 3)); else echo --dtype bfloat16; fi
  fi
  supports benchmark "$op" --weight-dtype && echo --weight-dtype input
  supports benchmark "$op" --shape && echo --shape 4096x4096
  if supports benchmark "$op" --scheme; then
    if [ "$grid" = full ]; then echo --scheme bf16,int8,int4/g128; scale=$((scale * 3 / 2)); else echo --scheme bf16,int4/g128; fi
  fi
  echo "$scale"
}

# benchmark_run OP MODE GRID LIMIT: one benchmark command of the grid, within LIMIT seconds. The
# report is written atomically at the end, so a run stopped by its limit leaves the earlier report.
benchmark_run() {
  local op="$1" mode="$2" grid="$3" limit="$4" extra
  mapfile -t extra < <(benchmark_args "$op" "$grid" | sed '$d' | tr ' ' '\n')
  local args=(--operation "$op" --device "$CHECK_DEVICE" --mode "$mode" --implementation all --revision "$REVISION"
              --output "$REPORTS/benchmark-$op-$mode.json" --markdown "$REPORTS/benchmark-$op-$mode.md" "${extra[@]}")
  timeout -k 10 "$limit" "$BUILD_DIR/xllm-kernel-benchmark" "${args[@]}" >"$REPORTS/benchmark-$op-$mode.log" 2>&1
}

phase_benchmark() {
  if no_device; then NOTE="no GPU"; return 4; fi
  built || return 1
  local op mode rc bad=0 start limit headline=() narrow=() ops
  declare -A took
  ops="$(operations)" || { NOTE="bad OPERATIONS"; return 1; }
  rm -f "$REPORTS"/benchmark-*  # a rerun of the phase replaces the reports of the one before
  # Pass 1: the headline grid of every operation, within the budget.
  for op in $ops; do
    for mode in eager graph; do
      limit="$(left)"
      if [ "$limit" -le 5 ]; then echo "  (no time left of the ${BUDGET_S}s budget for $op $mode)"; return 124; fi
      start=$(date +%s)
      benchmark_run "$op" "$mode" headline "$limit"
      rc=$?
      took["$op $mode"]=$(($(date +%s) - start))
      echo "  $op $mode, headline grid: exit $rc (${took["$op $mode"]} s)"
      uncapturable "$mode" "$rc" && continue
      [ "$rc" -eq 0 ] || { bad=1; tail -n 5 "$REPORTS/benchmark-$op-$mode.log"; }
      [ "$rc" -ne 124 ] || return 124
      headline+=("$op $mode")
    done
  done
  # Pass 2: the full grid, operation by operation, where its estimate (the headline pass's time
  # scaled by the grids' case counts, and a quarter more) fits what is left.
  for key in "${headline[@]}"; do
    op="${key% *}" mode="${key#* }"
    local scale guess
    scale="$(benchmark_args "$op" full | tail -n 1)"
    [ "$scale" -gt 100 ] || continue  # the full grid is the headline grid
    guess=$(( (${took[$key]} * scale / 100) * 5 / 4 + 2 ))
    limit="$(left)"
    if [ "$guess" -ge "$limit" ]; then
      narrow+=("$op $mode")
      continue
    fi
    start=$(date +%s)
    benchmark_run "$op" "$mode" full "$limit"
    rc=$?
    echo "  $op $mode, full grid: exit $rc ($(($(date +%s) - start)) s, estimate $guess s)"
    if [ "$rc" -eq 124 ]; then narrow+=("$op $mode"); continue; fi  # the headline report stays
    uncapturable "$mode" "$rc" && continue
    [ "$rc" -eq 0 ] || { bad=1; tail -n 5 "$REPORTS/benchmark-$op-$mode.log"; }
  done
  [ "${#narrow[@]}" -eq 0 ] || NOTE="headline grid only (budget): $(IFS=,; echo "${narrow[*]}" | sed 's/,/, /g')"
  [ "$bad" -eq 0 ] || NOTE="a benchmark run did not pass${NOTE:+; $NOTE}"
  return "$bad"
}

phase environment phase_environment
if [ "$FAILED" -eq 0 ] && [ "$RUN_BUILD" = 1 ]; then
  phase configure phase_configure
  [ "$FAILED" -eq 0 ] && phase build phase_build
fi
if [ "$FAILED" -eq 0 ]; then
  [ "$RUN_TESTS" = 1 ] && phase tests phase_tests
  [ "$RUN_NUMERICS" = 1 ] && phase numerics phase_numerics
  [ "$RUN_BENCHMARK" = 1 ] && phase benchmark phase_benchmark
fi

# ---- verdict: phase times, then one table read from the reports (every phase run so far) ----
echo
echo "== phases"
awk -F'\t' '{ printf "  %-12s %5d s  %s\n", $1, $2, $3 }' "$REPORTS/phases.tsv"
echo "  this command $(($(date +%s) - T0)) s"
if [ "$GPUS" -eq 0 ] && [ "${ALLOW_NO_GPU:-0}" != 1 ]; then NO_GPU_EXIT=3; else NO_GPU_EXIT=0; fi
TESTS_SCOPE="CUDA tests"
[ "$CPU_TESTS" = 1 ] && TESTS_SCOPE="all tests"
"$PYTHON" scripts/gpu_check_verdict.py verdict "$REPORTS" "$(($(date +%s) - T0))" "$FAILED" "$NO_GPU_EXIT" "$TESTS_SCOPE"
rc=$?
if [ -n "${OUT:-}" ]; then
  # The device tool brings back a few files: the log, the verdict, the summary and one archive.
  mkdir -p "$OUT"
  cp "$REPORTS/gpu-check.log" "$REPORTS/verdict.md" "$REPORTS/summary.json" "$OUT/" 2>/dev/null
  (cd "$REPORTS" && find . -maxdepth 1 -type f ! -name gpu-check.log ! -name verdict.md ! -name summary.json \
      ! -name gpu-check-reports.tar.gz -printf '%P\n' | tar czf "$OUT/gpu-check-reports.tar.gz" -T -)
fi
exit "$rc"
