#!/usr/bin/env bash
# Puts the torch-npu wheel (headers, libtorch_npu.so; about 44 MB) in a folder of its own beside the
# virtual environment and prints that folder, for cmake/npu.cmake (XLLM_KERNEL_TORCH_NPU_DIR): the
# ACLGraph library builds against it, and tests import it to check the exclusion without CANN.
# Never installed into the environment itself: torch imports an installed torch_npu at `import
# torch` (device back-end autoloading), which fails without the CANN runtime.
#   bash scripts/torch-npu.sh PYTHON     (XLLM_KERNEL_TORCH_NPU_DIR overrides the folder)
# Prints nothing (and says why) when the wheel cannot be fetched: the build then has no ACLGraph.
set -euo pipefail
PYTHON="$1"
VERSION="2.14.0"
DIR="${XLLM_KERNEL_TORCH_NPU_DIR:-${HOME}/.cache/xllm-kernel/torch-npu-${VERSION}}"
if [ ! -f "$DIR/torch_npu/lib/libtorch_npu.so" ]; then
  echo "[torch-npu] fetching torch-npu==$VERSION into $DIR" >&2
  rm -rf "$DIR.partial"
  if "$PYTHON" -m pip install -q --no-deps --target "$DIR.partial" "torch-npu==$VERSION" >&2; then
    rm -rf "$DIR"
    mv "$DIR.partial" "$DIR"
  else
    rm -rf "$DIR.partial"
    echo "[torch-npu] torch-npu==$VERSION could not be fetched: building without ACLGraph" >&2
    exit 0
  fi
fi
echo "$DIR"
