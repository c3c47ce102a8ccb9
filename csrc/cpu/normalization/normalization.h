// Torch-free CPU normalization kernels (Highway, runtime ISA dispatch).
//
// The at::Tensor side lives in src/ops/normalization/native_cpu.cpp: it checks every argument,
// fills a NormParams and splits the rows over threads. Kernels assume valid arguments.
//
//   xllm_kernel::cpu::NormParams p{};
//   p.dtype = DType::kBFloat16; p.weight_dtype = DType::kFloat32;
//   p.rows = tokens; p.hidden = hidden; p.row_ndim = 1; p.row_sizes[0] = tokens;
//   p.input = x; p.input_strides[0] = hidden; p.out = y; p.out_strides[0] = hidden;
//   p.weight = w; p.eps = 1e-6;
//   xllm_kernel::cpu::rms_norm(p, 0, p.rows);
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::kMaxRowDims;
using kernels::Status;

// Rows are the leading dimensions of the tensors, flattened in row-major order; the last
// dimension (hidden) is contiguous in every tensor. A row's element offset in a tensor is
// sum(index[d] * strides[d]) for d < row_ndim, where index is the row number decomposed over
// row_sizes (last leading dimension fastest). Strides are in elements and may exceed 2^31.

struct NormParams {
  DType dtype = DType::kFloat32;         // input, residual and out
  DType weight_dtype = DType::kFloat32;  // weight and bias: kFloat32 or dtype
  int64_t rows = 0;                      // product of row_sizes
  int64_t hidden = 0;                    // >= 1
  int row_ndim = 0;                      // 1..kMaxRowDims
  int64_t row_sizes[kMaxRowDims] = {};

  const void* input = nullptr;  // rms_norm, layer_norm: read; fused_add_rms_norm: read, then written
  int64_t input_strides[kMaxRowDims] = {};
  void* out = nullptr;          // rms_norm, layer_norm only
  int64_t out_strides[kMaxRowDims] = {};
  void* residual = nullptr;     // fused_add_rms_norm only: read, then written
  int64_t residual_strides[kMaxRowDims] = {};

  const void* weight = nullptr;  // [hidden]
  const void* bias = nullptr;    // [hidden] or null (layer_norm only)
  double eps = 0.0;              // finite, >= 0

  // rms_norm, layer_norm: write out with non-temporal stores where its layout allows (f32 and
  // bf16 rows aligned to the SIMD width). Saves reading each output line before writing it, but
  // leaves out in memory rather than cache: for outputs much larger than the last-level cache.
  bool stream_out = false;
};

// Each processes rows [row_begin, row_end) and may run concurrently on disjoint ranges. A status
// other than ok (invalid parameters, with the reason) means the bridge has a bug.
//   rms_norm:            out = input * rsqrt(mean(input^2) + eps) * weight
//   fused_add_rms_norm:  residual = round(input + residual); input = rms_norm(residual)
//   layer_norm:          out = (input - mean) * rsqrt(biased var + eps) * weight (+ bias)
// All arithmetic in float32; one rounding to the output dtype (round to nearest even).
Status rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end);
Status fused_add_rms_norm(const NormParams& p, int64_t row_begin, int64_t row_end);
Status layer_norm(const NormParams& p, int64_t row_begin, int64_t row_end);

}  // namespace xllm_kernel::cpu
