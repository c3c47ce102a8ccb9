"""Reports of the numerics and benchmark tools as Python objects: load, validate, compare.

    from xllm_kernel.numerics import report

    r = report.load("numerics.json")               # NumericsReport (or BenchmarkReport, Comparison)
    r.passed, r.summary["status"]
    for impl in r.implementations:
        for case in impl.results:
            print(impl.name, case.case_id, case.status, case.headroom)
    b = report.load("benchmark.json")
    b.result("rms_norm/dtype=bfloat16/...", "cpu.native.rms_norm").device["median"]
    c = report.compare("base.json", "candidate.json", "base2.json")  # the tools' comparison, as a Comparison
    d = report.compare("numerics-old.json", "numerics-new.json")      # NumericsDiff: status and headroom changes

load() checks the report against its JSON schema (docs/schemas/, the reports' contract) when
jsonschema is installed and the schemas are at hand (a source checkout), and always checks the
schema identifier and the top-level fields the schema requires: a file that is not a report is a
ReportError naming the path and what is wrong. The objects keep the parsed JSON (`data`) for the
fields they do not name. The distributed aggregates are read by xllm_kernel.numerics.distributed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import tempfile
from typing import Any, Optional, Union

NUMERICS = "xllm-kernel/numerics-report/1"
BENCHMARK = "xllm-kernel/benchmark-report/1"
COMPARISON = "xllm-kernel/benchmark-comparison/1"

# Schema identifier -> its file in docs/schemas/.
SCHEMA_FILES = {NUMERICS: "numerics-report", BENCHMARK: "benchmark-report", COMPARISON: "benchmark-comparison"}

# The top-level fields each schema requires (checked without jsonschema too; a test keeps these
# equal to the schema files' "required").
REQUIRED = {
    NUMERICS: ("schema", "tool", "operation", "device", "mode", "seed", "environment", "occupancy", "implementations",
               "summary"),
    BENCHMARK: ("schema", "tool", "operation", "device", "mode", "seed", "environment", "occupancy", "timing",
                "device_timer",
                "copy_bandwidth_gbps", "copy_method", "copy_methods", "copy_bytes", "implementations", "results",
                "summary"),
    COMPARISON: ("schema", "tolerance", "rows", "drift", "compared"),
}


class ReportError(ValueError):
    """A file that is not a valid report (names the file and what is wrong)."""


def schema_directory() -> Optional[pathlib.Path]:
    """docs/schemas/ of the source tree this package comes from, or None (an installed wheel
    carries no docs); XLLM_KERNEL_SCHEMA_DIR names another."""
    given = os.environ.get("XLLM_KERNEL_SCHEMA_DIR")
    if given:
        return pathlib.Path(given)
    # python/xllm_kernel/numerics/report.py in a checkout; the build tree links the sources in.
    here = pathlib.Path(__file__).resolve()
    candidate = here.parents[3] / "docs" / "schemas" if len(here.parents) > 3 else None
    return candidate if candidate is not None and candidate.is_dir() else None


def json_schema(identifier: str) -> dict:
    """The JSON schema of a report identifier (e.g. NUMERICS), from schema_directory()."""
    if identifier not in SCHEMA_FILES:
        raise ReportError(f"no JSON schema for {identifier!r}; known: {sorted(SCHEMA_FILES)}")
    folder = schema_directory()
    if folder is None:
        raise FileNotFoundError("the report schemas (docs/schemas/) are not found next to this package; set "
                                "XLLM_KERNEL_SCHEMA_DIR to the repository's docs/schemas")
    return json.loads((folder / f"{SCHEMA_FILES[identifier]}.schema.json").read_text())


def validate(data: dict, *, where: str = "report") -> None:
    """Validates `data` against its JSON schema with jsonschema (ImportError when it is not
    installed); a ReportError names the failing field."""
    import jsonschema

    identifier = _identifier(data, where)
    try:
        jsonschema.validate(data, json_schema(identifier))
    except jsonschema.ValidationError as e:
        field = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ReportError(f"{where}: not a valid {identifier}: at {field}: {e.message}") from None


def _identifier(data: Any, where: str) -> str:
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected a JSON object, got {type(data).__name__}")
    identifier = data.get("schema")
    if identifier not in REQUIRED:
        hint = (" (a distributed aggregate: read it with xllm_kernel.numerics.distributed.load_aggregate)"
                if isinstance(identifier, str) and "distributed" in identifier else "")
        raise ReportError(f"{where}: schema is {identifier!r}, expected one of {sorted(REQUIRED)}{hint}")
    return identifier


def check_structure(data: Any, *, where: str = "report") -> str:
    """The schema identifier of `data`, after checking it names one and has the required fields."""
    identifier = _identifier(data, where)
    missing = [f for f in REQUIRED[identifier] if f not in data]
    if missing:
        raise ReportError(f"{where}: a {identifier} without {', '.join(missing)}")
    return identifier


def _can_validate() -> bool:
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        return False
    return schema_directory() is not None


# ---- the objects -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Implementation:
    """A report's implementation block."""

    name: str
    operation: str
    device: str
    solution: str
    variant: str
    binding: str
    detail: str
    priority: int

    @classmethod
    def _from(cls, d: dict) -> "Implementation":
        return cls(d.get("name", ""), d.get("operation", ""), d.get("device", ""), d.get("solution", ""),
                   d.get("variant", ""), d.get("binding", ""), d.get("detail", ""), int(d.get("priority", 0)))


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One numerics case: status ('passed', 'failed', 'unsupported'), its reason or failures, errors."""

    case_id: str
    parameters: dict
    status: str
    reason: str
    max_abs_error: float
    max_rel_error: float
    max_ulp: float
    headroom: float
    failures: tuple[str, ...]
    checks: tuple[dict, ...]
    data: dict = dataclasses.field(repr=False)

    @classmethod
    def _from(cls, d: dict) -> "CaseResult":
        return cls(d["case_id"], dict(d.get("parameters", {})), d["status"], d.get("reason") or "",
                   float(d.get("max_abs_error") or 0.0), float(d.get("max_rel_error") or 0.0),
                   float(d.get("max_ulp") or 0.0), float(d.get("headroom") or 0.0), tuple(d.get("failures", ())),
                   tuple(d.get("checks", ())), d)


@dataclasses.dataclass(frozen=True)
class ImplementationResults:
    """One implementation's numerics results."""

    implementation: Implementation
    excluded_reason: str
    coverage: dict
    worst_headroom: float
    results: tuple[CaseResult, ...]

    @property
    def name(self) -> str:
        return self.implementation.name


