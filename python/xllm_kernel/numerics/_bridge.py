"""The Python side of python/src/python_suites.cpp: how the C++ runner sees a Python suite.

SuiteAdapter records the suite's add_argument calls (for CLI11), turns the parsed option strings
back into values (type, nargs, default, choices) for cases(args), and wraps cases and prepared
cases in the plain calls the C++ side makes. Everything here runs with the GIL, called from C++.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Mapping, Optional, Sequence

from xllm_kernel.numerics.suite import (CaseMetadata, Implementation, KernelCase, OperationSuite, Plan,
                                        PreparedCase, Validation)


class SuiteArgumentError(ValueError):
    """A suite argument's value or declaration is wrong (the tools exit 2 on the former)."""


_UNBOUNDED = -1


class Argument:
    """One add_argument call, as the CLI needs it (flags, value count) and as cases() reads it."""

    def __init__(self, operation: str, names: Sequence[str], *, type: Optional[Callable] = None, nargs=None,
                 default: Any = None, choices: Optional[Sequence[Any]] = None, help: str = "",
                 required: bool = False, action: str = "store", dest: Optional[str] = None,
                 metavar: Optional[str] = None, const: Any = None):
        who = f"suite {operation}: add_argument{tuple(names)}"
        if not names:
            raise SuiteArgumentError(f"{who}: give an option name, e.g. '--tokens'")
        for n in names:
            if not isinstance(n, str) or not n.startswith("-") or n in ("-", "--"):
                raise SuiteArgumentError(f"{who}: {n!r} is not an option name; suite arguments are options "
                                         f"('--tokens'), not positional arguments")
        longs = [n for n in names if n.startswith("--")]
        self.operation = operation
        self.names = tuple(names)
        self.dest = dest or (longs[0] if longs else names[0]).lstrip("-").replace("-", "_")
        self.help = help or ""
        self.required = bool(required)
        self.choices = list(choices) if choices is not None else None
        if action in ("store_true", "store_false"):
            if type is not None or nargs is not None or choices is not None:
                raise SuiteArgumentError(f"{who}: action {action!r} takes no type, nargs or choices")
            self.action = action
            self.type = None
            self.nargs = 0
            self.default = (action == "store_false") if default is None else default
            return
        if action != "store":
            raise SuiteArgumentError(f"{who}: action {action!r} is not supported; use 'store' (the default), "
                                     f"'store_true' or 'store_false'")
        if nargs == "?" or const is not None:
            raise SuiteArgumentError(f"{who}: nargs '?' and const are not supported; give a default instead")
        if not (nargs is None or nargs in ("+", "*") or (isinstance(nargs, int) and not isinstance(nargs, bool)
                                                        and nargs >= 1)):
            raise SuiteArgumentError(f"{who}: nargs must be None, a positive integer, '+' or '*', got {nargs!r}")
        if type is not None and not callable(type):
            raise SuiteArgumentError(f"{who}: type must be callable (int, float, str, ...), got {type!r}")
        self.action = "store"
        self.type = type
        self.nargs = nargs
        self.default = default
        self.metavar = metavar

    # ---- the CLI side (read by python_suites.cpp) ----

    @property
    def flags(self) -> str:
        return ",".join(self.names)

    @property
    def type_name(self) -> str:
        if getattr(self, "metavar", None):
            return str(self.metavar)
        if self.choices is not None:
            return "{" + ",".join(str(c) for c in self.choices) + "}"
        return getattr(self.type, "__name__", "TEXT").upper() if self.type is not None else "TEXT"

    @property
    def cli_action(self) -> str:
        return "flag" if self.action != "store" else "store"

    @property
    def min_values(self) -> int:
        if self.action != "store":
            return 0
        return {None: 1, "+": 1, "*": 0}.get(self.nargs, self.nargs) if not isinstance(self.nargs, int) else self.nargs

    @property
    def max_values(self) -> int:
        if self.action != "store":
            return 0
        if self.nargs in ("+", "*"):
            return _UNBOUNDED
        return 1 if self.nargs is None else self.nargs

    @property
    def delimited(self) -> bool:
        return self.action == "store" and self.nargs is not None  # lists also take "1,7,257"

    # ---- values ----

    def _convert(self, text: str) -> Any:
        flag = self.names[-1]
        value = text
        if self.type is not None:
            try:
                value = self.type(text)
            except (TypeError, ValueError) as e:
                name = getattr(self.type, "__name__", repr(self.type))
                raise SuiteArgumentError(f"{self.operation}: {flag}: expected {name} values, got {text!r} ({e})") from None
        if self.choices is not None and value not in self.choices:
            raise SuiteArgumentError(f"{self.operation}: {flag}: expected one of "
                                     f"{', '.join(str(c) for c in self.choices)}, got {text!r}")
        return value

    def value(self, given: Sequence[str]) -> Any:
        flag = self.names[-1]
        if self.action != "store":
            return (self.action == "store_true") if given else self.default
        if not given:
            if self.required:
                raise SuiteArgumentError(f"{self.operation}: {flag} is required")
            default = self.default
            if isinstance(default, str) and self.type is not None:
                default = self._convert(default)  # argparse converts string defaults too
            return default
        if isinstance(self.nargs, int) and len(given) != self.nargs:
            raise SuiteArgumentError(f"{self.operation}: {flag}: expected {self.nargs} values, got {len(given)}")
        values = [self._convert(t) for t in given]
        return values[-1] if self.nargs is None else values

    def cli_default(self, value: Any) -> list[str]:
        """A benchmark default as option strings."""
        if self.action != "store":
            return ["1"] if value == (self.action == "store_true") else []
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        return [str(v) for v in values]


