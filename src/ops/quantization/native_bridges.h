// The bridges of the eight operations shared by cpu.native (native_cpu.cpp) and cuda.native
// (cuda/native_cuda.cpp): each checks every argument for its device (check_arguments) and hands
// them to the device's runner with the kernel named after the operation, which the runner runs
// after allocating the outputs.
//   struct CpuRunner {
//     static constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
//     using Kernel = kernels::Status (*)(const kernels::QuantParams&, int64_t, int64_t);
//     static constexpr Kernel per_token_quant = &cpu::per_token_quant;  // one per operation
//     static Outputs run(Kernel kernel, const Call& call, const Arguments& a);
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
    const Call call{.op = op, .producer = QuantProducer::kInput, .scheme = Scheme::kPerToken, .input = input, .dtype = dtype,
                    .scale_ub = &scale_ub, .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    Outputs o = Runner::run(Runner::per_token_quant, call, a);
    return {o.out, o.scale};
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> per_token_quant_int8_azp(const at::Tensor& input) {
    const char* op = per_token_quant_int8_azp_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kInput, .scheme = Scheme::kPerTokenAzp, .input = input,
                    .dtype = at::kChar, .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    Outputs o = Runner::run(Runner::per_token_quant_int8_azp, call, a);
    return {o.out, o.scale, o.azp};
  }

  static at::Tensor static_quant(const at::Tensor& input, const at::Tensor& scale, at::ScalarType dtype,
                                 const std::optional<at::Tensor>& azp) {
    const char* op = static_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kInput, .scheme = Scheme::kStatic, .input = input, .dtype = dtype,
                    .scale = &scale, .azp = &azp, .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    return Runner::run(Runner::static_quant, call, a).out;
  }

  static Pair rms_norm_per_token_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                       at::ScalarType dtype, const std::optional<at::Tensor>& scale_ub) {
    const char* op = rms_norm_per_token_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kRmsNorm, .scheme = Scheme::kPerToken, .input = input,
                    .weight = &weight, .eps = eps, .dtype = dtype, .scale_ub = &scale_ub, .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    Outputs o = Runner::run(Runner::rms_norm_per_token_quant, call, a);
    return {o.out, o.scale};
  }

  static Pair fused_add_rms_norm_per_token_quant(const at::Tensor& input, at::Tensor& residual,
                                                 const at::Tensor& weight, double eps, at::ScalarType dtype,
                                                 const std::optional<at::Tensor>& scale_ub) {
    const char* op = fused_add_rms_norm_per_token_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kFusedAddRmsNorm, .scheme = Scheme::kPerToken, .input = input,
                    .residual = &residual, .weight = &weight, .eps = eps, .dtype = dtype, .scale_ub = &scale_ub,
                    .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    Outputs o = Runner::run(Runner::fused_add_rms_norm_per_token_quant, call, a);
    return {o.out, o.scale};
  }

  static at::Tensor rms_norm_static_quant(const at::Tensor& input, const at::Tensor& weight, double eps,
                                          const at::Tensor& scale, at::ScalarType dtype,
                                          const std::optional<at::Tensor>& azp) {
    const char* op = rms_norm_static_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kRmsNorm, .scheme = Scheme::kStatic, .input = input,
                    .weight = &weight, .eps = eps, .dtype = dtype, .scale = &scale, .azp = &azp,
                    .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    return Runner::run(Runner::rms_norm_static_quant, call, a).out;
  }

  static at::Tensor fused_add_rms_norm_static_quant(const at::Tensor& input, at::Tensor& residual,
                                                    const at::Tensor& weight, double eps, const at::Tensor& scale,
                                                    at::ScalarType dtype, const std::optional<at::Tensor>& azp) {
    const char* op = fused_add_rms_norm_static_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kFusedAddRmsNorm, .scheme = Scheme::kStatic, .input = input,
                    .residual = &residual, .weight = &weight, .eps = eps, .dtype = dtype, .scale = &scale, .azp = &azp,
                    .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    return Runner::run(Runner::fused_add_rms_norm_static_quant, call, a).out;
  }

  static Pair silu_and_mul_per_token_quant(const at::Tensor& input, at::ScalarType dtype,
                                           const std::optional<at::Tensor>& scale_ub) {
    const char* op = silu_and_mul_per_token_quant_operation().name().c_str();
    const Call call{.op = op, .producer = QuantProducer::kSiluAndMul, .scheme = Scheme::kPerToken, .input = input,
                    .dtype = dtype, .scale_ub = &scale_ub, .device = Runner::kDevice};
    const Arguments a = check_arguments(call);
    Outputs o = Runner::run(Runner::silu_and_mul_per_token_quant, call, a);
    return {o.out, o.scale};
  }
};

}  // namespace xllm_kernel::quantization
