"""CPU test doubles of cli_scale_ (declared in test_kernel_cli.py): a correct one and three that
misbehave on purpose. initialize() and the tools import this module when they prepare the CPU."""

import torch

from xllm_kernel import register_kernel
from test_kernel_cli import CLI_SCALE_CONTRACT

DOMAIN = "even hidden sizes"  # the suite reports odd ones unsupported


@register_kernel(name="cpu.python.cli_scale_", contract=CLI_SCALE_CONTRACT, device="cpu", priority=20,
                 input_domain=DOMAIN)
def cli_scale_(input: torch.Tensor, alpha: float) -> None:
    input.mul_(alpha)


@register_kernel(name="cpu.python.cli_scale_.wrong", variant="wrong", contract=CLI_SCALE_CONTRACT, device="cpu",
                 priority=2, input_domain=DOMAIN)
def cli_scale_wrong(input: torch.Tensor, alpha: float) -> None:
    input.mul_(alpha * 1.01)  # 1% off: outside the float32 tolerance


@register_kernel(name="cpu.python.cli_scale_.raises", variant="raises", contract=CLI_SCALE_CONTRACT, device="cpu",
                 priority=1, input_domain=DOMAIN)
def cli_scale_raises(input: torch.Tensor, alpha: float) -> None:
    raise RuntimeError("cli_scale_.raises: the test double fails on purpose")
