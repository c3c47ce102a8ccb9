// cuda.native.*: bridges from at::Tensor to the CUDA kernels in csrc/cuda/quantization/. Built into
// the plugin libxllm_kernel_cuda.so, which initialize("cuda") loads when the
// quantization.native_cuda module's probe finds a usable device; loading it registers these. Each
// checks every argument (check_arguments, shared with the CPU bridges), allocates the outputs, fills
// the kernel parameters (kernel_params) and enqueues one kernel on the current stream. No value is
// read on the host (a static scale, a zero point and scale_ub are device pointers the kernel reads)
// and nothing is synchronized or allocated beyond the outputs, so a call can be captured into a graph.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <tuple>

#include "csrc/cuda/quantization/quantization.h"
#include "src/ops/common/cuda/launch.h"
#include "src/ops/quantization/internal.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {
namespace {

using kernels::QuantScheme;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Launcher = kernels::Status (*)(const kernels::QuantParams&, cudaStream_t);

constexpr auto kCuda = c10::DeviceType::CUDA;

Outputs run(const char* op, Launcher launcher, const at::Tensor& input, const at::Tensor* residual,
            const at::Tensor* weight, double eps, const Arguments& a) {
  bridge::check_capability(op, input);
  const c10::cuda::CUDAGuard guard(input.device());
  Outputs o = new_outputs(input, a);
  const kernels::QuantParams p = kernel_params(op, input, residual, weight, eps, a, o);
  bridge::check_launch(op, launcher(p, c10::cuda::getCurrentCUDAStream().stream()));
  return o;
}

Pair native_per_token_quant(const at::Tensor& input, at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kPerToken, input, nullptr, nullptr, 0, dtype,
                                      &scale_ub, nullptr, nullptr, kCuda);
  Outputs o = run(op, &cuda::quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_per_token_quant_int8_azp(const at::Tensor& input) {
  const char* op = per_token_quant_int8_azp_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kPerTokenAzp, input, nullptr, nullptr, 0,
                                      at::kChar, nullptr, nullptr, nullptr, kCuda);
  Outputs o = run(op, &cuda::quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale, o.azp};
}

at::Tensor native_static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                               const std::optional<at::Tensor>& azp) {
  const char* op = static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kStatic, input, nullptr, nullptr, 0, dtype,
                                      nullptr, &scale, &azp, kCuda);
  return run(op, &cuda::quant, input, nullptr, nullptr, 0, a).out;
}

Pair native_rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                     at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kRmsNorm, QuantScheme::kPerToken, input, nullptr, &weight, eps,
                                      dtype, &scale_ub, nullptr, nullptr, kCuda);
  Outputs o = run(op, &cuda::rms_norm_quant, input, nullptr, &weight, eps, a);
  return {o.out, o.scale};
}

Pair native_fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                                               double eps, at::ScalarType dtype,
                                               const std::optional<at::Tensor>& scale_ub) {
  const char* op = fused_add_rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, QuantScheme::kPerToken, input, &residual, &weight,
                                      eps, dtype, &scale_ub, nullptr, nullptr, kCuda);
  Outputs o = run(op, &cuda::fused_add_rms_norm_quant, input, &residual, &weight, eps, a);
  return {o.out, o.scale};
}

at::Tensor native_rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                        const at::Tensor& scale, at::ScalarType dtype,
                                        const std::optional<at::Tensor>& azp) {
  const char* op = rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kRmsNorm, QuantScheme::kStatic, input, nullptr, &weight, eps, dtype,
                                      nullptr, &scale, &azp, kCuda);
  return run(op, &cuda::rms_norm_quant, input, nullptr, &weight, eps, a).out;
}

at::Tensor native_fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual,
                                                  const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                  at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
  const char* op = fused_add_rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, QuantScheme::kStatic, input, &residual, &weight,
                                      eps, dtype, nullptr, &scale, &azp, kCuda);
  return run(op, &cuda::fused_add_rms_norm_quant, input, &residual, &weight, eps, a).out;
}

Pair native_silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                         const std::optional<at::Tensor>& scale_ub) {
  const char* op = silu_and_mul_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kSiluAndMul, QuantScheme::kPerToken, input, nullptr, nullptr, 0,
                                      dtype, &scale_ub, nullptr, nullptr, kCuda);
  Outputs o = run(op, &cuda::silu_and_mul_quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale};
}

}  // namespace

#define XLLM_QUANT_NATIVE_CUDA(NAME) \
  XLLM_REGISTER_IMPLEMENTATION(cuda_native_##NAME, modules().native_cuda, NAME##_operation(), native_##NAME)

XLLM_QUANT_NATIVE_CUDA(per_token_quant);
XLLM_QUANT_NATIVE_CUDA(per_token_quant_int8_azp);
XLLM_QUANT_NATIVE_CUDA(static_quant);
XLLM_QUANT_NATIVE_CUDA(rms_norm_per_token_quant);
XLLM_QUANT_NATIVE_CUDA(fused_add_rms_norm_per_token_quant);
XLLM_QUANT_NATIVE_CUDA(rms_norm_static_quant);
XLLM_QUANT_NATIVE_CUDA(fused_add_rms_norm_static_quant);
XLLM_QUANT_NATIVE_CUDA(silu_and_mul_per_token_quant);
#undef XLLM_QUANT_NATIVE_CUDA

}  // namespace xllm_kernel::quantization