@dataclasses.dataclass(frozen=True)
class NumericsReport:
    path: str
    operation: str
    device: str
    mode: str
    seed: int
    environment: dict
    implementations: tuple[ImplementationResults, ...]
    summary: dict
    data: dict = dataclasses.field(repr=False)

    @property
    def passed(self) -> bool:
        return self.summary.get("status") == "passed"

    @property
    def exit_code(self) -> int:
        return int(self.summary.get("exit_code", -1))

    def implementation(self, name: str) -> ImplementationResults:
        for i in self.implementations:
            if i.name == name:
                return i
        raise KeyError(f"{self.path}: no implementation {name!r}; it has {[i.name for i in self.implementations]}")

    def result(self, case_id: str, implementation: str) -> CaseResult:
        for c in self.implementation(implementation).results:
            if c.case_id == case_id:
                return c
        raise KeyError(f"{self.path}: {implementation} has no case {case_id!r}")

    def cases(self) -> list[tuple[str, CaseResult]]:
        """(implementation name, case) for every case, in the report's order."""
        return [(i.name, c) for i in self.implementations for c in i.results]

    def failures(self) -> list[tuple[str, CaseResult]]:
        return [(name, c) for name, c in self.cases() if c.status == "failed"]


@dataclasses.dataclass(frozen=True)
class TimedResult:
    """One benchmark row (a case on an implementation); device, wall and host_enqueue hold the
    statistics in seconds per call (count, min, p10, median, mean, p90, max, stddev)."""

    case_id: str
    implementation: str
    parameters: dict
    status: str
    reason: str
    device: dict
    wall: dict
    host_enqueue: dict
    samples: dict
    achieved_gbps: Optional[float]
    percent_of_copy: Optional[float]
    ratio_to_fastest: Optional[float]
    speedup_vs_torch: Optional[float]
    percent_of_roofline: Optional[float]
    roofline_bound: Optional[str]  # "read", "copy" or a compute class (docs/reports.md, "Roofline")
    data: dict = dataclasses.field(repr=False)

    @property
    def median(self) -> Optional[float]:
        """The median device time per call in seconds (None when not timed)."""
        return self.device.get("median") if self.device else None

    @classmethod
    def _from(cls, d: dict) -> "TimedResult":
        return cls(d["case_id"], d["implementation"], dict(d.get("parameters", {})), d["status"], d.get("reason") or "",
                   dict(d.get("device") or {}), dict(d.get("wall") or {}), dict(d.get("host_enqueue") or {}),
                   dict(d.get("samples") or {}), d.get("achieved_gbps"), d.get("percent_of_copy"),
                   d.get("ratio_to_fastest"), d.get("speedup_vs_torch"), d.get("percent_of_roofline"),
                   (d.get("roofline") or {}).get("bound"), d)


