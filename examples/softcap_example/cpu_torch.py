"""cpu.torch.logit_softcap: ATen's tanh in float32, one rounding to the input's dtype."""

import torch

from xllm_kernel import PlatformEnum, register_kernel
from softcap_example import LOGIT_SOFTCAP_CONTRACT
from softcap_example._checks import check


@register_kernel(
    name="cpu.torch.logit_softcap",
    contract=LOGIT_SOFTCAP_CONTRACT,
    platform=PlatformEnum.CPU,
    execution_modes=("eager",),
    input_domain="cpu tensors, float32/bfloat16/float16, any layout",
    solution="torch",
    binding="aten",
    priority=10,
)
def logit_softcap(input: torch.Tensor, cap: float) -> torch.Tensor:
    check(input, cap)
    return (torch.tanh(input.float() / cap) * cap).to(input.dtype)
