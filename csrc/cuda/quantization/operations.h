// The CUDA quantization launchers by operation: one entry point per operation, named after it, each
// over the shared body of its producer (quantization.h: the launchers quant, rms_norm_quant,
// fused_add_rms_norm_quant, silu_and_mul_quant, which take any scheme), as the operation table of
// csrc/common/quantization.h says (kQuantOperations, the CPU kernels' too). An entry point takes the
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
// The shared body of a producer (quantization.h).
constexpr Body body_of(::xllm_kernel::kernels::QuantProducer producer) {
  switch (producer) {
    case ::xllm_kernel::kernels::QuantProducer::kRmsNorm: return &rms_norm_quant;
    case ::xllm_kernel::kernels::QuantProducer::kFusedAddRmsNorm: return &fused_add_rms_norm_quant;
    case ::xllm_kernel::kernels::QuantProducer::kSiluAndMul: return &silu_and_mul_quant;
    default: return &quant;
  }
}
// The operation's entry point: its table entry (csrc/common/quantization.h) names its producer and
// scheme.
template <int kIndex>
inline Status run(const QuantParams& p, cudaStream_t stream) {
  constexpr ::xllm_kernel::kernels::QuantOperation kOp = ::xllm_kernel::kernels::kQuantOperations[kIndex];
  if (p.scheme != kOp.scheme) return Status::invalid(kOp.wrong_scheme);
  return body_of(kOp.producer)(p, stream);
}
}  // namespace quant_operation

#define XLLM_QUANT_ENTRY(NAME, PRODUCER, SCHEME)                                              \
  inline Status NAME(const QuantParams& p, cudaStream_t stream) {                    \
    return quant_operation::run<::xllm_kernel::kernels::quant_operation_index(#NAME)>(p, stream);             \
  }
XLLM_QUANT_OPERATIONS(XLLM_QUANT_ENTRY)
#undef XLLM_QUANT_ENTRY

}  // namespace xllm_kernel::cuda
