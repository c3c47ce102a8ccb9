"""Token sampling from logits: sample (contract and kernels in src/ops/sampling/; the arithmetic
in csrc/common/sampling.h; docs/operators.md has the full semantics).

    from xllm_kernel.ops.sampling import sample, SAMPLE_CONTRACT, OPERATIONS

    # logits [batch, vocab]; per-row parameters, each [batch] on logits' device
    tokens = sample(logits, temperature, top_k, top_p, min_p, seeds, offsets)  # int64 [batch]

The public API calls torch.ops.xllm_kernel.sample, whose CPU/CUDA kernels call the device's
prepared binding and whose Meta fake lets torch.compile(fullgraph=True) trace it.
"""

from __future__ import annotations

import torch

from xllm_kernel import catalog
from xllm_kernel.registry import Operation, contract

SAMPLE_CONTRACT = contract("sample")

SAMPLE = Operation(SAMPLE_CONTRACT)

OPERATIONS = (SAMPLE,)

GROUP = catalog.group("sampling")
MODULES = GROUP.modules

_sample = SAMPLE.torch_op


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
           min_p: torch.Tensor, seeds: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """One token per row of logits [batch, vocab]: greedy where temperature is 0, otherwise a draw
    from softmax(logits / temperature) restricted by top_k (int32, <= 0: off), top_p (1: off) and
    min_p (0: off), by an exponential race over the Philox4x32-10 uniforms of (seeds, offsets,
    token index). The same inputs give the same token on every device and for every batch size;
    the token is never outside the kept set. On the CPU, bad parameters, a NaN logit or a row of
    -inf raise; on CUDA such a row gives -1 (a NaN counts as -inf). Returns int64 [batch]."""
    return _sample(logits, temperature, top_k, top_p, min_p, seeds, offsets)


__all__ = ["SAMPLE_CONTRACT", "SAMPLE", "OPERATIONS", "GROUP", "MODULES", "sample"]
