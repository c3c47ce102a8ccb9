// Torch-free CUDA normalization kernels: rms_norm, fused_add_rms_norm, layer_norm.
//
// The at::Tensor side lives in src/ops/normalization/cuda/native_cuda.cpp: it checks every argument,
// fills a NormParams, and passes the current stream. The launchers validate only what they rely
// on, enqueue one kernel on `stream`, check the launch, and never synchronize.
//
//   xllm_kernel::cuda::NormParams p{};
//   p.dtype = DType::kBFloat16; p.weight_dtype = DType::kFloat32;
//   p.rows = tokens; p.hidden = hidden; p.row_ndim = 1; p.row_sizes[0] = tokens;
//   p.input = x; p.input_strides[0] = hidden; p.out = y; p.out_strides[0] = hidden;
//   p.weight = w; p.eps = 1e-6;
//   cudaError_t e = xllm_kernel::cuda::rms_norm(p, stream);  // device pointers, current device
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

// The element types and row limits every family shares (csrc/common/rows.h).
using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::kMaxRowDims;

// Rows are the leading dimensions of the tensors, flattened in row-major order; the last
// dimension (hidden) is contiguous in every tensor. A row's element offset in a tensor is
// sum(index[d] * strides[d]) for d < row_ndim, where index is the row number decomposed over
// row_sizes (last leading dimension fastest). Strides are in elements and may exceed 2^31.
struct NormParams {
  DType dtype = DType::kFloat32;         // input, residual and out
  DType weight_dtype = DType::kFloat32;  // weight and bias: kFloat32 or dtype
  int64_t rows = 0;                      // product of row_sizes; 0 launches nothing
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
};

// The launchers. Every pointer is device memory of the current device; the tensors a launcher
// writes must not overlap anything it reads from another tensor. All arithmetic in float32, one
// rounding to the output dtype (round to nearest even). Returns cudaErrorInvalidValue for
// parameters the kernels cannot handle, otherwise the launch's cudaGetLastError().
//   rms_norm:            out = input * rsqrt(mean(input^2) + eps) * weight
//   fused_add_rms_norm:  residual = round(input + residual); input = rms_norm(residual)
//   layer_norm:          out = (input - mean) * rsqrt(biased var + eps) * weight (+ bias)
cudaError_t rms_norm(const NormParams& p, cudaStream_t stream);
cudaError_t fused_add_rms_norm(const NormParams& p, cudaStream_t stream);
cudaError_t layer_norm(const NormParams& p, cudaStream_t stream);

// How a launch is shaped, chosen from the row count, the row length and the device's SM count.
// Exposed so that tests and benchmarks can see (and host-check) the choice.
struct LaunchPlan {
  bool warp_per_row = false;  // true: each warp owns rows; false: each block owns rows
  int threads = 0;            // per block, a multiple of 32, <= 1024
  int64_t blocks = 0;         // grid size; blocks loop over rows beyond the grid
  size_t shared_bytes = 0;    // dynamic shared memory (block reduction scratch)
};
LaunchPlan plan_launch(int64_t rows, int64_t hidden, size_t element_bytes, int sm_count);

}  // namespace xllm_kernel::cuda
