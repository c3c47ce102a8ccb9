"""Attention over the paged KV cache: paged_attention, and paged_attention_quant over quantized
caches (contracts and kernels in src/ops/attention/; docs/operators.md has the full semantics).

    from xllm_kernel.ops.attention import paged_attention, paged_attention_quant, OPERATIONS

    # query [tokens, q_heads, head_size]; caches [num_blocks, block_size, kv_heads, head_size]
    # (what reshape_and_cache writes); block_tables, query_start_loc, seq_lens int32
    out = paged_attention(query, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                          scale=head_size ** -0.5)
    # float8_e4m3fn or int8 caches and their float32 scales (what reshape_and_cache_quant writes)
    out = paged_attention_quant(query, key_cache, value_cache, key_scale, value_scale, block_tables,
                                query_start_loc, seq_lens, scale=head_size ** -0.5)

The public API calls torch.ops.xllm_kernel.<op>, whose CPU/CUDA kernels call the device's prepared
binding and whose Meta fakes let torch.compile(fullgraph=True) trace them.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

PAGED_ATTENTION_CONTRACT = contract("paged_attention")
PAGED_ATTENTION_QUANT_CONTRACT = contract("paged_attention_quant")

PAGED_ATTENTION = Operation(PAGED_ATTENTION_CONTRACT)
PAGED_ATTENTION_QUANT = Operation(PAGED_ATTENTION_QUANT_CONTRACT)

OPERATIONS = (PAGED_ATTENTION, PAGED_ATTENTION_QUANT)

GROUP = catalog.group("attention")
MODULES = GROUP.modules

# torch.ops.xllm_kernel.<op>.default, bound once (torch.compile traces the calls below).
_paged_attention = PAGED_ATTENTION.torch_op
_paged_attention_quant = PAGED_ATTENTION_QUANT.torch_op


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                    scale: float, soft_cap: float = 0.0, sliding_window: int = 0) -> torch.Tensor:
    """Attention of every query row over its sequence's pages; a new [tokens, q_heads, head_size]
    tensor of query's dtype. Sequence s owns query rows [query_start_loc[s], query_start_loc[s+1]);
    its row i sits at position seq_lens[s] - q_len + i and sees positions up to its own (the last
    sliding_window of them when sliding_window > 0). soft_cap > 0 caps the logits (Gemma 2). On the
    CPU bad lengths or block ids raise before any compute; on CUDA the rows they touch are NaN."""
    return _paged_attention(query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, scale, soft_cap,
                            sliding_window)


def paged_attention_quant(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          key_scale: torch.Tensor, value_scale: torch.Tensor, block_tables: torch.Tensor,
                          query_start_loc: torch.Tensor, seq_lens: torch.Tensor, scale: float, soft_cap: float = 0.0,
                          sliding_window: int = 0) -> torch.Tensor:
    """paged_attention over float8_e4m3fn or int8 caches: every key and value element read is
    dequantized first, x = float(q) * scale in float32 (fp8: key_scale and value_scale of one
    element each; int8: float32 [num_blocks, block_size, kv_heads], a scale per (slot, head) row),
    then computed as paged_attention (same masks, soft cap, window, GQA, padding rows and rounding)."""
    return _paged_attention_quant(query, key_cache, value_cache, key_scale, value_scale, block_tables,
                                  query_start_loc, seq_lens, scale, soft_cap, sliding_window)


__all__ = ["PAGED_ATTENTION_CONTRACT", "PAGED_ATTENTION_QUANT_CONTRACT", "PAGED_ATTENTION", "PAGED_ATTENTION_QUANT",
           "OPERATIONS", "GROUP", "MODULES", "paged_attention", "paged_attention_quant"]
