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

LINEAR_PACK = Operation(LINEAR_PACK_CONTRACT)
LINEAR = Operation(LINEAR_CONTRACT)

OPERATIONS = (LINEAR_PACK, LINEAR)

GROUP = catalog.group("linear")
MODULES = GROUP.modules

_linear_pack = LINEAR_PACK.torch_op
_linear = LINEAR.torch_op


def linear_pack(weight: torch.Tensor, scales: Optional[torch.Tensor], zeros: Optional[torch.Tensor], scheme: str,
                group_size: int) -> torch.Tensor:
    """The packed weight (uint8 [N, row_bytes]) for the selected linear; once, at load."""
    return _linear_pack(weight, scales, zeros, scheme, group_size)


def linear(input: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """input [..., K] @ W^T + bias -> a new [..., N] tensor of input's dtype (float32 accumulation)."""
    return _linear(input, packed, bias)


# Checkpoint formats (GPTQ, AWQ, GGUF, fp8 blocks) into the canonical form: xllm_kernel.ops.linear.formats.
from xllm_kernel.ops.linear.formats import LinearWeight, from_awq, from_fp8_blocks, from_gguf, from_gptq  # noqa: E402

__all__ = ["LINEAR_PACK_CONTRACT", "LINEAR_CONTRACT", "LINEAR_PACK", "LINEAR", "OPERATIONS", "GROUP", "MODULES",
           "linear_pack", "linear", "LinearWeight", "from_gptq", "from_awq", "from_gguf", "from_fp8_blocks"]
