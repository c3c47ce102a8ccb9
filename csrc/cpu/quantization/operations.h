// The CPU quantization kernels by operation: one entry point per operation, named after it, each
// over the shared body of its producer (quantization.h: quant, rms_norm_quant,
// fused_add_rms_norm_quant, silu_and_mul_quant, which take any scheme), as the operation table of
// csrc/common/quantization.h says (kQuantOperations, the CUDA launchers' too). An entry point takes
// the scheme its operation computes in p.scheme; another scheme is kInvalidArgument, nothing written.
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
// The shared body of a producer (quantization.h).
constexpr Body body_of(kernels::QuantProducer producer) {
  switch (producer) {
    case kernels::QuantProducer::kRmsNorm: return &rms_norm_quant;
    case kernels::QuantProducer::kFusedAddRmsNorm: return &fused_add_rms_norm_quant;
    case kernels::QuantProducer::kSiluAndMul: return &silu_and_mul_quant;
    default: return &quant;
  }
}
// The operation's entry point: its table entry (csrc/common/quantization.h) names its producer and
// scheme.
template <int kIndex>
inline Status run(const QuantParams& p, int64_t row_begin, int64_t row_end) {
  constexpr kernels::QuantOperation kOp = kernels::kQuantOperations[kIndex];
  if (p.scheme != kOp.scheme) return Status::invalid(kOp.wrong_scheme);
  return body_of(kOp.producer)(p, row_begin, row_end);
}
}  // namespace quant_operation

#define XLLM_QUANT_ENTRY(NAME, PRODUCER, SCHEME)                                              \
  inline Status NAME(const QuantParams& p, int64_t row_begin, int64_t row_end) {    \
    return quant_operation::run<kernels::quant_operation_index(#NAME)>(p, row_begin, row_end); \
  }
XLLM_QUANT_OPERATIONS(XLLM_QUANT_ENTRY)
#undef XLLM_QUANT_ENTRY

}  // namespace xllm_kernel::cpu
