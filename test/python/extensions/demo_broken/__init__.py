"""A group whose implementation module is installed but broken: initialize() must propagate the
error, not exclude the implementation."""

import torch

from xllm_kernel.catalog import BackendModule
from xllm_kernel.registry import OpContract, Operation

DEMO_BROKEN_CONTRACT = OpContract(
    operation="demo_broken", version=1, schema="demo_broken(Tensor input) -> Tensor", numerical_mode="exact"
)
DEMO_BROKEN = Operation(DEMO_BROKEN_CONTRACT, fake=lambda input: torch.empty_like(input))
OPERATIONS = (DEMO_BROKEN,)
MODULES = (BackendModule(name="demo_broken.cpu_python", device="cpu", implementations=("cpu.python.demo_broken",)),)
