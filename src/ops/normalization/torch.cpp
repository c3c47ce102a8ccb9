// cpu.torch.* and cuda.torch.*: the normalization ops composed from ATen ops (float32 compute,
// one rounding). The same code serves both devices: ATen dispatches on the tensors' device, and
// on CUDA it runs on the current stream under a device guard of its own, so the ops are also
// capturable into a CUDA graph.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "src/ops/common/registration.h"
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

template <c10::DeviceType kDevice>
at::Tensor torch_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments({.op = rms_norm_operation().name().c_str(), .input = input, .weight = weight, .eps = eps,
                   .device = kDevice});
  return rms_norm_float(input, weight, eps).to(input.scalar_type());
}

template <c10::DeviceType kDevice>
void torch_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments({.op = fused_add_rms_norm_operation().name().c_str(), .input = input, .weight = weight,
                   .residual = &residual, .eps = eps, .device = kDevice});
  residual.add_(input);  // float32 add, rounded to residual's dtype
  input.copy_(rms_norm_float(residual, weight, eps));
}

template <c10::DeviceType kDevice>
at::Tensor torch_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            double eps) {
  check_arguments({.op = layer_norm_operation().name().c_str(), .input = input, .weight = weight, .bias = &bias,
                   .eps = eps, .device = kDevice});
  std::optional<at::Tensor> bias_float;
  if (bias.has_value() && bias->defined()) bias_float = bias->to(at::kFloat);
  return at::layer_norm(as_float(input), {input.size(-1)}, weight.to(at::kFloat), bias_float, eps)
      .to(input.scalar_type());
}

constexpr auto kCpu = c10::DeviceType::CPU;
constexpr auto kCuda = c10::DeviceType::CUDA;

}  // namespace

XLLM_REGISTER_NAMED("cpu.torch.rms_norm", modules().torch_cpu, rms_norm_operation(), torch_rms_norm<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.fused_add_rms_norm", modules().torch_cpu, fused_add_rms_norm_operation(),
                    torch_fused_add_rms_norm<kCpu>);
XLLM_REGISTER_NAMED("cpu.torch.layer_norm", modules().torch_cpu, layer_norm_operation(), torch_layer_norm<kCpu>);

XLLM_REGISTER_NAMED("cuda.torch.rms_norm", modules().torch_cuda, rms_norm_operation(), torch_rms_norm<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.fused_add_rms_norm", modules().torch_cuda, fused_add_rms_norm_operation(),
                    torch_fused_add_rms_norm<kCuda>);
XLLM_REGISTER_NAMED("cuda.torch.layer_norm", modules().torch_cuda, layer_norm_operation(),
                    torch_layer_norm<kCuda>);

}  // namespace xllm_kernel::normalization
