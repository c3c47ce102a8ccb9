"""Checkpoint formats into linear_pack's canonical form: GPTQ, AWQ, GGUF Q8_0 / Q4_0 and fp8 with block
scales. The C++ functions of include/xllm_kernel/ops/linear.h do the work (torch.ops.xllm_kernel_formats.*),
on the tensors' own device.

    from xllm_kernel.ops.linear import formats, linear

    w = formats.from_gptq(qweight, qzeros, scales, g_idx, bits=4, format="v1")
    packed = w.pack()                                   # linear_pack, once, after initialize()
    y = linear(w.permute_input(x), packed, bias)        # act-order GPTQ reorders the input's K

Layouts (docs/checkpoint-formats.md):
- GPTQ: qweight int32 [K * bits / 32, N] packed along K, low bits first; qzeros int32 [G, N * bits / 32]
  packed along N; scales [G, N]; g_idx [K] (the group of each input channel). "v1" (AutoGPTQ) stores
  zero - 1, "v2" (GPTQModel) the zero. bits 4 -> int4 in groups; bits 8 -> int8 in groups (symmetric only).
- AWQ: qweight int32 [K, N / 8], qzeros int32 [G, N / 8], packed along N in AWQ's order (field i of a word
  holds column 8 c + [0, 2, 4, 6, 1, 3, 5, 7][i]); scales [G, N] -> int4 in groups.
- GGUF: Q8_0 (blocks of an f16 d and 32 int8: W = d q) -> int8 in groups of 32; Q4_0 (an f16 d and 16 bytes,
  weight j in the low nibble of byte j and weight j + 16 in its high nibble: W = d (q - 8)) -> int4 in groups
  of 32. data is the tensor's bytes (uint8), shape (N, K) = GGUF's (ne1, ne0).
- fp8 blocks: weight float8_e4m3fn [N, K], weight_scale_inv [ceil(N / 128), ceil(K / 128)]; W = q * scale.

Every zero 8 (int4) gives the symmetric form without zeros: the same W, a smaller packed weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

import xllm_kernel  # noqa: F401  (loads the library that registers torch.ops.xllm_kernel_formats)


@dataclass(frozen=True)
class LinearWeight:
    """linear_pack's arguments, and the input's column order where the format reorders K."""

    weight: torch.Tensor
    scales: Optional[torch.Tensor]
    zeros: Optional[torch.Tensor]
    scheme: str
    group_size: int
    input_permutation: Optional[torch.Tensor] = None  # int64 [K]: linear takes x[..., input_permutation]

    def pack(self) -> torch.Tensor:
        """linear_pack(weight, scales, zeros, scheme, group_size) with the selected implementation."""
        # The dispatcher's entry, as xllm_kernel.ops.linear.linear_pack calls it; that package imports this module.
        return torch.ops.xllm_kernel.linear_pack(self.weight, self.scales, self.zeros, self.scheme, self.group_size)

    def permute_input(self, x: torch.Tensor) -> torch.Tensor:
        """x[..., input_permutation] (a new tensor), or x itself where K keeps its order."""
        if self.input_permutation is None:
            return x
        return x.index_select(-1, self.input_permutation.to(x.device))


def _weight(result) -> LinearWeight:
    weight, scales, zeros, scheme, group_size, permutation = result
    return LinearWeight(weight, scales, zeros, scheme, int(group_size), permutation)


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: Optional[torch.Tensor] = None,
              *, bits: int = 4, format: str = "v1") -> LinearWeight:
    """GPTQ's qweight, qzeros, scales and g_idx (None: contiguous groups); format "v1" or "v2"."""
    return _weight(torch.ops.xllm_kernel_formats.gptq(qweight, qzeros, scales, g_idx, bits, format))


def from_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor) -> LinearWeight:
    """AWQ's (AutoAWQ GEMM layout) qweight, qzeros and scales."""
    return _weight(torch.ops.xllm_kernel_formats.awq(qweight, qzeros, scales))


def from_gguf(data: torch.Tensor, type: str, shape: Sequence[int]) -> LinearWeight:
    """A GGUF tensor's bytes (uint8) of type "Q8_0" or "Q4_0", for the weight shape (N, K)."""
    n, k = (int(v) for v in shape)
    return _weight(torch.ops.xllm_kernel_formats.gguf(data, type, n, k))


def from_fp8_blocks(weight: torch.Tensor, weight_scale_inv: torch.Tensor) -> LinearWeight:
    """fp8 e4m3fn weight with 128 x 128 block scales (weight_scale_inv, which multiplies)."""
    return _weight(torch.ops.xllm_kernel_formats.fp8_blocks(weight, weight_scale_inv))


__all__ = ["LinearWeight", "from_gptq", "from_awq", "from_gguf", "from_fp8_blocks"]
