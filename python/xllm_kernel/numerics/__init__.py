"""Offline numerical validation: `python -m xllm_kernel.numerics --help` (the same tool and flags as
xllm-kernel-numerics; suites live in C++, src/numerics/suites/)."""
