// cpu.native.*: bridges from at::Tensor to the Highway kernels in csrc/cpu/quantization/. Each
// checks every argument, fills the kernel parameters (kernel_params, shared with the CUDA bridge)
// and splits the rows over torch's intra-op threads; an out tensor larger than the stream
// threshold (src/core/cpu_stream.h) is written with non-temporal stores.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "csrc/cpu/quantization/quantization.h"
#include "src/core/cpu_stream.h"
#include "src/ops/common/cpu.h"
#include "src/ops/quantization/internal.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {
namespace {

using kernels::QuantScheme;
using Pair = std::tuple<at::Tensor, at::Tensor>;
using Kernel = kernels::Status (*)(const kernels::QuantParams&, int64_t, int64_t);

constexpr auto kCpu = c10::DeviceType::CPU;

Outputs run(const char* op, Kernel kernel, const at::Tensor& input, const at::Tensor* residual,
            const at::Tensor* weight, double eps, const Arguments& a) {
  Outputs o = new_outputs(input, a);
  kernels::QuantParams p = kernel_params(op, input, residual, weight, eps, a, o);
  p.stream_out = detail::stream_cpu_output(static_cast<int64_t>(o.out.nbytes()));
  const int64_t row_elements = a.producer == Producer::kSiluAndMul ? 2 * a.hidden : a.hidden;
  bridge::run_rows(op, p, p.shape.rows, row_elements, kernel);
  return o;
}

Pair native_per_token_quant(const at::Tensor& input, at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kPerToken, input, nullptr, nullptr, 0, dtype,
                                      &scale_ub, nullptr, nullptr, kCpu);
  Outputs o = run(op, &cpu::quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_per_token_quant_int8_azp(const at::Tensor& input) {
  const char* op = per_token_quant_int8_azp_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kPerTokenAzp, input, nullptr, nullptr, 0,
                                      at::kChar, nullptr, nullptr, nullptr, kCpu);
  Outputs o = run(op, &cpu::quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale, o.azp};
}

at::Tensor native_static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                               const std::optional<at::Tensor>& azp) {
  const char* op = static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kNone, QuantScheme::kStatic, input, nullptr, nullptr, 0, dtype,
                                      nullptr, &scale, &azp, kCpu);
  return run(op, &cpu::quant, input, nullptr, nullptr, 0, a).out;
}

Pair native_rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                     at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
  const char* op = rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kRmsNorm, QuantScheme::kPerToken, input, nullptr, &weight, eps,
                                      dtype, &scale_ub, nullptr, nullptr, kCpu);
  Outputs o = run(op, &cpu::rms_norm_quant, input, nullptr, &weight, eps, a);
  return {o.out, o.scale};
}

Pair native_fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                                               double eps, at::ScalarType dtype,
                                               const std::optional<at::Tensor>& scale_ub) {
  const char* op = fused_add_rms_norm_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, QuantScheme::kPerToken, input, &residual, &weight,
                                      eps, dtype, &scale_ub, nullptr, nullptr, kCpu);
  Outputs o = run(op, &cpu::fused_add_rms_norm_quant, input, &residual, &weight, eps, a);
  return {o.out, o.scale};
}

at::Tensor native_rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                        const at::Tensor& scale, at::ScalarType dtype,
                                        const std::optional<at::Tensor>& azp) {
  const char* op = rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kRmsNorm, QuantScheme::kStatic, input, nullptr, &weight, eps, dtype,
                                      nullptr, &scale, &azp, kCpu);
  return run(op, &cpu::rms_norm_quant, input, nullptr, &weight, eps, a).out;
}

at::Tensor native_fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual,
                                                  const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                  at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
  const char* op = fused_add_rms_norm_static_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, QuantScheme::kStatic, input, &residual, &weight,
                                      eps, dtype, nullptr, &scale, &azp, kCpu);
  return run(op, &cpu::fused_add_rms_norm_quant, input, &residual, &weight, eps, a).out;
}

Pair native_silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                         const std::optional<at::Tensor>& scale_ub) {
  const char* op = silu_and_mul_per_token_quant_operation().name().c_str();
  const Arguments a = check_arguments(op, Producer::kSiluAndMul, QuantScheme::kPerToken, input, nullptr, nullptr, 0,
                                      dtype, &scale_ub, nullptr, nullptr, kCpu);
  Outputs o = run(op, &cpu::silu_and_mul_quant, input, nullptr, nullptr, 0, a);
  return {o.out, o.scale};
}

}  // namespace

#define XLLM_QUANT_NATIVE(NAME) \
  XLLM_REGISTER_IMPLEMENTATION(cpu_native_##NAME, modules().native_cpu, NAME##_operation(), native_##NAME)

XLLM_QUANT_NATIVE(per_token_quant);
XLLM_QUANT_NATIVE(per_token_quant_int8_azp);
XLLM_QUANT_NATIVE(static_quant);
XLLM_QUANT_NATIVE(rms_norm_per_token_quant);
XLLM_QUANT_NATIVE(fused_add_rms_norm_per_token_quant);
XLLM_QUANT_NATIVE(rms_norm_static_quant);
XLLM_QUANT_NATIVE(fused_add_rms_norm_static_quant);
XLLM_QUANT_NATIVE(silu_and_mul_per_token_quant);
#undef XLLM_QUANT_NATIVE

}  // namespace xllm_kernel::quantization
