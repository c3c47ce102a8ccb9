"""The catalog: operator groups, their operations and the backend modules that implement them.

The groups live in C++ (src/ops/<group>/) and register themselves; _BUILTINS follows from them:
the Python module of each group, xllm_kernel.ops.<group>, which exports its contracts, OPERATIONS
and public API. Nothing here lists a family by hand.

    from xllm_kernel import catalog
    print(catalog.describe())                  # catalog and registered implementations
    catalog.group("normalization").modules     # BackendModule views
"""

from __future__ import annotations

import dataclasses
import importlib

from xllm_kernel import _C
from xllm_kernel.registry import OpContract, kernels

_BUILTINS = tuple(f"xllm_kernel.ops.{g['name']}" for g in _C.catalog())


@dataclasses.dataclass(frozen=True)
class DeclaredImplementation:
    operation: str
    name: str
    solution: str


@dataclasses.dataclass(frozen=True)
class BackendModule:
    """An implementation module: linked into the library, or a device plugin loaded by initialize()."""

    name: str
    device: str
    plugin: str  # '' when linked in, else e.g. 'libxllm_kernel_cuda.so'
    implementations: tuple[DeclaredImplementation, ...]


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    operations: tuple[OpContract, ...]
    modules: tuple[BackendModule, ...]


def groups() -> tuple[Group, ...]:
    """Every group this build knows, in catalog order."""
    return tuple(
        Group(
            g["name"],
            tuple(OpContract._from_c(c) for c in g["operations"]),
            tuple(
                BackendModule(
                    m["name"], m["device"], m["plugin"], tuple(DeclaredImplementation(*i) for i in m["implementations"])
                )
                for m in g["modules"]
            ),
        )
        for g in _C.catalog()
    )


def group(name: str) -> Group:
    for g in groups():
        if g.name == name:
            return g
    raise ValueError(f"catalog: unknown group {name!r}; groups: {[g.name for g in groups()]}")


def operations() -> tuple[OpContract, ...]:
    """Every catalog operation's contract, in catalog order."""
    return tuple(OpContract._from_c(c) for c in _C.operations())


def group_modules() -> tuple:
    """The Python module of every built-in group (imported)."""
    return tuple(importlib.import_module(name) for name in _BUILTINS)


def describe() -> str:
    """The catalog and the registered implementations, for people."""
    lines = ["catalog:"]
    for g in groups():
        lines.append(f"  group {g.name}")
        for c in g.operations:
            lines.append(f"    {c.schema}  (v{c.version}, {c.numerical_mode})")
        for m in g.modules:
            lines.append(f"    module {m.name} [{m.device}]" + (f" plugin {m.plugin}" if m.plugin else ""))
    specs = kernels()
    lines.append(f"registered implementations: {len(specs)}")
    for s in specs:
        lines.append(
            f"  {s.name}  device={s.device} solution={s.solution} binding={s.binding} priority={s.priority}"
        )
    return "\n".join(lines)
