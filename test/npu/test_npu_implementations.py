"""Every npu implementation through its numerics suite in eager and ACLGraph mode, the benchmark,
selection, and a distributed run over two NPU ranks: on an Ascend machine only (conftest.py skips
everywhere else with the reason)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

OPERATIONS = ("rms_norm", "fused_add_rms_norm", "layer_norm", "linear_pack", "linear", "scaled_mm", "linear_dynamic_quant")
# ACLGraph: not for the linear family (its header is read on the host: eager only).
GRAPH_OPERATIONS = ("rms_norm", "fused_add_rms_norm", "layer_norm")


def tool(name: str, *args: str) -> int:
    from xllm_kernel import _tools

    return _tools.run(name, list(args))


def test_selection_picks_the_vendor_operators():
    import xllm_kernel

    xllm_kernel.initialize("npu")
    for op in OPERATIONS:
        ex = xllm_kernel.explain("npu", op)
        assert ex.selected is not None and ex.selected.name == f"npu.torch.{op}", str(ex)


@pytest.mark.parametrize("operation,mode", [(op, "eager") for op in OPERATIONS] +
                         [(op, "aclgraph") for op in GRAPH_OPERATIONS])
def test_numerics_every_case_passes(tmp_path, operation, mode):
    out = tmp_path / "numerics.json"
    rc = tool("numerics", "--operation", operation, "--device", "npu", "--mode", mode, "--output", str(out))
    report = json.loads(out.read_text())
    assert rc == 0 and report["summary"]["status"] == "passed", report["summary"]
    assert report["summary"]["unsupported"] == 0, report["summary"]


@pytest.mark.parametrize("mode", ["eager", "aclgraph"])
def test_benchmark_times_rms_norm(tmp_path, mode):
    out = tmp_path / "benchmark.json"
    rc = tool("benchmark", "--operation", "rms_norm", "--device", "npu", "--mode", mode, "--output", str(out))
    assert rc == 0, json.loads(out.read_text()).get("summary")


def test_distributed_numerics_over_two_npu_ranks(tmp_path):
    import torch

    if torch.npu.device_count() < 2:
        pytest.skip("fewer than 2 NPUs")
    torchrun = shutil.which("torchrun") or ""
    out = tmp_path / "dist.json"
    cmd = [torchrun or sys.executable, *([] if torchrun else ["-m", "torch.distributed.run"]), "--nproc-per-node", "2",
           "-m", "xllm_kernel.numerics", "--operation", "rms_norm", "--device", "npu", "--distributed",
           "--output", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
