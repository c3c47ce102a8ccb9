"""Package-owned torch operators, over torch.library, in the xllm_kernel namespace.

Catalog operations get their schemas from their contracts (torch.ops.xllm_kernel.<op>, defined in
C++ or when a Python group joins the catalog). register_custom_op adds other package-owned
operators beside them, torch.ops.xllm_kernel.<name>; a name the namespace already holds is an
error, never a silent replacement.

    from xllm_kernel.custom_ops import register_custom_op

    # Python implementation: declare mutation and the dispatch key explicitly.
    register_custom_op("my_op", my_kernel, mutates_args=(), dispatch_key="PrivateUse1", fake_impl=my_fake)
    torch.ops.xllm_kernel.my_op(x)

    # Existing schema (an operation whose extension is loaded): add only the fake.
    register_custom_op("my_native_op", fake_impl=my_native_fake)          # xllm_kernel::my_native_op
    register_custom_op("my_ns::my_native_op", fake_impl=my_native_fake)   # another namespace
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable

import torch

NAMESPACE = "xllm_kernel"

_lock = threading.Lock()
# torch.library keeps a registration only while its Library object lives: one per namespace, for
# the process's life. _defined remembers what each op was registered with, so preparing twice with
# the same arguments reuses the operator instead of failing on a duplicate definition.
_libraries: dict[str, torch.library.Library] = {}
_defined: dict[str, tuple] = {}


def _infer_schema(qualname: str, fn: Callable, mutates_args: Iterable[str]) -> str:
    infer = getattr(torch.library, "infer_schema", None)
    if infer is None:  # torch < 2.5 has it only privately
        from torch._library.infer_schema import infer_schema as infer
    try:
        return infer(fn, mutates_args=tuple(mutates_args))
    except Exception as e:  # a missing or unsupported annotation
        raise ValueError(
            f"register_custom_op({qualname}): cannot infer a schema from {getattr(fn, '__name__', fn)!r}: {e}; annotate "
            "every parameter and the return type, or pass schema='(Tensor x) -> Tensor'"
        ) from None


def _split(name: str, namespace: str) -> tuple[str, str]:
    if "::" in name:
        ns, op = name.split("::", 1)
        return ns, op
    return namespace, name


def _packet(namespace: str, op: str):
    return getattr(getattr(torch.ops, namespace), op)


def register_custom_op(
    name: str,
    fn: Callable | None = None,
    *,
    mutates_args: Iterable[str] | None = None,
    dispatch_key: str | None = None,
    fake_impl: Callable | None = None,
    schema: str | None = None,
    namespace: str = NAMESPACE,
):
    """Defines torch.ops.<namespace>.<name> with `fn` as its `dispatch_key` kernel, or adds a fake.

    With `fn`: `mutates_args` (the argument names written in place; () for none) and
    `dispatch_key` ('CPU', 'CUDA', 'PrivateUse1', 'CompositeExplicitAutograd', ...) are required;
    the schema is inferred from fn's annotations unless `schema` ('(Tensor x) -> Tensor') is given.
    `fake_impl` computes output metadata for torch.compile and graph capture.

    Without `fn`: the operator must already exist (e.g. defined by a loaded C++ extension); only
    `fake_impl` is registered. `name` may be qualified ('ns::op').

    Returns the operator's packet (torch.ops.<namespace>.<name>).
    """
    ns, op = _split(name, namespace)
    qualname = f"{ns}::{op}"
    if fn is None:
        if fake_impl is None:
            raise TypeError(f"register_custom_op({qualname}): give fn (a new operator) or fake_impl (an existing one)")
        if mutates_args is not None or dispatch_key is not None or schema is not None:
            raise TypeError(
                f"register_custom_op({qualname}): without fn only fake_impl applies; mutation and dispatch key "
                "come from the existing schema's own registration"
            )
        if not _has_schema(qualname):
            raise ValueError(
                f"register_custom_op({qualname}): no such operator; load the extension that defines it first"
            )
        # A Meta kernel is already a fake (the catalog's are defined in C++ from the contracts); a
        # second one from Python would silently disagree with it.
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
            raise RuntimeError(f"register_custom_op({qualname}): the operator already has a Meta kernel (its fake)")
        with _lock:
            if _defined.get(qualname) == ("fake", fake_impl):
                return _packet(ns, op)
            torch.library.register_fake(qualname, fake_impl)
            _defined[qualname] = ("fake", fake_impl)
        return _packet(ns, op)

    if mutates_args is None:
        raise TypeError(f"register_custom_op({qualname}): declare mutates_args explicitly (() when nothing is written)")
    if dispatch_key is None:
        raise TypeError(f"register_custom_op({qualname}): declare dispatch_key explicitly, e.g. 'CPU' or 'PrivateUse1'")
    mutates = tuple(mutates_args)
    schema_ = schema if schema is not None else _infer_schema(qualname, fn, mutates)
    written = {a.name for a in torch._C.parse_schema(op + schema_).arguments if a.alias_info and a.alias_info.is_write}
    if written != set(mutates):
        raise ValueError(
            f"register_custom_op({qualname}): mutates_args {sorted(mutates)} disagrees with the schema "
            f"{op + schema_!r}, which writes {sorted(written)}"
        )
    key = ("op", fn, schema_, mutates, dispatch_key, fake_impl)
    with _lock:
        previous = _defined.get(qualname)
        if previous == key:
            return _packet(ns, op)
        if previous is not None:
            raise RuntimeError(
                f"register_custom_op({qualname}): already registered with other arguments; an operator is "
                "defined once per process"
            )
        if _has_schema(qualname):
            raise ValueError(
                f"register_custom_op({qualname}): torch.ops.{ns}.{op} already exists (a catalog operation or another "
                "library's); choose another name, or add only a fake with register_custom_op(name, fake_impl=...)"
            )
        library = _libraries.get(ns)
        if library is None:
            library = _libraries[ns] = torch.library.Library(ns, "FRAGMENT")
        library.define(op + schema_)
        library.impl(op, fn, dispatch_key)
        if fake_impl is not None:
            torch.library.register_fake(qualname, fake_impl, lib=library)
        _defined[qualname] = key
    return _packet(ns, op)


def _has_schema(qualname: str) -> bool:
    try:
        return torch._C._dispatch_find_schema_or_throw(qualname, "") is not None
    except RuntimeError:
        return False
