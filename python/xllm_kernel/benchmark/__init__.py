"""Benchmarks of validated cases: `python -m xllm_kernel.benchmark --help` (the same tool and flags
as xllm-kernel-benchmark)."""
