"""Distributed runs (--distributed under torchrun) from Python: the rank's torchrun environment
as the tools read it, the per-rank report paths, and the aggregate rank 0 writes.

    from xllm_kernel.numerics import distributed

    env = distributed.environment()                # RankEnvironment; ValueError outside torchrun
    distributed.rank_path("numerics.json", 1)      # 'numerics.rank1.json'
    agg = distributed.load_aggregate("numerics.json")
    agg.world_size, agg.summary["status"], [c.case_id for c in agg.disagreed()]
    rank1 = agg.rank_report(1)                     # that rank's own report (xllm_kernel.numerics.report)

The environment rules and the path rule are the tools' own (src/tools/distributed/, through _C);
the aggregates' fields are docs/distributed.md's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Optional, Union

from xllm_kernel.numerics import report as _report

NUMERICS_AGGREGATE = "xllm-kernel/numerics-distributed-report/1"
BENCHMARK_AGGREGATE = "xllm-kernel/benchmark-distributed-report/1"
_REQUIRED = ("schema", "tool", "operation", "device", "mode", "seed", "world_size", "ranks", "summary")

# What torchrun sets for a rank (the tools require the first five).
VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
             "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def _tools():
    from xllm_kernel import _C

    if not getattr(_C, "tools_built", False) or not hasattr(_C, "rank_environment"):
        raise RuntimeError("xllm_kernel.numerics.distributed: this build of xllm_kernel has no tools "
                           "(built with XLLM_KERNEL_BUILD_TOOLS=OFF)")
    return _C


@dataclasses.dataclass(frozen=True)
class RankEnvironment:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the c10d store (TORCHELASTIC_USE_AGENT_STORE)
    run_id: str  # TORCHELASTIC_RUN_ID ('none' for a static rendezvous)
    restart_count: int


def environment(variables: Optional[Mapping[str, str]] = None) -> RankEnvironment:
    """This rank's torchrun environment (from os.environ, or `variables`), read by the tools' own
    rules: a ValueError names what is missing or wrong, and a WORLD_SIZE below 2."""
    source = os.environ if variables is None else variables
    given = {name: str(source[name]) for name in VARIABLES if name in source}
    return RankEnvironment(**_tools().rank_environment(given))


def under_torchrun(variables: Optional[Mapping[str, str]] = None) -> bool:
    """Whether `environment()` would succeed (two or more ranks, every variable set)."""
    try:
        environment(variables)
    except ValueError:
        return False
    return True


def rank_path(path: Union[str, os.PathLike], rank: int) -> str:
    """Where rank `rank` writes its own report for --output `path` (report.json -> report.rank1.json)."""
    return _tools().insert_rank(os.fspath(path), int(rank))


@dataclasses.dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    device: str
    host: str
    report: Optional[str]  # its own report's path (None without --output)
    summary: dict
    data: dict = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class AggregateResult:
    """One case (and implementation) across ranks: each rank's status, the consensus, the dissent."""

    case_id: str
    implementation: str
    parameters: dict
    statuses: tuple[str, ...]  # by rank
    majority_status: str
    consensus: str  # 'agreed' | 'disagreed'
    status: str  # the agreed status, or 'disagreed'
    dissent: tuple[dict, ...]
    data: dict = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """The aggregate report rank 0 writes (numerics or benchmark)."""

    path: str
    schema: str
    tool: str
    operation: str
    device: str
    mode: str
    world_size: int
    ranks: tuple[Rank, ...]
    results: tuple[AggregateResult, ...]
    summary: dict
    data: dict = dataclasses.field(repr=False)

    @property
    def exit_code(self) -> int:
        return int(self.summary.get("exit_code", -1))

    def disagreed(self) -> tuple[AggregateResult, ...]:
        return tuple(r for r in self.results if r.consensus != "agreed")

    def rank_report(self, rank: int) -> _report.Report:
        """Rank `rank`'s own report, loaded (xllm_kernel.numerics.report)."""
        entry = next((r for r in self.ranks if r.rank == rank), None)
        if entry is None:
            raise KeyError(f"{self.path}: no rank {rank}; ranks 0..{self.world_size - 1}")
        if not entry.report:
            raise FileNotFoundError(f"{self.path}: rank {rank} wrote no report of its own")
        path = pathlib.Path(entry.report)
        if not path.is_absolute() and self.path:
            beside = pathlib.Path(self.path).parent / path.name
            path = path if path.exists() else beside
        return _report.load(path)


def _result(d: dict, implementation: str) -> AggregateResult:
    return AggregateResult(d["case_id"], d.get("implementation", implementation), dict(d.get("parameters", {})),
                           tuple(d.get("statuses", ())), d.get("majority_status", ""), d.get("consensus", ""),
                           d.get("status", ""), tuple(d.get("dissent", ())), d)


def aggregate_from_dict(data: dict, *, path: str = "") -> Aggregate:
    where = path or "aggregate"
    if not isinstance(data, dict) or data.get("schema") not in (NUMERICS_AGGREGATE, BENCHMARK_AGGREGATE):
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise _report.ReportError(f"{where}: schema is {got!r}, expected {NUMERICS_AGGREGATE!r} or "
                                  f"{BENCHMARK_AGGREGATE!r} (a rank's own report: xllm_kernel.numerics.report.load)")
    missing = [f for f in _REQUIRED if f not in data]
    if missing:
        raise _report.ReportError(f"{where}: a {data['schema']} without {', '.join(missing)}")
    ranks = tuple(Rank(int(r["rank"]), int(r.get("local_rank", 0)), r.get("device", ""), r.get("host", ""),
                       r.get("report"), dict(r.get("summary") or {}), r) for r in data["ranks"])
    if data["schema"] == NUMERICS_AGGREGATE:
        results = tuple(_result(c, i.get("implementation", {}).get("name", ""))
                        for i in data.get("implementations", ()) for c in i.get("results", ()))
    else:
        results = tuple(_result(r, r.get("implementation", "")) for r in data.get("results", ()))
    return Aggregate(path, data["schema"], data["tool"], data["operation"], data["device"], data["mode"],
                     int(data["world_size"]), ranks, results, dict(data["summary"]), data)


def load_aggregate(path: Union[str, os.PathLike]) -> Aggregate:
    """Reads the aggregate report at `path` (the --output given to every rank)."""
    where = os.fspath(path)
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except OSError as e:
        raise _report.ReportError(f"{where}: cannot be read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise _report.ReportError(f"{where}: not JSON ({e})") from None
    return aggregate_from_dict(data, path=where)
