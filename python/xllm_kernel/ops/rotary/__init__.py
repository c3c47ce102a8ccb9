"""Rotary position embedding: rotary_embedding (contract and kernels in src/ops/rotary/;
docs/operators.md has the full semantics).

    from xllm_kernel.ops.rotary import rotary_embedding, ROTARY_EMBEDDING_CONTRACT, OPERATIONS

    q, k = qkv[:, :q_size], qkv[:, q_size:q_size + k_size]   # slices of a fused qkv tensor
    rotary_embedding(positions, q, k, head_size, cos_sin_cache, True)  # in place, NeoX halves

The public API calls torch.ops.xllm_kernel.rotary_embedding, whose CPU/CUDA kernels call the
device's prepared binding and whose Meta fake lets torch.compile(fullgraph=True) trace it.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

ROTARY_EMBEDDING_CONTRACT = contract("rotary_embedding")

ROTARY_EMBEDDING = Operation(ROTARY_EMBEDDING_CONTRACT)

OPERATIONS = (ROTARY_EMBEDDING,)

GROUP = catalog.group("rotary")
MODULES = GROUP.modules

# Resolved once: an OpOverload call skips torch.ops' attribute lookups.
_rotary_embedding = ROTARY_EMBEDDING.torch_op


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    """Rotates the first rot_dim elements of every head of query (and key) in place by the angle of
    the token's position: cos_sin_cache[positions] holds cos, then sin. NeoX pairs (x[i], x[i + rot_dim/2])
    or GPT-J pairs (x[2i], x[2i + 1]); float32 compute, one rounding; elements past rot_dim unchanged."""
    _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


__all__ = [
    "ROTARY_EMBEDDING_CONTRACT", "ROTARY_EMBEDDING", "OPERATIONS", "GROUP", "MODULES", "rotary_embedding",
]
