"""python -m xllm_kernel [--explain DEVICE]: the catalog and registry, and optionally the selection
that initialize(DEVICE) would make for every operation."""

import argparse

from xllm_kernel import catalog, explain

parser = argparse.ArgumentParser(prog="python -m xllm_kernel", description=__doc__)
parser.add_argument("--explain", metavar="DEVICE", help="explain the selection on DEVICE (cpu, cuda, npu)")
args = parser.parse_args()
print(catalog.describe())
if args.explain:
    for contract in catalog.operations():
        print(explain(args.explain, contract.operation), end="")
