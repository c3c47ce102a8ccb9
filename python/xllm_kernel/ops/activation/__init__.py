"""Activation: gated silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, and gelu, gelu_tanh,
quick_gelu without the gate (contracts and kernels in src/ops/activation/; docs/operators.md has
the full semantics).

    from xllm_kernel.ops.activation import silu_and_mul, gelu, SILU_AND_MUL_CONTRACT, OPERATIONS

    y = silu_and_mul(x)   # x [..., 2d] -> y [..., d] = silu(x[..., :d]) * x[..., d:]
    z = gelu(h)           # h [..., d] -> z [..., d] = gelu(h)

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
GELU_CONTRACT = contract("gelu")
GELU_TANH_CONTRACT = contract("gelu_tanh")
QUICK_GELU_CONTRACT = contract("quick_gelu")

SILU_AND_MUL = Operation(SILU_AND_MUL_CONTRACT)
GELU_AND_MUL = Operation(GELU_AND_MUL_CONTRACT)
GELU_TANH_AND_MUL = Operation(GELU_TANH_AND_MUL_CONTRACT)
GELU = Operation(GELU_CONTRACT)
GELU_TANH = Operation(GELU_TANH_CONTRACT)
QUICK_GELU = Operation(QUICK_GELU_CONTRACT)

OPERATIONS = (SILU_AND_MUL, GELU_AND_MUL, GELU_TANH_AND_MUL, GELU, GELU_TANH, QUICK_GELU)

GROUP = catalog.group("activation")
MODULES = GROUP.modules

_silu_and_mul = SILU_AND_MUL.torch_op
_gelu_and_mul = GELU_AND_MUL.torch_op
_gelu_tanh_and_mul = GELU_TANH_AND_MUL.torch_op
_gelu = GELU.torch_op
_gelu_tanh = GELU_TANH.torch_op
_quick_gelu = QUICK_GELU.torch_op


def silu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x = input [..., 2d], float32 compute; a new [..., d] tensor."""
    return _silu_and_mul(input)


def gelu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """gelu(x[..., :d]) * x[..., d:] with the exact (erf) GELU; a new [..., d] tensor."""
    return _gelu_and_mul(input)


def gelu_tanh_and_mul(input: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x[..., :d]) * x[..., d:] with GELU's tanh approximation; a new [..., d] tensor."""
    return _gelu_tanh_and_mul(input)


def gelu(input: torch.Tensor) -> torch.Tensor:
    """gelu(x) elementwise (the exact, erf GELU), float32 compute; a new tensor of input's shape."""
    return _gelu(input)


def gelu_tanh(input: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x) elementwise (GPT-2's "gelu_new"), float32 compute; a new tensor of input's shape."""
    return _gelu_tanh(input)


def quick_gelu(input: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(1.702 x) elementwise, float32 compute; a new tensor of input's shape."""
    return _quick_gelu(input)


__all__ = [
    "SILU_AND_MUL_CONTRACT", "GELU_AND_MUL_CONTRACT", "GELU_TANH_AND_MUL_CONTRACT",
    "GELU_CONTRACT", "GELU_TANH_CONTRACT", "QUICK_GELU_CONTRACT",
    "SILU_AND_MUL", "GELU_AND_MUL", "GELU_TANH_AND_MUL", "GELU", "GELU_TANH", "QUICK_GELU", "OPERATIONS", "GROUP",
    "MODULES", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "gelu", "gelu_tanh", "quick_gelu",
]
