#!/usr/bin/env bash
# Runs the C++ code under sanitizers (clang), each build in a directory of its own:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover: a finding fails) of
#         the library, the CPU kernels, the tools and every C++ test; runs all of CTest there.
#   tsan  ThreadSanitizer of the library, the tools and their tests; runs the concurrency tests
#         (Concurrency*, in xllm_kernel_numerics_test: they take valid arguments from the suites).
# torch's own libraries are not instrumented; the suppressions (test/sanitizers/*.supp) name only
# findings inside torch or the C++ runtime, each with its reason. Row loops run their ranges one
# after another in these builds (clang's OpenMP runtime is not torch's libgomp; see
# src/core/parallel.cpp); the Python package is not built (it would need the runtime preloaded into
# python) and the CUDA plugin neither (no GPU runs here).
#
#   kernels  ASan+UBSan of the torch-free CPU kernels and their tests only (csrc/cpu, test/csrc;
#         -DXLLM_KERNEL_KERNELS_ONLY=ON: no torch, no library): a few minutes, run by .ci/run
#         (scripts/test.sh). On a failure it prints the first sanitizer report again at the end
#         and keeps it in BUILD_DIR/first-report.txt.
#
#   bash scripts/sanitize.sh [asan|tsan|kernels|all]   (default all: asan and tsan; JOBS=N, default
#                                                      nproc; BUILD_DIR for kernels, default build-asan-kernels)
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="${1:-all}"
case "$WHAT" in asan|tsan|kernels|all) ;; *) echo "usage: $0 [asan|tsan|kernels|all]" >&2; exit 2 ;; esac
ROOT="$PWD"
if [ "$WHAT" = kernels ]; then
  # Needs no torch: the Debian packages of the build only (scripts/setup.sh installs them and torch;
  # here only what the kernels need).
  missing=()
  for p in build-essential cmake ninja-build ccache pkg-config libhwy-dev libgtest-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
else
  PYTHON="$(bash scripts/setup.sh | tail -n 1)"
fi
bash scripts/install-clang.sh >&2
export CCACHE_BASEDIR="$ROOT"
JOBS="${JOBS:-$(nproc)}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_init_order=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$ROOT/test/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/test/sanitizers/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/test/sanitizers/tsan.supp"
export XLLM_KERNEL_LOG=off

configure() {  # dir sanitizers [cmake args...]
  local dir="$1" sanitizers="$2"
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DXLLM_KERNEL_SANITIZE="$sanitizers" -DXLLM_KERNEL_CUDA=OFF -DXLLM_KERNEL_BUILD_PYTHON=OFF \
    -DPython3_EXECUTABLE="$PYTHON" "$@" >&2
}

seconds() { echo $(( $(date +%s) - $1 )); }

if [ "$WHAT" = kernels ]; then
  start=$(date +%s)
  dir="${BUILD_DIR:-build-asan-kernels}"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DXLLM_KERNEL_SANITIZE="address,undefined" -DXLLM_KERNEL_KERNELS_ONLY=ON >&2
  cmake --build "$dir" -j "$JOBS" >&2
  built=$(seconds "$start")
  start=$(date +%s)
  rc=0
  rm -f "$dir/first-report.txt"
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --output-log "$dir/ctest.log" >&2 || rc=$?
  count="$(ctest --test-dir "$dir" -N | tail -n 1)"
  if [ "$rc" -ne 0 ]; then
    # The failing tests' output went by above; the first sanitizer report again, whole, so that the
    # log's end says what was found.
    # $dir/first-report.txt keeps it for the caller (scripts/test.sh prints it at its end).
    log="$dir/ctest.log"
    {
      echo "[sanitize] kernels: ASan+UBSan FAILED ($count); the first sanitizer report:"
      awk '/ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/ {on = 1}
           on {print; if (++n >= 60 || /^SUMMARY: /) exit}' "$log" || true
    } > "$dir/first-report.txt"
    cat "$dir/first-report.txt" >&2
    exit "$rc"
  fi
  echo "[sanitize] kernels: asan+ubsan: built in ${built} s, CTest green in $(seconds "$start") s ($count)"
  exit 0
fi

if [ "$WHAT" = asan ] || [ "$WHAT" = all ]; then
  start=$(date +%s)
  configure build-asan "address,undefined" -DXLLM_KERNEL_BUILD_FUZZERS=ON
  cmake --build build-asan -j "$JOBS" >&2
  built=$(seconds "$start")
  start=$(date +%s)
  # Left to the normal build: the installed-consumer test (it builds a program without sanitizer
  # flags against this library) and the test that row loops use every torch thread (these builds
  # run the ranges one after another on purpose).
  skip='^install\.consumer|^ParallelRows\.UsesEveryThreadTorchIsSetTo$'
  ctest --test-dir build-asan -j "$JOBS" --output-on-failure -E "$skip" >&2
  echo "[sanitize] asan+ubsan: built in ${built} s, CTest green in $(seconds "$start") s" \
       "($(ctest --test-dir build-asan -N -E "$skip" | tail -n 1))"
fi

if [ "$WHAT" = tsan ] || [ "$WHAT" = all ]; then
  start=$(date +%s)
  configure build-tsan "thread"
  cmake --build build-tsan -j "$JOBS" --target xllm_kernel_numerics_test >&2
  built=$(seconds "$start")
  start=$(date +%s)
  build-tsan/test/xllm_kernel_numerics_test --gtest_filter='Concurrency*' --gtest_brief=1 >&2
  count=$(build-tsan/test/xllm_kernel_numerics_test --gtest_filter='Concurrency*' --gtest_list_tests | grep -c '^  ' || true)
  if [ "$count" -eq 0 ]; then echo "[sanitize] tsan: no Concurrency* tests found" >&2; exit 1; fi
  echo "[sanitize] tsan: built in ${built} s, ${count} concurrency tests green in $(seconds "$start") s"
fi
