import sys

from xllm_kernel._tools import run

sys.exit(run("benchmark"))
