// Torch-free CUDA normalization kernels: rms_norm, fused_add_rms_norm, layer_norm.
//
// The at::Tensor side lives in src/ops/normalization/cuda/native_cuda.cpp: it checks every argument,
// fills a NormParams (csrc/common/normalization.h), and passes the current stream. The launchers
// validate only what they rely on, enqueue one kernel on `stream`, check the launch, and never
// synchronize.
//
//   xllm_kernel::cuda::NormParams p;  // the fields as in csrc/common/normalization.h
//   Status s = xllm_kernel::cuda::rms_norm(p, stream);  // device pointers, current device
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "csrc/common/normalization.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cuda {

// The element types, row limits and status every family shares (csrc/common/rows.h).
using ::xllm_kernel::kernels::DType;
using ::xllm_kernel::kernels::kMaxRowDims;
using ::xllm_kernel::kernels::Status;

// The parameters, shared with the CPU kernels (csrc/common/normalization.h; stream_out is ignored).
using ::xllm_kernel::kernels::NormParams;

// The launchers. Every pointer is device memory of the current device; the tensors a launcher
// writes must not overlap anything it reads from another tensor. All arithmetic in float32, one
// rounding to the output dtype (round to nearest even). Returns kInvalidArgument with the reason
// for parameters the kernels cannot handle (unknown dtypes, hidden < 1, an invalid row shape, eps
// not finite or negative, a null pointer with rows > 0, bias given to rms_norm), ok without
// launching for zero rows, kDeviceError for a failing SM-count query or launch, otherwise ok.
//   rms_norm:            out = input * rsqrt(mean(input^2) + eps) * weight
//   fused_add_rms_norm:  residual = round(input + residual); input = rms_norm(residual)
//   layer_norm:          out = (input - mean) * rsqrt(biased var + eps) * weight (+ bias)
Status rms_norm(const NormParams& p, cudaStream_t stream);
Status fused_add_rms_norm(const NormParams& p, cudaStream_t stream);
Status layer_norm(const NormParams& p, cudaStream_t stream);

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
