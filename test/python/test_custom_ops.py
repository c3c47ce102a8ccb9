"""register_custom_op: package-owned operators over torch.library (torch.ops.xllm_kernel.*), and
fakes added to an existing schema."""

from __future__ import annotations

import pytest
import torch

from xllm_kernel.custom_ops import NAMESPACE, register_custom_op


def scale_shift(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + 1


def scale_shift_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def accumulate(out: torch.Tensor, x: torch.Tensor) -> None:
    out.add_(x)


def accumulate_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    return None


def test_python_op_with_fake():
    op = register_custom_op("test_scale_shift", scale_shift, mutates_args=(), dispatch_key="CPU",
                            fake_impl=scale_shift_fake)
    assert op is torch.ops.xllm_kernel.test_scale_shift and NAMESPACE == "xllm_kernel"
    x = torch.randn(3, 4)
    assert torch.equal(op(x, 2.0), x * 2 + 1)
    torch.library.opcheck(op.default, (x, 2.0))
    compiled = torch.compile(lambda t: op(t, 3.0) * 2, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), (x * 3 + 1) * 2)
    # Preparing twice with the same arguments reuses the operator; other arguments are an error.
    assert register_custom_op("test_scale_shift", scale_shift, mutates_args=(), dispatch_key="CPU",
                              fake_impl=scale_shift_fake) is op
    with pytest.raises(RuntimeError, match="already registered with other arguments"):
        register_custom_op("test_scale_shift", scale_shift, mutates_args=(), dispatch_key="CPU")


def test_mutating_op_declares_its_writes():
    op = register_custom_op("test_accumulate", accumulate, mutates_args=("out",), dispatch_key="CPU",
                            fake_impl=accumulate_fake)
    assert "Tensor(a0!) out" in str(op.default._schema)
    out, x = torch.zeros(2, 3), torch.ones(2, 3)
    torch.library.opcheck(op.default, (out.clone(), x))
    op(out, x)
    assert torch.equal(out, x)


def test_explicit_schema_must_agree_with_mutates_args():
    with pytest.raises(ValueError, match="disagrees with the schema"):
        register_custom_op("test_disagree", accumulate, mutates_args=(), dispatch_key="CPU",
                           schema="(Tensor(a!) out, Tensor x) -> ()")


def test_declarations_are_explicit():
    with pytest.raises(TypeError, match="mutates_args"):
        register_custom_op("test_missing", scale_shift, dispatch_key="CPU")
    with pytest.raises(TypeError, match="dispatch_key"):
        register_custom_op("test_missing", scale_shift, mutates_args=())
    with pytest.raises(TypeError, match="fn .* or fake_impl"):
        register_custom_op("test_missing")

def test_a_name_the_namespace_holds_is_refused():
    # A catalog operation keeps its schema and kernels: no silent replacement.
    with pytest.raises(ValueError, match=r"torch.ops.xllm_kernel.rms_norm already exists"):
        register_custom_op("rms_norm", scale_shift, mutates_args=(), dispatch_key="CPU")


def test_an_unannotated_kernel_gets_a_clear_error_or_takes_a_schema():
    def unannotated(x, scale):
        return x * scale

    with pytest.raises(ValueError, match=r"register_custom_op\(xllm_kernel::test_unannotated\): cannot infer a schema "
                                         r"from 'unannotated'.*annotate every parameter.*schema="):
        register_custom_op("test_unannotated", unannotated, mutates_args=(), dispatch_key="CPU")
    op = register_custom_op("test_unannotated", unannotated, mutates_args=(), dispatch_key="CPU",
                            schema="(Tensor x, float scale) -> Tensor")
    assert torch.equal(op(torch.ones(2), 3.0), torch.full((2,), 3.0))


def test_python_dispatch_key_privateuse1_is_registered_for_that_key():
    op = register_custom_op("test_npu_only", scale_shift, mutates_args=(), dispatch_key="PrivateUse1",
                            fake_impl=scale_shift_fake)
    assert torch._C._dispatch_has_kernel_for_dispatch_key("xllm_kernel::test_npu_only", "PrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("xllm_kernel::test_npu_only", "CPU")
    with pytest.raises(NotImplementedError):
        op(torch.ones(2), 1.0)  # a CPU tensor finds no CPU kernel


def test_fake_for_an_existing_schema():
    # Stands for a C++ extension that defines a schema and a CPU kernel but no fake.
    lib = torch.library.Library("xllm_kernel_test", "DEF")
    lib.define("native_like(Tensor x) -> Tensor")
    lib.impl("native_like", lambda x: x.neg(), "CPU")
    fake_calls = []

    def fake(x):
        fake_calls.append(x.shape)
        return torch.empty_like(x)

    op = register_custom_op("xllm_kernel_test::native_like", fake_impl=fake)
    assert op is torch.ops.xllm_kernel_test.native_like
    compiled = torch.compile(lambda t: op(t) + 1, backend="aot_eager", fullgraph=True)
    x = torch.randn(4)
    assert torch.equal(compiled(x), 1 - x) and fake_calls
    with pytest.raises(ValueError, match="no such operator"):
        register_custom_op("xllm_kernel_test::absent", fake_impl=fake)
    with pytest.raises(TypeError, match="only fake_impl applies"):
        register_custom_op("xllm_kernel_test::native_like", fake_impl=fake, dispatch_key="CPU")


def test_fake_for_an_existing_schema_in_the_package_namespace():
    # The guide's form: an unqualified name means xllm_kernel::name (an extension's C++ schema).
    lib = torch.library.Library("xllm_kernel", "FRAGMENT")
    lib.define("test_native_in_namespace(Tensor x) -> Tensor")
    lib.impl("test_native_in_namespace", lambda x: x * 2, "CPU")
    op = register_custom_op("test_native_in_namespace", fake_impl=lambda x: torch.empty_like(x))
    assert op is torch.ops.xllm_kernel.test_native_in_namespace
    compiled = torch.compile(lambda t: op(t) + 1, backend="aot_eager", fullgraph=True)
    x = torch.randn(3)
    assert torch.equal(compiled(x), x * 2 + 1)


def test_catalog_ops_already_have_their_fake():
    with pytest.raises(RuntimeError, match="Meta"):
        register_custom_op("xllm_kernel::rms_norm", fake_impl=lambda input, weight, eps: torch.empty_like(input))
