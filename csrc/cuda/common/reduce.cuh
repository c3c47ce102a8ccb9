// Warp and block sums of float32 for CUDA kernels (device code only). Every thread gets the same
// bits: the butterfly adds the same two values on every lane. Host tests that emulate a group's
// sum reproduce this order (see test/cuda/normalization/normalization_kernels_host_test.cpp).
//
//   __shared__ float scratch[2 * 32];
//   int parity = 0;
//   const float total = block_sum(partial, scratch, parity);  // blockDim.x a multiple of 32
#pragma once

#include <cuda_runtime.h>

#include "csrc/cuda/common/macros.cuh"

namespace xllm_kernel::cuda::kernels {

inline constexpr int kWarp = 32;

#ifdef __CUDACC__

__device__ __forceinline__ float warp_sum(float v) {
XLLM_CUDA_UNROLL
  for (int m = kWarp / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, m);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the same
// value. `scratch` holds 2 * (blockDim.x / 32) floats; the two halves alternate between calls, so
// one barrier per call suffices: a half is rewritten only after every thread has passed the
// barrier of the call in between. Every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v, float* scratch, int& parity) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  float* slots = scratch + parity * warps;
  parity ^= 1;
  v = warp_sum(v);
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? slots[lane] : 0.0f);
}

#endif  // __CUDACC__

}  // namespace xllm_kernel::cuda::kernels
