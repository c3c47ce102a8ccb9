"""The paged KV-cache write: reshape_and_cache, and reshape_and_cache_quant into quantized caches
(contracts and kernels in src/ops/kv_cache/; the quantized formats in csrc/common/kv_cache.h;
docs/operators.md has the full semantics).

    from xllm_kernel.ops.kv_cache import reshape_and_cache, reshape_and_cache_quant, OPERATIONS

    # key, value [tokens, kv_heads, head_size]; caches [num_blocks, block_size, kv_heads, head_size]
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)  # in place; -1 skips a token

    # float8_e4m3fn caches, one given float32 scale each: q = e4m3(x / scale)
    reshape_and_cache_quant(key, value, fp8_key_cache, fp8_value_cache, slot_mapping, k_scale, v_scale)
    # int8 caches, float32 scales [num_blocks, block_size, kv_heads] written per (token, head) row
    reshape_and_cache_quant(key, value, int8_key_cache, int8_value_cache, slot_mapping, k_scales, v_scales)

The public API calls torch.ops.xllm_kernel.<op>, whose CPU/CUDA kernels call the device's prepared
binding and whose Meta fakes let torch.compile(fullgraph=True) trace them.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

RESHAPE_AND_CACHE_CONTRACT = contract("reshape_and_cache")
RESHAPE_AND_CACHE_QUANT_CONTRACT = contract("reshape_and_cache_quant")

RESHAPE_AND_CACHE = Operation(RESHAPE_AND_CACHE_CONTRACT)
RESHAPE_AND_CACHE_QUANT = Operation(RESHAPE_AND_CACHE_QUANT_CONTRACT)

OPERATIONS = (RESHAPE_AND_CACHE, RESHAPE_AND_CACHE_QUANT)

GROUP = catalog.group("kv_cache")
MODULES = GROUP.modules

# torch.ops.xllm_kernel.<op>.default, bound once (torch.compile traces the calls below).
_reshape_and_cache = RESHAPE_AND_CACHE.torch_op
_reshape_and_cache_quant = RESHAPE_AND_CACHE_QUANT.torch_op


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """key_cache[s // block_size, s % block_size] = key[t] (and value) for every token t whose slot
    s = slot_mapping[t] is >= 0, bit for bit, in place; nothing else of the caches changes. On the
    CPU a slot >= num_blocks * block_size or a repeated slot raises before any write; on CUDA an
    out-of-range slot is skipped."""
    _reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)


def reshape_and_cache_quant(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, key_scale: torch.Tensor,
                            value_scale: torch.Tensor) -> None:
    """reshape_and_cache's rows and slots, quantized, in place. float8_e4m3fn caches: key_scale and
    value_scale hold one float32 each (given, only read) and every element is q = e4m3(x / scale)
    (saturating to +-448, NaN to 0x7F). int8 caches: key_scale and value_scale are float32
    [num_blocks, block_size, kv_heads], and each written (token, head) row is per_token_quant(row,
    torch.int8) bit for bit, its scale (amax / 127) stored at the row's (block, offset, head).
    Dequantized, x ~ float(q) * scale."""
    _reshape_and_cache_quant(key, value, key_cache, value_cache, slot_mapping, key_scale, value_scale)


__all__ = ["RESHAPE_AND_CACHE_CONTRACT", "RESHAPE_AND_CACHE_QUANT_CONTRACT", "RESHAPE_AND_CACHE",
           "RESHAPE_AND_CACHE_QUANT", "OPERATIONS", "GROUP", "MODULES", "reshape_and_cache",
           "reshape_and_cache_quant"]
