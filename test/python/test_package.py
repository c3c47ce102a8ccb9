"""The package's views of the C++ core: catalog, contracts, registry, bindings, explain, Platform."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Mapping

import pytest
import torch

import xllm_kernel
from xllm_kernel import Platform, PlatformEnum, catalog
from xllm_kernel.ops import normalization
from xllm_kernel.platforms import device_name

from conftest import ROOT

OPERATIONS = tuple(c.operation for c in catalog.operations())  # every family's
NORMALIZATION = ("rms_norm", "fused_add_rms_norm", "layer_norm")


def test_version_is_the_cmake_project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    assert xllm_kernel.__version__ == re.search(r"project\(xllm_kernel\s+VERSION\s+([0-9.]+)", text).group(1)


def test_torch_ops_are_defined_from_the_contracts():
    for contract in catalog.operations():
        packet = getattr(torch.ops.xllm_kernel, contract.operation)
        assert str(packet.default._schema) == "xllm_kernel::" + contract.schema


def test_group_modules_mirror_the_catalog():
    # The "adding an operator" checklist on the Python side: each C++ group has a module in
    # catalog._BUILTINS exporting its contracts, OPERATIONS and public API, also from xllm_kernel.ops.
    modules = {m.GROUP.name: m for m in catalog.group_modules()}
    assert sorted(modules) == sorted(g.name for g in catalog.groups())
    for group in catalog.groups():
        module = modules[group.name]
        assert tuple(op.contract for op in module.OPERATIONS) == group.operations
        for contract in group.operations:
            assert getattr(module, contract.operation.upper() + "_CONTRACT") == contract
            assert getattr(xllm_kernel.ops, contract.operation) is getattr(module, contract.operation)


def test_contracts_are_read_only_views():
    c = normalization.RMS_NORM_CONTRACT
    assert (c.operation, c.version, c.mutates, c.aliases_inputs, c.numerical_mode) == (
        "rms_norm", 1, (), False, "fp32_accumulate")
    assert c.schema == "rms_norm(Tensor input, Tensor weight, float eps) -> Tensor"
    assert normalization.FUSED_ADD_RMS_NORM_CONTRACT.mutates == ("input", "residual")
    assert "Tensor? bias" in normalization.LAYER_NORM_CONTRACT.schema
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.version = 2
    with pytest.raises(ValueError, match="closest: rms_norm"):
        xllm_kernel.registry.contract("rms_nrom")


def test_registry_lists_every_builtin_implementation():
    names = {s.name for s in xllm_kernel.kernels("cpu")}
    for op in OPERATIONS:
        assert {f"cpu.native.{op}", f"cpu.torch.{op}"} <= names
    for spec in xllm_kernel.kernels():
        assert spec.name == ".".join(filter(None, [spec.device, spec.solution, spec.operation, spec.variant]))
        assert spec.contract == xllm_kernel.registry.contract(spec.operation)
        assert spec.execution_modes and set(spec.execution_modes) <= {"eager", "graph"}
    text = catalog.describe()
    assert "group normalization" in text and "cpu.native.rms_norm" in text


def test_catalog_declares_the_backend_modules():
    modules = {m.name: m for m in catalog.group("normalization").modules}
    native = modules["normalization.native_cpu"]
    assert native.device == "cpu" and native.plugin == ""
    assert {i.name for i in native.implementations} == {f"cpu.native.{op}" for op in NORMALIZATION}
    assert normalization.MODULES == catalog.group("normalization").modules
    with pytest.raises(ValueError, match="unknown group"):
        catalog.group("nope")


def test_platform():
    assert [p.value for p in PlatformEnum] == ["cpu", "cuda", "npu"]
    assert Platform.is_npu() == (importlib.util.find_spec("torch_npu") is not None)
    assert Platform.is_cuda() == torch.cuda.is_available()
    assert Platform.current() in PlatformEnum
    assert Platform.is_cpu() == (Platform.current() is PlatformEnum.CPU)
    assert Platform.device_type() == Platform.current().value
    assert [device_name(d) for d in (PlatformEnum.NPU, "cuda:1", torch.device("cpu"))] == ["npu", "cuda", "cpu"]
    with pytest.raises(TypeError):
        device_name(3)


def test_bindings_are_a_read_only_mapping(cpu):
    assert isinstance(cpu, Mapping)
    assert sorted(cpu) == sorted(OPERATIONS) and len(cpu) == len(OPERATIONS) >= 6
    assert (cpu.device, cpu.mode) == ("cpu", "eager")
    with pytest.raises(TypeError):
        cpu["rms_norm"] = None
    with pytest.raises(KeyError, match="initialized"):
        cpu["no_such_operation"]
    plan = cpu["rms_norm"]
    spec = plan.spec
    assert (spec.name, spec.solution, spec.binding, spec.priority, spec.device) == (
        "cpu.native.rms_norm", "native", "highway", 20, "cpu")
    assert (spec.variant, spec.contract_version, spec.execution_modes) == ("", 1, ("eager",))
    assert spec.input_domain and plan.detail  # the SIMD target Highway picked
    assert callable(plan.function) and "cpu.native.rms_norm" in repr(plan.function)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.function = None


def test_same_configuration_returns_the_same_bindings(cpu):
    assert xllm_kernel.initialize(device="cpu") is cpu
    assert xllm_kernel.initialize(device=PlatformEnum.CPU, operations=list(reversed(OPERATIONS))) is cpu
    assert xllm_kernel.bindings("cpu") is cpu
    assert xllm_kernel.bindings("npu") is None


def test_a_different_configuration_is_an_error(cpu):
    with pytest.raises(RuntimeError, match=r"operations \[.*\] then \[rms_norm\].*restart the worker"):
        xllm_kernel.initialize(device="cpu", operations=("rms_norm",))
    with pytest.raises(RuntimeError, match="mode eager then graph"):
        xllm_kernel.initialize(device="cpu", mode="aclgraph")
    with pytest.raises(ValueError, match="unknown operation 'rms_nrom'; closest: rms_norm"):
        xllm_kernel.initialize(device="cpu", operations=("rms_nrom",))
    with pytest.raises(ValueError, match="execution mode"):
        xllm_kernel.initialize(device="cpu", mode="turbo")


def test_explain_is_structured_and_printable(cpu):
    ex = xllm_kernel.explain("cpu", "rms_norm")
    assert (ex.device, ex.operation, ex.mode, ex.override_target, ex.error) == ("cpu", "rms_norm", "eager", "", "")
    assert ex.selected.name == "cpu.native.rms_norm" == ex.candidates[0].name
    lower = ex.candidates[1]
    assert (lower.name, lower.verdict, lower.reason) == ("cpu.torch.rms_norm", "lower priority", "priority 10 < 20")
    assert lower.rejection == ex.selected.rejection == "none"
    text = str(ex)
    assert text.startswith("rms_norm on cpu (eager)") and "cpu.torch.rms_norm" in text and "selected" in text


def test_explain_reports_a_device_without_its_dependency():
    # No CUDA driver on the CPU machines: every CUDA candidate is excluded, with the reason.
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    ex = xllm_kernel.explain("cuda", "rms_norm")
    assert ex.selected is None and "no eligible implementation" in ex.error
    assert all(c.verdict == "excluded" and "missing dependency" in c.reason for c in ex.candidates)
    assert {c.rejection for c in ex.candidates} == {"missing_dependency"}


def test_get_prepared(cpu):
    assert normalization.RMS_NORM.get_prepared("cpu") is cpu["rms_norm"]
    assert normalization.RMS_NORM.get_prepared() is cpu["rms_norm"]  # the one initialized device
    assert normalization.LAYER_NORM.torch_op is torch.ops.xllm_kernel.layer_norm.default
    with pytest.raises(RuntimeError, match="device npu is not initialized"):
        normalization.RMS_NORM.get_prepared("npu")
