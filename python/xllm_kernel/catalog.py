"""The catalog: operator groups, their operations and the backend modules that implement them.

One catalog, the library's. Its groups come from three places, and every one of them is a folder
or a module of its own (nothing here lists a family by hand):
- the C++ groups (src/ops/<group>/), which register themselves when the library loads;
- the package's group modules, xllm_kernel.ops.<group> for every folder under ops/ (_BUILTINS);
- extensions: modules named by XLLM_KERNEL_EXTENSIONS or the xllm_kernel.extensions entry points.

A group module exports OPERATIONS (Operation objects) and, optionally, MODULES (BackendModules).
load() imports each group module once and joins what the C++ catalog does not have yet: new
operations (torch.ops.xllm_kernel.<op> with their fake) and Python backend modules, whose
implementation modules initialize() imports when it prepares their device.

    from xllm_kernel import catalog
    print(catalog.describe())                  # catalog and registered implementations
    catalog.group("normalization").modules     # BackendModule views
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from typing import Iterable

from xllm_kernel import _C
from xllm_kernel._extensions import ENTRY_POINT_GROUP, ENVIRONMENT_VARIABLE, extension_modules
from xllm_kernel.platforms import PlatformEnum, device_name
from xllm_kernel import registry as _registry
from xllm_kernel.registry import OpContract, Operation, execution_mode, kernels


def _folder_groups() -> list[str]:
    ops = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops")
    return [
        f"xllm_kernel.ops.{entry}"
        for entry in sorted(os.listdir(ops))
        if not entry.startswith(("_", ".")) and os.path.isfile(os.path.join(ops, entry, "__init__.py"))
    ]


# The package's group modules: one per C++ group, plus every folder under ops/ (a group declared in
# Python only), in name order.
_BUILTINS = tuple(sorted({f"xllm_kernel.ops.{g['name']}" for g in _C.catalog()} | set(_folder_groups())))


@dataclasses.dataclass(frozen=True)
class DeclaredImplementation:
    operation: str
    name: str
    solution: str
    variant: str = ""
    priority: int = 0  # shown by explain() while the module is not loaded; registration sets the real one
    input_domain: str = ""


def _parse_implementation(module: str, device: str, name: str) -> DeclaredImplementation:
    parts = name.split(".")
    if len(parts) < 3 or not all(parts):
        raise ValueError(
            f"BackendModule({module}): implementation name {name!r} must be <device>.<solution>.<operation>[.<variant>]"
        )
    if parts[0] != device:
        raise ValueError(f"BackendModule({module}): implementation {name!r} is not for the module's device {device!r}")
    return DeclaredImplementation(operation=parts[2], name=name, solution=parts[1], variant=".".join(parts[3:]))


@dataclasses.dataclass(frozen=True)
class BackendModule:
    """A module of implementations: a Python module that initialize() imports when it prepares the
    module's device, or (language 'c++') one linked into the library or a device plugin.

    Declared in a group module, as the guide's MODULES:

        BackendModule(
            name="my_pkg.ops.my_group.torch_npu",           # the implementation module, imported lazily
            device="npu",
            implementations=("npu.torch.my_operation",),   # what importing it registers
            dependencies=("torch_npu",),                   # not importable: a missing dependency
        )

    A dependency that cannot be imported excludes the module's implementations with that reason
    (explain() shows it); any error while importing the implementation module itself propagates.
    Implementation names follow <device>.<solution>.<operation>[.<variant>]; one module, one solution.
    """

    name: str
    device: str
    implementations: tuple = ()
    dependencies: tuple[str, ...] = ()
    plugin: str = ""  # C++ only: '' when linked in, else e.g. 'libxllm_kernel_cuda.so'
    binding: str = "python"
    execution_modes: tuple[str, ...] = ("eager",)
    language: str = "python"

    def __post_init__(self):
        device = device_name(self.device)
        object.__setattr__(self, "device", device)
        impls = (self.implementations,) if isinstance(self.implementations, str) else tuple(self.implementations)
        object.__setattr__(
            self,
            "implementations",
            tuple(i if isinstance(i, DeclaredImplementation) else _parse_implementation(self.name, device, i) for i in impls),
        )
        deps = (self.dependencies,) if isinstance(self.dependencies, str) else tuple(self.dependencies)
        object.__setattr__(self, "dependencies", deps)
        modes = (self.execution_modes,) if isinstance(self.execution_modes, str) else tuple(self.execution_modes)
        object.__setattr__(self, "execution_modes", modes)
        if self.language not in ("python", "c++"):
            raise ValueError(f"BackendModule({self.name}): language must be 'python' or 'c++', got {self.language!r}")
        if self.language == "python":
            for m in modes:
                execution_mode(m)  # ValueError for an unknown mode
            solutions = {i.solution for i in self.implementations}
            if len(solutions) > 1:
                raise ValueError(f"BackendModule({self.name}): one module, one solution; got {sorted(solutions)}")

    @property
    def solution(self) -> str:
        return self.implementations[0].solution if self.implementations else ""


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
                    name=m["name"],
                    device=m["device"],
                    plugin=m["plugin"],
                    implementations=tuple(DeclaredImplementation(*i) for i in m["implementations"]),
                    binding=m["binding"],
                    language="python" if m["name"] in _python_modules else "c++",
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


# ---- joining Python groups ----------------------------------------------------------------------

_lock = threading.RLock()
_joined: dict[str, str] = {}  # module path -> the catalog group it joined as ('' when nothing to join)
_loading = False
_python_modules: set[str] = set()  # names of the backend modules joined from Python
_fakes = None  # the torch.library.Library holding the fakes of operations declared in Python


def load() -> None:
    """Joins the package's group modules and every extension, once (later calls only pick up
    extensions added to XLLM_KERNEL_EXTENSIONS since). initialize() and explain() call it."""
    global _loading
    with _lock:
        if _loading:  # a group module being imported asked again
            return
        _loading = True
        try:
            for name in _BUILTINS:
                load_module(name)
            for name in extension_modules():
                load_module(name, extension=True)
        finally:
            _loading = False


def _import(name: str, extension: bool):
    try:
        return importlib.import_module(name)
    except Exception as e:
        if not extension:
            raise
        raise ImportError(
            f"xllm_kernel: extension module {name!r} (from {ENVIRONMENT_VARIABLE} or the {ENTRY_POINT_GROUP!r} entry "
            f"points) failed to import: {type(e).__name__}: {e}"
        ) from e


def load_module(name: str, extension: bool = False) -> str:
    """Imports the group module `name` and joins its operations and Python backend modules to the
    catalog; returns the catalog group it joined as ('' when it had nothing new). A module without
    OPERATIONS (a numerics suite, say) is skipped; an extension module without OPERATIONS or SUITE is
    an error naming it. Idempotent."""
    with _lock:
        if name in _joined:
            return _joined[name]
        module = _import(name, extension)
        operations = getattr(module, "OPERATIONS", None)
        if operations is None:
            if extension and getattr(module, "SUITE", None) is None:
                raise ImportError(
                    f"xllm_kernel: extension module {name!r} (from {ENVIRONMENT_VARIABLE} or the {ENTRY_POINT_GROUP!r} "
                    "entry points) exports neither OPERATIONS (an operator group) nor SUITE (a numerics suite); name "
                    "the module that declares them"
                )
            _joined[name] = ""
            return ""
        _joined[name] = _join(name, module, operations)
        return _joined[name]


def _join(name: str, module, operations) -> str:
    who = f"catalog: group module {name}"
    if isinstance(operations, Operation) or not all(isinstance(op, Operation) for op in operations):
        raise TypeError(f"{who}: OPERATIONS must be a tuple of Operation objects, e.g. OPERATIONS = (OPERATION,)")
    known = {c["operation"]: c for c in _C.operations()}
    new: list[Operation] = []
    for op in operations:
        existing = known.get(op.name)
        if existing is None:
            new.append(op)
        elif (existing["version"], existing["schema"]) != (op.contract.version, op.contract.schema):
            raise ValueError(
                f"{who}: operation {op.name!r} declares version {op.contract.version} {op.contract.schema!r}, but the "
                f"catalog has version {existing['version']} {existing['schema']!r}; a change of semantics is a new "
                "contract version, declared in one place"
            )
    for op in new:
        _check_fake(who, op)
    modules = [m for m in getattr(module, "MODULES", ()) if m.language == "python"]
    if not new and not modules:
        return ""
    cpp_groups = {g["name"] for g in _C.catalog()}
    group_name = getattr(module, "GROUP_NAME", name.rsplit(".", 1)[-1])
    if group_name in cpp_groups:
        group_name = name  # Python modules of a C++ group join as a group of their own
    _C.add_group(
        group_name,
        [dataclasses.asdict(op.contract) for op in new],
        [_module_declaration(who, m) for m in modules],
    )
    _python_modules.update(m.name for m in modules)
    for op in new:
        _register_fake(op)
    return group_name


def _returns(schema: str) -> bool:
    return schema.rsplit("->", 1)[-1].strip() != "()"


def _check_fake(who: str, op: Operation) -> None:
    if op.fake is None and _returns(op.contract.schema):
        raise ValueError(
            f"{who}: operation {op.name!r} returns something ({op.contract.schema!r}) but declares no fake; give "
            "Operation(contract, fake=...) computing the outputs' shape, dtype and device (torch.compile and graph "
            "capture need it)"
        )


def _register_fake(op: Operation) -> None:
    import torch

    global _fakes
    if _fakes is None:
        _fakes = torch.library.Library("xllm_kernel", "FRAGMENT")  # kept for the process's life
    if op.fake is not None:
        torch.library.register_fake(f"xllm_kernel::{op.name}", op.fake, lib=_fakes)
    else:  # returns nothing: the fake writes nothing either
        torch.library.register_fake(f"xllm_kernel::{op.name}", lambda *args, **kwargs: None, lib=_fakes)


def _module_declaration(who: str, m: BackendModule) -> dict:
    if not m.implementations:
        raise ValueError(f"{who}: BackendModule {m.name} declares no implementations")
    return {
        "name": m.name,
        "device": m.device,
        "solution": m.solution,
        "binding": m.binding,
        "execution_modes": [execution_mode(x) for x in m.execution_modes],
        "implementations": [
            {"operation": i.operation, "variant": i.variant, "input_domain": i.input_domain, "priority": i.priority}
            for i in m.implementations
        ],
        "probe": _probe(m),
    }


def _probe(m: BackendModule):
    """Runs when initialize() (or explain()) first needs the module's device: imports its
    dependencies, then the module itself, whose @register_kernel calls register its kernels."""

    def probe():
        for dependency in m.dependencies:
            try:
                importlib.import_module(dependency)
            except ImportError as e:
                return False, f"python module {dependency} cannot be imported ({type(e).__name__}: {e})"
        importlib.import_module(m.name)  # any error here is a broken installation: it propagates
        return True, f"python {m.name}"

    return probe


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


# The registry joins the catalog's Python groups through this before it looks an operation up (it
# imports nothing above it). Looked up when called, so the catalog's load() is the one called.
_registry._install("load_catalog", lambda: load())
