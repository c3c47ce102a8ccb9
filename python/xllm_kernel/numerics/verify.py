"""Comparison with float64 references, by the C++ numerics' own code (src/numerics/verify.h), so a
Python case's statistics are exactly a C++ case's.

    v = Validation()
    v.compare("out0", got, want64, atol=1e-6, rtol=1e-6)   # or verify.compare(...) for a new one
    atol, rtol = verify.accumulate_tolerance(torch.bfloat16, reduction=4096)
"""

from __future__ import annotations

from xllm_kernel.numerics.suite import Validation


def _numerics():
    from xllm_kernel import _C

    if not getattr(_C, "numerics_built", False):
        raise RuntimeError("xllm_kernel.numerics: this build of xllm_kernel has no numerics tools "
                           "(built with XLLM_KERNEL_BUILD_TOOLS=OFF; the tools need CLI11 and nlohmann-json)")
    return _C._numerics


def compare(name: str, got, want, *, atol: float, rtol: float, kind: str = "output") -> Validation:
    """A Validation of `got` (any device, any dtype) against float64 `want`: absolute, relative and
    ULP errors, headroom and mismatches (|got - want| > atol + rtol |want|; NaN or inf where the
    reference is finite is an infinite error); a shape difference fails."""
    return Validation._from_c(_numerics().compare(name, kind, got, want, float(atol), float(rtol)))


def bitwise_equal(a, b) -> bool:
    """Whether two tensors hold the same bytes (same shape and dtype; NaN-safe)."""
    return bool(_numerics().bitwise_equal(a, b))


def unit_roundoff(dtype) -> float:
    """Half an ulp relative: 2^-24 float32, 2^-8 bfloat16, 2^-11 float16."""
    return float(_numerics().unit_roundoff(dtype))


def accumulate_tolerance(dtype, reduction: int) -> tuple[float, float]:
    """(atol, rtol) of one rounding to `dtype` after float32 accumulation over `reduction` elements."""
    return tuple(_numerics().accumulate_tolerance(dtype, int(reduction)))
