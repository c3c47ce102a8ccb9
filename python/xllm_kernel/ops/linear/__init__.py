"""Linear: weights packed once at load (linear_pack), then y = x W^T + b (linear). Contracts and
kernels in src/ops/linear/; docs/operators.md has the full semantics.

    import xllm_kernel
    from xllm_kernel.ops.linear import linear_pack, linear

    xllm_kernel.initialize(device="cpu")
    packed = linear_pack(w, None, None, "bf16", 0)          # w [N, K] bfloat16
    y = linear(x, packed, None)                              # x [..., K] -> y [..., N]
    q4 = linear_pack(q, scales, zeros, "int4", 128)          # q int8 [N, K] in [0, 15], zeros/scales [N, K/128]

Schemes: "f32", "bf16", "f16" (weight in that dtype), "int8" (scales [N], or [N, K / group_size]), "fp8" (float8_e4m3fn,
scales per tensor, per channel [N] or per 128 x 128 block), "int4" (int8 values in [-8, 7], or in
[0, 15] with zeros; scales [N, K / group_size]). W = (q - z) * s is formed in float32; products and
sums are float32, rounded once to the input's dtype. A packed tensor is accepted only by the linear
of the implementation (device and solution) that packed it: pack after initialize().

The public API calls torch.ops.xllm_kernel.*, whose CPU/CUDA kernels call the device's prepared
binding and whose Meta fakes let torch.compile(fullgraph=True) trace linear (N is the packed
tensor's first dimension).

Quantized activations (docs/scaled-mm.md): a weight packed with "w8a8-int8" (int8 in [-127, 127],
scales [N]), "w8a8-fp8" (float8_e4m3fn, scales as "fp8") or "w4a8" (as "int4", groups a multiple of
8) is used by scaled_mm on activations quantized per token, or by linear_dynamic_quant, which does
both steps:

    from xllm_kernel.ops.quantization import per_token_quant
    packed = linear_pack(q8, scales, None, "w8a8-int8", 0)      # q8 int8 [N, K], scales [N]
    a, scale_a = per_token_quant(x, torch.int8)
    y = scaled_mm(a, packed, scale_a, None, None, torch.bfloat16)
    assert torch.equal(y, linear_dynamic_quant(x, packed))     # x bfloat16: bit for bit

The int8 schemes accumulate in int32, exactly, then apply the scales in one fixed float32 order: every
implementation gives the same bits.

Checkpoints (formats.py): from_gptq, from_awq, from_gguf and from_fp8_blocks give a LinearWeight (the
canonical arguments); its pack() calls linear_pack and its permute_input(x) reorders K where the format
did (GPTQ act-order).
"""

from __future__ import annotations

from typing import Optional

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

LINEAR_PACK_CONTRACT = contract("linear_pack")
LINEAR_CONTRACT = contract("linear")

SCALED_MM_CONTRACT = contract("scaled_mm")
LINEAR_DYNAMIC_QUANT_CONTRACT = contract("linear_dynamic_quant")

LINEAR_PACK = Operation(LINEAR_PACK_CONTRACT)
LINEAR = Operation(LINEAR_CONTRACT)
SCALED_MM = Operation(SCALED_MM_CONTRACT)
LINEAR_DYNAMIC_QUANT = Operation(LINEAR_DYNAMIC_QUANT_CONTRACT)

OPERATIONS = (LINEAR_PACK, LINEAR, SCALED_MM, LINEAR_DYNAMIC_QUANT)

GROUP = catalog.group("linear")
MODULES = GROUP.modules

_linear_pack = LINEAR_PACK.torch_op
_linear = LINEAR.torch_op
_scaled_mm = SCALED_MM.torch_op
_linear_dynamic_quant = LINEAR_DYNAMIC_QUANT.torch_op


def linear_pack(weight: torch.Tensor, scales: Optional[torch.Tensor], zeros: Optional[torch.Tensor], scheme: str,
                group_size: int) -> torch.Tensor:
    """The packed weight (uint8 [N, row_bytes]) for the selected linear; once, at load."""
    return _linear_pack(weight, scales, zeros, scheme, group_size)


def linear(input: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """input [..., K] @ W^T + bias -> a new [..., N] tensor of input's dtype (float32 accumulation)."""
    return _linear(input, packed, bias)


def scaled_mm(a: torch.Tensor, packed: torch.Tensor, scale_a: torch.Tensor, azp: Optional[torch.Tensor] = None,
              bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """a [..., K] (int8 or float8_e4m3fn, by the packed scheme) with scale_a float32 [..., 1] or one
    element (and int32 azp like it, w8a8-int8 only) times the packed weight -> a new [..., N] tensor
    of out_dtype: int32 (or float32 for fp8) sums per K group, then the contract's float32 epilogue."""
    return _scaled_mm(a, packed, scale_a, azp, bias, out_dtype)


def linear_dynamic_quant(input: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """scaled_mm(*per_token_quant(input, int8 or float8_e4m3fn), packed, ..., input.dtype), bit for bit."""
    return _linear_dynamic_quant(input, packed, bias)


# Checkpoint formats (GPTQ, AWQ, GGUF, fp8 blocks) into the canonical form: xllm_kernel.ops.linear.formats.
from xllm_kernel.ops.linear.formats import LinearWeight, from_awq, from_fp8_blocks, from_gguf, from_gptq  # noqa: E402

__all__ = ["LINEAR_PACK_CONTRACT", "LINEAR_CONTRACT", "SCALED_MM_CONTRACT", "LINEAR_DYNAMIC_QUANT_CONTRACT",
           "LINEAR_PACK", "LINEAR", "SCALED_MM", "LINEAR_DYNAMIC_QUANT", "OPERATIONS", "GROUP", "MODULES",
           "linear_pack", "linear", "scaled_mm", "linear_dynamic_quant", "LinearWeight", "from_gptq", "from_awq", "from_gguf", "from_fp8_blocks"]
