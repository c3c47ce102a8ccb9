"""Quantization: int8 and float8_e4m3fn activations with per-token (dynamic) or static scales,
alone or fused with the rms_norm / fused_add_rms_norm / silu_and_mul that produces them (contracts
and kernels in src/ops/quantization/; the arithmetic and the non-finite rules in
csrc/common/quantization.h; docs/operators.md has the full semantics).

    from xllm_kernel.ops import per_token_quant, rms_norm_per_token_quant

    q, scale = per_token_quant(x, torch.float8_e4m3fn)          # x ~ q.float() * scale
    q, scale = rms_norm_per_token_quant(x, weight, 1e-6, torch.int8)

Every operation computes in float32 in vLLM's order and rounds to nearest even with saturation; a
NaN in a row makes its scale NaN. The fused operations equal their composition bit for bit. The
public API calls torch.ops.xllm_kernel.<op>, whose CPU/CUDA kernels call the device's prepared
binding and whose Meta fakes let torch.compile(fullgraph=True) trace them.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

PER_TOKEN_QUANT_CONTRACT = contract("per_token_quant")
PER_TOKEN_QUANT_INT8_AZP_CONTRACT = contract("per_token_quant_int8_azp")
STATIC_QUANT_CONTRACT = contract("static_quant")
RMS_NORM_PER_TOKEN_QUANT_CONTRACT = contract("rms_norm_per_token_quant")
FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT_CONTRACT = contract("fused_add_rms_norm_per_token_quant")
RMS_NORM_STATIC_QUANT_CONTRACT = contract("rms_norm_static_quant")
FUSED_ADD_RMS_NORM_STATIC_QUANT_CONTRACT = contract("fused_add_rms_norm_static_quant")
SILU_AND_MUL_PER_TOKEN_QUANT_CONTRACT = contract("silu_and_mul_per_token_quant")

PER_TOKEN_QUANT = Operation(PER_TOKEN_QUANT_CONTRACT)
PER_TOKEN_QUANT_INT8_AZP = Operation(PER_TOKEN_QUANT_INT8_AZP_CONTRACT)
STATIC_QUANT = Operation(STATIC_QUANT_CONTRACT)
RMS_NORM_PER_TOKEN_QUANT = Operation(RMS_NORM_PER_TOKEN_QUANT_CONTRACT)
FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT = Operation(FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT_CONTRACT)
RMS_NORM_STATIC_QUANT = Operation(RMS_NORM_STATIC_QUANT_CONTRACT)
FUSED_ADD_RMS_NORM_STATIC_QUANT = Operation(FUSED_ADD_RMS_NORM_STATIC_QUANT_CONTRACT)
SILU_AND_MUL_PER_TOKEN_QUANT = Operation(SILU_AND_MUL_PER_TOKEN_QUANT_CONTRACT)

OPERATIONS = (PER_TOKEN_QUANT, PER_TOKEN_QUANT_INT8_AZP, STATIC_QUANT, RMS_NORM_PER_TOKEN_QUANT,
              FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT, RMS_NORM_STATIC_QUANT, FUSED_ADD_RMS_NORM_STATIC_QUANT,
              SILU_AND_MUL_PER_TOKEN_QUANT)

GROUP = catalog.group("quantization")
MODULES = GROUP.modules


# torch.ops.xllm_kernel.<op>.default, bound once (torch.compile traces the calls below).
_per_token_quant = PER_TOKEN_QUANT.torch_op
_per_token_quant_int8_azp = PER_TOKEN_QUANT_INT8_AZP.torch_op
_static_quant = STATIC_QUANT.torch_op
_rms_norm_per_token_quant = RMS_NORM_PER_TOKEN_QUANT.torch_op
_fused_add_rms_norm_per_token_quant = FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT.torch_op
_rms_norm_static_quant = RMS_NORM_STATIC_QUANT.torch_op
_fused_add_rms_norm_static_quant = FUSED_ADD_RMS_NORM_STATIC_QUANT.torch_op
_silu_and_mul_per_token_quant = SILU_AND_MUL_PER_TOKEN_QUANT.torch_op

Pair = tuple[torch.Tensor, torch.Tensor]


def per_token_quant(input: torch.Tensor, dtype: torch.dtype, scale_ub: torch.Tensor | None = None) -> Pair:
    """(q, scale): one float32 scale per row ([..., 1]); q of dtype (torch.int8 or
    torch.float8_e4m3fn) and input's shape. fp8: scale = max(min(amax, scale_ub) / 448, 1/(448*512)),
    q = e4m3(x / scale); int8: scale = amax / 127, q = int8(x * (127 / amax)). scale_ub (one float32
    element) with fp8 only."""
    return _per_token_quant(input, dtype, scale_ub)


def per_token_quant_int8_azp(input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q int8, scale float32 [..., 1], azp int32 [..., 1]): asymmetric per row, x ~ (q - azp) * scale."""
    return _per_token_quant_int8_azp(input)


