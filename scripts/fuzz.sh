#!/usr/bin/env bash
# Runs each libFuzzer target for a fixed time under AddressSanitizer + UBSan, starting from its seed
# corpus (test/fuzz/corpus/<target>/, copied: new inputs stay out of the repository). A finding
# stops the target with the reproducer written to build-asan/fuzz/<target>/ and fails the script.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]   (default 60 s each; targets cli bridges reports)
# Builds build-asan first when needed (scripts/sanitize.sh's configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(cli bridges reports)
PYTHON="$(bash scripts/setup.sh | tail -n 1)"
bash scripts/install-clang.sh >&2
export CCACHE_BASEDIR="$ROOT"
if [ ! -f build-asan/CMakeCache.txt ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DXLLM_KERNEL_SANITIZE="address,undefined" -DXLLM_KERNEL_BUILD_FUZZERS=ON -DXLLM_KERNEL_CUDA=OFF \
    -DXLLM_KERNEL_BUILD_PYTHON=OFF -DPython3_EXECUTABLE="$PYTHON" >&2
fi
cmake --build build-asan -j "${JOBS:-$(nproc)}" --target $(printf 'xllm_kernel_fuzz_%s ' "${TARGETS[@]}") >&2

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$ROOT/test/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/test/sanitizers/ubsan.supp"
export XLLM_KERNEL_LOG=off
status=0
for target in "${TARGETS[@]}"; do
  work="build-asan/fuzz/$target"
  rm -rf "$work" && mkdir -p "$work/corpus"
  cp -r "test/fuzz/corpus/$target/." "$work/corpus/" 2>/dev/null || true
  start=$(date +%s)
  if build-asan/test/fuzz/xllm_kernel_fuzz_"$target" "$work/corpus" -max_total_time="$SECONDS_EACH" -max_len=4096 \
       -timeout=30 -rss_limit_mb=4096 -artifact_prefix="$work/" -print_final_stats=1 >"$work/log.txt" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -n 1)
    echo "[fuzz] $target: ${runs:-?} inputs in $(( $(date +%s) - start )) s, no finding" \
         "(corpus $(ls "$work/corpus" | wc -l) inputs)"
  else
    status=1
    echo "[fuzz] $target: FINDING after $(( $(date +%s) - start )) s; reproducer and log in $work/:" >&2
    grep -E 'ERROR|SUMMARY|disagree|does not name|runtime error' "$work/log.txt" | head -n 20 >&2 || tail -n 40 "$work/log.txt" >&2
  fi
done
exit $status
