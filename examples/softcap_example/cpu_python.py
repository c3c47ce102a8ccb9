"""cpu.python.logit_softcap: tanh written out from one exponential, in float32.

tanh(z) = sign(z) m / (2 - m) with m = -expm1(-2|z|) in [0, 1): no overflow for any finite z,
no cancellation near 0 (expm1, not 1 - exp), and +-inf inputs give +-cap.
"""

import torch

from xllm_kernel import PlatformEnum, register_kernel
from softcap_example import LOGIT_SOFTCAP_CONTRACT
from softcap_example._checks import check


@register_kernel(
    name="cpu.python.logit_softcap",
    contract=LOGIT_SOFTCAP_CONTRACT,
    platform=PlatformEnum.CPU,
    execution_modes=("eager",),
    input_domain="cpu tensors, float32/bfloat16/float16, any layout",
    solution="python",
    priority=20,
)
def logit_softcap(input: torch.Tensor, cap: float) -> torch.Tensor:
    check(input, cap)
    z = input.float() / cap
    m = -torch.expm1(-2.0 * z.abs())
    return (torch.sign(z) * m / (2.0 - m) * cap).to(input.dtype)
