"""Operation suites written in Python: the cases of one operation, for the numerics and benchmark tools.

A suite module (numerics/<operation>.py, or an extension module named in XLLM_KERNEL_EXTENSIONS)
exports SUITE; xllm_kernel.numerics.catalog adds it to the C++ tools' suite list, so
`python -m xllm_kernel.numerics --operation my_operation` runs it exactly like a C++ suite: the same
runner, report schemas, exit codes, graph capture and timing.

    from xllm_kernel.numerics.suite import OperationSuite

    SUITE = OperationSuite(
        operation="my_operation",
        implementations=("npu.my_solution.my_operation",),
        add_arguments=_add_arguments,  # parser.add_argument("--tokens", type=int, nargs="+", default=[1, 7])
        cases=_cases,                  # args (attributes as argparse names them) -> KernelCases
        prepare=_prepare,              # optional: plan -> None, or a reason to skip that implementation
    )

The protocol:
- add_arguments(parser): parser.add_argument(...) as argparse takes it (option strings, type, nargs
  None/N/"+"/"*", default, choices, help, required, dest, metavar, action "store"/"store_true"/
  "store_false"). The arguments become the tools' CLI options (`--operation NAME --help` lists them).
- cases(args): a sequence of KernelCase from the parsed arguments. A ValueError here is a usage
  error (exit 2), so reject bad values with one that names the argument, expected and given.
- prepare(plan): called once per implementation before its cases run, by both tools (not for an
  implementation excluded here, nor for a plan no case can run with); load what the implementation
  needs (an extension, a compiled kernel). Return None, or a reason: every case of that
  implementation is then reported unsupported with it. An exception is an execution error.
- implementations: the implementation names the suite is written for. With --implementation not
  given, the tools run those of them registered for the device (in this order); when none is,
  the one initialize() would select. --implementation NAME|all|selected chooses explicitly.

A KernelCase has case_id, parameters (JSON values), unsupported_reason(plan) (None or a reason) and
prepare(plan) -> PreparedCase: function() runs the implementation once on prepared inputs and
returns what it produced; validate(last) checks, against an independent float64 reference, what
`last()` returns (the last run's results; in graph mode the replay's) and the inputs' state, and
returns a Validation; reset() (optional) restores mutated inputs; metadata gives bytes and flops.
Suite discovery imports the suite module only: import device SDKs in prepare or in the cases.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

from xllm_kernel.numerics.verify import Validation  # re-exported: a case's validate returns one


@dataclasses.dataclass(frozen=True)
class Implementation:
    """The implementation a plan runs: its registered name, spec, and prepared callable."""

    name: str
    spec: Any  # xllm_kernel.registry.KernelSpec
    function: Callable  # the prepared binding: call it with the operation's arguments
    detail: str = ""  # what probing its module found (e.g. the SIMD target)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One implementation on one device in one mode, as the tools run it."""

    device: str  # "cpu", "cuda", "npu"
    device_index: int
    mode: str  # "eager" or "graph" (ACLGraph on npu, CUDA graphs on cuda)
    seed: int
    implementation: Implementation

    @property
    def torch_device(self):
        """The torch.device the case's inputs belong on."""
        import torch

        if self.device == "cpu":
            return torch.device("cpu")
        if self.device == "npu":
            try:
                return torch.device("npu", self.device_index)  # torch_npu names PrivateUse1 "npu"
            except RuntimeError:
                return torch.device("privateuseone", self.device_index)
        return torch.device(self.device, self.device_index)


@dataclasses.dataclass(frozen=True)
class CaseMetadata:
    """What one call moves and computes (the benchmark's GB/s and % of copy come from the bytes)."""

    bytes_read: int = 0
    bytes_written: int = 0
    flops: float = 0.0


@dataclasses.dataclass(frozen=True)
class PreparedCase:
    """A case prepared for one plan.

    function() runs the implementation once on the prepared inputs and returns what it produced.
    validate(last) returns a Validation of what last() returns (the last run's results; after a
    graph replay, the replay's) and of the inputs' state. reset() restores mutated inputs (None
    when nothing is mutated); snapshot() (optional) returns copies of what a run produced, which
    graph mode compares bitwise with the eager call.
    """

    function: Callable[[], Any]
    validate: Callable[[Callable[[], Any]], Validation]
    metadata: CaseMetadata | Mapping[str, float] = CaseMetadata()
    reset: Optional[Callable[[], None]] = None
    snapshot: Optional[Callable[[], Sequence[Any]]] = None


class KernelCase:
    """One case of a suite. Subclass it (or provide the same four members)."""

    case_id: str = ""
    parameters: Mapping[str, Any] = {}

    def unsupported_reason(self, plan: Plan) -> Optional[str]:
        """Why this case cannot run with `plan`, or None."""
        return None

    def prepare(self, plan: Plan) -> PreparedCase:
        raise NotImplementedError(f"{type(self).__name__}.prepare")


@dataclasses.dataclass(frozen=True)
class OperationSuite:
    """The suite of one operation (see the module documentation for the protocol)."""

    operation: str
    implementations: Sequence[str]
    add_arguments: Callable[[Any], None]
    cases: Callable[[Any], Sequence[KernelCase]]
    prepare: Optional[Callable[[Plan], Optional[str]]] = None
    description: str = ""
    # Argument values the benchmark uses where the user gave none (timing wants fewer, larger cases).
    benchmark_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The headline cases: argument values both tools use under --grid headline where the user gave
    # none (one to four cases of the shapes the operation is known by; empty: the default grid).
    headline: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        who = f"OperationSuite({self.operation!r})"
        if not isinstance(self.operation, str) or not self.operation:
            raise ValueError(f"OperationSuite: operation must be a non-empty string, got {self.operation!r}")
        if isinstance(self.implementations, str):
            raise TypeError(f"{who}: implementations must be a sequence of names, got the string "
                            f"{self.implementations!r} (write ({self.implementations!r},))")
        names = tuple(self.implementations)
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"{who}: implementations must be names (strings), got {name!r}")
        object.__setattr__(self, "implementations", names)
        for field in ("add_arguments", "cases"):
            if not callable(getattr(self, field)):
                raise TypeError(f"{who}: {field} must be callable, got {getattr(self, field)!r}")
        if self.prepare is not None and not callable(self.prepare):
            raise TypeError(f"{who}: prepare must be callable or None, got {self.prepare!r}")
        object.__setattr__(self, "benchmark_defaults", dict(self.benchmark_defaults))
        object.__setattr__(self, "headline", dict(self.headline))
