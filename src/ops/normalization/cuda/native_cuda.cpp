// cuda.native.*: bridges from at::Tensor to the CUDA kernels in csrc/cuda/normalization/normalization.cu.
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
  const char* op = rms_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .eps = eps, .device = c10::DeviceType::CUDA};
  check_arguments(call);
  bridge::check_capability(op, input);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options());
  const cuda::NormParams p = kernel_params(call, &out);
  bridge::check_launch(op, cuda::rms_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  const char* op = fused_add_rms_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .residual = &residual, .eps = eps,
                  .device = c10::DeviceType::CUDA};
  check_arguments(call);
  bridge::check_capability(op, input);
  const c10::cuda::CUDAGuard guard(input.device());
  const cuda::NormParams p = kernel_params(call, nullptr);
  bridge::check_launch(op, cuda::fused_add_rms_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  const char* op = layer_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .bias = &bias, .eps = eps,
                  .device = c10::DeviceType::CUDA};
  check_arguments(call);
  bridge::check_capability(op, input);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(input.sizes(), input.options());
  const cuda::NormParams p = kernel_params(call, &out);
  bridge::check_launch(op, cuda::layer_norm(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.rms_norm", modules().native_cuda, rms_norm_operation(), native_rms_norm);
XLLM_REGISTER_NAMED("cuda.native.fused_add_rms_norm", modules().native_cuda, fused_add_rms_norm_operation(),
                    native_fused_add_rms_norm);
XLLM_REGISTER_NAMED("cuda.native.layer_norm", modules().native_cuda, layer_norm_operation(), native_layer_norm);

}  // namespace xllm_kernel::normalization
