"""The demo group's Python CPU implementations; initialize() imports this module."""

import torch

from xllm_kernel import PlatformEnum, register_kernel
from demo_group import DEMO_ADD_CONTRACT, DEMO_SCALE_CONTRACT

IMPORTS = []  # each import of this module appends; the tests check it is imported once, lazily
IMPORTS.append(__name__)


@register_kernel(name="cpu.python.demo_scale", contract=DEMO_SCALE_CONTRACT, platform=PlatformEnum.CPU,
                 execution_modes=("eager",), input_domain="cpu float tensors", solution="python", priority=20)
def demo_scale(input: torch.Tensor, alpha: float) -> torch.Tensor:
    return input * alpha


@register_kernel(name="cpu.python.demo_add_", contract=DEMO_ADD_CONTRACT, platform=PlatformEnum.CPU,
                 input_domain="cpu float tensors of one shape", solution="python", priority=20)
def demo_add_(input: torch.Tensor, other: torch.Tensor) -> None:
    input.add_(other)
