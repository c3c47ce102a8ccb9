#!/usr/bin/env bash
# Installs clang with its sanitizer and libFuzzer runtimes (Debian), for scripts/sanitize.sh and
# scripts/fuzz.sh. Does nothing when they are there.
set -euo pipefail
runtime_present() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local dir
  dir="$(clang++ -print-resource-dir)/lib/linux"
  [ -e "$dir/libclang_rt.asan-x86_64.a" ] && [ -e "$dir/libclang_rt.fuzzer-x86_64.a" ]
}
runtime_present && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends clang
major="$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)"
runtime_present || $SUDO apt-get install -y -qq --no-install-recommends "libclang-rt-${major}-dev"
runtime_present || { echo "install-clang: clang's sanitizer/libFuzzer runtimes are still missing" >&2; exit 1; }