@dataclasses.dataclass(frozen=True)
class BenchmarkReport:
    path: str
    operation: str
    device: str
    mode: str
    seed: int
    environment: dict
    timing: dict
    copy_bandwidth_gbps: float
    implementations: tuple[str, ...]  # the names timed side by side
    results: tuple[TimedResult, ...]
    summary: dict
    data: dict = dataclasses.field(repr=False)

    @property
    def exit_code(self) -> int:
        return int(self.summary.get("exit_code", -1))

    def result(self, case_id: str, implementation: str) -> TimedResult:
        for r in self.results:
            if r.case_id == case_id and r.implementation == implementation:
                return r
        raise KeyError(f"{self.path}: no result for {case_id!r} on {implementation!r}")


@dataclasses.dataclass(frozen=True)
class Ratio:
    low: float
    point: float
    high: float


@dataclasses.dataclass(frozen=True)
class ComparedRow:
    case_id: str
    implementation: str
    candidate_over_baseline: Ratio
    baseline2_over_baseline: Ratio
    verdict: str  # 'faster' | 'slower' | 'same' | 'drift'


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The benchmark comparison (baseline / candidate / baseline2), as `compare` writes it."""

    path: str
    tolerance: float
    drift: bool
    compared: int
    slower: int
    exit_code: int
    mismatches: tuple[dict, ...]
    rows: tuple[ComparedRow, ...]
    data: dict = dataclasses.field(repr=False)

    def verdicts(self) -> dict[tuple[str, str], str]:
        return {(r.case_id, r.implementation): r.verdict for r in self.rows}


def _ratio(d: Any) -> Ratio:
    d = d or {}
    return Ratio(d.get("low"), d.get("point"), d.get("high"))


Report = Union[NumericsReport, BenchmarkReport, Comparison]


def from_dict(data: dict, *, path: str = "", check: Optional[bool] = None) -> Report:
    """The report object of parsed JSON. check: True validates against the JSON schema (needs
    jsonschema and the schemas), False only the structure, None the schema when possible."""
    where = path or "report"
    identifier = check_structure(data, where=where)
    if check or (check is None and _can_validate()):
        validate(data, where=where)
    if identifier == NUMERICS:
        implementations = tuple(
            ImplementationResults(Implementation._from(i.get("implementation", {})), i.get("excluded_reason") or "",
                                  dict(i.get("coverage", {})), float(i.get("worst_headroom") or 0.0),
                                  tuple(CaseResult._from(c) for c in i.get("results", ())))
            for i in data["implementations"])
        return NumericsReport(path, data["operation"], data["device"], data["mode"], int(data["seed"]),
                              dict(data["environment"]), implementations, dict(data["summary"]), data)
    if identifier == BENCHMARK:
        return BenchmarkReport(path, data["operation"], data["device"], data["mode"], int(data["seed"]),
                               dict(data["environment"]), dict(data["timing"]), float(data["copy_bandwidth_gbps"]),
                               tuple(str(i) for i in data["implementations"]),
                               tuple(TimedResult._from(r) for r in data["results"]), dict(data["summary"]), data)
    rows = tuple(ComparedRow(r["case_id"], r["implementation"], _ratio(r.get("candidate_over_baseline")),
                             _ratio(r.get("baseline2_over_baseline")), r["verdict"]) for r in data["rows"])
    return Comparison(path, float(data["tolerance"]), bool(data["drift"]), int(data["compared"]),
                      int(data.get("slower", 0)), int(data.get("exit_code", 0)), tuple(data.get("mismatches", ())),
                      rows, data)


def load(path: Union[str, os.PathLike], *, check: Optional[bool] = None) -> Report:
    """Reads a report file (see from_dict for `check`)."""
    where = os.fspath(path)
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except OSError as e:
        raise ReportError(f"{where}: cannot be read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{where}: not JSON ({e})") from None
    return from_dict(data, path=where, check=check)


# ---- comparison ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CaseChange:
    """One case and implementation in two numerics reports (None where a report lacks it)."""

    case_id: str
    implementation: str
    baseline_status: Optional[str]
    candidate_status: Optional[str]
    baseline_headroom: Optional[float]
    candidate_headroom: Optional[float]

    @property
    def regressed(self) -> bool:
        """Passed in the baseline, not in the candidate (failed, unsupported or gone)."""
        return self.baseline_status == "passed" and self.candidate_status != "passed"


@dataclasses.dataclass(frozen=True)
class NumericsDiff:
    """Two numerics reports side by side, case by case."""

    baseline: NumericsReport
    candidate: NumericsReport
    changes: tuple[CaseChange, ...]  # every case and implementation of either report

    @property
    def regressions(self) -> tuple[CaseChange, ...]:
        return tuple(c for c in self.changes if c.regressed)

    @property
    def status_changes(self) -> tuple[CaseChange, ...]:
        return tuple(c for c in self.changes if c.baseline_status != c.candidate_status)


def _as_report(report: Union[Report, str, os.PathLike]) -> Report:
    return report if isinstance(report, (NumericsReport, BenchmarkReport, Comparison)) else load(report)


def _diff(baseline: NumericsReport, candidate: NumericsReport) -> NumericsDiff:
    def keyed(r: NumericsReport) -> dict:
        return {(name, c.case_id): c for name, c in r.cases()}

    a, b = keyed(baseline), keyed(candidate)
    order = list(a) + [k for k in b if k not in a]
    changes = []
    for key in order:
        x, y = a.get(key), b.get(key)
        changes.append(CaseChange(key[1], key[0], x.status if x else None, y.status if y else None,
                                  x.headroom if x else None, y.headroom if y else None))
    return NumericsDiff(baseline, candidate, tuple(changes))


@contextlib.contextmanager
def _stdout_to(path: str):
    """File descriptor 1 (where the C++ tool writes) redirected to `path` for the block."""
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "w") as f:
            os.dup2(f.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def compare(baseline, candidate, baseline2=None, *, tolerance: Optional[float] = None,
            allow_mismatch: bool = False) -> Union[Comparison, NumericsDiff]:
    """Compares reports (paths or loaded reports).

    Two numerics reports: a NumericsDiff (status and headroom per case). Benchmark reports: the
    tools' own comparison (`xllm-kernel-benchmark compare`, ratios with bootstrap intervals and
    verdicts) as a Comparison; `baseline2` defaults to `baseline` (no drift check, then). A
    configuration mismatch is a ReportError listing the differences unless allow_mismatch."""
    a, b = _as_report(baseline), _as_report(candidate)
    if isinstance(a, NumericsReport) and isinstance(b, NumericsReport):
        if baseline2 is not None:
            raise ValueError("report.compare: numerics reports are compared two at a time (no baseline2)")
        return _diff(a, b)
    if not (isinstance(a, BenchmarkReport) and isinstance(b, BenchmarkReport)):
        raise ReportError(f"report.compare: expected two numerics reports or benchmark reports, got "
                          f"{type(a).__name__} and {type(b).__name__}")
    c = a if baseline2 is None else _as_report(baseline2)
    from xllm_kernel import _C

    main = getattr(_C, "benchmark_main", None)
    if main is None:
        raise RuntimeError("report.compare: this build of xllm_kernel has no benchmark tool")
    with tempfile.TemporaryDirectory(prefix="xllm-kernel-compare-") as folder:
        paths = []
        for k, r in enumerate((a, b, c)):
            p = os.path.join(folder, f"{k}.json")
            with open(p, "w") as f:
                json.dump(r.data, f)
            paths.append(p)
        out = os.path.join(folder, "comparison.json")
        args = ["xllm_kernel.numerics.report", "compare", *paths, "--output", out, "--markdown",
                os.path.join(folder, "comparison.md"), "--fail-on", "none"]
        if tolerance is not None:
            args += ["--tolerance", str(tolerance)]
        if allow_mismatch:
            args.append("--allow-mismatch")
        with _stdout_to(os.path.join(folder, "stdout.txt")):  # the tool prints its Markdown there
            code = main(args)
        if code != 0 or not os.path.exists(out):
            raise ReportError(f"report.compare: the comparison failed (exit {code}; the reasons are on stderr)")
        return load(out)
