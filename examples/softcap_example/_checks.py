"""Argument checks both implementations share: errors name the operation, the argument, what was
expected and what was given."""

from __future__ import annotations

import math

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check(input: torch.Tensor, cap: float) -> None:
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"logit_softcap: input: expected a tensor, got {type(input).__name__}")
    if input.dtype not in DTYPES:
        raise TypeError(f"logit_softcap: input: expected float32, bfloat16 or float16, got {input.dtype}")
    if not (isinstance(cap, (int, float)) and math.isfinite(cap) and cap > 0):
        raise ValueError(f"logit_softcap: cap: expected a finite number > 0, got {cap!r}")
