#!/usr/bin/env bash
# The main job: set up, build, select implementations on the CPU, explain the selection and run
# every operation once.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="$(bash scripts/build.sh | tail -n 1)"
"$BUILD_DIR/xllm-kernel-info" --device cpu --explain --run
