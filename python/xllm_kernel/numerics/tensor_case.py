"""Tensor-tree cases: the Python twin of src/numerics/tensor_case.h.

A suite describes one example (CPU arguments from a fixed seed, a float64 reference, tolerances);
TensorCase does the rest: moves the arguments to the device with their layout, runs the
implementation, and validates outputs, the contract's mutated arguments (in place, and within their
elements), that every other input is bitwise unchanged, and aliasing (only where the contract
declares it). The checks are the C++ TensorCase's own code (numerics::check_tensors).

    def build(p, g):                     # p: the case's parameters, g: its CPU generator
        x = inputs.randn((p["tokens"], p["hidden"]), g)
        return Example(args=(x, 0.5), reference=lambda x, alpha: x * alpha,
                       tolerance=Tolerance(atol=1e-6, rtol=1e-6))

    case = TensorCase("my_scale", {"tokens": 7, "hidden": 64}, build)
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from xllm_kernel.numerics import inputs as _inputs
from xllm_kernel.numerics.suite import CaseMetadata, KernelCase, Plan, PreparedCase, Validation


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """|got - want| <= atol + rtol |want|, per element."""

    atol: float
    rtol: float


@dataclasses.dataclass(frozen=True)
class Example:
    """What a builder returns for one case.

    args: the operation's arguments in schema order, on the CPU (tensors keep their layout: a view
      with padding is copied to the device with it; scalars and None as they are).
    reference: the float64 reference, called with float64 CPU copies of the floating-point tensor
      arguments (other arguments as given); returns the expected outputs (a tensor, a tuple of them,
      or None) and writes the expected final value of each mutated argument into its copy in place.
      It must not call a registered implementation.
    expected / expected_mutated: instead of a reference, the expected outputs and the final values of
      the mutated arguments by name.
    tolerance: for outputs and mutated arguments; tolerance_overrides by name ("out0", or an argument
      name), each with its reason written beside it.
    call: how to call the implementation, call(function, args) -> outputs; default function(*args).
    metadata: bytes and flops of one call; default: the tensor arguments' bytes read, the outputs' and
      mutated arguments' bytes written (outputs counted in the first floating-point argument's dtype).
    """

    args: Sequence[Any]
    tolerance: Tolerance
    reference: Optional[Callable[..., Any]] = None
    expected: Any = None
    expected_mutated: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    tolerance_overrides: Mapping[str, Tolerance] = dataclasses.field(default_factory=dict)
    call: Optional[Callable[[Callable, list], Any]] = None
    metadata: Optional[CaseMetadata] = None


ExampleBuilder = Callable[[Mapping[str, Any], torch.Generator], Example]


def case_id(operation: str, parameters: Mapping[str, Any]) -> str:
    """operation/key=value/... with the keys in order, as the C++ cases name themselves."""
    parts = [operation]
    for key in sorted(parameters):
        value = parameters[key]
        parts.append(f"{key}={value if isinstance(value, str) else json.dumps(value)}")
    return "/".join(parts)


def outputs_of(result: Any) -> list:
    """A call's results as a list: None -> [], a tensor -> [it], a tuple or list -> its items."""
    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def _argument_names(contract) -> list[str]:
    return [a.name for a in torch._C.parse_schema(contract.schema).arguments]


def _float64_copy(value):
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_floating_point():
        return value.detach().to(device="cpu", dtype=torch.float64, copy=True)
    return value.detach().to(device="cpu", copy=True)


class _State:
    __slots__ = ("example", "names", "mutates", "aliases", "inputs", "pristine", "outputs", "expected",
                 "expected_mutated", "function")


