"""Suites from dimension matrices: each dimension a CLI argument (a list of positive integers, or of
named choices such as dtypes), every combination a TensorCase whose builder returns an Example.

    SUITE = tensor_suite(
        operation="my_scale",
        implementations=("cpu.python.my_scale",),
        dimensions=(Dimension("tokens", (1, 7, 257)), Dimension("hidden", (64, 4099)),
                    Dimension("dtype", ("float32", "bfloat16"), choices=("float32", "bfloat16", "float16"))),
        builder=build,   # (parameters, generator) -> Example
    )

`--tokens 1 8` (or `--tokens 1,8`) replaces a dimension's values. Integer dimensions are positive:
empty dimensions (0 tokens) need a custom KernelCase (xllm_kernel.numerics.suite), which can say
what an empty call must do.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Optional, Sequence

from xllm_kernel.numerics.suite import OperationSuite, Plan
from xllm_kernel.numerics.tensor_case import ExampleBuilder, TensorCase


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One axis of the matrix: `--<name>` with these default values. Without choices the values
    are positive integers; with choices, names from them."""

    name: str
    default: Sequence[Any]
    help: str = ""
    choices: Optional[Sequence[str]] = None


def _positive(operation: str, name: str, values: Sequence[Any], where: str) -> list[int]:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(
                f"{operation}: --{name}: {where} must be positive integers, got {v!r}; tensor_suite builds "
                f"positive dimension matrices only: write a custom KernelCase (xllm_kernel.numerics.suite) "
                f"for empty dimensions")
    return list(values)


def tensor_suite(
    *,
    operation: str,
    implementations: Sequence[str],
    dimensions: Sequence[Dimension] | Mapping[str, Sequence[int]],
    builder: ExampleBuilder,
    description: str = "",
    prepare: Optional[Callable[[Plan], Optional[str]]] = None,
    benchmark_defaults: Optional[Mapping[str, Any]] = None,
    headline: Optional[Mapping[str, Any]] = None,
) -> OperationSuite:
    """An OperationSuite whose cases are every combination of `dimensions` (the last varies fastest)."""
    if isinstance(dimensions, Mapping):
        dimensions = tuple(Dimension(name, tuple(values)) for name, values in dimensions.items())
    dimensions = tuple(dimensions)
    if not dimensions:
        raise ValueError(f"tensor_suite({operation!r}): at least one dimension is needed")
    for d in dimensions:
        if not d.default:
            raise ValueError(f"tensor_suite({operation!r}): dimension {d.name} has no default values")
        if d.choices is None:
            _positive(operation, d.name, d.default, "default values")
        elif any(v not in d.choices for v in d.default):
            raise ValueError(f"tensor_suite({operation!r}): dimension {d.name}: defaults {list(d.default)} "
                             f"must be among {list(d.choices)}")

    def add_arguments(parser) -> None:
        for d in dimensions:
            default = " ".join(str(v) for v in d.default)
            if d.choices is None:
                parser.add_argument(f"--{d.name}", type=int, nargs="+", default=list(d.default),
                                    help=f"{d.help or d.name} (positive integers) [default: {default}]")
            else:
                parser.add_argument(f"--{d.name}", type=str, nargs="+", default=list(d.default), choices=list(d.choices),
                                    help=f"{d.help or d.name}: {', '.join(d.choices)} [default: {default}]")

    def cases(args) -> list[TensorCase]:
        axes = []
        for d in dimensions:
            values = list(getattr(args, d.name.replace("-", "_")))
            axes.append(values if d.choices is not None else _positive(operation, d.name, values, "values"))
        names = [d.name for d in dimensions]
        return [TensorCase(operation, dict(zip(names, point)), builder) for point in itertools.product(*axes)]

    return OperationSuite(operation=operation, implementations=tuple(implementations), add_arguments=add_arguments,
                          cases=cases, prepare=prepare, description=description,
                          benchmark_defaults=dict(benchmark_defaults or {}), headline=dict(headline or {}))
