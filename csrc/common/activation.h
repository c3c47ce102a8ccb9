// The parameters of the activation kernels: one torch-free struct for the CPU kernels
// (csrc/cpu/activation/activation.h) and the CUDA launchers (csrc/cuda/activation/activation.h).
// The bridges fill it once from checked tensors (kernel_params in src/ops/activation/internal.h).
//
//   xllm_kernel::kernels::ActivationParams p;
//   p.dtype = DType::kBFloat16; p.d = 14336;                        // input [tokens, 2 * d]
//   p.shape.rows = tokens; p.shape.ndim = 1; p.shape.sizes[0] = tokens;
//   p.input = x; p.input_strides.s[0] = 2 * p.d;
//   p.out = y; p.out_strides.s[0] = p.d;                            // out [tokens, d]
//   xllm_kernel::cpu::silu_and_mul(p, 0, tokens);  // or xllm_kernel::cuda::silu_and_mul(p, stream)
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

// The leading dimensions (rows) are described by `shape`; each tensor has its own strides over
// them (in elements, any values, also beyond 2^31; strides of size-1 dimensions are ignored). The
// last dimension is contiguous.
struct ActivationParams {
  DType dtype = DType::kFloat32;  // input and out
  int64_t d = 0;                  // >= 1: out rows hold d elements, input rows 2 * d (gated) or d
  RowShape shape;                 // the leading dimensions (rows), shared by input and out; 0 rows: nothing to do

  const void* input = nullptr;  // [..., 2 * d] (gated) or [..., d], last dim contiguous
  RowStrides input_strides;     // over shape's dims, in elements
  void* out = nullptr;          // [..., d], last dim contiguous; must not overlap input
  RowStrides out_strides;

  // CPU kernels only (the CUDA launchers ignore it). Write out with non-temporal stores where a
  // row allows it (rows aligned to the SIMD width). Saves reading each output line before writing
  // it, but leaves out in memory rather than cache: for outputs much larger than the last-level
  // cache.
  bool stream_out = false;
};

}  // namespace xllm_kernel::kernels
