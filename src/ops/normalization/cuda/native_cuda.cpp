// cuda.native.*: bridges from at::Tensor to the CUDA kernels in csrc/cuda/normalization.cu.
// Built into the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// normalization.native_cuda module's probe finds a usable device; loading it registers these.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "csrc/cuda/normalization/normalization.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {
namespace {

at::Tensor native_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments(rms_norm_operation().name().c_str(), input, weight, std::nullopt, nullptr, eps, c10::DeviceType::CUDA);
  bridge::check_capability(rms_norm_operation().name().c_str(), input);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options());
  const cuda::NormParams p =
      kernel_params(rms_norm_operation().name().c_str(), input, weight, std::nullopt, eps, &out, nullptr);
  bridge::check_launch(rms_norm_operation().name().c_str(), cuda::rms_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments(fused_add_rms_norm_operation().name().c_str(), input, weight, std::nullopt, &residual, eps, c10::DeviceType::CUDA);
  bridge::check_capability(fused_add_rms_norm_operation().name().c_str(), input);
  const c10::cuda::CUDAGuard guard(input.device());
  const cuda::NormParams p =
      kernel_params(fused_add_rms_norm_operation().name().c_str(), input, weight, std::nullopt, eps, nullptr, &residual);
  bridge::check_launch(fused_add_rms_norm_operation().name().c_str(), cuda::fused_add_rms_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  check_arguments(layer_norm_operation().name().c_str(), input, weight, bias, nullptr, eps, c10::DeviceType::CUDA);
  bridge::check_capability(layer_norm_operation().name().c_str(), input);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options());
  const cuda::NormParams p = kernel_params(layer_norm_operation().name().c_str(), input, weight, bias, eps, &out, nullptr);
  bridge::check_launch(layer_norm_operation().name().c_str(), cuda::layer_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.rms_norm", modules().native_cuda, rms_norm_operation(), native_rms_norm);
XLLM_REGISTER_NAMED("cuda.native.fused_add_rms_norm", modules().native_cuda, fused_add_rms_norm_operation(),
                    native_fused_add_rms_norm);
XLLM_REGISTER_NAMED("cuda.native.layer_norm", modules().native_cuda, layer_norm_operation(), native_layer_norm);

}  // namespace xllm_kernel::normalization
