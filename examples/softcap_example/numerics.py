"""The logit_softcap suite, as the guide's numerics/<operation>.py: a dimension matrix
(tensor_suite), inputs from the fixed-seed CPU generator, a float64 reference and per-dtype
tolerances. Suite discovery imports only this module (torch and the numerics helpers)."""

from __future__ import annotations

import torch

from xllm_kernel.numerics import inputs, verify
from xllm_kernel.numerics.factory import Dimension, tensor_suite
from xllm_kernel.numerics.tensor_case import Example, Tolerance


def _reference(x: torch.Tensor, cap: float) -> torch.Tensor:  # float64, never a registered implementation
    return cap * torch.tanh(x / cap)


def _build(p, g) -> Example:
    dtype = getattr(torch, p["dtype"])
    cap = float(p["cap"])
    # Logits up to a few times the cap: the linear part, the bend and the saturated tail.
    x = inputs.randn((p["tokens"], p["hidden"]), g, dtype=dtype, scale=1.5 * cap)
    # One rounding to the output dtype after a float32 computation of a few operations (tanh's
    # float32 error is a few float32 ulps); near 0, where out ~ input, the absolute term covers a
    # float32 ulp of cap.
    u = verify.unit_roundoff(dtype)
    return Example(args=(x, cap), reference=_reference,
                   tolerance=Tolerance(atol=cap * 2.0 ** -22, rtol=2 * u + 16 * 2.0 ** -24))


SUITE = tensor_suite(
    operation="logit_softcap",
    implementations=("cpu.python.logit_softcap", "cpu.torch.logit_softcap"),
    dimensions=(
        Dimension("tokens", (1, 7, 64), help="Rows"),
        Dimension("hidden", (256, 1000), help="Row width (the vocabulary of a logits row)"),
        Dimension("cap", (30,), help="The soft cap (Gemma 2: 30 for logits, 50 for attention scores)"),
        Dimension("dtype", ("float32", "bfloat16", "float16"), choices=("float32", "bfloat16", "float16")),
    ),
    builder=_build,
    description="cap * tanh(input / cap), Gemma 2's logit soft cap",
    benchmark_defaults={"tokens": [256], "hidden": [4096], "dtype": ["bfloat16", "float32"]},
    headline={"tokens": [16], "hidden": [32000], "dtype": ["bfloat16"]},  # a decode batch's logits
)