class TensorCase(KernelCase):
    """A case built from one point of a dimension matrix by `builder(parameters, generator)`."""

    def __init__(self, operation: str, parameters: Mapping[str, Any], builder: ExampleBuilder):
        self.operation = operation
        self.parameters = dict(parameters)
        self.case_id = case_id(operation, self.parameters)
        self._builder = builder

    def unsupported_reason(self, plan: Plan) -> Optional[str]:
        # Graph mode without a graph API, or an implementation without the plan's mode: the runner
        # says so for every case before asking this one.
        return None

    def _example(self, plan: Plan) -> Example:
        example = self._builder(self.parameters, _inputs.generator(plan.seed, self.case_id))
        if not isinstance(example, Example):
            raise TypeError(f"{self.case_id}: the builder returned {type(example).__name__}, expected an Example")
        if (example.reference is None) == (example.expected is None):
            raise ValueError(f"{self.case_id}: an Example needs exactly one of reference= and expected=")
        return example

    def prepare(self, plan: Plan) -> PreparedCase:
        from xllm_kernel.registry import contract as contract_of

        s = _State()
        s.example = ex = self._example(plan)
        contract = contract_of(self.operation)
        s.names = _argument_names(contract)
        if len(ex.args) != len(s.names):
            raise ValueError(f"{self.case_id}: the Example has {len(ex.args)} arguments, the schema "
                             f"{contract.schema!r} takes {len(s.names)} ({', '.join(s.names)})")
        s.mutates = list(contract.mutates)
        s.aliases = bool(contract.aliases_inputs)
        if ex.reference is not None:
            args64 = [_float64_copy(a) for a in ex.args]
            s.expected = [_float64_copy(t) for t in outputs_of(ex.reference(*args64))]
            s.expected_mutated = {n: args64[i] for i, n in enumerate(s.names) if n in s.mutates}
        else:
            s.expected = [_float64_copy(t) for t in outputs_of(ex.expected)]
            s.expected_mutated = {n: _float64_copy(t) for n, t in ex.expected_mutated.items()}
        device = plan.torch_device
        s.inputs = [_inputs.to_device(a, device) for a in ex.args]
        s.pristine = [_inputs.to_device(a, device) for a in ex.args]
        s.outputs = []
        s.function = plan.implementation.function
        call = ex.call or (lambda function, args: function(*args))

        def function():
            s.outputs = outputs_of(call(s.function, s.inputs))
            return s.outputs

        def validate(last: Callable[[], Any]) -> Validation:
            outputs = outputs_of(last())
            for k, t in enumerate(outputs):
                if not isinstance(t, torch.Tensor):
                    return Validation().check(f"out{k}", "output", False,
                                              f"output out{k} is {type(t).__name__}, expected a tensor")
            tolerance = ex.tolerance
            overrides = {n: (float(t.atol), float(t.rtol)) for n, t in ex.tolerance_overrides.items()}
            optional = lambda values: [v if isinstance(v, torch.Tensor) else None for v in values]  # noqa: E731
            from xllm_kernel.numerics.verify import _numerics

            return Validation._from_c(_numerics().check_tensors(
                s.names, s.mutates, s.aliases, float(tolerance.atol), float(tolerance.rtol), overrides,
                optional(s.inputs), optional(s.pristine), outputs, s.expected, s.expected_mutated))

        reset = None
        mutated = [i for i, n in enumerate(s.names) if n in s.mutates and isinstance(s.inputs[i], torch.Tensor)]
        if mutated:
            def reset():
                for i in mutated:
                    s.inputs[i].copy_(s.pristine[i])

        def snapshot() -> list:
            return [t.clone() for t in s.outputs if isinstance(t, torch.Tensor)] + [s.inputs[i].clone() for i in mutated]

        return PreparedCase(function=function, validate=validate, metadata=ex.metadata or _metadata(s),
                            reset=reset, snapshot=snapshot)


def _metadata(s: _State) -> CaseMetadata:
    tensors = [a for a in s.example.args if isinstance(a, torch.Tensor)]
    read = sum(t.numel() * t.element_size() for t in tensors)
    floating = next((t for t in tensors if t.is_floating_point()), None)
    out_size = floating.element_size() if floating is not None else 4
    written = sum(t.numel() * out_size for t in s.expected)
    written += sum(s.example.args[i].numel() * s.example.args[i].element_size()
                   for i, n in enumerate(s.names) if n in s.mutates and isinstance(s.example.args[i], torch.Tensor))
    return CaseMetadata(bytes_read=read, bytes_written=written, flops=0.0)
