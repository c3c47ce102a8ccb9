// The one home of what the torch-free contract headers (csrc/common) share between the host and
// CUDA device code: the host/device qualifier and the float32 bit casts. A function marked
// XLLM_HOST_DEVICE compiles for both sides under nvcc (a host-only inline function called from
// device code compiles to nothing but a warning) and is a plain function elsewhere. The CUDA kernel
// headers add __forceinline__ on top (XLLM_CUDA_HD, csrc/cuda/common/macros.cuh).
//
//   XLLM_HOST_DEVICE inline bool is_negative(float x) {
//     return (xllm_kernel::kernels::float_bits(x) >> 31) != 0;
//   }
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define XLLM_HOST_DEVICE __host__ __device__
#else
#define XLLM_HOST_DEVICE
#endif

namespace xllm_kernel::kernels {

// The IEEE binary32 bits of f, and the float with these bits: exact both ways (NaN payloads kept).
XLLM_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

XLLM_HOST_DEVICE inline float float_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace xllm_kernel::kernels
