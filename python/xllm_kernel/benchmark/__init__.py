"""Benchmarks of validated cases: `python -m xllm_kernel.benchmark --help` (the same tool and flags
as xllm-kernel-benchmark); `python -m xllm_kernel.benchmark plot` (plot.py) draws a report, and
`python -m xllm_kernel.benchmark.summary REPORT_DIR` (summary.py) writes docs/performance.md from a folder
of benchmark and end-to-end reports."""
