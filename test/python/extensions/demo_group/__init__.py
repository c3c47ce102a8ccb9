"""A group declared in Python, as the guide's ops/<group>/__init__.py: contracts, OPERATION objects,
OPERATIONS, the backend modules that implement them, and the public API."""

from __future__ import annotations

import torch

from xllm_kernel.catalog import BackendModule
from xllm_kernel.registry import OpContract, Operation, infer_schema


def _demo_scale_fake(input: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(input)


def _demo_add_fake(input: torch.Tensor, other: torch.Tensor) -> None:
    return None


DEMO_SCALE_CONTRACT = OpContract(
    operation="demo_scale",
    version=1,
    schema="demo_scale(Tensor input, float alpha) -> Tensor",
    numerical_mode="exact",
    semantics="out = input * alpha, a new tensor",
    dtypes="float32",
)
# The schema derived from an annotated prototype.
DEMO_ADD_CONTRACT = OpContract(
    operation="demo_add_",
    version=1,
    schema=infer_schema("demo_add_", _demo_add_fake, mutates=("input",)),
    mutates=("input",),
    numerical_mode="exact",
    semantics="input <- input + other, in place",
)

DEMO_SCALE = Operation(DEMO_SCALE_CONTRACT, fake=_demo_scale_fake)
DEMO_ADD = Operation(DEMO_ADD_CONTRACT)

OPERATIONS = (DEMO_SCALE, DEMO_ADD)

MODULES = (
    BackendModule(
        name="demo_group.cpu_python",
        device="cpu",
        implementations=("cpu.python.demo_scale", "cpu.python.demo_add_"),
    ),
    BackendModule(name="demo_group.cpu_reference", device="cpu", implementations=("cpu.reference.demo_scale",)),
    # Its dependency is not installed: excluded with the reason, never imported.
    BackendModule(
        name="demo_group.cpu_fast",
        device="cpu",
        implementations=("cpu.fast.demo_scale",),
        dependencies=("demo_absent_dependency",),
    ),
)


def demo_scale(input: torch.Tensor, alpha: float) -> torch.Tensor:
    return DEMO_SCALE.get_prepared().function(input, alpha)


def demo_add_(input: torch.Tensor, other: torch.Tensor) -> None:
    DEMO_ADD.torch_op(input, other)
