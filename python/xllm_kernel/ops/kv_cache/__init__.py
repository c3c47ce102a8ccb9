"""The paged KV-cache write: reshape_and_cache (contract and kernels in src/ops/kv_cache/;
docs/operators.md has the full semantics).

    from xllm_kernel.ops.kv_cache import reshape_and_cache, RESHAPE_AND_CACHE_CONTRACT, OPERATIONS

    # key, value [tokens, kv_heads, head_size]; caches [num_blocks, block_size, kv_heads, head_size]
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)  # in place; -1 skips a token

The public API calls torch.ops.xllm_kernel.reshape_and_cache, whose CPU/CUDA kernels call the
device's prepared binding and whose Meta fake lets torch.compile(fullgraph=True) trace it.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

RESHAPE_AND_CACHE_CONTRACT = contract("reshape_and_cache")

RESHAPE_AND_CACHE = Operation(RESHAPE_AND_CACHE_CONTRACT)

OPERATIONS = (RESHAPE_AND_CACHE,)

GROUP = catalog.group("kv_cache")
MODULES = GROUP.modules

_reshape_and_cache = RESHAPE_AND_CACHE.torch_op


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """key_cache[s // block_size, s % block_size] = key[t] (and value) for every token t whose slot
    s = slot_mapping[t] is >= 0, bit for bit, in place; nothing else of the caches changes. On the
    CPU a slot >= num_blocks * block_size or a repeated slot raises before any write; on CUDA an
    out-of-range slot is skipped."""
    _reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)


__all__ = ["RESHAPE_AND_CACHE_CONTRACT", "RESHAPE_AND_CACHE", "OPERATIONS", "GROUP", "MODULES", "reshape_and_cache"]
