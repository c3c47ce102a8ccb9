"""Inputs with a fixed seed: made on the CPU by a torch.Generator, then moved to the device, so every
device sees the same values.

    g = inputs.generator(plan.seed, case_id)
    x = inputs.randn((tokens, hidden), g, dtype=torch.bfloat16, scale=3)
    x_device = inputs.to_device(x, plan.torch_device)   # same sizes, strides and offset
"""

from __future__ import annotations

import hashlib

import torch


def generator(seed: int, key: str = "") -> torch.Generator:
    """A CPU generator seeded from `seed` and `key` (e.g. the case id), so a case's inputs depend on
    the seed and the case only, never on the order cases run in."""
    mixed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    if key:
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        mixed ^= digest
    g = torch.Generator(device="cpu")
    g.manual_seed(mixed & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def randn(shape, g: torch.Generator, *, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Normal values (drawn in float64, scaled, then rounded once to `dtype`) on the CPU."""
    return (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale).to(dtype)


def uniform(shape, g: torch.Generator, *, low: float = -1.0, high: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    """Uniform values in [low, high) (drawn in float64, rounded once to `dtype`) on the CPU."""
    return (torch.rand(tuple(shape), generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def randint(shape, g: torch.Generator, *, low: int, high: int, dtype=torch.int64) -> torch.Tensor:
    """Integers in [low, high) on the CPU."""
    return torch.randint(low, high, tuple(shape), generator=g, dtype=dtype)


def to_device(tensor, device) -> torch.Tensor:
    """A copy of `tensor` on `device` with the same sizes, strides and storage offset; the whole
    storage is copied, so padding between rows is defined and checkable. Non-tensors pass through."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    from xllm_kernel.numerics.verify import _numerics

    return _numerics().copy_with_layout(tensor, torch.device(device))
