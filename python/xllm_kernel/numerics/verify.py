"""Validation (what a case's validation found; xllm_kernel.numerics.suite re-exports it) and the
comparison with float64 references, by the C++ numerics' own code (src/numerics/verify.h), so a
Python case's statistics are exactly a C++ case's. The suite protocol (suite.py) builds on this
module, never the other way round.

    v = Validation()
    v.compare("out0", got, want64, atol=1e-6, rtol=1e-6)   # or verify.compare(...) for a new one
    atol, rtol = verify.accumulate_tolerance(torch.bfloat16, reduction=4096)
"""

from __future__ import annotations

import dataclasses
import json


def _numerics():
    from xllm_kernel import _C

    if not getattr(_C, "numerics_built", False):
        raise RuntimeError("xllm_kernel.numerics: this build of xllm_kernel has no numerics tools "
                           "(built with XLLM_KERNEL_BUILD_TOOLS=OFF; the tools need CLI11 and nlohmann-json)")
    return _C._numerics


@dataclasses.dataclass
class Validation:
    """What a validation found (mirrors the C++ numerics::Validation, src/numerics/suite.h).

    headroom is max |error| / (atol + rtol |reference|): <= 1 passes. `compare` folds one tensor's
    comparison in, computed by the C++ comparison (src/numerics/verify.h).
    """

    passed: bool = True
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    max_ulp: float = 0.0
    headroom: float = 0.0
    mismatches: int = 0
    failures: list = dataclasses.field(default_factory=list)  # one line per failed check, for people
    checks: list = dataclasses.field(default_factory=list)  # per check: name, kind, statistics (JSON values)

    def compare(self, name: str, got, want, *, atol: float, rtol: float, kind: str = "output") -> "Validation":
        """Compares tensor `got` (any device and dtype) with the float64 `want` and folds the result in."""
        return self.merge(compare(name, got, want, atol=atol, rtol=rtol, kind=kind))

    def check(self, name: str, kind: str, passed: bool, failure: str = "") -> "Validation":
        """Records a pass/fail check (e.g. kind "unchanged" or "alias"); `failure` says what went wrong."""
        self.checks.append({"name": name, "kind": kind, "passed": bool(passed)})
        if not passed:
            self.passed = False
            self.failures.append(failure or f"{kind} {name} failed")
        return self

    def merge(self, other: "Validation") -> "Validation":
        """Folds `other` in: worst statistics, all failures and checks."""
        self.passed = self.passed and other.passed
        self.max_abs_error = max(self.max_abs_error, other.max_abs_error)
        self.max_rel_error = max(self.max_rel_error, other.max_rel_error)
        self.max_ulp = max(self.max_ulp, other.max_ulp)
        self.headroom = max(self.headroom, other.headroom)
        self.mismatches += other.mismatches
        self.failures.extend(other.failures)
        self.checks.extend(other.checks)
        return self

    @classmethod
    def _from_c(cls, t: tuple) -> "Validation":
        passed, max_abs, max_rel, max_ulp, headroom, mismatches, failures, checks = t
        return cls(bool(passed), max_abs, max_rel, max_ulp, headroom, int(mismatches), list(failures),
                   json.loads(checks))

    def _to_c(self) -> tuple:
        return (bool(self.passed), float(self.max_abs_error), float(self.max_rel_error), float(self.max_ulp),
                float(self.headroom), int(self.mismatches), [str(f) for f in self.failures],
                json.dumps(self.checks, default=str))


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
