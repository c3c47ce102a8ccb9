"""Normalization: rms_norm, fused_add_rms_norm, layer_norm (contracts and kernels in
src/ops/normalization/; docs/operators.md has the full semantics).

    from xllm_kernel.ops.normalization import rms_norm, RMS_NORM_CONTRACT, OPERATIONS

The public API calls torch.ops.xllm_kernel.*, whose CPU/CUDA/NPU kernels call the device's
prepared binding and whose Meta fakes let torch.compile(fullgraph=True) trace it.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

RMS_NORM_CONTRACT = contract("rms_norm")
FUSED_ADD_RMS_NORM_CONTRACT = contract("fused_add_rms_norm")
LAYER_NORM_CONTRACT = contract("layer_norm")

RMS_NORM = Operation(RMS_NORM_CONTRACT)
FUSED_ADD_RMS_NORM = Operation(FUSED_ADD_RMS_NORM_CONTRACT)
LAYER_NORM = Operation(LAYER_NORM_CONTRACT)

OPERATIONS = (RMS_NORM, FUSED_ADD_RMS_NORM, LAYER_NORM)

GROUP = catalog.group("normalization")
MODULES = GROUP.modules

# Resolved once: an OpOverload call skips torch.ops' attribute lookups.
_rms_norm = RMS_NORM.torch_op
_fused_add_rms_norm = FUSED_ADD_RMS_NORM.torch_op
_layer_norm = LAYER_NORM.torch_op


def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """input * rsqrt(mean(input^2, -1) + eps) * weight, fp32 accumulation; a new contiguous tensor."""
    return _rms_norm(input, weight, eps)


def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """residual <- input + residual (rounded); input <- rms_norm(residual, weight, eps). In place."""
    _fused_add_rms_norm(input, residual, weight, eps)


def layer_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """(input - mean) * rsqrt(biased var + eps) * weight (+ bias), fp32 accumulation; a new tensor."""
    return _layer_norm(input, weight, bias, eps)


__all__ = [
    "RMS_NORM_CONTRACT", "FUSED_ADD_RMS_NORM_CONTRACT", "LAYER_NORM_CONTRACT",
    "RMS_NORM", "FUSED_ADD_RMS_NORM", "LAYER_NORM", "OPERATIONS", "GROUP", "MODULES",
    "rms_norm", "fused_add_rms_norm", "layer_norm",
]
