// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/normalization/normalization.cpp.
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include "csrc/cpu/normalization/normalization.h"
#include "src/core/cpu_allocator.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/common/registration.h"
#include "src/ops/normalization/internal.h"
#include "xllm_kernel/ops/normalization.h"

namespace xllm_kernel::normalization {

namespace {

template <class Kernel>
void run_rows(const char* op, const cpu::NormParams& p, Kernel kernel) {
  bridge::run_rows(op, p, p.rows, p.hidden, kernel);
}

// Outputs too large to stay in cache for the next op are stored non-temporally, which saves
// reading every output line before writing it (src/core/cpu_stream.h has the policy).
bool stream_output(const at::Tensor& out) { return detail::stream_cpu_output(static_cast<int64_t>(out.nbytes())); }

at::Tensor native_rms_norm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_arguments(rms_norm_operation().name().c_str(), input, weight, std::nullopt, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = kernel_params(rms_norm_operation().name().c_str(), input, weight, std::nullopt, eps, &out, nullptr);
  p.stream_out = stream_output(out);
  run_rows(rms_norm_operation().name().c_str(), p, cpu::rms_norm);
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_arguments(fused_add_rms_norm_operation().name().c_str(), input, weight, std::nullopt, &residual, eps, c10::DeviceType::CPU);
  const cpu::NormParams p =
      kernel_params(fused_add_rms_norm_operation().name().c_str(), input, weight, std::nullopt, eps, nullptr, &residual);
  run_rows(fused_add_rms_norm_operation().name().c_str(), p, cpu::fused_add_rms_norm);
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  check_arguments(layer_norm_operation().name().c_str(), input, weight, bias, nullptr, eps, c10::DeviceType::CPU);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = kernel_params(layer_norm_operation().name().c_str(), input, weight, bias, eps, &out, nullptr);
  p.stream_out = stream_output(out);
  run_rows(layer_norm_operation().name().c_str(), p, cpu::layer_norm);
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.rms_norm", modules().native_cpu, rms_norm_operation(), native_rms_norm);
XLLM_REGISTER_NAMED("cpu.native.fused_add_rms_norm", modules().native_cpu, fused_add_rms_norm_operation(),
                    native_fused_add_rms_norm);
XLLM_REGISTER_NAMED("cpu.native.layer_norm", modules().native_cpu, layer_norm_operation(), native_layer_norm);

}  // namespace xllm_kernel::normalization
