"""xllm_kernel: one contract per operator, many implementations, one selection at start-up.

    import xllm_kernel
    from xllm_kernel.ops import rms_norm

    bindings = xllm_kernel.initialize(device="cpu")        # before the model runs
    y = rms_norm(x, weight, 1e-6)                          # torch.ops.xllm_kernel.rms_norm
    fn = bindings["rms_norm"].function                     # the prepared binding itself
    print(xllm_kernel.explain("cpu", "rms_norm"))

The registry, selection and kernels are the C++ library's (libxllm_kernel.so, loaded by _C);
importing this package defines torch.ops.xllm_kernel.* with their fake (Meta) kernels.
"""

# torch first: _C resolves libtorch* through the libraries torch has loaded, and uses the
# pybind11 types torch registers.
import torch  # noqa: F401

from xllm_kernel import _C  # noqa: E402
from xllm_kernel.platforms import Platform, PlatformEnum  # noqa: E402
from xllm_kernel.registry import (  # noqa: E402
    KernelSpec,
    OpContract,
    Operation,
    PreparedKernel,
    kernels,
    register_kernel,
)
from xllm_kernel.runtime import Bindings, Candidate, Explanation, bindings, explain, initialize  # noqa: E402
from xllm_kernel.custom_ops import register_custom_op  # noqa: E402
from xllm_kernel import catalog  # noqa: E402
from xllm_kernel import selection  # noqa: E402

__version__ = _C.__version__  # the CMake project version

__all__ = [
    "Bindings", "Candidate", "Explanation", "KernelSpec", "OpContract", "Operation", "Platform",
    "PlatformEnum", "PreparedKernel", "bindings", "catalog", "explain", "initialize", "kernels",
    "register_custom_op", "register_kernel", "selection",
]
