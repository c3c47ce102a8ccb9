"""The development guide's section 3 snippets, as written (only the names the guide leaves to the
reader are defined around them). Section 4 and 6 snippets: test_numerics_python.py."""

from __future__ import annotations

from conftest import run_python

# Section 3.1, verbatim: registers only on an NPU machine (Platform.is_npu()), and imports here.
GUIDE_3_1 = '''
import torch

from xllm_kernel import Platform, PlatformEnum, register_kernel
from xllm_kernel.ops.normalization import RMS_NORM_CONTRACT

if Platform.is_npu():
    import torch_npu

    _native_rms_norm = torch_npu.npu_rms_norm


    @register_kernel(
        name="npu.torch.rms_norm",
        contract=RMS_NORM_CONTRACT,
        platform=PlatformEnum.NPU,
        execution_modes=("eager", "aclgraph"),
        input_domain="torch_npu.npu_rms_norm tensor domain",
        solution="torch",
        binding="torch_npu",
        priority=20,
    )
    def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return _native_rms_norm(input, weight, epsilon=eps)[0]
'''

# Section 3.3, verbatim, after the definitions it assumes.
GUIDE_3_3 = '''
from xllm_kernel.custom_ops import register_custom_op

# Python implementation: declare mutation and the dispatch key explicitly.
register_custom_op(
    "my_op", my_kernel, mutates_args=(),
    dispatch_key="PrivateUse1", fake_impl=my_fake,
)

# Existing C++ schema: load its extension first, then add only the fake.
register_custom_op("my_native_op", fake_impl=my_native_fake)
'''


def test_guide_3_1_and_3_2_and_3_4_on_the_cpu():
    run_python(
        GUIDE_3_1
        + '''
from xllm_kernel import initialize

bindings = initialize(device="cpu", operations=("rms_norm",))
plan = bindings["rms_norm"]

from xllm_kernel.ops import rms_norm

input, weight, eps = torch.randn(4, 64), torch.rand(64), 1e-6
output = rms_norm(input, weight, eps)
assert torch.equal(output, bindings["rms_norm"].function(input, weight, eps))
assert plan.spec.name == "cpu.native.rms_norm"
'''
    )


def test_guide_3_3_register_custom_op():
    run_python(
        '''
import torch

def my_kernel(x: torch.Tensor) -> torch.Tensor:
    return x + 1

def my_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)

# Stands for a loaded C++ extension that defined xllm_kernel::my_native_op with a CPU kernel.
_extension = torch.library.Library("xllm_kernel", "FRAGMENT")
_extension.define("my_native_op(Tensor x) -> Tensor")
_extension.impl("my_native_op", lambda x: x * 2, "CPU")

def my_native_fake(x):
    return torch.empty_like(x)
'''
        + GUIDE_3_3
        + '''
assert torch._C._dispatch_has_kernel_for_dispatch_key("xllm_kernel::my_op", "PrivateUse1")
assert str(torch.ops.xllm_kernel.my_op.default._schema) == "xllm_kernel::my_op(Tensor x) -> Tensor"
x = torch.randn(3)
compiled = torch.compile(lambda t: torch.ops.xllm_kernel.my_native_op(t) + 1, backend="aot_eager", fullgraph=True)
assert torch.equal(compiled(x), x * 2 + 1)
'''
    )
