"""Tests that need an Ascend NPU (torch_npu with the CANN runtime and at least one device). Run on an
Ascend machine from the repository root, after installing the package (docs/devices.md, "On an Ascend
machine"):

    python -m pytest -q test/npu

Everywhere else every test here skips with the reason. The package's own tests stay
`python -m pytest -q test --ignore=test/npu` (scripts/test.sh runs that command)."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def npu_unavailable() -> str | None:
    """Why this process cannot run on an NPU, or None."""
    try:
        import torch
        import torch_npu  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or torch's autoload RuntimeError
        return f"torch_npu cannot be imported ({type(e).__name__}: {e})"
    if getattr(torch_npu, "STANDIN", False):
        return "torch_npu is the CPU stand-in of test/npu_standin, not an Ascend runtime"
    if not torch.npu.is_available() or torch.npu.device_count() < 1:
        return "torch_npu sees no NPU device"
    return None


def pytest_collection_modifyitems(config, items):
    reason = npu_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        item.add_marker(skip)