class ArgumentRecorder:
    """The `parser` a suite's add_arguments(parser) receives: argparse's add_argument, recorded."""

    def __init__(self, operation: str):
        self._operation = operation
        self.arguments: list[Argument] = []

    def add_argument(self, *names: str, **options: Any) -> Argument:
        argument = Argument(self._operation, names, **options)
        for other in self.arguments:
            if other.dest == argument.dest or set(other.names) & set(argument.names):
                raise SuiteArgumentError(f"suite {self._operation}: argument {argument.flags} repeats "
                                         f"{other.flags} (same name or dest {argument.dest!r})")
        self.arguments.append(argument)
        return argument

    def parse(self, options: dict[str, list[str]]) -> argparse.Namespace:
        """The Namespace cases(args) gets, from the option strings the CLI collected."""
        return argparse.Namespace(**{a.dest: a.value(options.get(a.dest) or []) for a in self.arguments})


def _text(value: Any, who: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{who} must be a string, got {type(value).__name__}")
    return value


class SuiteAdapter:
    """A Python OperationSuite as the C++ runner calls it."""

    def __init__(self, suite: OperationSuite, origin: str):
        if not isinstance(suite, OperationSuite):
            raise TypeError(f"{origin}: SUITE must be an xllm_kernel.numerics.suite.OperationSuite, "
                            f"got {type(suite).__name__}")
        self.suite = suite
        self.operation = suite.operation
        self.origin = origin
        self.description = suite.description or f"Python suite ({origin})"
        self.implementations = list(suite.implementations)
        self.has_prepare = suite.prepare is not None
        self._parser = ArgumentRecorder(suite.operation)
        suite.add_arguments(self._parser)
        known = {a.dest: a for a in self._parser.arguments}
        self._benchmark_defaults = self._cli_values(suite.benchmark_defaults, "benchmark_defaults", known)
        self._headline = self._cli_values(suite.headline, "headline", known)

    def _cli_values(self, values: Mapping[str, Any], field: str, known: dict) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for key, value in values.items():
            if key not in known:
                raise SuiteArgumentError(f"suite {self.operation}: {field} names {key!r}, which is not "
                                         f"one of its arguments ({', '.join(known) or 'none'})")
            out[key] = known[key].cli_default(value)
        return out

    # Read once, when the suite is added.
    def cli_arguments(self) -> list:
        return [_CliArgument(a) for a in self._parser.arguments]

    def cli_benchmark_defaults(self) -> dict[str, list[str]]:
        return dict(self._benchmark_defaults)

    def cli_headline(self) -> dict[str, list[str]]:
        return dict(self._headline)

    def parse(self, options: dict[str, list[str]]) -> argparse.Namespace:
        return self._parser.parse(options)

    def cases(self, options: dict[str, list[str]]) -> list[tuple[Any, str, str]]:
        made = self.suite.cases(self.parse(options))
        out, seen = [], set()
        for c in made:
            who = f"suite {self.operation}: case {getattr(c, 'case_id', c)!r}"
            case_id = _text(getattr(c, "case_id", None), f"{who}: case_id")
            if case_id in seen:
                raise RuntimeError(f"suite {self.operation}: two cases are called {case_id!r}; case ids are unique")
            seen.add(case_id)
            parameters = getattr(c, "parameters", {})
            try:
                text = json.dumps(dict(parameters))
            except (TypeError, ValueError) as e:
                raise TypeError(f"{who}: parameters must be a mapping of JSON values ({e})") from None
            out.append((c, case_id, text))
        return out

    def prepare(self, plan: Plan) -> Optional[str]:
        reason = self.suite.prepare(plan)
        return None if reason is None else _text(reason, f"suite {self.operation}: prepare's reason")

    def unsupported_reason(self, case: KernelCase, plan: Plan) -> Optional[str]:
        reason = case.unsupported_reason(plan)
        return None if reason is None else _text(reason, f"{case.case_id}: unsupported_reason")

    def prepare_case(self, case: KernelCase, plan: Plan) -> "CaseRunner":
        prepared = case.prepare(plan)
        if not isinstance(prepared, PreparedCase):
            raise TypeError(f"{case.case_id}: prepare returned {type(prepared).__name__}, expected a PreparedCase")
        return CaseRunner(case.case_id, prepared)


class _CliArgument:
    __slots__ = ("flags", "dest", "help", "type_name", "action", "min_values", "max_values", "required", "delimited")

    def __init__(self, a: Argument):
        self.flags, self.dest, self.help, self.type_name = a.flags, a.dest, a.help, a.type_name
        self.action, self.min_values, self.max_values = a.cli_action, a.min_values, a.max_values
        self.required, self.delimited = a.required, a.delimited


class CaseRunner:
    """A PreparedCase as the runner drives it: run() keeps what the last run produced, validate()
    hands the case's validate a callable returning it."""

    def __init__(self, case_id: str, prepared: PreparedCase):
        self._id = case_id
        self._prepared = prepared
        self._last: Any = None
        self.has_reset = prepared.reset is not None
        self.has_snapshot = prepared.snapshot is not None

    def metadata_tuple(self) -> tuple[int, int, float]:
        m = self._prepared.metadata
        if isinstance(m, CaseMetadata):
            return (int(m.bytes_read), int(m.bytes_written), float(m.flops))
        m = dict(m or {})
        return (int(m.get("bytes_read", 0)), int(m.get("bytes_written", 0)), float(m.get("flops", 0.0)))

    def run(self) -> None:
        self._last = self._prepared.function()

    def validate(self) -> tuple:
        result = self._prepared.validate(lambda: self._last)
        if not isinstance(result, Validation):
            raise TypeError(f"{self._id}: validate returned {type(result).__name__}, expected a Validation")
        return result._to_c()

    def reset(self) -> None:
        self._prepared.reset()

    def snapshot(self) -> list:
        return list(self._prepared.snapshot())


def make_plan(device: str, device_index: int, mode: str, seed: int, spec: Optional[dict],
              function: Optional[Callable], detail: str) -> Plan:
    from xllm_kernel.registry import KernelSpec

    kernel_spec = KernelSpec._from_c(spec) if spec is not None else None
    implementation = Implementation(kernel_spec.name if kernel_spec else "", kernel_spec, function, detail)
    return Plan(device=device, device_index=int(device_index), mode=mode, seed=int(seed), implementation=implementation)
