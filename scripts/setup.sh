#!/usr/bin/env bash
# Installs what the build needs and prints the Python to build with (last line of stdout).
#   Debian packages: compilers, CMake, Ninja, ccache, Highway, nlohmann-json, CLI11, GoogleTest,
#   Python headers (the extension module xllm_kernel._C).
#   A virtual environment with the pinned torch wheel (reused across clones; pip's cache makes a
#   reinstall cheap). Override its place with XLLM_KERNEL_VENV.
set -euo pipefail

TORCH_VERSION="2.14.1"
VENV="${XLLM_KERNEL_VENV:-${HOME}/.cache/xllm-kernel/venv-torch${TORCH_VERSION}}"
APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config python3-venv python3-dev
              libhwy-dev nlohmann-json3-dev libcli11-dev libgtest-dev)

log() { echo "[setup] $*" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

PYTHON="${XLLM_KERNEL_PYTHON:-$(command -v python3)}"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV" >&2
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION into $VENV (large download the first time; pip caches it)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" >&2
fi
# pytest-xdist: scripts/test.sh runs the package's tests in one worker per core (most of them wait
# on a child process that imports torch: on 2 cores 744 s in one process, 368 s in two).
"$VENV/bin/python" -c "import numpy, pytest, jsonschema, matplotlib, xdist" 2>/dev/null ||
  "$VENV/bin/python" -m pip install -q "numpy" "pytest" "jsonschema" "matplotlib" "pytest-xdist" >&2
# Test dependency of the end-to-end tool's tests (test/python/test_e2e.py compares the runner with
# transformers' LlamaForCausalLM / Qwen2ForCausalLM). Pinned; its dependencies are small wheels
# (huggingface_hub, tokenizers, safetensors, ...) and do not include torch, so nothing here
# replaces the pinned torch. The tests skip, saying why, where it is missing.
TRANSFORMERS_VERSION="4.57.1"
"$VENV/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" 2>/dev/null ||
  "$VENV/bin/python" -m pip install -q "transformers==$TRANSFORMERS_VERSION" >&2 ||
  log "transformers==$TRANSFORMERS_VERSION could not be installed; the tests comparing with it skip"
log "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
echo "$VENV/bin/python"
