// The CUDA quantization launchers by operation: one entry point per operation, named after it, each
// over the shared body of its producer (quantization.h: the launchers quant, rms_norm_quant,
// fused_add_rms_norm_quant, silu_and_mul_quant, which take any scheme). An entry point takes the
// scheme its operation computes in p.scheme; another scheme is kInvalidArgument, nothing launched.
//
//   xllm_kernel::cuda::QuantParams p;  // the fields as in csrc/common/quantization.h
//   p.scheme = QuantScheme::kStatic; p.qdtype = QuantDType::kInt8;
//   Status s = xllm_kernel::cuda::rms_norm_static_quant(p, stream);
#pragma once

#include <cuda_runtime_api.h>

#include "csrc/cuda/quantization/quantization.h"

namespace xllm_kernel::cuda {

namespace quant_operation {
using Body = Status (*)(const QuantParams&, cudaStream_t);
template <QuantScheme kScheme, Body kBody>
inline Status run(const QuantParams& p, cudaStream_t stream, const char* wrong_scheme) {
  if (p.scheme != kScheme) return Status::invalid(wrong_scheme);
  return kBody(p, stream);
}
}  // namespace quant_operation

inline Status per_token_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kPerToken, &quant>(
      p, stream, "per_token_quant: scheme must be kPerToken");
}
inline Status per_token_quant_int8_azp(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kPerTokenAzp, &quant>(
      p, stream, "per_token_quant_int8_azp: scheme must be kPerTokenAzp");
}
inline Status static_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kStatic, &quant>(
      p, stream, "static_quant: scheme must be kStatic");
}
inline Status rms_norm_per_token_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kPerToken, &rms_norm_quant>(
      p, stream, "rms_norm_per_token_quant: scheme must be kPerToken");
}
inline Status rms_norm_static_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kStatic, &rms_norm_quant>(
      p, stream, "rms_norm_static_quant: scheme must be kStatic");
}
inline Status fused_add_rms_norm_per_token_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kPerToken, &fused_add_rms_norm_quant>(
      p, stream, "fused_add_rms_norm_per_token_quant: scheme must be kPerToken");
}
inline Status fused_add_rms_norm_static_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kStatic, &fused_add_rms_norm_quant>(
      p, stream, "fused_add_rms_norm_static_quant: scheme must be kStatic");
}
inline Status silu_and_mul_per_token_quant(const QuantParams& p, cudaStream_t stream) {
  return quant_operation::run<QuantScheme::kPerToken, &silu_and_mul_quant>(
      p, stream, "silu_and_mul_per_token_quant: scheme must be kPerToken");
}

}  // namespace xllm_kernel::cuda
