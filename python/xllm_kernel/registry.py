"""OpContract, KernelSpec, PreparedKernel, Operation and register_kernel, over the C++ registry.

There is one registry per process, the library's: these are read-only views of its C++ objects,
and register_kernel() adds a Python implementation to it, where it competes in selection with the
native ones.

    from xllm_kernel import register_kernel
    from xllm_kernel.ops.normalization import RMS_NORM_CONTRACT

    @register_kernel(name="cpu.python.rms_norm", contract=RMS_NORM_CONTRACT, device="cpu", priority=30)
    def rms_norm(input, weight, eps):
        ...

The registry is the package's lowest layer: it imports neither the catalog nor the runtime. Where
it needs them (joining the Python groups before it looks an operation up, the bindings
initialize() published), it calls what they install here when they are imported (_install below);
importing xllm_kernel imports both.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, TypeVar

from xllm_kernel import _C
from xllm_kernel.platforms import PlatformEnum, device_name

F = TypeVar("F", bound=Callable)

# What the layers above install when they are imported (importing xllm_kernel imports both), so
# that this module imports neither: "load_catalog" (xllm_kernel.catalog.load: the package's Python
# groups and the extensions join the catalog) and "prepared" (xllm_kernel.runtime.prepared: the
# binding initialize() published).
_above: dict[str, Callable] = {}


def _install(name: str, fn: Callable) -> None:
    """Called by xllm_kernel.catalog and xllm_kernel.runtime when they are imported."""
    _above[name] = fn


def _call_above(name: str, *args):
    fn = _above.get(name)
    if fn is None:
        raise RuntimeError(f"xllm_kernel.registry: {name} is not installed (import xllm_kernel first)")
    return fn(*args)


def _ensure_in_catalog(operation: str) -> None:
    """Joins the catalog's Python groups and extensions (catalog.load()) unless `operation` is in the
    catalog already."""
    if not _known(operation):
        _call_above("load_catalog")


# The C++ core knows two execution modes; the spec names the graph mode after each device's graph
# API (ACLGraph on Ascend, CUDA graphs), which are all the C++ "graph".
_MODE_ALIASES = {"eager": "eager", "graph": "graph", "aclgraph": "graph", "cudagraph": "graph", "cuda_graph": "graph"}


def execution_mode(name: str) -> str:
    """'eager' or 'graph' from a mode name or one of its device spellings ('aclgraph', 'cudagraph')."""
    try:
        return _MODE_ALIASES[name]
    except (KeyError, TypeError):
        raise ValueError(f"execution mode: expected one of {sorted(_MODE_ALIASES)}, got {name!r}") from None


@dataclasses.dataclass(frozen=True)
class OpContract:
    """An operation's semantics, shared by all its implementations (include/xllm_kernel/contract.h).

    The catalog's contracts are read from C++ (contract("rms_norm")); a group module declares a new
    operation's contract here, with its torch schema written out or derived by infer_schema():

        MY_SCALE_CONTRACT = OpContract(
            operation="my_scale", version=1, schema="my_scale(Tensor input, float alpha) -> Tensor",
            numerical_mode="exact")

    `mutates` names every argument written in place (Tensor(a!) in the schema); the library checks
    that they agree when the operation joins the catalog.
    """

    operation: str
    version: int
    schema: str
    mutates: tuple[str, ...] = ()
    aliases_inputs: bool = False
    numerical_mode: str = "fp32_accumulate"
    semantics: str = ""
    dtypes: str = ""

    def __post_init__(self):
        if isinstance(self.mutates, str):
            object.__setattr__(self, "mutates", (self.mutates,))
        else:
            object.__setattr__(self, "mutates", tuple(self.mutates))

    @classmethod
    def _from_c(cls, d: dict) -> "OpContract":
        return cls(**d)


def infer_schema(operation: str, prototype: Callable, mutates: Iterable[str] = ()) -> str:
    """The torch schema of `operation` from an annotated prototype (e.g. the operation's fake).

        infer_schema("my_add_", my_add_fake, mutates=("input",))
        # 'my_add_(Tensor(a0!) input, Tensor other) -> ()'
    """
    import torch

    infer = getattr(torch.library, "infer_schema", None)
    if infer is None:  # torch < 2.5 has it only privately
        from torch._library.infer_schema import infer_schema as infer
    try:
        return operation + infer(prototype, mutates_args=tuple(mutates))
    except Exception as e:  # torch raises ValueError for a missing or unsupported annotation
        raise ValueError(
            f"{operation}: cannot infer a schema from {getattr(prototype, '__name__', prototype)!r}: {e}; annotate "
            "every parameter and the return type (torch.Tensor, float, int, bool, ...), or write the schema out"
        ) from None


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """An implementation's metadata; the name is a convention, the fields are the truth."""

    name: str
    contract: OpContract
    device: str
    execution_modes: tuple[str, ...]
    input_domain: str
    solution: str
    variant: str
    binding: str
    priority: int
    # A row's output bits do not depend on the other rows, their number, its position or the thread
    # count (docs/batch-invariance.md); declared by the library's C++ modules.
    batch_invariant: bool = False

    @property
    def operation(self) -> str:
        return self.contract.operation

    @property
    def contract_version(self) -> int:
        return self.contract.version

    @classmethod
    def _from_c(cls, d: dict) -> "KernelSpec":
        return cls(**{**d, "contract": OpContract._from_c(d["contract"])})


@dataclasses.dataclass(frozen=True)
class PreparedKernel:
    """The implementation initialize() selected for one operation on one device.

    `function` calls the prepared C++ binding directly (no dispatcher); keep it for a graph's
    lifetime. `detail` is what probing its module found (e.g. the SIMD target).
    """

    spec: KernelSpec
    function: Callable
    detail: str = ""


class Operation:
    """A catalog operation (the C++ Operation): its contract and its prepared binding per device.

    A group module declares one per contract and lists them in OPERATIONS. For an operation the C++
    catalog lacks, `fake` computes the outputs' metadata (shape, dtype, device) for torch.compile and
    graph capture; it is required when the schema returns something.
    """

    __slots__ = ("contract", "fake")

    def __init__(self, contract: OpContract, fake: Callable | None = None):
        if not isinstance(contract, OpContract):
            raise TypeError(f"Operation: expected an OpContract, got {type(contract).__name__}")
        if fake is not None and not callable(fake):
            raise TypeError(f"Operation({contract.operation}): fake must be callable")
        self.contract = contract
        self.fake = fake

    @property
    def name(self) -> str:
        return self.contract.operation

    @property
    def torch_op(self):
        """torch.ops.xllm_kernel.<operation>.default, the dispatcher's entry to the same binding."""
        import torch

        _ensure_in_catalog(self.name)  # an operation declared in Python joins the catalog (and torch.ops) there
        return getattr(torch.ops.xllm_kernel, self.name).default

    def get_prepared(self, device: object = None) -> PreparedKernel:
        """The binding initialize() published; `device` may be omitted when one device is initialized."""
        return _call_above("prepared", self.name, device)

    def __repr__(self) -> str:
        return f"Operation({self.contract.schema!r})"


def _known(operation: str) -> bool:
    return any(c["operation"] == operation for c in _C.operations())


def contract(operation: str) -> OpContract:
    """The catalog contract of `operation` (ValueError naming the closest ones if unknown)."""
    _ensure_in_catalog(operation)  # the catalog's Python groups and extensions
    return OpContract._from_c(_C.contract(operation))


def kernels(device: object = None) -> tuple[KernelSpec, ...]:
    """Every registered implementation (of one device, if given), in registration order."""
    specs = (KernelSpec._from_c(d) for d in _C.kernels())
    if device is None:
        return tuple(specs)
    name = device_name(device)
    return tuple(s for s in specs if s.device == name)


def _one_device(device: object, platform: object) -> str:
    if (device is None) == (platform is None):
        raise TypeError("register_kernel: give exactly one of device= and platform=")
    return device_name(device if device is not None else platform)


def register_kernel(
    *,
    name: str,
    contract: OpContract,
    device: str | PlatformEnum | None = None,
    platform: PlatformEnum | str | None = None,
    execution_modes: Iterable[str] = ("eager",),
    input_domain: str = "",
    solution: str = "python",
    variant: str = "",
    binding: str = "python",
    priority: int = 0,
) -> Callable[[F], F]:
    """Registers the decorated callable as an implementation of `contract`'s operation.

    The callable takes the operation's arguments in schema order and returns what the schema
    returns (mutated arguments are written in place). It is returned unchanged. Registering after
    initialize() of that device fails (the registry is frozen then), as does a name that does not
    follow <device>.<solution>.<operation>[.<variant>] or is already taken.
    """
    device_ = _one_device(device, platform)
    _ensure_in_catalog(contract.operation)  # the operation may be declared by a Python group or an extension
    if isinstance(execution_modes, str):
        execution_modes = (execution_modes,)
    modes = [execution_mode(m) for m in execution_modes]
    contract_fields = dataclasses.asdict(contract)

    def decorate(fn: F) -> F:
        _C.register_kernel(
            contract_fields, name, device_, modes, input_domain, solution, variant, binding, int(priority), fn
        )
        return fn

    return decorate
