// The parameters of the normalization kernels (rms_norm, fused_add_rms_norm, layer_norm): one
// torch-free struct for the CPU kernels (csrc/cpu/normalization/normalization.h) and the CUDA
// launchers (csrc/cuda/normalization/normalization.h). The bridges fill it once from checked
// tensors (kernel_params in src/ops/normalization/internal.h).
//
//   xllm_kernel::kernels::NormParams p;
//   p.dtype = DType::kBFloat16; p.weight_dtype = DType::kFloat32;
//   p.rows = tokens; p.hidden = hidden; p.row_ndim = 1; p.row_sizes[0] = tokens;
//   p.input = x; p.input_strides[0] = hidden; p.out = y; p.out_strides[0] = hidden;
//   p.weight = w; p.eps = 1e-6;
//   xllm_kernel::cpu::rms_norm(p, 0, p.rows);         // or xllm_kernel::cuda::rms_norm(p, stream)
#pragma once

#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::kernels {

// Rows are the leading dimensions of the tensors, flattened in row-major order; the last
// dimension (hidden) is contiguous in every tensor. A row's element offset in a tensor is
// sum(index[d] * strides[d]) for d < row_ndim, where index is the row number decomposed over
// row_sizes (last leading dimension fastest). Strides are in elements and may exceed 2^31.
struct NormParams {
  DType dtype = DType::kFloat32;         // input, residual and out
  DType weight_dtype = DType::kFloat32;  // weight and bias: kFloat32 or dtype
  int64_t rows = 0;                      // product of row_sizes; 0 rows: nothing to do
  int64_t hidden = 0;                    // >= 1
  int row_ndim = 0;                      // 1..kMaxRowDims
  int64_t row_sizes[kMaxRowDims] = {};

  const void* input = nullptr;  // rms_norm, layer_norm: read; fused_add_rms_norm: read, then written
  int64_t input_strides[kMaxRowDims] = {};
  void* out = nullptr;          // rms_norm, layer_norm only
  int64_t out_strides[kMaxRowDims] = {};
  void* residual = nullptr;     // fused_add_rms_norm only: read, then written
  int64_t residual_strides[kMaxRowDims] = {};

  const void* weight = nullptr;  // [hidden], contiguous
  const void* bias = nullptr;    // [hidden] or null (layer_norm only)
  double eps = 0.0;              // finite, >= 0

  // CPU kernels only (the CUDA launchers ignore it). rms_norm, layer_norm: write out with
  // non-temporal stores where its layout allows (f32 and bf16 rows aligned to the SIMD width).
  // Saves reading each output line before writing it, but leaves out in memory rather than
  // cache: for outputs much larger than the last-level cache.
  bool stream_out = false;
};

}  // namespace xllm_kernel::kernels
