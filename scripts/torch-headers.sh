#!/usr/bin/env bash
# Puts the C++ headers of the oldest supported torch (the wheel's torch/include, about 60 MB) in a
# folder of its own and prints that folder; scripts/compile-guard.sh compiles every translation unit
# against them. The wheel itself is only downloaded (pip's cache keeps it), never installed.
#   bash scripts/torch-headers.sh PYTHON [VERSION]   (default 2.11.0, the GPU test machines' torch;
#                                                    XLLM_KERNEL_TORCH_HEADERS_DIR overrides the folder)
set -euo pipefail
PYTHON="$1"
VERSION="${2:-2.11.0}"
DIR="${XLLM_KERNEL_TORCH_HEADERS_DIR:-${HOME}/.cache/xllm-kernel/torch-headers-${VERSION}}"
if [ ! -f "$DIR/include/ATen/ATen.h" ]; then
  echo "[torch-headers] fetching the headers of torch==$VERSION into $DIR" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "torch==$VERSION" >&2
  rm -rf "$DIR.partial"
  "$PYTHON" - "$tmp" "$DIR.partial" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "torch-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("torch/include/") and not n.endswith("/")]
    for n in names:
        z.extract(n, sys.argv[2])
print("[torch-headers] %d headers from %s" % (len(names), os.path.basename(wheel)), file=sys.stderr)
PY
  rm -rf "$DIR"
  mv "$DIR.partial/torch" "$DIR"
  rm -rf "$DIR.partial"
  echo "$VERSION" >"$DIR/VERSION"
fi
echo "$DIR"
