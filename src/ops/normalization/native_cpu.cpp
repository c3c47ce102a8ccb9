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
  const char* op = rms_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .eps = eps, .device = c10::DeviceType::CPU};
  check_arguments(call);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = kernel_params(call, &out);
  p.stream_out = stream_output(out);
  run_rows(op, p, cpu::rms_norm);
  return out;
}

void native_fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  const char* op = fused_add_rms_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .residual = &residual, .eps = eps,
                  .device = c10::DeviceType::CPU};
  check_arguments(call);
  const cpu::NormParams p = kernel_params(call, nullptr);
  run_rows(op, p, cpu::fused_add_rms_norm);
}

at::Tensor native_layer_norm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             double eps) {
  const char* op = layer_norm_operation().name().c_str();
  const Call call{.op = op, .input = input, .weight = weight, .bias = &bias, .eps = eps,
                  .device = c10::DeviceType::CPU};
  check_arguments(call);
  at::Tensor out = detail::empty_cpu_cached(input.sizes(), input.scalar_type());
  cpu::NormParams p = kernel_params(call, &out);
  p.stream_out = stream_output(out);
  run_rows(op, p, cpu::layer_norm);
  return out;
}

}  // namespace

XLLM_REGISTER_NAMED("cpu.native.rms_norm", modules().native_cpu, rms_norm_operation(), native_rms_norm);
XLLM_REGISTER_NAMED("cpu.native.fused_add_rms_norm", modules().native_cpu, fused_add_rms_norm_operation(),
                    native_fused_add_rms_norm);
XLLM_REGISTER_NAMED("cpu.native.layer_norm", modules().native_cpu, layer_norm_operation(), native_layer_norm);

}  // namespace xllm_kernel::normalization
