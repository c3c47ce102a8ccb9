"""An operator group declared outside the package, as the guide's ops/<group>/__init__.py: the
contract, the Operation, OPERATIONS, the backend modules that implement it, and the public API.

Joins the catalog through XLLM_KERNEL_EXTENSIONS=softcap_example (its suite:
softcap_example.numerics). initialize() imports an implementation module only when it prepares
that module's device.
"""

from __future__ import annotations

import torch

from xllm_kernel.catalog import BackendModule
from xllm_kernel.registry import OpContract, Operation


def _logit_softcap_fake(input: torch.Tensor, cap: float) -> torch.Tensor:
    # Metadata only (shape, dtype, device), for torch.compile and graph capture.
    return torch.empty_like(input)


LOGIT_SOFTCAP_CONTRACT = OpContract(
    operation="logit_softcap",
    version=1,
    schema="logit_softcap(Tensor input, float cap) -> Tensor",
    numerical_mode="fp32_accumulate",
    semantics="out = cap * tanh(input / cap) (Gemma 2's logit soft cap), a new tensor; cap > 0",
    dtypes="float32, bfloat16, float16; computed in float32, one rounding to the input's dtype",
)

OPERATION = Operation(LOGIT_SOFTCAP_CONTRACT, fake=_logit_softcap_fake)
OPERATIONS = (OPERATION,)

MODULES = (
    BackendModule(
        name="softcap_example.cpu_torch",
        device="cpu",
        implementations=("cpu.torch.logit_softcap",),
        binding="aten",
    ),
    BackendModule(
        name="softcap_example.cpu_python",
        device="cpu",
        implementations=("cpu.python.logit_softcap",),
    ),
)


def logit_softcap(input: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(input / cap) through the binding initialize() published."""
    return OPERATION.get_prepared().function(input, cap)
