#!/usr/bin/env bash
# Draws benchmark-OP.png (each case's % of copy bandwidth per implementation) beside every
# benchmark-OP.json in REPORT_DIR, with python -m xllm_kernel.benchmark plot. Without matplotlib
# it says so and draws nothing (scripts/setup.sh installs it); that is not a failure.
#   bash scripts/plot-reports.sh REPORT_DIR PYTHON BUILD_DIR
set -euo pipefail
REPORT_DIR="$1" PYTHON="$2" BUILD_DIR="$3"
status=0
shopt -s nullglob
for report in "$REPORT_DIR"/benchmark-*.json; do
  image="${report%.json}.png"
  rc=0
  PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m xllm_kernel.benchmark plot "$report" -o "$image" || rc=$?
  if [ "$rc" -eq 3 ]; then
    echo "plots skipped (see above)"
    break
  elif [ "$rc" -ne 0 ]; then
    echo "plot of $report failed ($rc)" >&2
    status=1
  else
    echo "plot: $image"
  fi
done
exit "$status"
