// cpu.torch.*: the normalization ops composed from ATen ops (float32 compute, one rounding).
#include <ATen/ATen.h>

#include "src/ops/normalization/internal.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {
namespace {

// A contiguous float32 view of x (a copy unless x already is one).
at::Tensor as_float(const at::Tensor& x) {
  return x.to(at::kFloat, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
}

at::Tensor rms_norm_float(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = as_float(x);
  at::Tensor inv_rms = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true).add_(eps));
  return xf.mul(inv_rms).mul_(weight.to(at::kFloat));
}

at::Tensor torch_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments("rms_norm", input, weight, std::nullopt, nullptr, eps, c10::DeviceType::CPU);
  return rms_norm_float(input, weight, eps).to(input.scalar_type());
}

void torch_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments("fused_add_rms_norm", input, weight, std::nullopt, &residual, eps, c10::DeviceType::CPU);
  residual.add_(input);  // float32 add, rounded to residual's dtype
  input.copy_(rms_norm_float(residual, weight, eps));
}

at::Tensor torch_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            double eps) {
  check_arguments("layer_norm", input, weight, bias, nullptr, eps, c10::DeviceType::CPU);
  std::optional<at::Tensor> bias_float;
  if (bias.has_value() && bias->defined()) bias_float = bias->to(at::kFloat);
  return at::layer_norm(as_float(input), {input.size(-1)}, weight.to(at::kFloat), bias_float, eps)
      .to(input.scalar_type());
}

KernelSpec spec(const char* operation, const OpContract& contract) {
  return KernelSpec{std::string("cpu.torch.") + operation,
                    &contract,
                    Device::kCpu,
                    {ExecutionMode::kEager},
                    "cpu tensors, float32/bfloat16/float16, weight in input dtype or float32",
                    "torch",
                    "",
                    "aten",
                    10};
}

}  // namespace

XLLM_REGISTER_KERNEL(cpu_torch_rms_norm, rms_norm_operation(), spec("rms_norm", rms_norm_contract()),
                     torch_rms_norm);
XLLM_REGISTER_KERNEL(cpu_torch_fused_add_rms_norm, fused_add_rms_norm_operation(),
                     spec("fused_add_rms_norm", fused_add_rms_norm_contract()), torch_fused_add_rms_norm);
XLLM_REGISTER_KERNEL(cpu_torch_layer_norm, layer_norm_operation(), spec("layer_norm", layer_norm_contract()),
                     torch_layer_norm);

}  // namespace xllm_kernel::normalization
