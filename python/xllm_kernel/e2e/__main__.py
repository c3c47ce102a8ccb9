"""`python -m xllm_kernel.e2e --help`: the end-to-end measurement (xllm_kernel.e2e.cli)."""
import sys

from xllm_kernel.e2e.cli import main

sys.exit(main())
