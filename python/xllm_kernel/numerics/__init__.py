"""Offline numerical validation: `python -m xllm_kernel.numerics --help` (the same tool and flags as
xllm-kernel-numerics). Suites: C++ ones (src/ops/<family>/suites/) and Python ones (suite.py,
factory.py, tensor_case.py; found by catalog.py), all run by the one C++ runner."""
