// The CPU quantization kernels by operation: one entry point per operation, named after it, each
// over the shared body of its producer (quantization.h: quant, rms_norm_quant,
// fused_add_rms_norm_quant, silu_and_mul_quant, which take any scheme). An entry point takes the
// scheme its operation computes in p.scheme; another scheme is kInvalidArgument, nothing written.
//
//   xllm_kernel::cpu::QuantParams p;  // the fields as in csrc/common/quantization.h
//   p.scheme = QuantScheme::kStatic; p.qdtype = QuantDType::kInt8;
//   xllm_kernel::cpu::rms_norm_static_quant(p, 0, p.shape.rows);
#pragma once

#include <cstdint>

#include "csrc/cpu/quantization/quantization.h"

namespace xllm_kernel::cpu {

namespace quant_operation {
using Body = Status (*)(const QuantParams&, int64_t, int64_t);
template <QuantScheme kScheme, Body kBody>
inline Status run(const QuantParams& p, int64_t row_begin, int64_t row_end, const char* wrong_scheme) {
  if (p.scheme != kScheme) return Status::invalid(wrong_scheme);
  return kBody(p, row_begin, row_end);
}
}  // namespace quant_operation

inline Status per_token_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kPerToken, &quant>(
      p, row_begin, row_end, "per_token_quant: scheme must be kPerToken");
}
inline Status per_token_quant_int8_azp(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kPerTokenAzp, &quant>(
      p, row_begin, row_end, "per_token_quant_int8_azp: scheme must be kPerTokenAzp");
}
inline Status static_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kStatic, &quant>(
      p, row_begin, row_end, "static_quant: scheme must be kStatic");
}
inline Status rms_norm_per_token_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kPerToken, &rms_norm_quant>(
      p, row_begin, row_end, "rms_norm_per_token_quant: scheme must be kPerToken");
}
inline Status rms_norm_static_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kStatic, &rms_norm_quant>(
      p, row_begin, row_end, "rms_norm_static_quant: scheme must be kStatic");
}
inline Status fused_add_rms_norm_per_token_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kPerToken, &fused_add_rms_norm_quant>(
      p, row_begin, row_end, "fused_add_rms_norm_per_token_quant: scheme must be kPerToken");
}
inline Status fused_add_rms_norm_static_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kStatic, &fused_add_rms_norm_quant>(
      p, row_begin, row_end, "fused_add_rms_norm_static_quant: scheme must be kStatic");
}
inline Status silu_and_mul_per_token_quant(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  return quant_operation::run<QuantScheme::kPerToken, &silu_and_mul_quant>(
      p, row_begin, row_end, "silu_and_mul_per_token_quant: scheme must be kPerToken");
}

}  // namespace xllm_kernel::cpu
