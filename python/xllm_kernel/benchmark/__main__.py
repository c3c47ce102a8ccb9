import sys

if len(sys.argv) > 1 and sys.argv[1] == "plot":
    from xllm_kernel.benchmark.plot import main

    sys.exit(main(sys.argv[2:]))

from xllm_kernel._tools import run

sys.exit(run("benchmark"))
