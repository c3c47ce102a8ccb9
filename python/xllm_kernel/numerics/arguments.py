"""The arguments Python suites share, spelled as the C++ suites spell them (--tokens, --hidden,
--dtype, --layout: comma or space separated lists, `[default: ...]` in the help), for a suite's
add_arguments(parser), and the conversions its cases(args) needs.

    from xllm_kernel.numerics import arguments

    def _add_arguments(parser):
        arguments.add_tokens(parser, default=(1, 7, 257))
        arguments.add_hidden(parser, default=(64, 4099))
        arguments.add_dtype(parser)                        # float32, bfloat16, float16
        arguments.add_layout(parser, choices=("contiguous", "strided"))

    def _cases(args):
        for dtype in arguments.dtypes(args):               # torch dtypes
            ...

`parser` is what the tools hand a suite (argparse's add_argument, recorded), or an
argparse.ArgumentParser: the helpers use only add_argument. The tools' own flags (--device, --mode,
--implementation, --seed, --output, ...) belong to the tools; TOOL_FLAGS lists them and
add_argument refuses them here.
"""

from __future__ import annotations

from typing import Any, Sequence

DTYPES = ("float32", "bfloat16", "float16")

# The flags of xllm-kernel-numerics / -benchmark themselves (src/tools/cli.cpp, the benchmark's
# timing flags): a suite argument cannot take these names.
TOOL_FLAGS = frozenset({
    "--help", "--list", "--operation", "--device", "--mode", "--implementation", "--revision", "--output",
    "--markdown", "--seed", "--distributed", "--distributed-timeout", "--explain", "--iterations", "--warmup",
    "--graph-calls", "--threads", "--cold-cache", "--copy-bytes", "--batch-invariant", "--grid", "--budget",
})


def _default_text(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def add_argument(parser, *names: str, **options: Any):
    """parser.add_argument(*names, **options), refusing a flag the tools own."""
    taken = sorted(set(names) & TOOL_FLAGS)
    if taken:
        raise ValueError(f"suite argument {', '.join(names)}: {', '.join(taken)} is a flag of the tools themselves; "
                         f"choose another name")
    return parser.add_argument(*names, **options)


def add_integers(parser, name: str, default: Sequence[int], help: str, *, minimum: int = 1):
    """--<name>: a list of integers, default `default`; cases() checks `minimum` (integers(...))."""
    return add_argument(parser, f"--{name}", type=int, nargs="+", default=list(default),
                        help=f"{help} (comma list, each >= {minimum}) [default: {_default_text(default)}]")


def add_choices(parser, name: str, default: Sequence[str], choices: Sequence[str], help: str):
    """--<name>: a list of names from `choices`, default `default`."""
    bad = [d for d in default if d not in choices]
    if bad:
        raise ValueError(f"suite argument --{name}: defaults {bad} are not among the choices {list(choices)}")
    return add_argument(parser, f"--{name}", type=str, nargs="+", default=list(default), choices=list(choices),
                        help=f"{help}: {', '.join(choices)} [default: {_default_text(default)}]")


def add_tokens(parser, default: Sequence[int] = (1, 7, 257), help: str = "Rows (tokens)", *, minimum: int = 1):
    return add_integers(parser, "tokens", default, help, minimum=minimum)


def add_hidden(parser, default: Sequence[int] = (64, 4096), help: str = "Row width (hidden size)"):
    return add_integers(parser, "hidden", default, help)


def add_dtype(parser, default: Sequence[str] = DTYPES, choices: Sequence[str] = DTYPES, help: str = "Input dtypes"):
    return add_choices(parser, "dtype", default, choices, help)


def add_layout(parser, default: Sequence[str] | None = None, choices: Sequence[str] = ("contiguous", "strided"),
               help: str = "Input layouts"):
    return add_choices(parser, "layout", tuple(choices) if default is None else default, choices, help)


def integers(args, name: str, *, minimum: int = 1, operation: str = "") -> list[int]:
    """The values of --<name>, each checked >= `minimum`: a ValueError naming the flag (the tools exit 2)."""
    values = list(getattr(args, name.replace("-", "_")))
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            who = f"{operation}: " if operation else ""
            raise ValueError(f"{who}--{name}: expected integers >= {minimum}, got {v!r}")
    return values


def torch_dtype(name: str):
    """'float32' | 'bfloat16' | 'float16' (the names the C++ suites take) -> the torch dtype."""
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(torch, name)


def dtypes(args, name: str = "dtype") -> list:
    """The torch dtypes of --<name>."""
    return [torch_dtype(n) for n in getattr(args, name.replace("-", "_"))]
