// cuda.native.*: bridges from at::Tensor to the CUDA kernels in csrc/cuda/activation/. Built into
// the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the activation.native_cuda
// module's probe finds a usable device; loading it registers these.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "csrc/cuda/activation/activation.h"
#include "src/ops/activation/internal.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/common/registration.h"
#include "xllm_kernel/ops/activation.h"

namespace xllm_kernel::activation {
namespace {

using Launcher = kernels::Status (*)(const cuda::ActivationParams&, cudaStream_t);

// Gated ([..., 2d] -> [..., d]) or not ([..., d] -> [..., d]).
template <Launcher kLaunch, const TypedOperation<ActivationFn>& (*kOperation)(), bool kGated = true>
at::Tensor native_act(const at::Tensor& input) {
  const char* op = kOperation().name().c_str();
  constexpr auto kDevice = c10::DeviceType::CUDA;
  const int64_t d = kGated ? check_input(op, input, kDevice) : check_plain_input(op, input, kDevice);
  bridge::check_capability(op, input);
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor out = at::empty(output_shape(input, kGated), input.options());
  const cuda::ActivationParams p = kernel_params(op, input, d, out);
  bridge::check_launch(op, kLaunch(p, c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cuda.native.silu_and_mul", modules().native_cuda, silu_and_mul_operation(),
                    (native_act<cuda::silu_and_mul, &silu_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.native.gelu_and_mul", modules().native_cuda, gelu_and_mul_operation(),
                    (native_act<cuda::gelu_and_mul, &gelu_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.native.gelu_tanh_and_mul", modules().native_cuda, gelu_tanh_and_mul_operation(),
                    (native_act<cuda::gelu_tanh_and_mul, &gelu_tanh_and_mul_operation>));
XLLM_REGISTER_NAMED("cuda.native.gelu", modules().native_cuda, gelu_operation(),
                    (native_act<cuda::gelu, &gelu_operation, /*kGated=*/false>));
XLLM_REGISTER_NAMED("cuda.native.gelu_tanh", modules().native_cuda, gelu_tanh_operation(),
                    (native_act<cuda::gelu_tanh, &gelu_tanh_operation, /*kGated=*/false>));
XLLM_REGISTER_NAMED("cuda.native.quick_gelu", modules().native_cuda, quick_gelu_operation(),
                    (native_act<cuda::quick_gelu, &quick_gelu_operation, /*kGated=*/false>));

}  // namespace xllm_kernel::activation
