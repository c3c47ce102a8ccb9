"""Extension modules: packages outside xllm_kernel that add operator groups or numerics suites.

Two ways to name them, read in this order (a module named twice is loaded once):
- the XLLM_KERNEL_EXTENSIONS environment variable: comma-separated module paths,
  e.g. XLLM_KERNEL_EXTENSIONS=my_pkg.ops.my_group,my_pkg.numerics.my_operation
- the `xllm_kernel.extensions` entry-point group of installed distributions, each entry's value a
  module path (pyproject.toml: [project.entry-points."xllm_kernel.extensions"] my_group = "my_pkg.ops.my_group").

A module that exports OPERATIONS joins the operator catalog (xllm_kernel.catalog); one that exports
SUITE joins the numerics catalog (xllm_kernel.numerics.catalog); a module may do both. Only the
names are read here: importing is the catalogs' business.
"""

from __future__ import annotations

import os

ENVIRONMENT_VARIABLE = "XLLM_KERNEL_EXTENSIONS"
ENTRY_POINT_GROUP = "xllm_kernel.extensions"


def _from_environment() -> list[str]:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    names = [part.strip() for part in value.split(",")]
    return [n for n in names if n]


def _from_entry_points() -> list[str]:
    from importlib import metadata

    try:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10: a dict of groups
        found = metadata.entry_points().get(ENTRY_POINT_GROUP, ())
    # An entry point names a module ("pkg.mod"); an object reference ("pkg.mod:attr") names its module.
    return sorted({ep.value.split(":", 1)[0].strip() for ep in found})


def extension_modules() -> tuple[str, ...]:
    """Module paths of every extension, environment first, then entry points, each once."""
    out: list[str] = []
    for name in _from_environment() + _from_entry_points():
        if name not in out:
            out.append(name)
    return tuple(out)
