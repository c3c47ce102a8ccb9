"""Activation (gated): silu_and_mul, gelu_and_mul, gelu_tanh_and_mul (contracts and kernels in
src/ops/activation/; docs/operators.md has the full semantics).

    from xllm_kernel.ops.activation import silu_and_mul, SILU_AND_MUL_CONTRACT, OPERATIONS

    y = silu_and_mul(x)   # x [..., 2d] -> y [..., d] = silu(x[..., :d]) * x[..., d:]

The public API calls torch.ops.xllm_kernel.*, whose CPU/CUDA kernels call the device's prepared
binding and whose Meta fakes let torch.compile(fullgraph=True) trace it.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

SILU_AND_MUL_CONTRACT = contract("silu_and_mul")
GELU_AND_MUL_CONTRACT = contract("gelu_and_mul")
GELU_TANH_AND_MUL_CONTRACT = contract("gelu_tanh_and_mul")

SILU_AND_MUL = Operation(SILU_AND_MUL_CONTRACT)
GELU_AND_MUL = Operation(GELU_AND_MUL_CONTRACT)
GELU_TANH_AND_MUL = Operation(GELU_TANH_AND_MUL_CONTRACT)

OPERATIONS = (SILU_AND_MUL, GELU_AND_MUL, GELU_TANH_AND_MUL)

GROUP = catalog.group("activation")
MODULES = GROUP.modules

_silu_and_mul = SILU_AND_MUL.torch_op
_gelu_and_mul = GELU_AND_MUL.torch_op
_gelu_tanh_and_mul = GELU_TANH_AND_MUL.torch_op


def silu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x = input [..., 2d], float32 compute; a new [..., d] tensor."""
    return _silu_and_mul(input)


def gelu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """gelu(x[..., :d]) * x[..., d:] with the exact (erf) GELU; a new [..., d] tensor."""
    return _gelu_and_mul(input)


def gelu_tanh_and_mul(input: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x[..., :d]) * x[..., d:] with GELU's tanh approximation; a new [..., d] tensor."""
    return _gelu_tanh_and_mul(input)


__all__ = [
    "SILU_AND_MUL_CONTRACT", "GELU_AND_MUL_CONTRACT", "GELU_TANH_AND_MUL_CONTRACT",
    "SILU_AND_MUL", "GELU_AND_MUL", "GELU_TANH_AND_MUL", "OPERATIONS", "GROUP", "MODULES",
    "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul",
]
