"""Runs the C++ numerics and benchmark tools (libxllm_kernel_tools) from Python."""

from __future__ import annotations

import sys


def run(tool: str, argv: list[str] | None = None) -> int:
    """Exit code of `python -m xllm_kernel.<tool>` with argv (default sys.argv[1:])."""
    from xllm_kernel import _C

    prog = f"python -m xllm_kernel.{tool}"
    main = getattr(_C, f"{tool}_main", None)
    if main is None:
        why = (
            f"its libxllm_kernel_tools has no {tool} entry point"
            if _C.tools_built
            else "it was built with XLLM_KERNEL_BUILD_TOOLS=OFF (the tools need CLI11 and nlohmann-json)"
        )
        print(f"{prog}: this build of xllm_kernel has no {tool} tool: {why}", file=sys.stderr)
        return 2
    # Both languages write to the same file descriptors; flush Python's buffers first so output
    # stays in order.
    sys.stdout.flush()
    sys.stderr.flush()
    return main([prog, *(sys.argv[1:] if argv is None else argv)])