def static_quant(input: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 azp: torch.Tensor | None = None) -> torch.Tensor:
    """q with one given float32 scale (and, int8 only, an int32 zero point): fp8 q = e4m3(x * (1 / scale)),
    int8 q = int8(x / scale), with azp q = int8(int32(x * (1 / scale)) + azp)."""
    return _static_quant(input, scale, dtype, azp)


def rms_norm_per_token_quant(input: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype,
                             scale_ub: torch.Tensor | None = None) -> Pair:
    """per_token_quant(rms_norm(input, weight, eps), dtype, scale_ub), bit for bit, in one pass."""
    return _rms_norm_per_token_quant(input, weight, eps, dtype, scale_ub)


def fused_add_rms_norm_per_token_quant(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                       dtype: torch.dtype, scale_ub: torch.Tensor | None = None) -> Pair:
    """residual <- input + residual (in place, as fused_add_rms_norm), then
    per_token_quant(rms_norm(residual, weight, eps), dtype, scale_ub); input is not written."""
    return _fused_add_rms_norm_per_token_quant(input, residual, weight, eps, dtype, scale_ub)


def rms_norm_static_quant(input: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor,
                          dtype: torch.dtype, azp: torch.Tensor | None = None) -> torch.Tensor:
    """static_quant(rms_norm(input, weight, eps), scale, dtype, azp), bit for bit, in one pass."""
    return _rms_norm_static_quant(input, weight, eps, scale, dtype, azp)


def fused_add_rms_norm_static_quant(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                    scale: torch.Tensor, dtype: torch.dtype,
                                    azp: torch.Tensor | None = None) -> torch.Tensor:
    """residual <- input + residual (in place), then static_quant(rms_norm(residual, weight, eps), ...)."""
    return _fused_add_rms_norm_static_quant(input, residual, weight, eps, scale, dtype, azp)


def silu_and_mul_per_token_quant(input: torch.Tensor, dtype: torch.dtype, scale_ub: torch.Tensor | None = None) -> Pair:
    """per_token_quant(silu_and_mul(input), dtype, scale_ub): input [..., 2d] -> (q [..., d], scale [..., 1])."""
    return _silu_and_mul_per_token_quant(input, dtype, scale_ub)


__all__ = [
    "OPERATIONS", "GROUP", "MODULES",
    "PER_TOKEN_QUANT_CONTRACT", "PER_TOKEN_QUANT_INT8_AZP_CONTRACT", "STATIC_QUANT_CONTRACT",
    "RMS_NORM_PER_TOKEN_QUANT_CONTRACT", "FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT_CONTRACT",
    "RMS_NORM_STATIC_QUANT_CONTRACT", "FUSED_ADD_RMS_NORM_STATIC_QUANT_CONTRACT",
    "SILU_AND_MUL_PER_TOKEN_QUANT_CONTRACT",
    "PER_TOKEN_QUANT", "PER_TOKEN_QUANT_INT8_AZP", "STATIC_QUANT", "RMS_NORM_PER_TOKEN_QUANT",
    "FUSED_ADD_RMS_NORM_PER_TOKEN_QUANT", "RMS_NORM_STATIC_QUANT", "FUSED_ADD_RMS_NORM_STATIC_QUANT",
    "SILU_AND_MUL_PER_TOKEN_QUANT",
    "per_token_quant", "per_token_quant_int8_azp", "static_quant", "rms_norm_per_token_quant",
    "fused_add_rms_norm_per_token_quant", "rms_norm_static_quant", "fused_add_rms_norm_static_quant",
    "silu_and_mul_per_token_quant",
]
