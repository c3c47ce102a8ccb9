"""Runs the C++ numerics and benchmark tools (libxllm_kernel_tools) from Python.

Before the C++ main runs, the operator catalog joins the groups declared in Python
(xllm_kernel.catalog.load) and the numerics catalog adds the Python suites to the tools' suite list
(xllm_kernel.numerics.catalog.load), so Python suites run exactly like C++ ones.
"""

from __future__ import annotations

import sys


def _device_argument(args: list[str]) -> str:
    """The --device the tool was given ('cpu' by default, as the tools' own default)."""
    for i, arg in enumerate(args):
        if arg == "--device" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
    return "cpu"


def _load_suites(prog: str, args: list[str]) -> bool:
    """Joins the Python operator groups to the catalog, imports the package's Python form of the
    device's backend modules (as initialize() does: ops/normalization/torch_npu.py on npu) and adds
    the Python suites to the tools; False (after saying why) when a group or suite module fails to
    load."""
    from xllm_kernel import _C

    if not getattr(_C, "numerics_built", False):
        return True
    try:
        from xllm_kernel import catalog as operator_catalog
        from xllm_kernel.numerics import catalog

        from xllm_kernel.platforms import device_name
        from xllm_kernel.runtime import _import_front_doors

        operator_catalog.load()  # operations declared in Python, which suites may be written for
        _import_front_doors(device_name(_device_argument(args)))
        catalog.load()
    except Exception as e:  # noqa: BLE001 - a broken suite module is reported, not a traceback
        print(f"{prog}: error: loading the numerics suites: {type(e).__name__}: {e}", file=sys.stderr)
        return False
    return True


def run(tool: str, argv: list[str] | None = None) -> int:
    """Exit code of `python -m xllm_kernel.<tool>` with argv (default sys.argv[1:])."""
    from xllm_kernel import _C

    prog = f"python -m xllm_kernel.{tool}"
    args = list(sys.argv[1:] if argv is None else argv)
    main = getattr(_C, f"{tool}_main", None)
    if main is None:
        why = (
            f"its libxllm_kernel_tools has no {tool} entry point"
            if _C.tools_built
            else "it was built with XLLM_KERNEL_BUILD_TOOLS=OFF (the tools need CLI11 and nlohmann-json)"
        )
        print(f"{prog}: this build of xllm_kernel has no {tool} tool: {why}", file=sys.stderr)
        return 2
    compare = tool == "benchmark" and args[:1] in (["compare"], ["ab"])  # reads reports only
    if not compare and not _load_suites(prog, args):
        return 1
    # Both languages write to the same file descriptors; flush Python's buffers first so output
    # stays in order.
    sys.stdout.flush()
    sys.stderr.flush()
    return main([prog, *args])
