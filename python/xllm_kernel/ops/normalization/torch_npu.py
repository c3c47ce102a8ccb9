"""npu.torch.*: the normalization contracts over torch_npu's vendor operators, in the guide's module
form (section 3.1). initialize("npu") imports this module before it selects; on an Ascend machine
it registers the three implementations the C++ catalog declares (module normalization.torch_npu),
and the C++ plugin libxllm_kernel_npu.so, which C++ engines use for the same names, is then not
loaded. Without torch_npu nothing registers; torch_npu whose import fails (no CANN runtime) is a
missing dependency that explain("npu", op) shows.

The mapping (the same as the plugin's, src/ops/normalization/npu/torch_npu.cpp): the vendor ops
take gamma in the input's dtype, so a float32 weight with bfloat16/float16 input runs on a float32
copy of the input and is rounded once; fused_add_rms_norm writes the vendor op's sum back to
residual and its output to input (the contract is in place).
"""

from __future__ import annotations

import torch

from xllm_kernel import Platform, PlatformEnum, register_kernel
from xllm_kernel.ops.normalization import (
    FUSED_ADD_RMS_NORM_CONTRACT,
    LAYER_NORM_CONTRACT,
    RMS_NORM_CONTRACT,
)

if Platform.is_npu():
    import torch_npu

    _npu_rms_norm = torch_npu.npu_rms_norm
    _npu_add_rms_norm = torch_npu.npu_add_rms_norm

    @register_kernel(
        name="npu.torch.rms_norm",
        contract=RMS_NORM_CONTRACT,
        platform=PlatformEnum.NPU,
        execution_modes=("eager", "aclgraph"),
        input_domain="torch_npu.npu_rms_norm tensor domain; float32 weights with half inputs on a float32 copy",
        solution="torch",
        binding="torch_npu",
        priority=20,
    )
    def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if input.numel() == 0:
            return torch.empty_like(input, memory_format=torch.contiguous_format)
        if weight.dtype == input.dtype:
            return _npu_rms_norm(input, weight, epsilon=eps)[0].contiguous()
        return _npu_rms_norm(input.float(), weight, epsilon=eps)[0].to(input.dtype).contiguous()

    @register_kernel(
        name="npu.torch.fused_add_rms_norm",
        contract=FUSED_ADD_RMS_NORM_CONTRACT,
        platform=PlatformEnum.NPU,
        execution_modes=("eager", "aclgraph"),
        input_domain="torch_npu.npu_add_rms_norm tensor domain, written back in place",
        solution="torch",
        binding="torch_npu",
        priority=20,
    )
    def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        if input.numel() == 0:
            return
        if weight.dtype == input.dtype:
            y, _, x = _npu_add_rms_norm(input, residual, weight, epsilon=eps)
        else:
            x = input + residual  # rounded to the input's dtype, as the contract says
            y = _npu_rms_norm(x.float(), weight, epsilon=eps)[0]
        residual.copy_(x)
        input.copy_(y)

    @register_kernel(
        name="npu.torch.layer_norm",
        contract=LAYER_NORM_CONTRACT,
        platform=PlatformEnum.NPU,
        execution_modes=("eager", "aclgraph"),
        input_domain="torch.nn.functional.layer_norm on npu tensors",
        solution="torch",
        binding="torch_npu",
        priority=20,
    )
    def layer_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        if input.numel() == 0:
            return torch.empty_like(input, memory_format=torch.contiguous_format)
        shape = (input.shape[-1],)
        if weight.dtype == input.dtype:
            return torch.nn.functional.layer_norm(input, shape, weight, bias, eps).contiguous()
        bias32 = None if bias is None else bias.float()
        out = torch.nn.functional.layer_norm(input.float(), shape, weight.float(), bias32, eps)
        return out.to(input.dtype).contiguous()
