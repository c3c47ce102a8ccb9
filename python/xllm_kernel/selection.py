"""Selection results as Python objects: what initialize() published for a device, and why.

    from xllm_kernel import selection

    chosen = selection.selection("cpu")          # Selection, or None before initialize("cpu")
    chosen["rms_norm"].implementation            # 'cpu.native.rms_norm'
    chosen["rms_norm"].override_source           # '' | 'argument' | 'environment XLLM_KERNEL_OVERRIDE_RMS_NORM'
    why = selection.explain_all("cpu")           # {operation: Explanation}, every candidate and its verdict
    why["rms_norm"].selected.name

A thin layer over xllm_kernel.runtime (bindings() and explain(), which read the C++ core): it
selects nothing itself, and the runtime does not import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

from xllm_kernel import catalog, runtime
from xllm_kernel.registry import KernelSpec
from xllm_kernel.runtime import Candidate, Explanation

__all__ = ["Candidate", "Explanation", "Selected", "Selection", "explain_all", "selection"]


@dataclasses.dataclass(frozen=True)
class Selected:
    """The implementation published for one operation, with where an override came from."""

    operation: str
    implementation: str  # the full name, <device>.<solution>.<operation>[.<variant>]
    solution: str
    variant: str
    binding: str
    priority: int
    detail: str  # what probing its module found (e.g. the SIMD target)
    override_target: str  # the override asked for ('' when none)
    override_source: str  # where it came from ('' when none)
    spec: KernelSpec = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Selection(Mapping):
    """Operation -> Selected for one device, in the bindings' order."""

    device: str
    mode: str
    selected: tuple[Selected, ...]

    def __getitem__(self, operation: str) -> Selected:
        for s in self.selected:
            if s.operation == operation:
                return s
        raise KeyError(f"selection({self.device}): operation {operation!r} was not initialized; "
                       f"initialized: {[s.operation for s in self.selected]}")

    def __iter__(self) -> Iterator[str]:
        return (s.operation for s in self.selected)

    def __len__(self) -> int:
        return len(self.selected)

    def as_dict(self) -> dict:
        """JSON values: {"device", "mode", "selected": {operation: {...}}} (the spec left out)."""
        rows = {}
        for s in self.selected:
            row = dataclasses.asdict(s)
            del row["spec"], row["operation"]
            rows[s.operation] = row
        return {"device": self.device, "mode": self.mode, "selected": rows}


def selection(device: object) -> Selection | None:
    """What initialize() published for `device`, or None when it is not initialized."""
    bindings = runtime.bindings(device)
    if bindings is None:
        return None
    rows = []
    for operation, prepared in bindings.items():
        ex = runtime.explain(bindings.device, operation)  # the device's initialized configuration
        spec = prepared.spec
        rows.append(Selected(operation=operation, implementation=spec.name, solution=spec.solution,
                             variant=spec.variant, binding=spec.binding, priority=spec.priority,
                             detail=prepared.detail, override_target=ex.override_target,
                             override_source=ex.override_source, spec=spec))
    return Selection(device=bindings.device, mode=bindings.mode, selected=tuple(rows))


def explain_all(device: object, operations: Iterable[str] | None = None) -> dict[str, Explanation]:
    """explain(device, operation) for each operation (default: the whole catalog, in its order)."""
    if operations is None:
        catalog.load()
        operations = [c.operation for c in catalog.operations()]
    elif isinstance(operations, str):
        operations = [operations]
    return {op: runtime.explain(device, op) for op in operations}
