"""A second, lower-priority implementation of demo_scale (selected by an override)."""

import torch

from xllm_kernel import register_kernel
from demo_group import DEMO_SCALE_CONTRACT


@register_kernel(name="cpu.reference.demo_scale", contract=DEMO_SCALE_CONTRACT, device="cpu", solution="reference",
                 priority=5)
def demo_scale(input: torch.Tensor, alpha: float) -> torch.Tensor:
    return (input.double() * alpha).to(input.dtype)
