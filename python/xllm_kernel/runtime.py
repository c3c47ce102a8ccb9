"""initialize() and explain(): selection happens once, in C++, before the model runs.

    from xllm_kernel import initialize, explain

    bindings = initialize(device="cpu", operations=("rms_norm",), overrides={"rms_norm": "torch"})
    plan = bindings["rms_norm"]            # PreparedKernel: plan.spec, plan.function
    y = plan.function(x, weight, 1e-6)     # the prepared C++ binding, no dispatcher
    print(explain("cpu", "rms_norm"))      # every candidate and its verdict
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping

from xllm_kernel import _C, catalog
from xllm_kernel import registry as _registry
from xllm_kernel.platforms import Platform, PlatformEnum, device_name
from xllm_kernel.registry import KernelSpec, PreparedKernel, execution_mode


class Bindings(Mapping):
    """Read-only mapping operation -> PreparedKernel for one device, as initialize() published it."""

    def __init__(self, handle: "_C.Bindings"):
        self._handle = handle  # keeps the C++ bindings (and every prepared kernel) alive
        self._kernels = {
            op: PreparedKernel(KernelSpec._from_c(handle.spec(op)), handle.function(op), handle.detail(op))
            for op in handle.operations()
        }

    @property
    def device(self) -> str:
        return self._handle.device

    @property
    def mode(self) -> str:
        return self._handle.mode

    def __getitem__(self, operation: str) -> PreparedKernel:
        try:
            return self._kernels[operation]
        except KeyError:
            raise KeyError(
                f"bindings({self.device}): operation {operation!r} was not initialized; "
                f"initialized: {sorted(self._kernels)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)

    def __repr__(self) -> str:
        chosen = ", ".join(f"{op}={k.spec.name}" for op, k in self._kernels.items())
        return f"Bindings({self.device}, {self.mode}: {chosen})"


# One Python mapping per C++ Bindings, so that the same configuration returns the same object here
# too, as it does in C++.
_lock = threading.Lock()
_cache: dict[int, Bindings] = {}


def _wrap(handle: "_C.Bindings") -> Bindings:
    with _lock:
        found = _cache.get(handle.identity())
        if found is None:
            found = _cache[handle.identity()] = Bindings(handle)
        return found


def initialize(
    device: object = None,
    operations: Iterable[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    mode: str = "eager",
    batch_invariant: bool = False,
) -> Bindings:
    """Selects one implementation per operation for `device`, once per process, and publishes it.

    device: 'cpu' | 'cuda' | 'npu' (or a PlatformEnum / torch.device); default Platform.current().
    operations: the process's complete set; None or empty means the whole catalog.
    overrides: operation -> implementation name or solution; XLLM_KERNEL_OVERRIDE_<OPERATION>
    beats it. mode: 'eager' or 'graph' ('aclgraph', 'cudagraph' name the same mode).
    batch_invariant: select only implementations whose row results do not depend on the batch
    (docs/batch-invariance.md); an operation without one on the device raises, naming every such
    operation with its reasons. XLLM_KERNEL_BATCH_INVARIANT=1 turns it on as well.

    The same configuration returns the same Bindings; a different one for an initialized device
    raises (restart the worker). Every requested operation prepares, or nothing is published.
    """
    device_ = device_name(Platform.current() if device is None else device)
    if isinstance(operations, str):
        operations = (operations,)
    # Discover definitions: the package's Python groups and the extensions join the catalog; the
    # C++ runtime then imports the backend modules of the requested operations, freezes, selects
    # and publishes.
    catalog.load()
    _import_front_doors(device_)
    handle = _C.initialize(
        device_, list(operations or ()), dict(overrides or {}), execution_mode(mode), bool(batch_invariant)
    )
    return _wrap(handle)


def _import_front_doors(device: str) -> None:
    """Imports the package's own Python form of the C++-declared backend modules of `device`:
    xllm_kernel/ops/<family>/<leaf>.py for the module "<family>.<leaf>", found by its file (e.g.
    ops/normalization/torch_npu.py, the guide's form, registers the npu.torch.* implementations in a
    Python process; their plugin is then not loaded). An ImportError raised by one of its
    dependencies (torch_npu missing, or failing without the CANN runtime) is a missing dependency:
    recorded for the module's probe, which reports it in explain() and in initialize()'s error. Any
    other error propagates, an ImportError of the package's own code included (a typo, a name that
    moved): that is a broken installation, not an absent dependency."""
    for group in catalog.groups():
        for module in group.modules:
            if module.device != device or module.language != "c++" or module.name.count(".") != 1:
                continue
            qualified = "xllm_kernel.ops." + module.name
            if qualified in sys.modules:
                continue
            try:
                spec = importlib.util.find_spec(qualified)
            except ImportError:
                spec = None
            if spec is None:
                continue
            try:
                importlib.import_module(qualified)
            except ImportError as e:
                sys.modules.pop(qualified, None)
                if not _raised_by_a_dependency(e, spec.origin):
                    raise
                _C.note_missing_dependency(
                    module.name, f"python module {qualified} cannot import its dependency ({type(e).__name__}: {e})"
                )


def _raised_by_a_dependency(error: ImportError, origin: str | None) -> bool:
    """Whether `error`, raised while importing the module at `origin`, comes from a dependency: a
    module outside this package that is missing (ModuleNotFoundError names it) or whose own code
    raised. False when this package's code raised it: the module itself, or a name it imports from
    xllm_kernel that is not there."""
    name = error.name or ""
    if name and name != "xllm_kernel" and not name.startswith("xllm_kernel."):
        return True
    # The deepest frame that is not importlib's machinery raised it.
    raised_in = None
    tb = error.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith("<frozen"):
            raised_in = os.path.abspath(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    own = os.path.abspath(origin) if origin else None
    return raised_in is not None and raised_in != own and not raised_in.startswith(package)


def bindings(device: object) -> Bindings | None:
    """What initialize() published for `device`, or None."""
    handle = _C.bindings(device_name(device))
    return None if handle is None else _wrap(handle)


def prepared(operation: str, device: object = None) -> PreparedKernel:
    """The prepared kernel of `operation` (Operation.get_prepared)."""
    if device is None:
        initialized = [p.value for p in PlatformEnum if _C.bindings(p.value) is not None]
        if len(initialized) != 1:
            raise RuntimeError(
                f"{operation}: name the device; initialized devices: {initialized or 'none'} "
                "(call xllm_kernel.initialize(device=...) at start-up)"
            )
        device = initialized[0]
    found = bindings(device)
    if found is None:
        name = device_name(device)
        raise RuntimeError(
            f"{operation}: device {name} is not initialized; call xllm_kernel.initialize(device={name!r}) "
            "at start-up, before the first call"
        )
    return found[operation]


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    solution: str
    variant: str
    binding: str
    detail: str
    priority: int
    verdict: str  # 'selected' | 'lower priority' | 'overridden' | 'excluded'
    reason: str
    # Why excluded, as a code: 'none' | 'missing_dependency' | 'unsupported' | 'contract_mismatch'
    # | 'unsupported_mode' | 'not_registered' | 'not_batch_invariant'
    rejection: str = "none"
    batch_invariant: bool = False  # the implementation declares it (KernelSpec.batch_invariant)


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why selection picks what it picks; str() is the table the CLIs print."""

    device: str
    operation: str
    mode: str
    override_target: str
    override_source: str
    candidates: tuple[Candidate, ...]
    error: str
    text: str = dataclasses.field(repr=False)
    batch_invariant: bool = False  # asked for at initialize (or XLLM_KERNEL_BATCH_INVARIANT)

    @property
    def selected(self) -> Candidate | None:
        return next((c for c in self.candidates if c.verdict == "selected"), None)

    def __str__(self) -> str:
        return self.text


def explain(device: object, operation: str) -> Explanation:
    """Every candidate of `operation` on `device`, selected first, with its verdict and reason.

    Uses the device's initialized configuration, or the defaults (eager, environment overrides)
    when it is not initialized yet.
    """
    catalog.load()
    _import_front_doors(device_name(device))
    d = _C.explain(device_name(device), operation)
    return Explanation(**{**d, "candidates": tuple(Candidate(**c) for c in d["candidates"])})


# Operation.get_prepared() reads the published bindings through this (the registry imports nothing
# above it). Looked up when called, so the runtime's prepared() is the one called.
_registry._install("prepared", lambda operation, device: prepared(operation, device))
