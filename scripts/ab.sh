#!/usr/bin/env bash
# A/B run of two revisions on the same benchmark cases, for speed changes on a shared machine:
# builds both (git worktrees under ${XLLM_KERNEL_AB_DIR:-~/.cache/xllm-kernel/ab}, sharing ccache),
# then runs the same benchmark command with each build in alternating rounds, ABBA (A B, B A, A B,
# ...), and prints the ratio of medians with a 95% bootstrap interval per case and implementation
# (`xllm-kernel-benchmark ab`), saying where the interval straddles 1.
#
#   bash scripts/ab.sh BASE_REV NEW_REV [--rounds N] [--out DIR] -- BENCHMARK_ARGS...
#   bash scripts/ab.sh HEAD~1 . -- --operation rms_norm --tokens 8192 --hidden 4096 --cold-cache
#
#   BASE_REV, NEW_REV  git revisions; "." is this checkout as it is, uncommitted changes included
#                      (built into build-ab/ here).
#   --rounds N         rounds of each build (default 6, at least 5).
#   --out DIR          where the reports go (default reports/ab-<time>/): a-<i>.json, b-<i>.json,
#                      ab.json and ab.md.
#   --fail-on slower|none
#                      whether a candidate slower beyond its interval fails (exit 4; default slower).
#   --build-a DIR, --build-b DIR
#                      use these build directories (holding xllm-kernel-benchmark) instead of
#                      building the revisions; the revisions then only label the reports.
#   BENCHMARK_ARGS     xllm-kernel-benchmark's arguments (--operation ... and the suite's options);
#                      --output and --revision are set here.
# Exit status: the `ab` subcommand's (0; 4 where a candidate is slower beyond its interval; 6 where
# the reports' configurations differ), 2 for usage errors, or the failing benchmark's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
die() { echo "ab.sh: $*" >&2; exit 2; }

[ $# -ge 2 ] || usage
BASE_REV="$1" NEW_REV="$2"
shift 2
ROUNDS=6 OUT="" BUILD_A="" BUILD_B="" FAIL_ON=slower
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --fail-on) FAIL_ON="${2:?--fail-on needs slower or none}"; shift 2 ;;
    --build-a) BUILD_A="${2:?--build-a needs a directory}"; shift 2 ;;
    --build-b) BUILD_B="${2:?--build-b needs a directory}"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (the benchmark's arguments go after --)" ;;
  esac
done
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 5 ] || die "--rounds: expected a whole number >= 5, given '$ROUNDS'"
[ $# -gt 0 ] || die "no benchmark arguments: give them after --, e.g. -- --operation rms_norm"
for a in "$@"; do
  case "$a" in --output|--output=*|--revision|--revision=*) die "the benchmark's $a is set by ab.sh" ;; esac
done
BENCH_ARGS=("$@")
OUT="${OUT:-reports/ab-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

# The revision's commit ("." stays ".": this checkout).
resolve() {
  if [ "$1" = . ]; then echo .; return; fi
  git rev-parse --verify --quiet "$1^{commit}" || die "'$1' is not a revision of this repository"
}
A_SHA="$(resolve "$BASE_REV")"
B_SHA="$(resolve "$NEW_REV")"

# Builds the benchmark tool of a revision; prints its build directory.
build_rev() {
  local sha="$1" src dir
  if [ "$sha" = . ]; then
    src="$ROOT"
    dir="$ROOT/build-ab"
  else
    local base="${XLLM_KERNEL_AB_DIR:-$HOME/.cache/xllm-kernel/ab}"
    src="$base/$sha"
    dir="$src/build"
    if [ ! -d "$src" ]; then
      mkdir -p "$base"
      git worktree prune
      git worktree add --detach "$src" "$sha" >&2
    fi
  fi
  local python
  python="$(bash "$ROOT/scripts/setup.sh" | tail -n 1)"
  echo "[ab] building $( [ "$sha" = . ] && echo 'this checkout' || echo "${sha:0:12}" ) in $dir" >&2
  # Paths relative to each source tree, so the two trees share ccache's entries.
  CCACHE_BASEDIR="$src" cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$python" -DXLLM_KERNEL_BUILD_TESTS=OFF -DXLLM_KERNEL_BUILD_PYTHON=OFF \
    -DXLLM_KERNEL_CUDA=OFF >&2
  CCACHE_BASEDIR="$src" cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target xllm-kernel-benchmark >&2
  echo "$dir"
}
[ -n "$BUILD_A" ] || BUILD_A="$(build_rev "$A_SHA")"
[ -n "$BUILD_B" ] || BUILD_B="$(build_rev "$B_SHA")"
A_BIN="$BUILD_A/xllm-kernel-benchmark"
B_BIN="$BUILD_B/xllm-kernel-benchmark"
[ -x "$A_BIN" ] || die "no xllm-kernel-benchmark in $BUILD_A"
[ -x "$B_BIN" ] || die "no xllm-kernel-benchmark in $BUILD_B"

label() { if [ "$1" = . ]; then echo "$(git rev-parse HEAD)+worktree"; else echo "$1"; fi; }
run_side() {  # side round
  local bin rev
  if [ "$1" = a ]; then bin="$A_BIN" rev="$(label "$A_SHA")"; else bin="$B_BIN" rev="$(label "$B_SHA")"; fi
  echo "[ab] round $2: $1" >&2
  "$bin" "${BENCH_ARGS[@]}" --revision "$rev" --output "$OUT/$1-$2.json" >/dev/null
}
for ((i = 0; i < ROUNDS; i++)); do
  if ((i % 2 == 0)); then run_side a "$i"; run_side b "$i"; else run_side b "$i"; run_side a "$i"; fi
done

# The comparison, by whichever build knows the subcommand (the candidate first).
tool=""
for bin in "$B_BIN" "$A_BIN" "$ROOT/build/xllm-kernel-benchmark"; do
  if [ -x "$bin" ] && "$bin" ab --help >/dev/null 2>&1; then tool="$bin"; break; fi
done
[ -n "$tool" ] || die "neither build has the 'ab' subcommand of xllm-kernel-benchmark (build this checkout: scripts/build.sh)"
base=() cand=()
for ((i = 0; i < ROUNDS; i++)); do base+=("$OUT/a-$i.json"); cand+=("$OUT/b-$i.json"); done
rc=0
"$tool" ab --baseline "${base[@]}" --candidate "${cand[@]}" --fail-on "$FAIL_ON" --output "$OUT/ab.json" \
  --markdown "$OUT/ab.md" || rc=$?
echo "[ab] reports in $OUT (baseline $(label "$A_SHA"), candidate $(label "$B_SHA"))" >&2
exit "$rc"
