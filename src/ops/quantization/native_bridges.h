// The bridges of the eight operations shared by cpu.native (native_cpu.cpp) and cuda.native
// (cuda/native_cuda.cpp): each checks every argument for its device (check_arguments) and hands
// them to the device's runner, which allocates the outputs and runs the kernel of the producer.
//   struct CpuRunner {
//     static constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
//     static Outputs run(const char* op, const at::Tensor& input, const at::Tensor* residual,
//                        const at::Tensor* weight, double eps, const Arguments& a);  // a.producer's kernel
//   };
//   XLLM_REGISTER_NAMED("cpu.native.per_token_quant", modules().native_cpu, per_token_quant_operation(),
//                       NativeBridges<CpuRunner>::per_token_quant);  // and so on, one line per operation
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "src/ops/quantization/internal.h"
#include "xllm_kernel/ops/quantization.h"

namespace xllm_kernel::quantization {

template <class Runner>
struct NativeBridges {
  using Pair = std::tuple<at::Tensor, at::Tensor>;
  using Scheme = kernels::QuantScheme;

  static Pair per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                              const std::optional<at::Tensor>& scale_ub) {
    const char* op = per_token_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kNone, Scheme::kPerToken, input, nullptr, nullptr, 0, dtype,
                                        &scale_ub, nullptr, nullptr, Runner::kDevice);
    Outputs o = Runner::run(op, input, nullptr, nullptr, 0, a);
    return {o.out, o.scale};
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_quant_int8_azp(const at::Tensor& input) {
    const char* op = per_token_quant_int8_azp_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kNone, Scheme::kPerTokenAzp, input, nullptr, nullptr, 0,
                                        at::kChar, nullptr, nullptr, nullptr, Runner::kDevice);
    Outputs o = Runner::run(op, input, nullptr, nullptr, 0, a);
    return {o.out, o.scale, o.azp};
  }

  static at::Tensor static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                                 const std::optional<at::Tensor>& azp) {
    const char* op = static_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kNone, Scheme::kStatic, input, nullptr, nullptr, 0, dtype,
                                        nullptr, &scale, &azp, Runner::kDevice);
    return Runner::run(op, input, nullptr, nullptr, 0, a).out;
  }

  static Pair rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                       at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
    const char* op = rms_norm_per_token_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kRmsNorm, Scheme::kPerToken, input, nullptr, &weight, eps,
                                        dtype, &scale_ub, nullptr, nullptr, Runner::kDevice);
    Outputs o = Runner::run(op, input, nullptr, &weight, eps, a);
    return {o.out, o.scale};
  }

  static Pair fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual,
                                                 const at::Tensor& weight, double eps, at::ScalarType dtype,
                                                 const std::optional<at::Tensor>& scale_ub) {
    const char* op = fused_add_rms_norm_per_token_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, Scheme::kPerToken, input, &residual,
                                        &weight, eps, dtype, &scale_ub, nullptr, nullptr, Runner::kDevice);
    Outputs o = Runner::run(op, input, &residual, &weight, eps, a);
    return {o.out, o.scale};
  }

  static at::Tensor rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                          const at::Tensor& scale, at::ScalarType dtype,
                                          const std::optional<at::Tensor>& azp) {
    const char* op = rms_norm_static_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kRmsNorm, Scheme::kStatic, input, nullptr, &weight, eps, dtype,
                                        nullptr, &scale, &azp, Runner::kDevice);
    return Runner::run(op, input, nullptr, &weight, eps, a).out;
  }

  static at::Tensor fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual,
                                                    const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                    at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
    const char* op = fused_add_rms_norm_static_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kFusedAddRmsNorm, Scheme::kStatic, input, &residual, &weight,
                                        eps, dtype, nullptr, &scale, &azp, Runner::kDevice);
    return Runner::run(op, input, &residual, &weight, eps, a).out;
  }

  static Pair silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                           const std::optional<at::Tensor>& scale_ub) {
    const char* op = silu_and_mul_per_token_quant_operation().name().c_str();
    const Arguments a = check_arguments(op, Producer::kSiluAndMul, Scheme::kPerToken, input, nullptr, nullptr, 0,
                                        dtype, &scale_ub, nullptr, nullptr, Runner::kDevice);
    Outputs o = Runner::run(op, input, nullptr, nullptr, 0, a);
    return {o.out, o.scale};
  }
};

// A runner's kernel of a producer, from the four a device provides.
template <typename Kernel>
Kernel kernel_of(Producer producer, Kernel quant, Kernel rms_norm_quant, Kernel fused_add_rms_norm_quant,
                 Kernel silu_and_mul_quant) {
  switch (producer) {
    case Producer::kRmsNorm: return rms_norm_quant;
    case Producer::kFusedAddRmsNorm: return fused_add_rms_norm_quant;
    case Producer::kSiluAndMul: return silu_and_mul_quant;
    case Producer::kNone: break;
  }
  return quant;
}

}  // namespace xllm_kernel::quantization
