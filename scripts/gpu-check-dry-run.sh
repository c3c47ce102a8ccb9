#!/usr/bin/env bash
# The dry run of the GPU check, here: scripts/gpu-check.sh as the GPU test machine would run it,
# minus the GPU. Needs root (or user namespaces) for unshare.
#   1. a second virtual environment with the GPU machine's torch (2.11.0, as it is there: numpy,
#      pytest, pybind11 beside it), kept in the user cache like the main one; made with the network
#      the first time, reused after;
#   2. the bundle (scripts/device-bundle.sh) when .device/ is missing;
#   3. the check itself in new network and mount namespaces (unshare -n -m): no network at all, and
#      the system's copies of the bundled packages (Highway, GoogleTest, CLI11, nlohmann-json,
#      pkg-config) hidden under empty mounts, so the build can only use the bundle; it builds
#      everything against torch 2.11, runs every test (CPU_TESTS=1: the GPU tests skip, saying why),
#      reports the numerics and benchmark phases as "no GPU", and must exit 0.
#
#   bash scripts/gpu-check-dry-run.sh         # or: bash scripts/gpu-check.sh --dry-run
#   bash scripts/gpu-check.sh --dry-run --phase build   # the check's own arguments pass through
#
# ccache (under ~/.cache) sees the paths relative to the source tree (CCACHE_BASEDIR), and the build
# directory sits inside the tree: a rerun rebuilds only what changed, and a fresh clone compiles
# from ccache's hits of the last dry run (a build directory outside the tree would make the
# relative paths, and so the hashes, differ between clones).
#
# A passing run records its phase times in ~/.cache/xllm-kernel/gpu-check-times.tsv (step 4), from
# which the GPU check estimates its phases (scripts/device-bundle.sh puts them in the bundle).
#
# Environment: XLLM_KERNEL_DRY_RUN_VENV (~/.cache/xllm-kernel/venv-torch2.11.0), BUILD_DIR
# (build-gpu-dry-run), REPORT_DIR (gpu-reports-dry-run), JOBS, BUDGET_S (the check's; default 10800
# here, where the build has few cores), HIDE_CCACHE (0: 1 hides ccache too, as on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="2.11.0"
VENV="${XLLM_KERNEL_DRY_RUN_VENV:-$HOME/.cache/xllm-kernel/venv-torch$TORCH_VERSION}"
log() { echo "[dry-run] $*" >&2; }
start=$(date +%s)

# 1. torch 2.11.0 (may use the network).
if ! "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION into $VENV (large download the first time)"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" >&2
fi
"$VENV/bin/python" -c "import numpy, pytest, pybind11" 2>/dev/null ||
  "$VENV/bin/python" -m pip install -q numpy pytest pybind11 >&2
log "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)"

# 2. the bundle.
[ -f .device/MANIFEST ] || bash scripts/device-bundle.sh >&2

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true

# 3. the check, offline, seeing only the bundle.
if ! unshare -n true 2>/dev/null; then
  log "unshare -n is not permitted here (needs root or unprivileged user namespaces)"
  exit 1
fi
HIDDEN=(/usr/include/hwy /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann
        /usr/lib/x86_64-linux-gnu/cmake/hwy /usr/lib/x86_64-linux-gnu/cmake/GTest /usr/share/cmake/CLI11
        /usr/share/cmake/nlohmann_json /usr/lib/x86_64-linux-gnu/pkgconfig /usr/share/pkgconfig /usr/src/googletest)
[ "${HIDE_CCACHE:-0}" = 1 ] && HIDDEN+=(/usr/bin/ccache)
HIDDEN+=(/usr/bin/pkg-config /usr/bin/pkgconf /usr/bin/x86_64-linux-gnu-pkg-config)
HIDDEN+=(/usr/lib/x86_64-linux-gnu/libhwy* /usr/lib/x86_64-linux-gnu/libgtest* /usr/lib/x86_64-linux-gnu/libgmock*)
log "running scripts/gpu-check.sh without network, system copies hidden: ${HIDDEN[*]}"
set +e
unshare -n -m -- env HIDDEN_PATHS="${HIDDEN[*]}" CHECK_ARGS="$*" PYTHON="$VENV/bin/python" BUILD_DIR="${BUILD_DIR:-build-gpu-dry-run}" \
  OUT= REPORTS_DIR="${REPORT_DIR:-gpu-reports-dry-run}" CPU_TESTS=1 ALLOW_NO_GPU=1 VERIFY_BUNDLE=1 \
  BUDGET_S="${BUDGET_S:-10800}" bash -c '
    set -e
    for path in $HIDDEN_PATHS; do
      [ -e "$path" ] || continue
      if [ -d "$path" ] && [ ! -L "$path" ]; then mount -t tmpfs -o ro,size=4k none "$path"
      else mount --bind /dev/null "$path"; fi
    done
    # No network: only a loopback device, and down.
    if ip -o link show 2>/dev/null | grep -v " lo:" | grep -q .; then echo "[dry-run] a network device is visible" >&2; exit 1; fi
    if python3 -c "import socket; socket.create_connection((\"pypi.org\", 443), timeout=3)" 2>/dev/null; then
      echo "[dry-run] the network is reachable" >&2; exit 1
    fi
    echo "[dry-run] no network: $(ip -o link show 2>/dev/null | cut -d: -f2 | xargs echo) (no route out)"
    exec bash scripts/gpu-check.sh $CHECK_ARGS'
rc=$?
set -e
log "gpu-check.sh exited $rc; dry run took $(($(date +%s) - start)) s"

# 4. The phase times of a passing run, for the GPU check's estimates (scripts/device-bundle.sh copies
# them into .device/phase-times.tsv): phase, seconds, cores. A build from ccache says nothing of the
# GPU machine's build (it has no ccache): the build's time is kept only from a run that hid ccache
# (HIDE_CCACHE=1), or when there is none yet. The tests' time is of every test (CPU_TESTS=1), an
# upper bound of the GPU machine's CUDA tests.
TIMES="$HOME/.cache/xllm-kernel/gpu-check-times.tsv"
PHASES_TSV="${REPORT_DIR:-gpu-reports-dry-run}/phases.tsv"
if [ "$rc" -eq 0 ] && [ -f "$PHASES_TSV" ]; then
  mkdir -p "$(dirname "$TIMES")"
  cores="${JOBS:-$(nproc)}"
  {
    echo "# the dry run of $(git rev-parse --short HEAD 2>/dev/null || echo unknown) on $(date -u +%Y-%m-%d)," \
         "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $cores cores"
    awk -F'\t' -v c="$cores" -v keep_build="${HIDE_CCACHE:-0}" -v old="$TIMES" '
      BEGIN { while ((getline l < old) > 0) { split(l, f, "\t"); if (f[1] == "build") prior = l } }
      $1 == "build" && keep_build != 1 && prior != "" { print prior; next }
      $1 ~ /^(environment|configure|build|tests)$/ && $3 ~ /^ok/ { print $1 "\t" $2 "\t" c }' "$PHASES_TSV"
  } >"$TIMES.partial"
  mv "$TIMES.partial" "$TIMES"
  log "phase times for the GPU check's estimates: $TIMES"
fi
exit "$rc"
